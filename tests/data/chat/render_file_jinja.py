#!/usr/bin/env python3
# Renders conversations with a chat template file as transformers does: the file read whole
# (chat_template.jinja, or a --chat-template file), compiled as apply_chat_template compiles it
# (sandboxed, trim_blocks, lstrip_blocks, loop controls, raise_exception, tojson as json.dumps with
# ensure_ascii=False) and rendered with bos_token and eos_token.
#   render_file_jinja.py TEMPLATE BOS EOS JSONL         each line's "messages" (and "tools" where it has
#                                                       them), add_generation_prompt false: a JSON list of
#                                                       the renders
#   render_file_jinja.py TEMPLATE BOS EOS --prompt TEXT [{"role": "user", "content": TEXT}],
#                                                       add_generation_prompt true
# Writes the text to stdout; exit 2 without jinja2.
import json, sys
try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(2)

def raise_exception(msg): raise jinja2.exceptions.TemplateError(msg)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env.globals["raise_exception"] = raise_exception

template = env.from_string(open(sys.argv[1], encoding="utf-8").read())
special = {"bos_token": sys.argv[2], "eos_token": sys.argv[3]}
if sys.argv[4] == "--prompt":
    out = template.render(messages=[{"role": "user", "content": sys.argv[5]}], add_generation_prompt=True, **special)
else:
    lines = [json.loads(line) for line in open(sys.argv[4], encoding="utf-8") if line.strip()]
    out = json.dumps([template.render(messages=line["messages"], add_generation_prompt=False,
                                      **({"tools": line["tools"]} if "tools" in line else {}), **special)
                      for line in lines])
sys.stdout.write(out)
