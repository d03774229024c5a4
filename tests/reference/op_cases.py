"""What the single-op PyTorch references share (moe_ops_ref.py, op_variants_ref.py, attention_ref.py,
gdn_ops_ref.py): a case is a directory holding case.txt (key=value lines: the sizes) and the op's
inputs as little-endian float32 (.f32) or int32 (.i32) files; each output is written as
NAME.ref.f64 or NAME.ref.i32 (tests/ref_ops.h reads them)."""
import os
import sys

import numpy
import torch

SCRIPT = os.path.basename(sys.argv[0])


def read_case(d):
    cfg = {}
    with open(os.path.join(d, "case.txt")) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key:
                cfg[key] = float(value) if "." in value or "e-" in value else int(value)
    return cfg


def load(d, name, shape, dtype="f32"):
    path = os.path.join(d, f"{name}.{dtype}")
    data = numpy.fromfile(path, dtype="<f4" if dtype == "f32" else "<i4")
    if data.size != numpy.prod(shape):
        raise SystemExit(f"{SCRIPT}: {path}: {data.size} values, expected {list(shape)}")
    t = torch.from_numpy(data.reshape(shape))
    return t.double() if dtype == "f32" else t.long()


def save(d, name, t):
    """An integer tensor as NAME.ref.i32, any other as NAME.ref.f64."""
    t = t.detach()
    if t.dtype in (torch.int64, torch.int32):
        t.numpy().astype("<i4").tofile(os.path.join(d, f"{name}.ref.i32"))
    else:
        t.double().numpy().astype("<f8").tofile(os.path.join(d, f"{name}.ref.f64"))


def run(argv, ops, no_grad=()):
    """OP DIR pairs: each op of `ops` (name -> function(dir, case)) on its case, one thread; the ops
    in no_grad without autograd."""
    if len(argv) < 2 or len(argv) % 2:
        sys.exit(f"usage: {SCRIPT} OP DIR [OP DIR ...]")
    torch.set_num_threads(1)
    for op, directory in zip(argv[0::2], argv[1::2]):
        if op not in ops:
            sys.exit(f"{SCRIPT}: unknown op '{op}'")
        with torch.no_grad() if op in no_grad else torch.enable_grad():
            ops[op](directory, read_case(directory))
