#!/usr/bin/env bash
# Soak test: minutes of mixed traffic (shared system prompts and random words, four cache
# strategies, unary and streamed, cancelling and short-deadline clients) against a kvserve
# started from the build tree's binaries, then its report (tests/stress/soak.py). Builds
# nothing.
#
# usage: scripts/soak.sh [--minutes N | --seconds N] [--concurrency C] [--build-dir DIR]
#                        [--json PATH] [--max-rss-growth F] [--rss-interval S]
#                        [--embedded] [--server-log PATH] [kvserve flags...]
#   e.g. scripts/soak.sh --minutes 10 --max-rss-growth 0.10 --prefix-cache-bytes 2097152
# The model is a fresh kvserve-make-model tiny llama (--embedded: kvserve's embedded model);
# kvserve runs with --threads 2 unless a --threads flag is given. Every other argument goes
# to kvserve. Exit status: soak.py's (0 passed, 1 failed, 2 could not start).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build
soak_args=()
server_flags=()
model=tiny
minutes_given=
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --minutes | --seconds) soak_args+=("$1" "$2"); minutes_given=1; shift 2 ;;
    --concurrency | --json | --max-rss-growth | --rss-interval | --server-log | --seed | \
      --cancel-clients | --short-deadline-clients | --warmup-fraction)
      soak_args+=("$1" "$2"); shift 2 ;;
    --embedded) model=embedded; shift ;;
    --threads) soak_args+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) server_flags+=("$1"); shift ;;
  esac
done
[[ -n "$minutes_given" ]] || soak_args+=(--minutes 10)
for binary in server/kvserve model/kvserve-make-model; do
  if [[ ! -x "$build_dir/$binary" ]]; then
    echo "soak.sh: $build_dir/$binary is missing; build first (make build)" >&2
    exit 2
  fi
done
[[ "$model" == tiny ]] && soak_args+=(--make-model "$build_dir/model/kvserve-make-model")
export KVSERVE_BUILD_DIR="$build_dir"
exec scripts/python.sh tests/stress/soak.py --kvserve "$build_dir/server/kvserve" \
  "${soak_args[@]}" -- "${server_flags[@]}"
