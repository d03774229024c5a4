#!/usr/bin/env python3
"""Compares megatrain's chat data (ids and loss masks) with transformers' apply_chat_template.

For each chat template of tests/data/chat (Llama 3, 3.1, 3.2; Qwen2, Qwen2.5, Qwen3, Qwen3
thinking-2507, Qwen3.5 ChatML; Llama 2 and Mistral v0.1-v0.3 [INST]; gpt-oss's harmony) with its
model family's real tokenizer from tests/data/tokenizers (Llama 3's, Qwen3's, the Llama 2/Mistral
sentencepiece BPE, gpt-oss's o200k_harmony; Qwen3.5's template with Qwen3's, which has its special
tokens and <think>, </think>, <tool_call>, since Qwen3.5's own tokenizer is not among them), the
conversations of tests/data/chat/cases.json (every line layout: OpenAI messages with tools,
tool_calls and tool results, prompt/completion, alpaca, ShareGPT with function_call/observation;
for Qwen3.5 those of tests/data/tokenizers/chat/qwen3_5.jsonl: reasoning_content and <think>
blocks, earlier turns' thinking dropped, XML tool calls and results) and a few more go through `megatrain tokenize --chat yes` into a masked shard, and through
transformers:

  ids   tokenizer.apply_chat_template(messages, tools=tools, tokenize=True) (add_generation_prompt False,
        date_string "26 Jul 2024": the fallback date megatrain renders for Llama 3.2, whose
        template would otherwise put today's date in), conversation after conversation;
  mask  a token carries loss when its characters (offset mapping) overlap an answer: in the
        rendered text, the k-th assistant message's answer runs from the end of the k-th
        assistant opening (what the model is prompted with: "<|start_header_id|>assistant
        <|end_header_id|>\n\n", "<|im_start|>assistant\n" and for Qwen3 thinking-2507 and Qwen3.5 the
        "<think>\n" after it, or for [INST] templates the end of "[/INST]") through the next
        end-of-turn token (<|eot_id|>, <|im_end|>, eos); tool calls are assistant messages, tool
        results are not. gpt-oss (harmony): each run of assistant messages that follow one another
        from after its first "<|start|>assistant" through the last one's <|end|>, <|call|> or
        <|return|>; with --analysis-loss off (checked as a template of its own, "gpt-oss
        analysis-off"), each assistant message but those of the analysis channel from after its
        "<|start|>assistant". Its template's strftime_now is given megatrain's fixed date.

Prints one PASS/FAIL line per template and exits 1 when any differs.

usage: check_chat.py [--bin build/megatrain]   (from the repository root)
"""
import argparse
import datetime
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import transformers

import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHAT = os.path.join(ROOT, "tests/data/chat")
TOKENIZERS = os.path.join(ROOT, "tests/data/tokenizers")
DATE = "26 Jul 2024"

# Template directory -> the tokenizer of its model family.
TEMPLATES = {
    "llama3": "llama3", "llama3-gen": "llama3", "llama3.1": "llama3", "llama3.2": "llama3",
    "qwen2": "qwen3", "qwen2.5": "qwen3", "qwen3": "qwen3", "qwen3-thinking-2507": "qwen3", "qwen3.5": "qwen3",
    "llama2": "mistral", "mistral-v0.1": "mistral", "mistral-v0.2": "mistral", "mistral-v0.3": "mistral",
    "gpt-oss": "gpt-oss", "gpt-oss analysis-off": "gpt-oss",
}
# megatrain's strftime_now date (MT_CHAT_TEMPLATE_DATE), which gpt-oss's template writes.
TODAY = datetime.date(2024, 7, 26)

# More conversations: Unicode, whitespace at the edges of answers, a long multi-turn one.
EXTRA = [
    [{"role": "user", "content": "Übersetze: «bonjour» 👋"}, {"role": "assistant", "content": "„Guten Tag“ 👋 — 你好！"}],
    [{"role": "system", "content": "Answer in one line."}, {"role": "user", "content": "def f(x):\n    return x"},
     {"role": "assistant", "content": "  It returns x unchanged.\n\n"}],
    [{"role": "user", "content": "q%d" % i} if i % 2 == 0 else {"role": "assistant", "content": " a%d " % i}
     for i in range(10)],
]


def template_dir(template):
    return template.split(" ")[0]


