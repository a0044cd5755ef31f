#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and PyTorch 2.x (pip or conda) but none of
# kvserve's other libraries and no internet. From the repository root, after
# scripts/gpu/fetch-debs.sh filled scripts/gpu/debs/ on a Debian machine:
#
#   scripts/gpu/run.sh [--torch-prefix DIR] [--jobs N] [--dry-run]
#
# 1. unpacks the .debs into build-gpu/prefix (dpkg-deb, or ar + tar) and makes them relocatable
#    (pkg-config files, absolute symlinks); builds GoogleTest from its sources there;
# 2. configures cache/ + model/ (-DKVSERVE_BUILD_SERVER=OFF) against torch's CMake package
#    (python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') and requires
#    "CUDA ON";
# 3. builds and runs the tests labelled gpu (cached = recomputed on CUDA for every strategy,
#    offload prefetch on a side stream, a real CUDA out-of-memory converted to offloaded) and
#    the refusal of a device index past the last GPU;
# 4. runs kvserve_device_bench: decode tokens/s per cache strategy and time to first token
#    with a 2,000-token prefix, cold and from a snapshot, in float32 and bfloat16.
# Everything runs within 8 minutes (each step has its own time limit); the results go to
# build-gpu/gpu-results.txt.
#
# --dry-run: for a machine without a GPU (a Debian 12 host with its CPU LibTorch 1.13, given
# as --torch-prefix /usr/lib/x86_64-linux-gnu/cmake): the same unpack, GoogleTest build and
# configure (expecting "CUDA OFF"), then stops. It proves the packages are enough and that the
# build finds them in the prefix rather than system copies. Add --build to also build and run
# the gpu tests there (they skip, printing why).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
build="$root/build-gpu"
prefix="$build/prefix"
debs="$root/scripts/gpu/debs"
results="$build/gpu-results.txt"
torch_prefix=""
jobs="$(nproc)"
dry_run=0
dry_build=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --torch-prefix) torch_prefix="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --build) dry_build=1; shift ;;
    *) sed -n '2,26s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
done
started=$SECONDS
deadline=$((started + 8 * 60))
log() { echo "gpu: [$((SECONDS - started))s] $*" | tee -a "$results"; }
left() { echo $((deadline - SECONDS)); }
# Runs a step with what is left of the 8 minutes, at most $1 seconds (a dry run: unlimited).
step() {
  local limit="$1"
  shift
  if ((dry_run)); then "$@"; return; fi  # a dry run is for slow machines: no time limits
  local budget
  budget="$(left)"
  ((budget > limit)) && budget="$limit"
  ((budget > 5)) || { log "out of time before: $*"; exit 1; }
  timeout "$budget" "$@"
}

