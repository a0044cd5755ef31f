// Writes corpus.jsonl (strings to encode) and conversations.jsonl (chat-template inputs).
// Deterministic; rerun only to change the corpus:  node make_corpus.mjs
import fs from "node:fs";

const strings = [""];
const english = [
  "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
  "I can't believe it's not butter", "They'll be here soon, won't they?", "I'm sure we've met.",
  "You're right; it's done.", "Don't stop", "HELLO WORLD", "hello WORLD Hello", "a", "I",
  "It's 5 o'clock", "The year 2024 had 366 days.", "Pi is roughly 3.14159265358979",
  "Call 555-0123 now!!!", "e.g. i.e. etc.", "Mr. Smith went to Washington.",
  "What?! No way...", "Quote: \"to be or not to be\"", "single 'quotes' here",
  "Sentence one. Sentence two.", "trailing space ", " leading space", "  two leading",
  "tabs\tbetween\twords", "line one\nline two", "windows\r\nline endings", "\n\n\n",
  "   ", "\t", "end with newline\n", "multiple   spaces    between", "a\u00a0b non-breaking",
  "semicolons; colons: dashes — and en–dashes", "ellipsis… unicode", "100% sure", "$19.99",
  "#hashtag @mention", "user@example.com", "https://example.com/path?q=1&r=2#frag",
  "C:\\Windows\\System32", "snake_case_identifier", "camelCaseIdentifier", "SCREAMING_CASE",
  "kebab-case-words", "x = y + z * 2", "if (a < b && c > d) { return; }",
];
strings.push(...english);
const code = [
  "def foo(x):\n    return x + 1\n", "for i in range(10):\n\tprint(i)",
  "#include <iostream>\nint main() { std::cout << \"hi\\n\"; }",
  "const f = (a, b) => a ?? b;", "SELECT * FROM users WHERE id = 42;",
  "<div class=\"x\">text</div>", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
  "    indented four", "        indented eight", "\t\tdouble tab", "fn main() -> i32 { 0 }",
  "x+=1;y-=2;z*=3", "a==b!=c<=d>=e", "lambda: None", "!@#$%^&*()_+-=[]{}|;':\",./<>?`~",
];
strings.push(...code);
for (const n of [0, 7, 42, 123, 1234, 12345, 123456, 1234567890, 3.5, 0.001, 1e21]) {
  strings.push(String(n), `value ${n}`, `${n}px`);
}
for (const ws of [" ", "  ", "   ", "    ", "\n", "\n\n", " \n ", "\t\t", " \t\n\r"]) {
  strings.push(`a${ws}b`, `${ws}x${ws}`, `end${ws}`);
}
const cjk = [
  "你好，世界", "我爱自然语言处理。", "日本語のテキストです", "東京は大きい都市です。",
  "한국어 문장입니다", "中文 and English mixed", "漢字かなカナ", "今天天气很好！",
  "「引用」『二重』", "全角ＡＢＣ１２３", "ｈａｌｆ　ｗｉｄｔｈ",
];
strings.push(...cjk);
const emoji = [
  "😀", "I love 🍕 and 🍣", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🇺🇸🇯🇵 flags", "❤️ heart",
  "emoji at end 🎉", "🎉🎉🎉", "mixed 😀 text 你好 café", "⭐️✨🌟",
];
strings.push(...emoji);
const accents = [
  "café", "naïve résumé", "Crème brûlée", "São Paulo", "Zürich", "Ångström", "Ærøskøbing",
  "cafe\u0301 (combining acute)", "n\u0303 combining tilde", "e\u0301\u0302 stacked marks",
  "Å vs A\u030a", "ﬁ ligature", "Ω ohm vs Ω omega", "½ ¼ ¾", "x² y³", "ℌ𝔢𝔩𝔩𝔬",
  "Ελληνικά κείμενα", "Русский текст", "עברית", "العربية", "हिन्दी", "ไทย",
  "Tiếng Việt có dấu", "İstanbul ıı", "straße STRASSE",
];
strings.push(...accents);
const specials = [
  "<s>", "</s>", "<unk>", "<s>Hello</s>", "text <s> in </s> middle", "<|begin_of_text|>hi",
  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<|eot_id|><|eot_id|>",
  "<|im_start|>user\nHello<|im_end|>", "<|im_start|>assistant\n<think>\n\n</think>\n\n",
  "<|endoftext|>", "<think>reasoning</think>answer", "< s> not special", "<|im_start",
  "<|reserved_special_token_5|>", "a<|im_end|>b", " <s> spaced </s> ",
];
strings.push(...specials);
// Deterministic pseudo-random mixtures of all of the above.
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pool = [...english, ...code, ...cjk, ...emoji, ...accents, ...specials];
while (strings.length < 360) {
  const parts = [];
  const n = 1 + Math.floor(rand() * 4);
  for (let i = 0; i < n; ++i) parts.push(pool[Math.floor(rand() * pool.length)]);
  const seps = [" ", "", "\n", "  ", "\t", ". "];
  strings.push(parts.join(seps[Math.floor(rand() * seps.length)]));
}
fs.writeFileSync("corpus.jsonl", strings.map((s) => JSON.stringify(s)).join("\n") + "\n");

