#!/usr/bin/env bash
# Prefix-cache benchmark (issue [prefixes]) on bench-small: TTFT of a 2,000-token registered
# prefix + 32-token suffix against the same prompt computed cold, per cache strategy; then
# throughput at a 0% hit rate with automatic prefix caching on and off.
# usage: scripts/bench_prefix.sh [build_dir] [threads] [arch] [strategies] [ttft]
# (arch: a kvserve-make-model --arch, default llama; strategies: comma-separated, default all;
# ttft: stop after the TTFT table)
set -euo pipefail
build_dir="${1:-build}"
threads="${2:-2}"
arch="${3:-llama}"
strategies="${4:-dynamic,static,offloaded,offloaded_static,quantized}"
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
pid=""
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
kvctl="$build_dir/client/kvctl"
"$build_dir/model/kvserve-make-model" --arch "$arch" --preset bench-small --seed 1 \
  --out "$work/model" > /dev/null

start_server() {  # extra kvserve flags...
  "$build_dir/server/kvserve" --model "$work/model" --listen 127.0.0.1:0 --threads "$threads" \
    "$@" > "$work/stdout" 2> "$work/stderr" &
  pid=$!
  for _ in $(seq 600); do grep -q "listening on" "$work/stdout" 2> /dev/null && break; sleep 0.1; done
  target="$(sed -n 's/^kvserve listening on //p' "$work/stdout")"
  for _ in $(seq 600); do "$kvctl" health --target "$target" > /dev/null 2>&1 && break; sleep 0.1; done
}

start_server --max-batch-tokens 4096
ids="$(/usr/bin/python3 -c 'print(",".join(str((7 * t + 11) % 31000) for t in range(2000)))')"
"$kvctl" prefix register --target "$target" --name sys --token-ids "$ids" > /dev/null
for cache in ${strategies//,/ }; do
  for mode in reuse cold; do
    extra=()
    [ "$mode" = cold ] && extra=(--no-prefix-reuse)
    ttft="$("$kvctl" bench --target "$target" --prefix sys --cache-implementation "$cache" \
      --concurrency 1 --requests 3 --warmup 1 --prompt-tokens 32 --max-new-tokens 1 \
      "${extra[@]}" --output json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["ttft_ms"]["p50"])')"
    echo "{\"cache\": \"$cache\", \"mode\": \"$mode\", \"ttft_ms_p50\": $ttft}"
  done
done
kill "$pid"; wait "$pid" 2> /dev/null || true

[ "${5:-}" = ttft ] && exit 0
for auto in on off; do
  flags=()
  [ "$auto" = off ] && flags=(--no-auto-prefix-cache)
  start_server "${flags[@]}"
  tps="$("$kvctl" bench --target "$target" --concurrency 4 --requests 16 --prompt-tokens 256 \
    --max-new-tokens 16 --output json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["output_tokens_per_s"])')"
  echo "{\"auto_prefix_cache\": \"$auto\", \"hit_rate\": 0, \"output_tokens_per_s\": $tps}"
  kill "$pid"; wait "$pid" 2> /dev/null || true
done
