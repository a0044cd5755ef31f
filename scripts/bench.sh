#!/usr/bin/env bash
# `make bench`: runs the benchmark programs (speed is measured here, never asserted in tests).
set -euo pipefail
build_dir="${1:-build}"
cd "$(dirname "$0")/.."
for b in "$build_dir"/bench/kvserve_*_bench; do
  [ -x "$b" ] || continue
  echo "== $b"
  "$b" --benchmark_counters_tabular=true
done
