#!/usr/bin/env bash
# Builds kvserve's libFuzzer targets (fuzz/: clang, AddressSanitizer, UndefinedBehaviorSanitizer)
# and runs each for a while from its seed corpus, printing per target the executions, the
# coverage libFuzzer reached (cov: edges, ft: features) and the crashes; exits 1 when any target
# crashed, 77 when clang or libFuzzer is missing (Debian: clang-14 libclang-rt-14-dev).
#
# usage: scripts/fuzz.sh [--minutes N | --seconds N] [--only TARGET]... [--build-dir DIR]
#                        [--jobs N] [--skip-build] [--build-only] [--no-main-build] [--fresh]
#                        [--clang CLANGXX] [-- LIBFUZZER_FLAGS...]
#   --minutes      run time per target (default 10)
#   --seconds      run time per target in seconds instead (make test uses 8)
#   --only         a target to run (repeatable; default all): safetensors model_config tokenizer
#                  chat_template prefixes_file request_builder
#   --build-dir    the main (gcc) build tree (default build); the fuzz tree is DIR/fuzz
#   --jobs         parallel compile jobs, under nice (default: nproc)
#   --skip-build   run what DIR/fuzz holds
#   --build-only   build, run nothing
#   --no-main-build  do not build kvserve_cache and kvserve_proto in DIR (make test has)
#   --fresh        start from the seed corpus alone (DIR/fuzz/ctest-corpus, emptied first)
#                  instead of the corpus earlier runs grew (DIR/fuzz/corpus/TARGET)
#   --clang        the clang++ to build with (default clang++-14, else clang++)
#   after --        extra libFuzzer flags for every target (e.g. -use_value_profile=1)
#
# Crashes are written to DIR/fuzz/artifacts/TARGET/ (crash-*, leak-*, timeout-*, oom-*); rerun
# one with `DIR/fuzz/kvserve_fuzz_TARGET FILE`. Each run's output is DIR/fuzz/logs/TARGET.log.
# KVSERVE_BUILD_LOCK=FILE runs the builds under `flock FILE` (a machine shared by several trees).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

all_targets=(safetensors model_config tokenizer chat_template prefixes_file request_builder)
seconds=600
targets=()
build_dir=build
jobs="$(nproc)"
skip_build=0
build_only=0
main_build=1
fresh=0
clang=""
extra=()
while (($#)); do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --only) targets+=("$2"); shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --build-only) build_only=1; shift ;;
    --no-main-build) main_build=0; shift ;;
    --fresh) fresh=1; shift ;;
    --clang) clang="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] ||
    { echo "fuzz.sh: unknown target '$t' (one of: ${all_targets[*]})" >&2; exit 2; }
done
build_dir="$(cd "$build_dir" 2>/dev/null && pwd || echo "$root/$build_dir")"
fuzz_dir="$build_dir/fuzz"

if [[ -z "$clang" ]]; then
  clang="$(command -v clang++-14 || command -v clang++ || true)"
fi
if [[ -z "$clang" ]]; then
  echo "fuzz.sh: skipped: no clang++ (scripts/setup.sh --fuzz installs clang-14 libclang-rt-14-dev)"
  exit 77
fi

locked() {
  if [[ -n "${KVSERVE_BUILD_LOCK:-}" ]]; then flock "$KVSERVE_BUILD_LOCK" "$@"; else "$@"; fi
}

if [[ $skip_build -eq 0 ]]; then
  probe="$(mktemp -d)"
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' > "$probe/p.cc"
  if ! "$clang" -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2> /dev/null; then
    rm -rf "$probe"
    echo "fuzz.sh: skipped: $clang cannot link a libFuzzer target (scripts/setup.sh --fuzz installs libclang-rt-14-dev)"
    exit 77
  fi
  rm -rf "$probe"
  start=$(date +%s)
  if [[ $main_build -eq 1 ]]; then
    if [[ ! -f "$build_dir/build.ninja" ]]; then
      locked nice cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
    fi
    echo "fuzz: building kvserve_cache and kvserve_proto in $build_dir"
    locked nice cmake --build "$build_dir" -j "$jobs" --target kvserve_cache kvserve_proto
  fi
  if [[ ! -f "$build_dir/fuzz-host.cmake" ]]; then
    echo "fuzz.sh: $build_dir/fuzz-host.cmake is missing: configure $build_dir first" >&2
    exit 1
  fi
  if [[ ! -f "$fuzz_dir/build.ninja" ]] ||
    ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=$clang\$" "$fuzz_dir/CMakeCache.txt"; then
    rm -rf "$fuzz_dir/CMakeCache.txt" "$fuzz_dir/CMakeFiles"
    cmake -S fuzz -B "$fuzz_dir" -G Ninja -DCMAKE_CXX_COMPILER="$clang" \
      -DKVSERVE_HOST_CONFIG="$build_dir/fuzz-host.cmake" > /dev/null
  fi
  echo "fuzz: building $fuzz_dir with $clang (-j$jobs under nice)"
  locked nice cmake --build "$fuzz_dir" -j "$jobs"
  echo "fuzz: built in $(($(date +%s) - start)) s"
fi
[[ $build_only -eq 1 ]] && exit 0

supp="$root/tests/sanitizers"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:print_stacktrace=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
# LibTorch's own thread pools are not what is fuzzed.
export OMP_NUM_THREADS=1

failed=0
lines=()
for t in "${targets[@]}"; do
  binary="$fuzz_dir/kvserve_fuzz_$t"
  if [[ ! -x "$binary" ]]; then
    echo "fuzz.sh: $binary is missing (build first, without --skip-build)" >&2
    exit 1
  fi
  seeds="$root/fuzz/corpus/$t"
  if [[ $fresh -eq 1 ]]; then
    corpus="$fuzz_dir/ctest-corpus/$t"
    rm -rf "$corpus"
  else
    corpus="$fuzz_dir/corpus/$t"
  fi
  artifacts="$fuzz_dir/artifacts/$t"
  log="$fuzz_dir/logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  flags=(-max_total_time="$seconds" -print_final_stats=1 -timeout=20 -rss_limit_mb=4096
    -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$artifacts/")
  [[ -f "$root/fuzz/dict/$t.dict" ]] && flags+=(-dict="$root/fuzz/dict/$t.dict")
  stamp="$fuzz_dir/logs/$t.start"
  touch "$stamp"
  echo "fuzz: $t for ${seconds} s (log $log)"
  set +e
  "$binary" "${flags[@]}" "${extra[@]}" "$corpus" "$seeds" > "$log" 2>&1
  rc=$?
  set -e
  mapfile -t found < <(find "$artifacts" -type f -newer "$stamp")
  crashes=${#found[@]}
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<< "$last")
  line=$(printf '%-15s execs %10s  exec/s %6s  cov %6s  ft %7s  corpus %6s  crashes %d' \
    "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes")
  if [[ $rc -ne 0 || $crashes -ne 0 ]]; then
    failed=1
    line+="  FAIL (exit $rc)"
    echo "fuzz: $t FAILED; the report:"
    grep -m1 -A30 -E '^==[0-9]+==ERROR|runtime error:|KVSERVE_CHECK failed|deadly signal|ERROR: libFuzzer' "$log" |
      head -40 || tail -40 "$log"
    for f in "${found[@]}"; do echo "fuzz: reproduce: $binary $f"; done
  else
    line+="  ok"
  fi
  echo "fuzz: $line"
  lines+=("$line")
done

echo "fuzz: ---- summary (${seconds} s per target) ----"
for line in "${lines[@]}"; do echo "fuzz: $line"; done
exit "$failed"
