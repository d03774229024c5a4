#!/usr/bin/env python3
# Renders every case of cases.json with Jinja2 the way transformers' apply_chat_template does
# (sandboxed, trim_blocks, lstrip_blocks, loop controls, raise_exception, tojson) and compares.
import json, os, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
root = sys.argv[1]
def raise_exception(msg): raise jinja2.exceptions.TemplateError(msg)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = lambda x, indent=None, **k: json.dumps(x, indent=indent, ensure_ascii=False)
env.globals["raise_exception"] = raise_exception
bad = 0
for c in json.load(open(os.path.join(root, "cases.json"))):
    cfg = json.load(open(os.path.join(root, c["template"], "tokenizer_config.json")))
    conv = c["conversation"]
    if isinstance(conv, dict):
        conv = [{"role": "user", "content": conv["prompt"]}, {"role": "assistant", "content": conv["completion"]}]
    got = env.from_string(cfg["chat_template"]).render(messages=conv, bos_token=cfg.get("bos_token") or "",
                                                        eos_token=cfg.get("eos_token") or "", add_generation_prompt=False)
    want = c["expected"].replace("⟦", "").replace("⟧", "")
    if got != want:
        bad += 1
        print("MISMATCH", c["template"], json.dumps(conv)[:80]); print(" got ", repr(got)); print(" want", repr(want))
print("ok" if not bad else f"{bad} mismatches")
