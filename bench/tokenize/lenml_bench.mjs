// @lenml/tokenizers (transformers.js's tokenizers) on the same text as bench/tokenize/run.sh gives
// megatrain: a text file as one document, or a JSONL file's "text" fields one document each.
// Prints one line: name=... docs=... bytes=... tokens=... seconds=... (encoding only, one thread).
//
//   node lenml_bench.mjs MODEL_DIR FILE   (needs tests/reference/tokenizers' npm packages installed)
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const here = path.dirname(new URL(import.meta.url).pathname);
const lib = path.resolve(here, "../../tests/reference/tokenizers/node_modules/@lenml/tokenizers/dist/main.mjs");
const { TokenizerLoader } = await import(pathToFileURL(lib).href);
const [dir, file] = process.argv.slice(2);
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
const raw = fs.readFileSync(file, "utf8");
const docs = file.endsWith(".jsonl")
  ? raw.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).text)
  : [raw];
const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d), 0);
const t0 = process.hrtime.bigint();
let tokens = 0;
for (const d of docs) tokens += tok.encode(d, { add_special_tokens: false }).length;
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`name=${path.basename(dir)} docs=${docs.length} bytes=${bytes} tokens=${tokens} seconds=${seconds.toFixed(3)}`);
