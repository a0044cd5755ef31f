#!/usr/bin/env bash
# `make serve`: starts kvserve with the embedded default model, gRPC on 127.0.0.1:50051 and the
# OpenAI-compatible HTTP API on 127.0.0.1:8000 (extra arguments go to kvserve and win over
# these, e.g. `make serve ARGS="--http-listen 127.0.0.1:9000 --metrics-listen 127.0.0.1:9400"`),
# and prints kvctl and curl commands to try from another terminal (on stderr, so that kvserve's
# first stdout line stays `kvserve listening on HOST:PORT`; tests/e2e/test_serve_demo.py runs
# them).
set -euo pipefail
build_dir="${1:-build}"
shift || true
cd "$(dirname "$0")/.."
kvctl="$build_dir/client/kvctl"
# kvserve takes the last value of a flag given twice: the caller's --http-listen wins.
listen="127.0.0.1:50051"
http="127.0.0.1:8000"
prev=""
for arg in "$@"; do
  case "$arg" in
    --listen=*) listen="${arg#--listen=}" ;;
    --http-listen=*) http="${arg#--http-listen=}" ;;
    *)
      if [[ "$prev" == "--listen" ]]; then listen="$arg"; fi
      if [[ "$prev" == "--http-listen" ]]; then http="$arg"; fi
      ;;
  esac
  prev="$arg"
done
zero_note=""
if [[ "$http" == *:0 ]]; then zero_note=' (port 0: kvserve logs the port it took)'; fi
cat >&2 <<HINT
kvserve: starting with the embedded tiny model (Ctrl-C or SIGTERM stops it gracefully);
gRPC (kvserve.v1) on $listen, the OpenAI-compatible HTTP API on http://$http$zero_note.
Try, from another terminal:
  $kvctl health
  $kvctl generate --prompt 'Once upon a time' --max-new-tokens 32
  $kvctl stream --prompt 'Once upon a time' --max-new-tokens 32 --cache-implementation static
  $kvctl generate --prompt 'Hello' --output json
  $kvctl bench --concurrency 4 --requests 16 --prompt-tokens 32 --max-new-tokens 32
  curl -s http://$http/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "embedded-tiny", "max_tokens": 16, "temperature": 1, "messages": [{"role": "user", "content": "Hello"}]}'
HINT
exec "$build_dir/server/kvserve" --http-listen 127.0.0.1:8000 "$@"
