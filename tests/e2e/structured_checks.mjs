// Structured outputs through the official `openai` npm package, each output checked by an
// independent validator: ajv (JSON Schema, with ajv-formats) and JavaScript's RegExp. Run by
// tests/e2e/test_structured.py against a real kvserve on a random-weight model (its unconstrained
// output is noise, so only the constraint makes an output valid):
//   node structured_checks.mjs SCHEMAS_JSON ROUNDS
// with KVSERVE_BASE_URL and KVSERVE_MODEL in the environment. Prints one line per check and
// exits non-zero on the first invalid output or wrong answer.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.resolve(here, "..", "..");
const fromOpenai = createRequire(path.join(source, "tests", "openai", "package.json"));
const fromValidator = createRequire(
  path.join(source, "tests", "constraint", "validator", "package.json"));
const OpenAI = fromOpenai("openai").default ?? fromOpenai("openai");
const Ajv2020 = fromValidator("ajv/dist/2020").default;
const addFormats = fromValidator("ajv-formats").default ?? fromValidator("ajv-formats");

const [schemasPath, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText ?? "4");
const corpus = JSON.parse(fs.readFileSync(schemasPath, "utf8"));
const client = new OpenAI({
  baseURL: process.env.KVSERVE_BASE_URL, apiKey: "none", maxRetries: 0, timeout: 120000,
});
const model = process.env.KVSERVE_MODEL;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

let checked = 0;
const complete = (text, finish) => finish !== "length";

// One request; every choice that finished (not cut by max_tokens) must be valid.
async function run(body, validate, label) {
  const r = await client.completions.create({ model, prompt: "Hello", max_tokens: 160, ...body });
  let whole = 0;
  for (const c of r.choices) {
    if (!complete(c.text, c.finish_reason)) continue;
    const verdict = validate(c.text);
    assert.equal(verdict, true, `${label}: ${JSON.stringify(c.text)} ${verdict}`);
    ++whole;
    ++checked;
  }
  return { whole, usage: r.usage, choices: r.choices };
}

// A random-weight model rarely closes an unbounded string or array on its own (each step, the
// closing byte is one choice among hundreds), so strings and arrays without bounds get some
// here. The outputs are validated against the original schema, which allows them too.
function bounded(schema) {
  if (Array.isArray(schema)) return schema.map(bounded);
  if (schema === null || typeof schema !== "object") return schema;
  const out = {};
  for (const [k, v] of Object.entries(schema)) {
    out[k] = k === "enum" || k === "const" || k === "examples" || k === "default" ? v : bounded(v);
  }
  const types = Array.isArray(out.type) ? out.type : [out.type];
  const plain = !("enum" in out) && !("const" in out) && !("pattern" in out) && !("format" in out);
  if (types.includes("string") && plain && !("maxLength" in out)) {
    out.maxLength = Math.max(out.minLength ?? 0, 12);
  }
  if (types.includes("array") && !("maxItems" in out)) out.maxItems = Math.max(out.minItems ?? 0, 3);
  return out;
}

function jsonValidator(schema) {
  const check = ajv.compile(schema);
  return (text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return `not JSON: ${e.message}`;
    }
    return check(value) ? true : ajv.errorsText(check.errors);
  };
}

async function main() {
  let forced = 0;
  let total = 0;
  let finishedSchemas = 0;
  // JSON Schema through response_format (strict), greedy and sampled, n = 1 and 4.
  for (const [i, entry] of corpus.schemas.entries()) {
    const validate = jsonValidator(entry.schema);
    let whole = 0;
    for (let round = 0; round < rounds; ++round) {
      const body = {
        response_format: {
          type: "json_schema",
          json_schema: { name: `s${i}`, strict: true, schema: bounded(entry.schema) },
        },
        temperature: round === 0 ? 0 : 1,
        seed: 1000 * i + round,
        n: round % 2 === 1 ? 4 : 1,
      };
      const r = await run(body, validate, `schema ${entry.name}`);
      whole += r.whole;
      forced += r.usage.completion_tokens_details?.forced_tokens ?? 0;
      total += r.usage.completion_tokens;
    }
    if (whole > 0) ++finishedSchemas;
  }
  // Every output that finished was valid (checked above); most schemas must finish at least once.
  assert.ok(finishedSchemas >= 0.8 * corpus.schemas.length,
            `only ${finishedSchemas} of ${corpus.schemas.length} schemas finished within max_tokens`);
  console.log(`ok json_schema: ${finishedSchemas} of ${corpus.schemas.length} schemas finished, forced ${forced} of ${total} tokens`);

  // Any JSON object.
  for (let round = 0; round < rounds; ++round) {
    await run({ response_format: { type: "json_object" }, temperature: 1, seed: round },
      (t) => { try { const v = JSON.parse(t); return typeof v === "object" && v !== null && !Array.isArray(v) ? true : "not an object"; } catch (e) { return e.message; } },
      "json_object");
  }
  console.log("ok json_object");

  // Regexes through vLLM's structured_outputs, checked whole by RegExp.
  for (const pattern of corpus.regexes) {
    const re = new RegExp(`^(?:${pattern})$`, "u");
    for (let round = 0; round < rounds; ++round) {
      await run({ structured_outputs: { regex: pattern }, temperature: round === 0 ? 0 : 1,
                  seed: round, n: round === 0 ? 1 : 2 },
                (t) => re.test(t) || "no match", `regex ${pattern}`);
    }
  }
  console.log(`ok regex: ${corpus.regexes.length} patterns`);

  // Choices.
  const colours = ["red", "green", "blue", "dark blue", "néon"];
  for (let round = 0; round < rounds; ++round) {
    await run({ structured_outputs: { choice: colours }, temperature: 1, seed: round, n: 4 },
              (t) => colours.includes(t) || "not a choice", "choice");
  }
  console.log("ok choice");

  // Chat with strict json_schema, as agent frameworks send it.
  const person = {
    type: "object",
    properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 150 } },
    required: ["name", "age"], additionalProperties: false,
  };
  const chat = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Describe a person." }], max_tokens: 120,
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } },
  });
  const verdict = jsonValidator(person)(chat.choices[0].message.content);
  assert.equal(verdict, true, chat.choices[0].message.content);
  ++checked;
  console.log("ok chat response_format");

  // A schema kvserve cannot enforce is refused naming the parameter.
  try {
    await client.chat.completions.create({
      model, messages: [{ role: "user", content: "x" }], max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "bad", schema: { type: "string", contentEncoding: "base64" } } },
    });
    assert.fail("an unsupported keyword was accepted");
  } catch (e) {
    assert.equal(e.status, 400, e.message);
    assert.equal(e.param, "response_format.json_schema.schema", e.message);
    assert.match(e.message, /contentEncoding/);
  }
  console.log("ok refusal");
  console.log(`checked ${checked} outputs`);
}

await main();