def conversations(template):
    convs = []
    for case in json.load(open(os.path.join(CHAT, "cases.json"))):
        if case["template"] == template_dir(template):
            convs.append(case["conversation"])
    if template == "qwen3.5":
        convs += [json.loads(line) for line in open(os.path.join(TOKENIZERS, "chat/qwen3_5.jsonl"), encoding="utf-8")
                  if line.strip()]
    return convs + EXTRA


def as_messages(line):
    """(messages, tools) of one JSONL line in any layout, as docs/data-formats.md says megatrain reads it."""
    if isinstance(line, list):
        return line, None
    if "messages" in line:
        return line["messages"], line.get("tools")
    if "prompt" in line:
        return [{"role": "user", "content": line["prompt"]}, {"role": "assistant", "content": line["completion"]}], None
    if "instruction" in line:
        user = line["instruction"] + ("\n" + line["input"] if line.get("input") else "")
        system = [{"role": "system", "content": line["system"]}] if line.get("system") is not None else []
        return system + [{"role": "user", "content": user}, {"role": "assistant", "content": line["output"]}], None
    roles = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
             "observation": "tool", "tool": "tool"}
    msgs = [{"role": "system", "content": line["system"]}] if line.get("system") is not None else []
    for turn in line["conversations"]:
        if turn["from"] == "function_call":
            calls = json.loads(turn["value"]) if isinstance(turn["value"], str) else turn["value"]
            calls = calls if isinstance(calls, list) else [calls]
            msgs.append({"role": "assistant", "content": "",
                         "tool_calls": [{"type": "function", "function": c} for c in calls]})
        else:
            msgs.append({"role": roles[turn["from"]], "content": turn["value"]})
    tools = line.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools) if tools else None
    return msgs, tools


def model_dir(template, tmp):
    """A directory with the family's tokenizer.json and the template's tokenizer_config.json."""
    d = os.path.join(tmp, template.replace(" ", "-"))
    os.makedirs(d)
    src = os.path.join(TOKENIZERS, TEMPLATES[template])
    if os.path.exists(os.path.join(src, "tokenizer.json")):
        shutil.copy(os.path.join(src, "tokenizer.json"), d)
    else:
        with lzma.open(os.path.join(src, "tokenizer.json.xz")) as f, open(os.path.join(d, "tokenizer.json"), "wb") as o:
            shutil.copyfileobj(f, o)
    shutil.copy(os.path.join(CHAT, template_dir(template), "tokenizer_config.json"), d)
    jinja = os.path.join(CHAT, template_dir(template), "chat_template.jinja")
    if os.path.exists(jinja):
        shutil.copy(jinja, d)
    return d


def read_masked_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 0x534D544D, f"{path}: not a masked shard"
    width, count, encoding = header[3], header[4] | header[5] << 32, header[6]
    assert encoding == 2, f"{path}: mask encoding {encoding}, not 2 (a loss bit and an example-start bit)"
    ids = list(struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", data[1024:1024 + count * width]))
    marks = data[1024 + count * width:]
    return ids, [b & 1 for b in marks], [k for k, b in enumerate(marks) if b & 2]


def ours(binary, directory, convs, tmp, name, options=()):
    name = name.replace(" ", "-")
    jsonl = os.path.join(tmp, name + ".jsonl")
    with open(jsonl, "w") as f:
        for c in convs:
            f.write(json.dumps(c if isinstance(c, dict) else {"messages": c}, ensure_ascii=False) + "\n")
    prefix = os.path.join(tmp, name + "-out")
    subprocess.run([binary, "tokenize", "--tokenizer", directory, "--chat", "yes", "--dtype", "uint32", jsonl,
                    "--out", prefix, *options], check=True, capture_output=True, text=True)
    return read_masked_shard(prefix + "_000000.bin")


def strftime_now(fmt):
    return datetime.datetime(TODAY.year, TODAY.month, TODAY.day).strftime(fmt)


# What every render is given: Llama 3.1's fallback date and megatrain's strftime_now date.
FIXED_DATES = {"date_string": DATE, "strftime_now": strftime_now}


def render(tok, messages, tools, generation=False):
    return tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation,
                                   **FIXED_DATES)


def answer_spans(messages, text, opening, end_token, think_in_prompt):
    """Character spans of the answers in `text` (the whole conversation rendered)."""
    spans, cursor = [], 0
    for _ in (m for m in messages if m["role"] == "assistant"):
        start = text.index(opening, cursor) + len(opening)
        if think_in_prompt and text.startswith("<think>\n", start):
            start += len("<think>\n")
        end = text.index(end_token, start) + len(end_token)
        spans.append((start, end))
        cursor = end
    return spans


