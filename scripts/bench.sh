#!/usr/bin/env bash
# `make bench`: runs the benchmark programs (speed is measured here, never asserted in tests).
set -euo pipefail
build_dir="${1:-build}"
cd "$(dirname "$0")/.."
# The benchmark programs are not in the default build (make bench builds them first).
cmake --build "$build_dir" --target kvserve_benchmarks > /dev/null
for b in "$build_dir"/bench/kvserve_*_bench; do
  [ -x "$b" ] || continue
  echo "== $b"
  "$b" --benchmark_counters_tabular=true
done
