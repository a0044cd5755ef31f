#!/usr/bin/env bash
# Fails when a C++ source of the project is not clang-formatted (.clang-format at the root).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "clang-format not installed (scripts/setup.sh installs it)"; exit 1
fi
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.h' '*.cc' 2>/dev/null || find base cache tokenizer model server client bench tests -name '*.h' -o -name '*.cc')
bad=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then echo "not formatted: $f"; bad=1; fi
done
[ "$bad" -eq 0 ] && echo "format: ${#files[@]} files clean"
exit "$bad"
