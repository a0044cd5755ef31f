// Checks of kvserve's OpenAI-compatible HTTP API through the official `openai` npm package.
// Run by tests/e2e/test_openai_http.py against a real kvserve:
//   node sdk_checks.mjs main|breakpoint
// with KVSERVE_BASE_URL (http://127.0.0.1:PORT/v1), KVSERVE_MODEL, KVSERVE_KEY_A and
// KVSERVE_KEY_B (two tenants' API keys) in the environment. Exits non-zero on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.KVSERVE_BASE_URL;
const model = process.env.KVSERVE_MODEL;
const a = new OpenAI({ baseURL, apiKey: process.env.KVSERVE_KEY_A, maxRetries: 0 });
const b = new OpenAI({ baseURL, apiKey: process.env.KVSERVE_KEY_B, maxRetries: 0 });
const SYSTEM =
  "You are a helpful assistant for the kvserve project. Answer briefly, precisely and politely, " +
  "in English, and never repeat the question. Cite the documentation when you can.";

async function expectError(promise, status, param) {
  try {
    await promise;
  } catch (error) {
    assert.equal(error.status, status, `status of ${error.message}`);
    if (param !== undefined) assert.equal(error.param, param, error.message);
    return error;
  }
  assert.fail(`expected HTTP ${status}`);
}

const chat = (client, content, extra = {}) =>
  client.chat.completions.create({
    model,
    messages: [{ role: "user", content }],
    max_tokens: 6,
    temperature: 0,
    ...extra,
  });

async function main() {
  const models = await a.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
  console.log("ok models");

  const whole = await chat(a, "Hello there");
  assert.equal(whole.object, "chat.completion");
  assert.equal(whole.choices.length, 1);
  assert.equal(typeof whole.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(whole.choices[0].finish_reason));
  assert.ok(whole.usage.completion_tokens >= 1 && whole.usage.completion_tokens <= 6);
  assert.equal(typeof whole.usage.prompt_tokens_details.cached_tokens, "number");
  console.log("ok chat");

  const stream = await chat(a, "Hello there", { stream: true, stream_options: { include_usage: true } });
  let text = "";
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) {
      assert.equal(chunk.choices.length, 0);
      usage = chunk.usage;
    }
  }
  assert.equal(text, whole.choices[0].message.content, "streamed text = whole text (greedy)");
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, "number");
  console.log("ok stream with usage");

  const completion = await a.completions.create({ model, prompt: "Once upon a time", max_tokens: 4, temperature: 0 });
  assert.equal(completion.object, "text_completion");
  assert.equal(typeof completion.choices[0].text, "string");
  assert.ok(completion.usage.completion_tokens <= 4);
  assert.equal(typeof completion.usage.prompt_tokens_details.cached_tokens, "number");
  console.log("ok completions");

  const two = await chat(a, "Pick a word", { n: 2, temperature: 1, seed: 7 });
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  console.log("ok n=2");

  const lp = await chat(a, "Hello there", { logprobs: true, top_logprobs: 2 });
  assert.equal(lp.choices[0].logprobs.content.length, lp.usage.completion_tokens);
  for (const t of lp.choices[0].logprobs.content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.top_logprobs[0].logprob >= t.logprob - 1e-6, "the chosen token is the top one (greedy)");
  }
  const clp = await a.completions.create({ model, prompt: "Once upon a time", max_tokens: 3, temperature: 0, logprobs: 2 });
  assert.equal(clp.choices[0].logprobs.tokens.length, clp.usage.completion_tokens);
  assert.equal(Object.keys(clp.choices[0].logprobs.top_logprobs[0]).length, 2);
  console.log("ok logprobs");

  const long = await chat(a, "Tell me a story", { max_tokens: 16 });
  const full = long.choices[0].message.content;
  const stop = [...full].slice(3, 4).join("");
  if (stop.length > 0 && stop !== "\uFFFD") {
    const stopped = await chat(a, "Tell me a story", { max_tokens: 16, stop: [stop] });
    assert.equal(stopped.choices[0].message.content, full.slice(0, full.indexOf(stop)));
    assert.equal(stopped.choices[0].finish_reason, "stop");
  }
  console.log("ok stop");

  const s1 = await chat(a, "Pick a word", { temperature: 1, seed: 42, max_tokens: 8 });
  const s2 = await chat(a, "Pick a word", { temperature: 1, seed: 42, max_tokens: 8 });
  assert.equal(s1.choices[0].message.content, s2.choices[0].message.content);
  console.log("ok seed");

  const bad = new OpenAI({ baseURL, apiKey: "not-a-key", maxRetries: 0 });
  await expectError(chat(bad, "hi"), 401);
  await expectError(chat(a, "hi", { temperature: 5 }), 400, "temperature");
  await expectError(chat(a, "hi", { frequency_penalty: 0.5 }), 400, "frequency_penalty");
  await expectError(chat(a, "hi", { max_tokens: 0 }), 400, "max_tokens");
  const missing = await expectError(chat(a, "hi", { model: "no-such-model" }), 404, "model");
  assert.equal(missing.code, "model_not_found");
  console.log("ok errors");

  // A repeated system prompt: the second request reuses the first one's cached prompt.
  const ask = (client, q) =>
    client.chat.completions.create({
      model, max_tokens: 2, temperature: 0,
      messages: [{ role: "system", content: SYSTEM }, { role: "user", content: q }],
    });
  const first = await ask(a, "What is a KV cache?");
  const again = await ask(a, "What is a prefix?");
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
  assert.ok(again.usage.prompt_tokens_details.cached_tokens < again.usage.prompt_tokens);
  console.log(`ok cached_tokens ${first.usage.prompt_tokens_details.cached_tokens} -> ${again.usage.prompt_tokens_details.cached_tokens}`);

  // Tenants: tenant B never reuses what tenant A's prompts left in the cache.
  const other = await ask(b, "What is a prefix?");
  assert.equal(other.usage.prompt_tokens_details.cached_tokens, 0, JSON.stringify(other.usage));
  console.log("ok tenants");
}

// On a server without automatic prefix caching: only a cache_control breakpoint caches.
async function breakpoint() {
  const plain = (q) => ({ role: "user", content: q });
  const system = (marked) => ({
    role: "system",
    content: [{ type: "text", text: SYSTEM, ...(marked ? { cache_control: { type: "ephemeral", ttl: "5m" } } : {}) }],
  });
  const ask = (client, marked, q) =>
    client.chat.completions.create({ model, max_tokens: 2, temperature: 0, messages: [system(marked), plain(q)] });
  await ask(a, false, "What is a KV cache?");
  const unmarked = await ask(a, false, "What is a prefix?");
  assert.equal(unmarked.usage.prompt_tokens_details.cached_tokens, 0, "no automatic caching here");
  const marked = await ask(a, true, "What is a KV cache?");
  const reused = await ask(a, true, "What is a session?");
  assert.ok(marked.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(marked.usage));
  assert.ok(reused.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(reused.usage));
  // Another tenant's breakpoint prefixes are not this tenant's.
  const other = await ask(b, false, "What is a session?");
  assert.equal(other.usage.prompt_tokens_details.cached_tokens, 0);
  await expectError(
    b.chat.completions.create({
      model, max_tokens: 2,
      messages: [{ role: "user", content: [{ type: "text", text: "x", cache_control: { type: "persistent" } }] }],
    }),
    400, "messages[0].content[0].cache_control.type");
  console.log("ok cache_control breakpoint");
}

const scenario = process.argv[2];
await ({ main, breakpoint })[scenario]();
