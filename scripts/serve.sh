#!/usr/bin/env bash
# `make serve`: starts kvserve with the embedded default model on 127.0.0.1:50051 (extra
# arguments go to kvserve, e.g. `make serve ARGS="--metrics-listen 127.0.0.1:9400"`) and
# prints kvctl commands to try from another terminal (on stderr, so that kvserve's first stdout
# line stays `kvserve listening on HOST:PORT`; tests/e2e/test_serve_demo.py runs them).
set -euo pipefail
build_dir="${1:-build}"
shift || true
cd "$(dirname "$0")/.."
kvctl="$build_dir/client/kvctl"
cat >&2 <<HINT
kvserve: starting with the embedded tiny model (Ctrl-C or SIGTERM stops it gracefully).
Try, from another terminal:
  $kvctl health
  $kvctl generate --prompt 'Once upon a time' --max-new-tokens 32
  $kvctl stream --prompt 'Once upon a time' --max-new-tokens 32 --cache-implementation static
  $kvctl generate --prompt 'Hello' --output json
  $kvctl bench --concurrency 4 --requests 16 --prompt-tokens 32 --max-new-tokens 32
HINT
exec "$build_dir/server/kvserve" "$@"
