#!/usr/bin/env bash
# Runs Debian's /usr/bin/python3 with the PYTHONPATH that ctest gives every Python test, for
# scripts run by hand (bench/*.py, tests/stress/soak.py, a single e2e test): the test harness
# (tests/harness: kvserve_launch, kvserve_fixtures), client/python (kvserve_stubs,
# kvserve_kv_events), tests/reference, bench/peer and the generated stubs (BUILD/proto/python).
#
# usage: [KVSERVE_BUILD_DIR=DIR] scripts/python.sh SCRIPT [ARGS...]   (DIR: build)
#   scripts/python.sh bench/http_vs_grpc.py --build build
#   KVSERVE_BUILD_DIR=build-asan scripts/python.sh tests/stress/soak.py --kvserve ...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${KVSERVE_BUILD_DIR:-$root/build}"
[[ "$build_dir" == /* ]] || build_dir="$PWD/$build_dir"
path="$root/tests/harness:$root/client/python:$root/tests/reference:$root/bench/peer"
export PYTHONPATH="$path:$build_dir/proto/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 "$@"
