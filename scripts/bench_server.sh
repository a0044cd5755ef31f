#!/usr/bin/env bash
# Server benchmark (issue [server]): kvctl bench against a real kvserve on bench-small, next to
# the engine alone on the same work, at concurrency 1, 4 and 16. Prints one JSON line per run.
# usage: scripts/bench_server.sh [build_dir] [threads] [weights: f32 | bf16]
set -euo pipefail
build_dir="${1:-build}"
threads="${2:-2}"
weights="${3:-f32}"
cd "$(dirname "$0")/.."
# The benchmark programs are not in the default build.
cmake --build "$build_dir" --target kvserve_benchmarks > /dev/null
model_dir="$(mktemp -d)"
trap 'kill "$server_pid" 2>/dev/null || true; rm -rf "$model_dir"' EXIT
"$build_dir/model/kvserve-make-model" --arch llama --preset bench-small --seed 1 \
  --weights-dtype "$weights" --out "$model_dir" > /dev/null
"$build_dir/server/kvserve" --model "$model_dir" --listen 127.0.0.1:0 --threads "$threads" \
  > "$model_dir/stdout" 2> "$model_dir/stderr" &
server_pid=$!
for _ in $(seq 600); do
  grep -q "listening on" "$model_dir/stdout" 2> /dev/null && break
  sleep 0.1
done
target="$(sed -n 's/^kvserve listening on //p' "$model_dir/stdout")"
for _ in $(seq 600); do
  "$build_dir/client/kvctl" health --target "$target" > /dev/null 2>&1 && break
  sleep 0.1
done
for c in 1 4 16; do
  n=$((c < 4 ? 8 : 2 * c))
  "$build_dir/bench/kvserve_engine_bench" --concurrency "$c" --requests "$n" --prompt-tokens 32 \
    --max-new-tokens 32 --threads "$threads" --weights-dtype "$weights"
  "$build_dir/client/kvctl" bench --target "$target" --concurrency "$c" --requests "$n" \
    --prompt-tokens 32 --max-new-tokens 32 --output json
done