HARMONY_MESSAGE = re.compile(r"<\|start\|>(.*?)<\|message\|>.*?(?:<\|end\|>|<\|call\|>|<\|return\|>)", re.S)


def harmony_spans(text, analysis):
    """The answers of a harmony text: runs of assistant messages from after the first's
    "<|start|>assistant"; without the analysis, each non-analysis assistant message on its own."""
    spans, opening = [], "<|start|>assistant"
    for m in HARMONY_MESSAGE.finditer(text):
        header = m.group(1)
        if not re.match(r"assistant(?=$| |<)", header):
            continue
        if not analysis and re.search(r"<\|channel\|>analysis(?=$| )", header):
            continue
        if analysis and spans and spans[-1][1] == m.start():
            spans[-1] = (spans[-1][0], m.end())
        else:
            spans.append((m.start() + len(opening), m.end()))
    return spans


def theirs(tok, convs, spans_of):
    ids, mask, starts = [], [], []
    for conv in convs:
        starts.append(len(ids))
        messages, tools = as_messages(conv)
        text = render(tok, messages, tools)
        want = tok.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=False,
                                       **FIXED_DATES)
        if not isinstance(want, list):  # transformers 5 returns a BatchEncoding (not a dict subclass)
            want = want["input_ids"]
        want = list(want)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) != want:
            raise AssertionError("apply_chat_template's ids are not its rendered text's: "
                                 f"{len(want)} vs {len(enc['input_ids'])} ids, first difference at "
                                 f"{next((k for k, (a, b) in enumerate(zip(want, enc['input_ids'])) if a != b), min(len(want), len(enc['input_ids'])))}")
        spans = spans_of(messages, text)
        ids += want
        mask += [int(any(s < b and e > a for a, b in spans)) for s, e in enc["offset_mapping"]]
    return ids, mask, starts


def compare(name, got, want, convs):
    (gi, gm, gs), (wi, wm, ws) = got, want
    if gs != ws:
        return (f"FAIL {name}: examples start at tokens {gs[:8]} in megatrain, at each conversation's first token "
                f"{ws[:8]} in transformers")
    for k in range(max(len(gi), len(wi))):
        a = (gi[k], gm[k]) if k < len(gi) else None
        b = (wi[k], wm[k]) if k < len(wi) else None
        if a != b:
            return f"FAIL {name}: token {k} is (id, mask) {a} in megatrain, {b} in transformers"
    trained = sum(gm)
    return f"PASS {name}: {len(convs)} conversations, {len(gi)} ids and masks equal ({trained} tokens with loss)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(ROOT, "build/megatrain"))
    args = parser.parse_args()
    print(f"transformers {transformers.__version__}")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in TEMPLATES:
            try:
                directory = model_dir(name, tmp)
                tok = transformers.AutoTokenizer.from_pretrained(directory)
                family = ("llama3" if name.startswith("llama3") else "chatml" if name.startswith("qwen")
                          else "harmony" if name.startswith("gpt-oss") else "inst")
                analysis = not name.endswith("analysis-off")
                if family == "harmony":
                    def spans_of(messages, text):
                        return harmony_spans(text, analysis)
                else:
                    opening, end_token = {"llama3": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
                                          "chatml": ("<|im_start|>assistant\n", "<|im_end|>"),
                                          "inst": ("[/INST]", tok.eos_token)}[family]

                    def spans_of(messages, text):
                        return answer_spans(messages, text, opening, end_token,
                                            name in ("qwen3-thinking-2507", "qwen3.5"))
                convs = [c for c in conversations(name)
                         if not (name == "mistral-v0.1" and as_messages(c)[0][0]["role"] == "system")]
                tools = sum(1 for c in convs if as_messages(c)[1] is not None or
                            any(m.get("tool_calls") or m["role"] == "tool" for m in as_messages(c)[0]))
                got = ours(args.bin, directory, convs, tmp, name, () if analysis else ("--analysis-loss", "off"))
                want = theirs(tok, convs, spans_of)
                line = compare(name, got, want, convs) + (f" ({tools} with tools or tool calls)" if tools else "")
            except subprocess.CalledProcessError as e:
                line = f"FAIL {name}: megatrain tokenize exited {e.returncode}: {e.stderr.strip()}"
            except Exception as e:  # a reference that cannot be computed is a failure too
                line = f"FAIL {name}: {type(e).__name__}: {e}"
            failed += line.startswith("FAIL")
            print(line, flush=True)
    print(f"{len(TEMPLATES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
