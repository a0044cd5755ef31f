#!/usr/bin/env bash
# Fails when a C++ source of the project is not clang-formatted (.clang-format at the root).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "clang-format not installed (scripts/setup.sh installs it)"; exit 1
fi
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.h' '*.cc' 2>/dev/null || find base cache tokenizer model server client bench tests -name '*.h' -o -name '*.cc')
existing=()
for f in "${files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
# Batches of files per clang-format process, on every core: one process per file spent most
# of the time starting processes. A file that is not formatted is named in the diagnostics.
bad=$(printf '%s\0' "${existing[@]}" |
      xargs -0 -n 32 -P "$(nproc)" clang-format --dry-run --Werror 2>&1 |
      sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error:.*/\1/p' | sort -u || true)
if [ -n "$bad" ]; then
  while read -r f; do echo "not formatted: $f"; done <<<"$bad"
  exit 1
fi
echo "format: ${#existing[@]} files clean"
