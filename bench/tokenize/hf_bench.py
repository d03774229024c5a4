#!/usr/bin/env python3
"""The `tokenizers` library (Hugging Face's Rust implementation, the reference megatrain's tokenizer
is checked against) on the same text as bench/tokenize/run.sh gives megatrain: a text file as one
document, or a JSONL file's "text" fields one document each, encoded as a batch. One thread unless
THREADS > 1 (the library's own rayon pool; RAYON_NUM_THREADS sets its size). Prints one line:
name=... docs=... bytes=... tokens=... seconds=... (encoding only, loading excluded).

usage: hf_bench.py MODEL_DIR FILE THREADS
"""
import json
import os
import sys
import time

model, path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
# The pool is sized when the library first uses it, so the variables go in before the import.
os.environ["RAYON_NUM_THREADS"] = str(threads)
os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
import tokenizers  # noqa: E402

tok = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
with open(path, encoding="utf-8") as f:
    docs = [json.loads(l)["text"] for l in f if l.strip()] if path.endswith(".jsonl") else [f.read()]
start = time.perf_counter()
encoded = tok.encode_batch(docs, add_special_tokens=False)
seconds = time.perf_counter() - start
print("name=%s docs=%d bytes=%d tokens=%d seconds=%.3f" % (os.path.basename(model), len(docs),
      sum(len(d.encode()) for d in docs), sum(len(e.ids) for e in encoded), seconds))
