#!/usr/bin/env bash
# `make sanitize`: builds kvserve twice, with AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan) and with ThreadSanitizer (build-tsan), and in each runs the unit tests of
# cache/, model/, server/ (the engine's included) and client/, every end-to-end suite (ctest
# label e2e; stress_soak_60s aside) and a soak (tests/stress/soak.py) of a few minutes;
# prints one verdict line per run. A run passes when it exits 0 and its processes wrote no
# sanitizer report.
#
# usage: scripts/sanitize.sh [--only address|thread] [--soak-minutes N] [--tests REGEX]
#                            [--skip-build] [--jobs N] [--keep-going]
#   --only         one of the two builds (default: both, address first)
#   --soak-minutes soak length per build (default 3; 0: no soak)
#   --tests        ctest -R regex of the tests to run instead of the default ones
#   --skip-build   use the trees as they are
#   --jobs         parallel compile jobs, run under nice (default 2)
#   --keep-going   halt_on_error=0: collect every report of a run instead of stopping at the
#                  first (for a first look at a new tree; the pass condition is the same)
#
# Reports go to files, one per process: <tree>/sanitize-logs/<run>/report.<pid>, beside the
# run's output (output.log). Settings and why:
# - Our targets only are instrumented (CMake KVSERVE_SANITIZE); Debian's LibTorch, gRPC,
#   protobuf and abseil are not. -O1 -g, CMAKE_BUILD_TYPE=Debug so that assert() and the
#   debug-only checks run too.
# - ASan: detect_leaks=1. LibTorch's and gRPC's start-up registries stay reachable from
#   globals, so LeakSanitizer does not count them; tests/sanitizers/lsan.supp holds the few
#   third-party one-time allocations it does report, each with its reason.
# - TSan: abseil's Mutex/CondVar/Notification are taught to TSan by
#   tests/sanitizers/tsan_absl_sync.cc (linked into every executable of the TSan build), or
#   every ABSL_GUARDED_BY field would be reported. LibTorch runs its element-wise kernels on
#   the calling thread when OpenBLAS is present (cache/torch_compat.cc sets
#   at::set_num_threads(1)), and OMP_NUM_THREADS=1 keeps libgomp's pool out entirely: its
#   barriers are invisible to TSan. OpenBLAS's own threads only touch memory through
#   uninstrumented code, which TSan does not check. So kvserve keeps --threads 2 and our
#   WorkerPool is checked with two threads.
# - TSan does not run what goes through gRPC's transport: Debian's libgrpc is not
#   instrumented, and the order it guarantees between a reactor's callbacks on its threads
#   (Finish before OnDone, a write before OnWriteDone) is invisible to TSan, which then reports
#   hundreds of races in gRPC's own headers per run. The TSan build runs the base, cache,
#   tokenizer and model suites and server_unit without the suites that start a gRPC server or
#   channel (the engine, scheduler, cache manager, journal, metrics endpoint, parser, worker
#   pool stay in); those suites, client_unit, the e2e suites and the soak run under ASan.
#   Checking the reactors under TSan needs a TSan-built gRPC.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

only=""
soak_minutes=3
tests_regex=""
skip_build=0
jobs=2
halt=1
while (($#)); do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --soak-minutes) soak_minutes="$2"; shift 2 ;;
    --tests) tests_regex="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --keep-going) halt=0; shift ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in
  "") sanitizers=(address thread) ;;
  address | thread) sanitizers=("$only") ;;
  *) echo "sanitize.sh: --only takes address or thread" >&2; exit 2 ;;
esac

supp="$root/tests/sanitizers"
# server_unit suites that go through a real gRPC server or channel (excluded under TSan).
grpc_transport_suites="GenerationServiceTest.*:KvServerTest.*:OutOfMemoryTest.*:PrefixServerTest.*:*PrefixEquivalenceTest*"
verdicts=()
failed=0

tree_of() { [[ "$1" == address ]] && echo build-asan || echo build-tsan; }

build() {
  local sanitizer="$1" tree
  tree="$(tree_of "$sanitizer")"
  echo "sanitize: building $tree (KVSERVE_SANITIZE=$sanitizer, -j$jobs under nice)"
  nice -n 19 cmake -S . -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DKVSERVE_SANITIZE="$sanitizer" -DKVSERVE_BUILD_BENCH=OFF -DKVSERVE_BUILD_TESTS=ON \
    -DKVSERVE_BUILD_SERVER=ON > /dev/null
  nice -n 19 cmake --build "$tree" -j "$jobs"
}

