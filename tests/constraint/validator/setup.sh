#!/usr/bin/env bash
# Installs the validators (the exact versions of package-lock.json) that validate.mjs checks the
# constraint engine's random strings with.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
