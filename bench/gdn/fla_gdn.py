#!/usr/bin/python3
"""flash-linear-attention's chunk_gated_delta_rule (Triton) on bench_gdn's inputs: the same shapes,
the same values (input() is bench_gdn_input), timed forward and backward the same way, one line a
layout in bench_gdn's key=value form; with --compare DIR, each output's relative L2 difference from
megatrain's (DIR/gdn-LAYOUT.bin, bench_gdn --out).

  fla_gdn.py [--batch 4] [--seq 4096] [--heads 32] [--dk 128] [--dv 128] [--iters K] [--packed LEN]
             [--compare DIR]

FLA comes from a copy of its source on PYTHONPATH (bench/gdn/run.sh). q and k are L2-normalised here
as megatrain's gdn.qk_norm does and q scaled by dk^-0.5, so FLA runs with scale 1 and
use_qk_l2norm_in_kernel off: both time the rule alone. FLA's package imports einops in ops this
bench does not call; where einops is not installed a stub stands in for it (calling it fails).

FLA refuses its gated backward on Hopper under Triton >= 3.4.0 and < 3.7.1 (its issue #640: one
kernel's results are wrong there). Where it does, the layout is timed again with that guard lifted:
the times stand (the same kernels run), the backward's outputs are not compared (fla_bwd=unchecked
on the line), the forward's still are."""
import argparse
import os
import sys
import types

import torch
import torch.nn.functional as F

try:
    import einops  # noqa: F401
except ImportError:
    def _absent(*args, **kwargs):
        raise RuntimeError("einops is not installed")
    stub = types.ModuleType("einops")
    stub.rearrange = stub.repeat = stub.reduce = stub.einsum = stub.pack = stub.unpack = _absent
    sys.modules["einops"] = stub

import fla.ops.common.chunk_o as fla_chunk_o  # noqa: E402
from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402

M32 = 0xFFFFFFFF


def mul32(h, c):
    """h * c mod 2^32 in int64 without overflow."""
    return ((((h * (c >> 16)) & 0xFFFF) << 16) + h * (c & 0xFFFF)) & M32


def uniform(count, salt, lo, hi):
    i = torch.arange(count, dtype=torch.int64, device="cuda")
    h = ((i * 2654435761) & M32) ^ ((salt * 40503) & M32)
    h = mul32(h, 2246822519) ^ (h >> 13)
    u = (h >> 8).to(torch.float32) / float(1 << 23) - 1.0
    return lo + (hi - lo) * (u + 1.0) / 2.0


def l2norm(x):
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def main():
    p = argparse.ArgumentParser()
    for name, default in (("batch", 4), ("seq", 4096), ("heads", 32), ("dk", 128), ("dv", 128), ("iters", 10),
                          ("packed", 0)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--compare")
    a = p.parse_args()
    B, T, H, K, V = a.batch, a.seq, a.heads, a.dk, a.dv
    n = B * T
    q = (l2norm(uniform(n * H * K, 1, -1, 1).bfloat16().view(B, T, H, K)) * K ** -0.5).bfloat16()
    k = l2norm(uniform(n * H * K, 2, -1, 1).bfloat16().view(B, T, H, K)).bfloat16()
    v = uniform(n * H * V, 3, -1, 1).bfloat16().view(B, T, H, V)
    g = uniform(n * H, 4, -1, 0).view(B, T, H)
    beta = uniform(n * H, 5, 0, 1).view(B, T, H)
    dout = uniform(n * H * V, 6, -1, 1).bfloat16().view(B, T, H, V)
    layouts = [("plain", None)]
    if a.packed:
        r = torch.arange(n, device="cuda")
        starts = torch.nonzero((r % T) % a.packed == 0).flatten()
        layouts.append(("packed", torch.cat([starts, torch.tensor([n], device="cuda")]).long()))
    for name, cu in layouts:
        shape = (lambda x: x.reshape(1, n, *x.shape[2:])) if cu is not None else (lambda x: x)
        leaves = [shape(x).detach().clone().requires_grad_(True) for x in (q, k, v, g, beta)]
        do = shape(dout)
        t0, t1, t2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        fields = dict(system="fla", layout=name, batch=B, seq=T, heads=H, dk=K, dv=V,
                      segments=len(cu) - 1 if cu is not None else B)
        def timed():
            fwd = bwd = 0.0
            for it in range(a.iters + 1):
                for x in leaves:
                    x.grad = None
                t0.record()
                o, _ = chunk_gated_delta_rule(*leaves, scale=1.0, output_final_state=False, cu_seqlens=cu)
                t1.record()
                o.backward(do)
                t2.record()
                torch.cuda.synchronize()
                if it:
                    fwd += t0.elapsed_time(t1)
                    bwd += t1.elapsed_time(t2)
            return o, fwd, bwd

        try:
            o, fwd, bwd = timed()
        except RuntimeError as e:  # FLA's #640 guard (module docstring): time it past the guard
            if "#640" not in str(e):
                raise
            print("fla_gdn.py: %s: %s; timed with the guard lifted" % (name, e), file=sys.stderr, flush=True)
            fla_chunk_o.TRITON_ABOVE_3_7_1 = True
            fields["fla_bwd"] = "unchecked"
            o, fwd, bwd = timed()
        fwd /= a.iters
        bwd /= a.iters
        fields.update(fwd_ms="%.3f" % fwd, bwd_ms="%.3f" % bwd, total_ms="%.3f" % (fwd + bwd))
        path = os.path.join(a.compare, "gdn-%s.bin" % name) if a.compare else None
        if path and os.path.exists(path):
            raw = open(path, "rb").read()
            at = 0

            def take(count, dtype):
                nonlocal at
                size = count * (2 if dtype == torch.bfloat16 else 4)
                t = torch.frombuffer(bytearray(raw[at:at + size]), dtype=torch.int16 if dtype == torch.bfloat16
                                     else torch.float32)
                at += size
                return (t.view(torch.bfloat16) if dtype == torch.bfloat16 else t).cuda()

            ours = [take(n * H * V, torch.bfloat16), take(n * H * K, torch.bfloat16), take(n * H * K, torch.bfloat16),
                    take(n * H * V, torch.bfloat16), take(n * H, torch.float32), take(n * H, torch.float32)]
            theirs = [o] + [x.grad for x in leaves]
            keys = ("o", "dq", "dk", "dv", "dg", "dbeta")[:1 if "fla_bwd" in fields else 6]
            for key, mine, fla in zip(keys, ours, theirs):
                fields["rel_" + key] = "%.2e" % rel(mine.flatten(), fla.flatten())
        print(" ".join("%s=%s" % kv for kv in fields.items()), flush=True)


if __name__ == "__main__":
    main()