const conversations = [];
const sys = { role: "system", content: "You are a helpful assistant." };
const u = (c) => ({ role: "user", content: c });
const a = (c) => ({ role: "assistant", content: c });
const bases = [
  [u("Hello!")],
  [sys, u("What is 2+2?")],
  [sys, u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")],
  [u("Translate 'cat' to French."), a("Chat."), u("And dog?"), a("Chien.")],
  // The reference ignores str.lstrip's argument (Python strips only "\n" in Qwen3's
  // `content.lstrip('\n')`), so the assistant turn here has no leading spaces; see README.md.
  [sys, u("  padded content  "), a("padded answer  ")],
  [u("Multi\nline\nquestion?"), a("Multi\nline\nanswer.")],
  [u("Solve x+1=3"), a("<think>\nSubtract one.\n</think>\n\nx = 2")],
  [sys, u("Q1"), a("<think>first thought</think>A1"), u("Q2")],
  [sys, u("Q1"), a("A1"), u("Q2"), a("<think>\nstep\n</think>\n\nA2")],
  [u("emoji 😀 and 你好"), a("café ✓")],
  [{ role: "system", content: "Be terse." }, u("Why?"), a("Because."), u("Why not?"), a("Fine.")],
  [u("<think>user text with think tags</think> hmm")],
];
for (const messages of bases) {
  for (const add_generation_prompt of [true, false]) {
    conversations.push({ messages, add_generation_prompt });
  }
}
// Template kwargs (apply_chat_template(**kwargs)): Qwen3's enable_thinking, and tools whose JSON
// schemas list their keys deliberately out of sorted order, so that a renderer sorting keys in
// `tojson` fails. Keys are never integer-like ("2"): JavaScript objects put those first, Python
// dicts keep them in place. Numbers are integers or short non-integral floats, which both
// languages print alike (see README.md).
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city, e.g. \"Zürich\" or 東京.",
    parameters: {
      type: "object",
      properties: {
        zeta_unit: { type: "string", enum: ["celsius", "fahrenheit"], description: "Unit" },
        city: { type: "string", description: "City name" },
        alpha_days: { type: "integer", minimum: 1, maximum: 7, default: null },
      },
      required: ["city", "zeta_unit"],
    },
  },
};
const searchTool = {
  type: "function",
  function: {
    name: "search",
    description: "Search the web 🔎 (results\tas\nplain text).",
    parameters: {
      type: "object",
      properties: {
        query: { type: "string" },
        options: {
          type: "object",
          properties: { safe: { type: "boolean", default: true }, boost: { type: "number", default: 0.5 } },
          additionalProperties: false,
        },
      },
      required: ["query"],
    },
    strict: true,
  },
};
const tools = [weatherTool, searchTool];
const withReasoning = [sys, u("Q1"), a("<think>\nfirst thought\n</think>\n\nA1"), u("Q2"),
                       a("<think>second thought</think>A2"), u("Q3")];
// An assistant tool call (arguments as an object, keys unsorted) answered by a user turn holding
// the tool response, which Qwen3 does not count as a new query.
const toolCall = [
  sys, u("Weather in Zürich for 3 days?"),
  { role: "assistant", content: "", tool_calls: [
    { type: "function", function: { name: "get_weather",
                                     arguments: { zeta_unit: "celsius", city: "Zürich", alpha_days: 3 } } },
  ] },
  u("<tool_response>\n{\"temp\": 21.5, \"sky\": \"sunny\"}\n</tool_response>"),
];
const withKwargs = [
  [[u("Hello!")], { enable_thinking: false }],
  [[u("Hello!")], { enable_thinking: true }],
  [withReasoning, { enable_thinking: false }],
  [withReasoning, { enable_thinking: true }],
  [[sys, u("What's the weather in Zürich?")], { tools }],
  [[u("What's the weather in Zürich?")], { tools, enable_thinking: false }],
  [toolCall, { tools }],
  [[u("Search for \"quoted\" text")],
   { tools: [searchTool], enable_thinking: true, unused: { zeta: 1, alpha: [true, null, 0.5] } }],
];
// Values for the tojson probe template of run_reference.sh, which prints each with the options
// of tojson (and every conversation's messages and tools).
const probe = {
  object: { zeta: 1, alpha: "a", mid: { z: [], a: {}, m: [1, [2, [3]]] } },
  list: [1, -7, 0.5, -2.25, 123456789012, true, false, null, "s", [], {}],
  text: "quotes \" ' backslash \\ slash / tab\t newline\n cr\r bs\b ff\f ctrl\u0001 del\u007f <b>&amp;",
  unicode: "é 東京 😀 \u00a0 \u2028 ẞ",
  number: 3.14159,
  negative: -42,
  yes: true,
  no: false,
  nothing: null,
  empty_list: [],
  empty_object: {},
};
const sortable = { delta: 1, bravo: { yankee: 2, xray: [3, { zulu: 4, alpha: 5 }] }, charlie: null };
withKwargs.push([[u("probe")], { probe }], [[u("probe")], { sortable, probe: { sortable } }]);
for (const [messages, template_kwargs] of withKwargs) {
  for (const add_generation_prompt of [true, false]) {
    conversations.push({ messages, add_generation_prompt, template_kwargs });
  }
}
fs.writeFileSync("conversations.jsonl",
                 conversations.map((c) => JSON.stringify(c)).join("\n") + "\n");
console.log(`${strings.length} strings, ${conversations.length} conversations`);
