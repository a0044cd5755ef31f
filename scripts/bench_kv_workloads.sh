#!/usr/bin/env bash
# KV-memory workloads of the cache-manager refactor (bench/kv_workloads.py), A/B between two
# kvserve binaries: 8 concurrent requests on a fresh shared prefix, inter-token gaps of running
# streams during a prefix registration, kvctl bench at concurrency 16, and 4 identical requests
# under a tight --kv-device-bytes. Results: bench/RESULTS-kv-manager.md.
#
# usage: scripts/bench_kv_workloads.sh [--build-dir DIR] [kv_workloads.py options...]
#   Without --kvserve, A is DIR/server/kvserve (DIR: build) with DIR's kvctl and
#   kvserve-make-model; --kvserve A [--kvserve-b B] chooses. --threads defaults to 2. Examples:
#   scripts/bench_kv_workloads.sh --kvserve /work/before15/kvserve --kvserve-b build/server/kvserve
#   scripts/bench_kv_workloads.sh --workload burst --repeat 10 --json /tmp/burst.json
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build
if [ "${1:-}" = "--build-dir" ]; then
  build_dir="$2"
  shift 2
fi
args=("$@")
have() {  # is option $1 among the arguments?
  local a
  for a in "${args[@]}"; do
    [ "$a" = "$1" ] || [ "${a%%=*}" = "$1" ] && return 0
  done
  return 1
}
defaults=()
if ! have --kvserve; then
  # DIR's binaries. With --kvserve given, kv_workloads.py takes kvctl and kvserve-make-model
  # from beside A (then build/), unless --kvctl / --make-model say otherwise.
  defaults+=(--kvserve "$build_dir/server/kvserve")
  have --kvctl || defaults+=(--kvctl "$build_dir/client/kvctl")
  have --make-model || defaults+=(--make-model "$build_dir/model/kvserve-make-model")
fi
have --threads || defaults+=(--threads 2)
export KVSERVE_BUILD_DIR="$build_dir"
exec scripts/python.sh bench/kv_workloads.py "${defaults[@]}" "${args[@]}"