# The sanitizer settings of one run whose reports go to $1/report.<pid>.
set_env() {
  local sanitizer="$1" dir="$2"
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS OMP_NUM_THREADS
  if [[ "$sanitizer" == address ]]; then
    export ASAN_OPTIONS="halt_on_error=$halt:print_stacktrace=1:detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$dir/report"
    export UBSAN_OPTIONS="halt_on_error=$halt:print_stacktrace=1:suppressions=$supp/ubsan.supp:log_path=$dir/report"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  else
    export TSAN_OPTIONS="halt_on_error=$halt:second_deadlock_stack=1:history_size=4:suppressions=$supp/tsan.supp:log_path=$dir/report"
    export OMP_NUM_THREADS=1
  fi
}

# Runs "$@" as run $2 of sanitizer $1 and records its verdict.
run() {
  local sanitizer="$1" name="$2" tree dir start rc reports summary
  shift 2
  tree="$(tree_of "$sanitizer")"
  dir="$root/$tree/sanitize-logs/$name"
  rm -rf "$dir"
  mkdir -p "$dir"
  start=$(date +%s)
  set +e
  (set_env "$sanitizer" "$dir"; "$@") > "$dir/output.log" 2>&1
  rc=$?
  set -e
  reports=$(find "$dir" -name 'report.*' -size +0 | wc -l)
  local line
  line=$(printf '%-8s %-24s' "$sanitizer" "$name")
  if [[ $rc -eq 0 && $reports -eq 0 ]]; then
    line+=" PASS  0 reports  ($(($(date +%s) - start)) s)"
  else
    failed=1
    summary=$(cat "$dir"/report.* 2> /dev/null | grep -m1 -E '^SUMMARY:|runtime error:' || true)
    [[ -z "$summary" ]] && summary=$(grep -m1 -E 'SUMMARY:|runtime error:|FAIL' "$dir/output.log" || true)
    line+=" FAIL  exit $rc, $reports report(s)  ($(($(date +%s) - start)) s)  ${summary:0:160}"
    line+="  [$dir]"
  fi
  echo "sanitize: $line"
  verdicts+=("$line")
}

for sanitizer in "${sanitizers[@]}"; do
  tree="$(tree_of "$sanitizer")"
  if [[ $skip_build -eq 0 ]]; then
    build "$sanitizer"
  fi
  if [[ -n "$tests_regex" ]]; then
    listing=$(cd "$tree" && ctest -N -R "$tests_regex")
  elif [[ "$sanitizer" == thread ]]; then
    # Everything that does not run gRPC's transport (see the top of this file).
    listing=$(cd "$tree" && ctest -N -R '^(base|cache|tokenizer|model|server)_unit$')
  else
    listing=$(cd "$tree" && ctest -N -R '^(base|cache|tokenizer|model|server|client)_unit$' &&
      ctest -N -L e2e -E '^stress_')
  fi
  mapfile -t tests < <(sed -n 's/^ *Test *#[0-9]*: //p' <<< "$listing")
  for test in "${tests[@]}"; do
    filter=""
    if [[ "$sanitizer" == thread && "$test" == server_unit ]]; then
      filter="-${grpc_transport_suites}"
    fi
    run "$sanitizer" "$test" env ${filter:+GTEST_FILTER="$filter"} ctest --test-dir \
      "$root/$tree" -R "^${test}\$" --output-on-failure --timeout 3600
  done
  if [[ "$sanitizer" == thread ]]; then
    echo "sanitize: thread: gRPC-transport suites, client_unit, e2e and the soak run under" \
      "address only (Debian's gRPC is not instrumented)"
  elif [[ "$soak_minutes" != 0 ]]; then
    run "$sanitizer" "soak_${soak_minutes}min" env KVSERVE_BUILD_DIR="$root/$tree" \
      scripts/python.sh tests/stress/soak.py --kvserve "$tree/server/kvserve" \
      --make-model "$tree/model/kvserve-make-model" --minutes "$soak_minutes" \
      --concurrency 8 --rss-interval 30 --startup-timeout 600 \
      --json "$root/$tree/sanitize-logs/soak_${soak_minutes}min/soak.json" \
      -- --prefix-cache-bytes 1048576
  fi
done

echo "sanitize: ---- verdicts ----"
for line in "${verdicts[@]}"; do echo "sanitize: $line"; done
if [[ $failed -eq 0 ]]; then
  echo "sanitize: PASS (${#verdicts[@]} runs, no sanitizer report)"
else
  echo "sanitize: FAIL (logs under build-asan/sanitize-logs and build-tsan/sanitize-logs)"
fi
exit "$failed"
