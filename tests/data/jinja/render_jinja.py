#!/usr/bin/env python3
# Renders a template with Jinja2 as transformers' apply_chat_template compiles it
# (_compile_jinja_template: ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
# controls, {% generation %}, tojson as json.dumps(ensure_ascii=False), raise_exception, and
# strftime_now on a fixed date as megatrain's), once for each variable set of a JSON list:
#   render_jinja.py TEMPLATE VARS.json DATE [EXTRA]   -> a JSON list, one entry a set: the text,
#                                                        or {"error": message} where Jinja raised
# EXTRA: a JSON object of variables added to every set (bos_token, eos_token).
# Exit 2 without jinja2.
import json, sys, datetime
try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(2)

class Generation(Extension):
    """transformers' AssistantTracker without the tracking: the block renders its body."""
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)
    def _render(self, caller):
        return caller()

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

day = datetime.date.fromisoformat(sys.argv[3])
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(day.year, day.month, day.day).strftime(fmt)
template = env.from_string(open(sys.argv[1], encoding="utf-8").read())
extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
out = []
for variables in json.load(open(sys.argv[2], encoding="utf-8")):
    try:
        out.append(template.render(**{**extra, **variables}))
    except Exception as e:
        out.append({"error": str(e)})
sys.stdout.write(json.dumps(out, ensure_ascii=False))
