#!/usr/bin/env python3
"""Compares megatrain's tokenizer with Hugging Face's `tokenizers` and transformers' AutoTokenizer.

For each tokenizer in tests/data/tokenizers (llama3, qwen3, mistral, gemma3, gpt-oss: the real files, xz-compressed;
mistral-metaspace, gpt2-bytelevel, qwen3_5-split (Qwen3.5's pre-tokenizer): small ones cut from them) and each
corpus file in
tests/data/tokenizers/corpus:

  1. reference  tests/data/tokenizers/expected/<name>.json (made by @lenml/tokenizers; CI asserts
                that megatrain's encoder gives exactly these ids) equals tokenizers.Tokenizer's
                encode(text, add_special_tokens=False), and AutoTokenizer's input_ids equal those
                too. `tokenizers` is the definition megatrain follows (it reads tokenizer.json as the
                library does). transformers 5 rebuilds the pipeline of some tokenizer classes from
                tokenizer_config.json instead (GPT2Tokenizer: a prefix space; LlamaTokenizer with
                "legacy": true: a "▁" after each special token; docs/tokenizer.md): for those
                classes a difference is printed as NOTE and not counted as a failure;
  2. decode     tokenizers' decode of those ids gives back what CI asserts megatrain's decode gives
                (the text; NFC of it for Qwen's NFC normalizer; a space after each special token
                for Mistral's per-piece "▁"; a space before each piece for GPT-2's prefix space);
  3. megatrain  with --bin, `megatrain tokenize` on the file (special tokens matched, then not)
                gives, after the leading end-of-text token, the same ids as tokenizers
                (with encode_special_tokens for the second run).
  4. U+FEFF     gpt-oss's o200k pattern reads \s as Oniguruma and tiktoken (Rust's regex) do, Unicode's
                White_Space, which U+FEFF is not (JavaScript's \s matches it, so the reference ids are
                made with \s spelled out: make_reference.mjs): "a\uFEFF\uFEFFb" keeps U+FEFF U+FEFF in
                one piece, o200k's one token for it, in tokenizers' ids and (--bin) megatrain's.

usage: check_tokenizer.py [--bin build-device/megatrain]
Prints one line per tokenizer and file, PASS or FAIL with the first difference, and a summary;
exits 1 when anything failed.
"""
import argparse
import glob
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unicodedata

from tokenizers import Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DATA = os.path.join(ROOT, "tests", "data", "tokenizers")
# The tokenizer classes whose pipeline transformers 5 rebuilds from tokenizer_config.json rather than
# reading tokenizer.json as it is.
REBUILT_CLASSES = {"GPT2Tokenizer", "LlamaTokenizer"}
NAMES = ["llama3", "qwen3", "mistral", "gemma3", "gpt-oss", "mistral-metaspace", "gpt2-bytelevel", "qwen3_5-split"]
# U+FEFF twice between letters: one piece (one token) when \s is White_Space, two in JavaScript.
FEFF_TEXT = " a\ufeff\ufeffb \ufeff\n"


def model_dir(name, scratch):
    """A directory with tokenizer.json and tokenizer_config.json (unpacking the .xz ones)."""
    src = os.path.join(DATA, name)
    if os.path.exists(os.path.join(src, "tokenizer.json")):
        return src
    dst = os.path.join(scratch, name)
    os.makedirs(dst, exist_ok=True)
    with lzma.open(os.path.join(src, "tokenizer.json.xz")) as f, open(os.path.join(dst, "tokenizer.json"), "wb") as g:
        shutil.copyfileobj(f, g)
    shutil.copy(os.path.join(src, "tokenizer_config.json"), dst)
    return dst


def round_trip_text(name, text, specials):
    """What decode(encode(text)) gives, as CI asserts for megatrain (test_tokenizer_reference.c)."""
    if name == "qwen3":
        return unicodedata.normalize("NFC", text)
    if name not in ("mistral", "gpt2-bytelevel"):
        return text
    out, i, start = [], 0, True
    while i < len(text):
        hit = next((s for s in specials if text.startswith(s, i)), None)
        if hit:
            out.append(hit)
            i += len(hit)
            start = True
            continue
        if name == "mistral" and start and out:
            out.append(" ")
        if name == "gpt2-bytelevel" and start and text[i] != " ":
            out.append(" ")
        start = False
        out.append(text[i])
        i += 1
    return "".join(out)


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"{len(a)} vs {len(b)} ids; first difference at {i}: {a[i:i + 5]} vs {b[i:i + 5]}"


