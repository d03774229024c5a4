// Regenerates tests/data/tokenizers/expected/qwen3_5-chat.json (run: npm install && node make_chat_spans.mjs):
// each conversation of tests/data/tokenizers/chat/qwen3_5.jsonl rendered with Qwen3.5's chat template
// (tests/data/chat/qwen3.5/chat_template.jinja) by @huggingface/jinja, an implementation independent of
// megatrain's, and the byte ranges of its answers. No tokenizer: Qwen3.5's tokenizer.json is not among
// the files these tests have, so the text and the answers' bytes are what is checked.
//   text   the template rendered with messages, tools, add_generation_prompt false
//   spans  [start, end) in bytes of the text, one for each assistant message i. Where the renders are
//          prefixes of one another: from the end of messages[:i] rendered with the generation prompt
//          to the end of messages[:i + 1] rendered, less the whitespace (space, tab, CR, LF) that ends
//          it. Where the whole text shows the turn otherwise (Qwen3.5 drops the thinking of turns
//          before the last user message): the turn is what the text has and the conversation
//          without message i rendered has not, placed where its text begins most like the
//          generation prompt (the prompt render's bytes past messages[:i]'s); the answer the turn
//          after as much of the prompt as it shows, backed up to the byte after the last newline
//          before it where the prompt goes on (none: not found), less the whitespace that ends it.
import { Template } from "@huggingface/jinja";
import fs from "fs";
import path from "path";

const here = path.dirname(new URL(import.meta.url).pathname);
const data = path.resolve(here, "../../data/tokenizers");
const template = new Template(fs.readFileSync(path.resolve(here, "../../data/chat/qwen3.5/chat_template.jinja"), "utf8"));
const render = (messages, tools, add_generation_prompt) =>
  Buffer.from(template.render({ messages, tools, add_generation_prompt }), "utf8");
const agree = (a, b) => {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
};
const startsWith = (a, b) => b.length <= a.length && a.subarray(0, b.length).equals(b);
const space = (c) => c === 0x20 || c === 0x0a || c === 0x09 || c === 0x0d;
const trimEnd = (buf, from) => {
  let end = buf.length;
  while (end > from && space(buf[end - 1])) end--;
  return end;
};

function removedTurn(whole, without, open) {
  if (whole.length <= without.length) return null;
  const turn = whole.length - without.length, first = agree(whole, without);
  let last = 0;
  while (last < without.length && whole[whole.length - 1 - last] === without[without.length - 1 - last]) last++;
  const lo = without.length - last, hi = Math.min(first, without.length);
  if (lo > hi) return null;
  let at = lo, shown = 0;
  for (let q = lo; q <= hi; q++) {
    const k = agree(whole.subarray(q, q + turn), open);
    if (k > shown) [at, shown] = [q, k];
  }
  const text = whole.subarray(at, at + turn);
  while (shown > 0 && shown < open.length && text[shown - 1] !== 0x0a) shown--;
  if (shown === 0) return null;
  const end = trimEnd(text, shown);
  return end > shown ? [at + shown, at + end] : null;
}

const out = [];
for (const line of fs.readFileSync(path.join(data, "chat/qwen3_5.jsonl"), "utf8").split("\n")) {
  if (!line.trim()) continue;
  const { messages, tools } = JSON.parse(line);
  const text = render(messages, tools, false), spans = [];
  messages.forEach((m, i) => {
    if (m.role !== "assistant") return;
    const before = i > 0 ? render(messages.slice(0, i), tools, true) : Buffer.alloc(0);
    const through = render(messages.slice(0, i + 1), tools, false);
    if (startsWith(through, before) && startsWith(text, through)) return spans.push([before.length, trimEnd(through, before.length)]);
    const plain = i > 0 ? render(messages.slice(0, i), tools, false) : Buffer.alloc(0);
    const without = render(messages.filter((_, k) => k !== i), tools, false);
    const span = startsWith(before, plain) ? removedTurn(text, without, before.subarray(plain.length)) : null;
    if (!span) throw new Error(`message ${i}: no answer found`);
    spans.push(span);
  });
  out.push({ text: text.toString("utf8"), spans });
}
fs.writeFileSync(path.join(data, "expected/qwen3_5-chat.json"),
  "[\n" + out.map((c) => ` {"text": ${JSON.stringify(c.text)},\n  "spans": ${JSON.stringify(c.spans)}}`).join(",\n") + "\n]\n");
console.log(`qwen3_5-chat: ${out.length} conversations, ${out.reduce((a, c) => a + c.spans.length, 0)} answers`);
