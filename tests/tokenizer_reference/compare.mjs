// Compares kvserve-tokenize's answers with the reference's, line by line; exits 1 on any
// difference and prints the first few.
//   node compare.mjs REQUESTS OURS REFERENCE LABEL
import fs from "node:fs";

const [requestsPath, oursPath, referencePath, label] = process.argv.slice(2);
const read = (p) => fs.readFileSync(p, "utf8").split("\n").filter((l) => l.length > 0);
const requests = read(requestsPath);
const ours = read(oursPath);
const reference = read(referencePath);
if (ours.length !== requests.length || reference.length !== requests.length) {
  console.error(`${label}: ${requests.length} requests but ${ours.length} answers from kvserve ` +
                `and ${reference.length} from the reference`);
  process.exit(1);
}
// Key order is not significant.
const canonical = (v) =>
  v && typeof v === "object" && !Array.isArray(v)
    ? JSON.stringify(Object.keys(v).sort().map((k) => [k, v[k]]))
    : JSON.stringify(v);
let mismatches = 0;
for (let i = 0; i < requests.length; ++i) {
  const a = JSON.parse(ours[i]);
  const b = JSON.parse(reference[i]);
  if (canonical(a) === canonical(b)) continue;
  if (++mismatches <= 5) {
    console.error(`${label}: mismatch on request ${i + 1}: ${requests[i].slice(0, 300)}`);
    console.error(`  kvserve:   ${JSON.stringify(a).slice(0, 600)}`);
    console.error(`  reference: ${JSON.stringify(b).slice(0, 600)}`);
  }
}
console.log(`${label}: ${requests.length - mismatches}/${requests.length} identical`);
process.exit(mismatches === 0 ? 0 : 1);
