#!/usr/bin/env bash
# Installs the reference npm packages (exact versions from package-lock.json).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
