// Checks the constraint engine's random strings with independent validators: every string
// kvserve-constraint prints for a schema of ../schemas.json must parse with JSON.parse and
// validate under ajv (with ajv-formats), and every string for a regex must match JavaScript's
// RegExp (with the u flag) whole. Exit 0 when all do; 1 with each failure listed; 77 (skipped)
// when the validators are not installed (setup.sh installs them).
//
// usage: node validate.mjs --tool build/constraint/kvserve-constraint [--samples 40]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
let Ajv, addFormats;
try {
  Ajv = (await import('ajv/dist/2020.js')).default;
  addFormats = (await import('ajv-formats')).default;
} catch (e) {
  console.log(`skipped: the validators are not installed (${here}/setup.sh): ${e.message}`);
  process.exit(77);
}

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tool = flag('--tool');
const samples = Number(flag('--samples', '40'));
if (!tool) {
  console.error('usage: node validate.mjs --tool PATH [--samples N]');
  process.exit(2);
}

const ajv = new Ajv({ strict: false, allErrors: false });
addFormats(ajv);
const work = mkdtempSync(join(tmpdir(), 'kvserve-constraint-'));
const failures = [];
let checked = 0;

function run(constraintArgs, seed, whitespace) {
  const r = spawnSync(tool, [...constraintArgs, '--samples', String(samples), '--seed', String(seed),
                             '--whitespace-bytes', String(whitespace)], { encoding: 'utf8' });
  if (r.status !== 0) return { error: `exit ${r.status}: ${r.stderr.trim()}` };
  return { strings: JSON.parse(r.stdout) };
}

const corpus = JSON.parse(readFileSync(join(here, '..', 'schemas.json'), 'utf8')).schemas;
corpus.forEach(({ name, schema }, index) => {
  const file = join(work, `${index}.json`);
  writeFileSync(file, JSON.stringify(schema));
  const validate = ajv.compile(schema);
  for (const whitespace of [0, 3]) {
    const out = run(['--json-schema', file], index + 1, whitespace);
    if (out.error) {
      failures.push(`${name}: ${out.error}`);
      continue;
    }
    for (const s of out.strings) {
      ++checked;
      let value;
      try {
        value = JSON.parse(s);
      } catch (e) {
        failures.push(`${name}: not JSON: ${s}`);
        continue;
      }
      if (!validate(value)) {
        failures.push(`${name}: ${s}: ${ajv.errorsText(validate.errors)}`);
      }
    }
  }
});

// Regexes in the documented subset, including Unicode classes and escapes.
const patterns = [
  '\\d{3}-\\d{4}', '[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8})?', '(yes|no|maybe)', '[^,]{1,5}(,[^,]{1,5}){0,3}',
  '[α-ω]+', '\\w+@\\w+\\.(com|org)', '(?:ab|c)*d?', '.{2,4}', '[\\u00e0-\\u00ff]{2}\\s[0-9a-f]+',
  '(?<year>\\d{4})-(0[1-9]|1[0-2])', '\\D\\W\\S', 'a+?b*?', '[^\\d\\s]+', '\\u{1F600}|x',
];
patterns.forEach((pattern, index) => {
  const re = new RegExp(`^(?:${pattern})$`, 'u');
  const out = run(['--regex', pattern], 1000 + index, 0);
  if (out.error) {
    failures.push(`regex ${pattern}: ${out.error}`);
    return;
  }
  for (const s of out.strings) {
    ++checked;
    if (!re.test(s)) failures.push(`regex ${pattern}: ${JSON.stringify(s)} does not match`);
  }
});

rmSync(work, { recursive: true, force: true });
for (const f of failures.slice(0, 50)) console.log(`FAIL ${f}`);
console.log(`${checked} strings from ${corpus.length} schemas and ${patterns.length} regexes`);
console.log(`${checked - failures.length} passed, ${failures.length} failed`);
process.exit(failures.length ? 1 : 0);
