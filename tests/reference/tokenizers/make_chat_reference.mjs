// Regenerates tests/data/tokenizers/expected/gemma3-chat.json (run: npm install && node make_chat_reference.mjs):
// each conversation of tests/data/tokenizers/chat/gemma3.jsonl rendered with Gemma 3's chat template
// (tests/data/tokenizers/gemma3/tokenizer_config.json, google/gemma-3-*-it's) and encoded with its
// tokenizer.json by @lenml/tokenizers (transformers.js), rendered by @huggingface/jinja (what
// transformers.js's apply_chat_template renders with; the one @lenml/tokenizers bundles predates the
// `is string` test Gemma's template uses): implementations independent of megatrain's renderer and
// tokenizer.
//   text  the template rendered with messages, bos_token, eos_token, add_generation_prompt false
//   ids   the text encoded, special tokens matched, none added (apply_chat_template's tokenize: true)
//   mask  1 on the tokens that hold a byte of an answer: for assistant message i, the text from the
//         end of messages[:i] rendered with the generation prompt to the end of messages[:i + 1]
//         rendered, less the whitespace that ends it (the newline after <end_of_turn>); a token's
//         bytes found by encoding the text's prefixes.
import { Template } from "@huggingface/jinja";
import { TokenizerLoader } from "@lenml/tokenizers";
import { execFileSync } from "child_process";
import fs from "fs";
import path from "path";

const here = path.dirname(new URL(import.meta.url).pathname);
const data = path.resolve(here, "../../data/tokenizers");
const json = JSON.parse(execFileSync("xz", ["-dc", path.join(data, "gemma3/tokenizer.json.xz")], { maxBuffer: 1 << 30 }));
const config = JSON.parse(fs.readFileSync(path.join(data, "gemma3/tokenizer_config.json"), "utf8"));
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });

const template = new Template(config.chat_template);
const render = (messages, add_generation_prompt) =>
  template.render({ messages, bos_token: config.bos_token, eos_token: config.eos_token, add_generation_prompt });
const encode = (text) => tok.encode(text, { add_special_tokens: false });
const shared = (a, b) => {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
};

const out = [];
for (const line of fs.readFileSync(path.join(data, "chat/gemma3.jsonl"), "utf8").split("\n")) {
  if (!line.trim()) continue;
  const { messages } = JSON.parse(line);
  const text = render(messages, false), ids = encode(text), mask = ids.map(() => 0);
  messages.forEach((m, i) => {
    if (m.role !== "assistant") return;
    const before = render(messages.slice(0, i), true), through = render(messages.slice(0, i + 1), false).trimEnd();
    if (!text.startsWith(before) || !text.startsWith(through)) throw new Error(`message ${i}: renders are not prefixes`);
    const first = shared(encode(before), ids), head = encode(through);
    const end = shared(head, ids) + (shared(head, ids) < head.length ? 1 : 0);
    for (let k = first; k < end; k++) mask[k] = 1;
  });
  out.push({ text, ids, mask });
}
fs.writeFileSync(path.join(data, "expected/gemma3-chat.json"),
  "[\n" + out.map((c) => ` {"text": ${JSON.stringify(c.text)},\n  "ids": [${c.ids.join(",")}],\n  "mask": [${c.mask.join(",")}]}`).join(",\n") + "\n]\n");
console.log(`gemma3-chat: ${out.length} conversations, ${out.reduce((a, c) => a + c.ids.length, 0)} tokens`);
