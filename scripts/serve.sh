#!/usr/bin/env bash
# `make serve`: starts kvserve with the embedded default model. Until the gRPC server lands,
# it runs the generation demo on the embedded model and prints how to try it yourself.
set -euo pipefail
build_dir="${1:-build}"
cd "$(dirname "$0")/.."
if [ -x "$build_dir/server/kvserve" ]; then
  exec "$build_dir/server/kvserve" "${@:2}"
fi
echo "kvserve: the gRPC server is not built yet; running the generation demo on the embedded model."
"$build_dir/model/kvserve-generate" --prompt "Once upon a time" --max-new-tokens 32 --output json
echo
echo "try: $build_dir/model/kvserve-generate --prompt 'Hello' --max-new-tokens 16"