ls "$debs"/*.deb >/dev/null 2>&1 || { echo "gpu: no packages in $debs: run scripts/gpu/fetch-debs.sh on a Debian 12 machine" >&2; exit 1; }
rm -rf "$build"
mkdir -p "$prefix"
: >"$results"
log "kvserve GPU check on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader |
    while read -r line; do log "GPU: $line"; done
elif ((!dry_run)); then
  log "nvidia-smi not found; continuing (CMake and the tests will say whether CUDA works)"
fi

# --- 1. unpack ------------------------------------------------------------------------------
for deb in "$debs"/*.deb; do
  if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$deb" "$prefix"
  else
    member="$(ar t "$deb" | grep '^data\.tar')"
    ar p "$deb" "$member" | tar -x -C "$prefix" --auto-compress -f - 2>/dev/null ||
      ar p "$deb" "$member" | tar -x -C "$prefix" -J -f -
  fi
done
multiarch="$(ls "$prefix/usr/lib" | grep -- '-linux-gnu$' | head -1)"
libdir="$prefix/usr/lib/$multiarch"
# Absolute symlinks point into the host's /usr: point them into the prefix.
find "$prefix" -type l | while read -r link; do
  target="$(readlink "$link")"
  if [[ "$target" == /* ]]; then ln -sfn "$prefix$target" "$link"; fi
done
# pkg-config files name /usr: make them name the prefix.
find "$prefix" -name '*.pc' -exec sed -i "s#=/usr#=$prefix/usr#" {} +
export PKG_CONFIG_LIBDIR="$libdir/pkgconfig:$prefix/usr/share/pkgconfig"
export PKG_CONFIG_PATH="$PKG_CONFIG_LIBDIR"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pkg_config_args=()
if ! command -v pkg-config >/dev/null 2>&1; then
  ln -sfn "$prefix/usr/bin/pkgconf" "$prefix/usr/bin/pkg-config"
  pkg_config_args=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkg-config")
fi
log "unpacked $(ls "$debs"/*.deb | wc -l) packages into $prefix"

# GoogleTest from its sources, with this machine's compiler.
step 120 cmake -S "$prefix/usr/src/googletest" -B "$build/googletest" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix/gtest" >"$build/googletest.log" 2>&1
step 180 cmake --build "$build/googletest" -j "$jobs" --target install >>"$build/googletest.log" 2>&1
log "built GoogleTest"

# --- 2. configure ---------------------------------------------------------------------------
if [[ -z "$torch_prefix" ]]; then
  torch_prefix="$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  log "torch $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available:", torch.cuda.is_available())')"
fi
cuda_args=()
# torch's CMake package looks for the CUDA toolkit (nvcc); help it to the usual places.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
command -v nvcc >/dev/null 2>&1 && cuda_args=(-DCUDAToolkit_ROOT="$(dirname "$(dirname "$(command -v nvcc)")")")
step 180 cmake -S "$root" -B "$build/kvserve" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVSERVE_BUILD_SERVER=OFF -DKVSERVE_BUILD_TESTS=ON -DKVSERVE_BUILD_BENCH=ON \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/gtest;$torch_prefix" \
  -DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON "${pkg_config_args[@]}" "${cuda_args[@]}" \
  >"$build/configure.log" 2>&1 || {
  tail -30 "$build/configure.log" >&2
  log "configure failed (log: $build/configure.log)"
  exit 1
}
summary="$(grep -m1 'kvserve: Torch' "$build/configure.log" | sed 's/^-- //')"
log "$summary"
# Where every dependency came from: the unpacked prefix, not a system copy.
for var in absl_DIR nlohmann_json_DIR GTest_DIR benchmark_DIR pkgcfg_lib_ONIG_onig \
  pkgcfg_lib_UTF8PROC_utf8proc Torch_DIR; do
  value="$(sed -n "s/^$var:[A-Z]*=//p" "$build/kvserve/CMakeCache.txt" | head -1)"
  log "  $var = $value"
  if [[ "$var" != Torch_DIR && "$value" != "$prefix"* ]]; then
    log "  $var does not come from $prefix"
    exit 1
  fi
done
if ((dry_run)); then
  [[ "$summary" == *"CUDA OFF"* ]] || log "note: this torch has CUDA; drop --dry-run"
  if ((!dry_build)); then
    log "dry run: unpack, GoogleTest and configure done in $((SECONDS - started)) s; the GPU run is still to do"
    exit 0
  fi
elif [[ "$summary" != *"CUDA ON"* ]]; then
  log "torch's CMake package has no CUDA here ($summary): see $build/configure.log"
  exit 1
fi

# --- 3. build and run the gpu tests ---------------------------------------------------------
targets=(kvserve_gpu_tests)
((dry_run)) || targets+=(kvserve_device_bench kvserve-generate)
step 300 cmake --build "$build/kvserve" -j "$jobs" --target "${targets[@]}" >"$build/build.log" 2>&1 || {
  tail -40 "$build/build.log" >&2
  log "build failed (log: $build/build.log)"
  exit 1
}
log "built ${targets[*]}"
status=0
(cd "$build/kvserve" && step 240 ctest -L gpu --output-on-failure -V) >"$build/ctest.log" 2>&1 || status=$?
grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|Skipped|needs a CUDA GPU' "$build/ctest.log" |
  sed 's/^[0-9]*: //' | tee -a "$results" >/dev/null
log "gpu tests: $(grep -E 'tests passed|tests failed' "$build/ctest.log" | tail -1) (log: $build/ctest.log)"
((status == 0)) || { log "gpu tests FAILED"; exit 1; }
((dry_run)) && { log "dry run done in $((SECONDS - started)) s (the GPU run is still to do)"; exit 0; }

# A device index past the last GPU is refused with a one-line reason, exit 2.
count="$(nvidia-smi -L 2>/dev/null | wc -l)"
refusal_status=0
refusal="$("$build/kvserve/model/kvserve-generate" --device "cuda:$count" 2>&1 >/dev/null)" || refusal_status=$?
log "kvserve-generate --device cuda:$count: exit $refusal_status: $refusal"
((refusal_status == 2)) || { log "expected exit 2"; exit 1; }

# --- 4. decode and prefix benchmark ---------------------------------------------------------
for dtype in float32 bfloat16; do
  step 120 "$build/kvserve/bench/kvserve_device_bench" --device cuda:0 --dtype "$dtype" \
    --preset bench-small --repeats 3 2>&1 | tee -a "$results" || log "benchmark ($dtype) did not finish"
done
log "done in $((SECONDS - started)) s; results in $results"
