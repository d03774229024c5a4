#!/usr/bin/env python3
# For each NAME.jinja in DIR, compares NAME.tokens (megatrain's Jinja lexer, src/tokenizer/jinja_lex.c:
# one token a line, "KIND HEX-OF-VALUE") with the tokens of Jinja2's own lexer, set up as
# transformers sets it up (trim_blocks, lstrip_blocks): the text between tags after whitespace
# control, tag openers and closers, names, string values, numbers and operators. Exit 1 on a
# difference (printed), 2 without jinja2.
import os, sys
try:
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(2)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
DATA, BLOCK, VAR, END, NAME, STRING, NUMBER, OP = range(8)

def jinja_tokens(src):
    out = []
    for tk in env.lexer.tokenize(src):
        t, v = tk.type, tk.value
        if t == "data":
            if out and out[-1][0] == DATA:
                out[-1] = (DATA, out[-1][1] + v)
            else:
                out.append((DATA, v))
        elif t == "block_begin": out.append((BLOCK, "{%"))
        elif t == "variable_begin": out.append((VAR, "{{"))
        elif t == "block_end": out.append((END, "%}"))
        elif t == "variable_end": out.append((END, "}}"))
        elif t == "name": out.append((NAME, v))
        elif t == "string": out.append((STRING, v))
        elif t in ("integer", "float"): out.append((NUMBER, None))  # compared by kind: Jinja gives the value
        else: out.append((OP, v))
    return [(k, v) for k, v in out if not (k == DATA and v == "")]

bad = 0
d = sys.argv[1]
names = sorted(f[:-6] for f in os.listdir(d) if f.endswith(".jinja"))
for name in names:
    src = open(os.path.join(d, name + ".jinja"), encoding="utf-8", newline="").read()
    ours = []
    for line in open(os.path.join(d, name + ".tokens")):
        kind, _, hexv = line.rstrip("\n").partition(" ")
        ours.append((int(kind), bytes.fromhex(hexv).decode("utf-8")))
    want = jinja_tokens(src)
    ours = [(k, None if k == NUMBER else v) for k, v in ours]
    if ours != want:
        bad += 1
        i = next((i for i, (a, b) in enumerate(zip(ours, want)) if a != b), min(len(ours), len(want)))
        print(f"{name}: token {i}: megatrain {ours[i] if i < len(ours) else 'end'!r}, Jinja2 {want[i] if i < len(want) else 'end'!r}")
print("ok" if not bad else f"{bad} differ", f"({len(names)} templates)")
sys.exit(1 if bad else 0)