def read_shards(prefix):
    ids = []
    for path in sorted(glob.glob(prefix + "_*.bin")):
        with open(path, "rb") as f:
            magic, version, count = struct.unpack("<3i", f.read(12))
            f.seek(1024)
            width = 2 if version == 1 else 4
            ids += list(struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", f.read(count * width)))
    return ids


def megatrain_ids(binary, model, path, allow_special, scratch):
    out = tempfile.mkdtemp(dir=scratch)
    cmd = [binary, "tokenize", "--tokenizer", model, path, "--out", os.path.join(out, "t"), "--threads", "2",
           "--bos", "no"]
    if allow_special:
        cmd.append("--allow-special")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return read_shards(os.path.join(out, "t")), None


def check_feff(report, binary, scratch):
    model = model_dir("gpt-oss", scratch)
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    pair = tok.token_to_id("\u00ef\u00bb\u00bf" * 2)  # the byte-level spelling of U+FEFF U+FEFF
    ids = tok.encode(FEFF_TEXT, add_special_tokens=False).ids
    report(pair is not None and pair in ids, "gpt-oss U+FEFF U+FEFF is one piece (\\s as White_Space)",
           f"ids {ids}, the pair's token {pair}")
    if not binary:
        return
    path = os.path.join(scratch, "feff.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(FEFF_TEXT)
    ours, err = megatrain_ids(binary, model, path, True, scratch)
    report(ours is not None and ours[1:] == ids, "gpt-oss U+FEFF megatrain tokenize = tokenizers",
           err or first_difference(ids, ours[1:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", help="a built megatrain to check as well (its tokenize command)")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="mt-tokenizer-check-")
    failures = checks = 0

    notes = 0

    def report(ok, what, detail="", note_only=False):
        nonlocal failures, checks, notes
        if note_only and not ok:
            notes += 1
            print(f"NOTE {what}: {detail}")
            return
        checks += 1
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {what}{': ' + detail if detail and not ok else ''}")

    for name in NAMES:
        model = model_dir(name, scratch)
        tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        auto = AutoTokenizer.from_pretrained(model)
        config = json.load(open(os.path.join(model, "tokenizer_config.json")))
        rebuilt = config.get("tokenizer_class") in REBUILT_CLASSES
        specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
        expected = json.load(open(os.path.join(DATA, "expected", f"{name}.json")))
        for file, want in expected.items():
            path = os.path.join(DATA, "corpus", file)
            text = open(path, encoding="utf-8", newline="").read()
            ids = tok.encode(text, add_special_tokens=False).ids
            report(ids == want, f"{name} {file} reference = tokenizers", first_difference(want, ids))
            auto_ids = auto(text, add_special_tokens=False)["input_ids"]
            report(auto_ids == ids, f"{name} {file} AutoTokenizer = tokenizers", first_difference(ids, auto_ids),
                   note_only=rebuilt)
            decoded = tok.decode(ids, skip_special_tokens=False)
            report(decoded == round_trip_text(name, text, specials), f"{name} {file} tokenizers decode",
                   repr(decoded[:80]))
            if not args.bin:
                continue
            for allow in (True, False):
                ours, err = megatrain_ids(args.bin, model, path, allow, scratch)
                tok.encode_special_tokens = not allow
                theirs = tok.encode(text, add_special_tokens=False).ids
                tok.encode_special_tokens = False
                what = f"{name} {file} megatrain tokenize{' --allow-special' if allow else ''}"
                if ours is None:
                    report(False, what, err)
                    continue
                report(ours[1:] == theirs, what, first_difference(theirs, ours[1:]))
    check_feff(report, args.bin, scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"{notes} differences of AutoTokenizer from tokenizers where transformers rebuilds the pipeline (NOTE)")
    print(f"==== tokenizer check: {checks - failures}/{checks} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
