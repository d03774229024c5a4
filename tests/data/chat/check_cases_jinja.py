#!/usr/bin/env python3
# Renders every case of cases.json with Jinja2 the way transformers' apply_chat_template does
# (sandboxed, trim_blocks, lstrip_blocks, loop controls, raise_exception, tojson as json.dumps with
# ensure_ascii=False; tools=None where a case has none; strftime_now on megatrain's fixed date) and
# compares with the expected text. The template is chat_template.jinja where the directory has one
# (it wins, as in transformers), else tokenizer_config.json's. Each line layout is turned into
# messages here as docs/data-formats.md says megatrain reads it, independently of megatrain's code.
# Prints "ok" or the mismatches (exit 1). Needs python3-jinja2 (scripts/install-deps.sh).
import datetime, json, os, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
root = sys.argv[1]
def raise_exception(msg): raise jinja2.exceptions.TemplateError(msg)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(2024, 7, 26).strftime(fmt)

def as_messages(line):
    """(messages, tools) of one JSONL line, in any of the layouts."""
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

bad = 0
cases = json.load(open(os.path.join(root, "cases.json")))
for c in cases:
    cfg = json.load(open(os.path.join(root, c["template"], "tokenizer_config.json")))
    jinja = os.path.join(root, c["template"], "chat_template.jinja")
    source = open(jinja, encoding="utf-8").read() if os.path.exists(jinja) else cfg["chat_template"]
    messages, tools = as_messages(c["conversation"])
    got = env.from_string(source).render(messages=messages, tools=tools,
                                                        bos_token=cfg.get("bos_token") or "",
                                                        eos_token=cfg.get("eos_token") or "", add_generation_prompt=False)
    want = c["expected"].replace("⟦", "").replace("⟧", "")
    if got != want:
        bad += 1
        print("MISMATCH", c["template"], json.dumps(c["conversation"])[:100]); print(" got ", repr(got)); print(" want", repr(want))
print("ok" if not bad else f"{bad} mismatches", f"({len(cases)} cases)")
sys.exit(1 if bad else 0)
