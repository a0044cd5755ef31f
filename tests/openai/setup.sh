#!/usr/bin/env bash
# Installs the official openai npm package (the exact version of package-lock.json) that
# tests/e2e/test_openai_http.py drives kvserve's HTTP API with.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
