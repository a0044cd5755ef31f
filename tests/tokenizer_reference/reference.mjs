// Reference side of the tokenizer comparison: reads the same JSON-lines requests as
// kvserve-tokenize and answers them with @huggingface/tokenizers and @huggingface/jinja.
//   node reference.mjs --tokenizer DIR < requests.jsonl > answers.jsonl
//   node reference.mjs --tokenizer DIR --benchmark FILE [--iterations N]
import fs from "node:fs";
import readline from "node:readline";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const args = process.argv.slice(2);
const option = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const dir = option("--tokenizer");
if (!dir) {
  console.error("usage: node reference.mjs --tokenizer DIR [--benchmark FILE [--iterations N]]");
  process.exit(2);
}

const loadStart = performance.now();
const tokenizerJson = JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`, "utf8"));
const configPath = `${dir}/tokenizer_config.json`;
const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, "utf8")) : {};
const tokenizer = new Tokenizer(tokenizerJson, config);
const loadMs = performance.now() - loadStart;

const tokenContent = (t) => (t == null ? "" : typeof t === "string" ? t : t.content ?? "");
let template = null;
if (typeof config.chat_template === "string") template = new Template(config.chat_template);

function handle(request) {
  if (typeof request.text === "string") {
    const addSpecial = request.add_special_tokens ?? true;
    const ids = tokenizer.encode(request.text, { add_special_tokens: addSpecial }).ids;
    // The reference throws on an empty id list; decoding nothing is the empty string.
    const decoded = ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: false });
    return { ids, decoded };
  }
  if (Array.isArray(request.messages)) {
    const rendered = template.render({
      ...(request.template_kwargs ?? {}),
      messages: request.messages,
      add_generation_prompt: request.add_generation_prompt ?? false,
      bos_token: tokenContent(config.bos_token),
      eos_token: tokenContent(config.eos_token),
    });
    const ids = tokenizer.encode(rendered, { add_special_tokens: false }).ids;
    return { rendered, ids };
  }
  return { error: 'expected a "text" string or a "messages" array' };
}

const benchmarkFile = option("--benchmark");
if (benchmarkFile) {
  const text = fs.readFileSync(benchmarkFile, "utf8");
  const bytes = Buffer.byteLength(text, "utf8");
  const iterations = Number(option("--iterations") ?? 3);
  let best = Infinity;
  let tokens = 0;
  for (let i = 0; i < iterations; ++i) {
    const start = performance.now();
    tokens = tokenizer.encode(text, { add_special_tokens: false }).ids.length;
    best = Math.min(best, performance.now() - start);
  }
  console.log(JSON.stringify({ load_ms: loadMs, bytes, tokens, encode_ms: best,
                               mb_per_s: bytes / 1e6 / (best / 1e3) }));
} else {
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.length === 0) continue;
    let answer;
    try {
      answer = handle(JSON.parse(line));
    } catch (e) {
      answer = { error: String(e.message ?? e) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  }
}
