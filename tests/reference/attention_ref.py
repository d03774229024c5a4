#!/usr/bin/python3
"""PyTorch definition of megatrain's attention op with its variants (backend.h's mt_attn_params),
for tests/test_attention_ref.c: the forward in float64 and its backward by autograd of a probe loss.

Usage: attention_ref.py attention DIR [attention DIR ...]
A case directory, written by the test, holds case.txt (key=value lines) and the inputs as
little-endian float32 (.f32) or int32 (.i32) files; the script writes each output as NAME.ref.f64.

  case.txt  batch, seq, heads, kv_heads, head_dim; q0, q_len (a window of queries: positions
            [q0, q0 + q_len) of each sequence, 0: every position); window (0: none), scale,
            softcap (0: none), sinks (1: sinks.f32 and dsinks.f32 given), segmented (1:
            positions.i32 given)
  q.f32 [batch * q rows, heads, head_dim], k.f32 and v.f32 [batch * seq, kv_heads, head_dim],
  dout.f32 like q, sinks.f32 [heads], dsinks.f32 [heads] (its value before), positions.i32
  [batch * seq] (each row's position in its segment)
  -> out, lse ([batch, heads, q rows]; [batch * q rows, heads] with segments), dq, dk, dv (zero
     for keys no query sees), dsinks (before + d/dsinks) of the loss sum(out * dout).

The mask is transformers' (masking_utils.py): causal_mask_function (kv_idx <= q_idx) and
sliding_window_overlay (kv_idx > q_idx - sliding_window), within each packed segment; Gemma 2's
soft cap (logits / cap, tanh, * cap) before the mask; gpt-oss's sinks as an extra softmax column
whose probability is dropped. Written from those definitions, not from megatrain's C.
"""
import math
import sys

try:
    import torch
    from op_cases import load, read_case, run, save
except ImportError:
    sys.exit("attention_ref.py: PyTorch or NumPy is not installed (Debian: apt-get install python3-torch)")


def allowed(c, positions, b):
    """[q rows, kv rows] booleans: which keys each query of sequence b sees."""
    seq, q0 = c["seq"], c["q0"] if c["q_len"] else 0
    q_rows = c["q_len"] or seq
    kv_rows = q0 + q_rows
    q_idx = torch.arange(q0, q0 + q_rows)[:, None]
    kv_idx = torch.arange(kv_rows)[None, :]
    mask = kv_idx <= q_idx
    if c["window"]:
        mask = mask & (kv_idx > q_idx - c["window"])
    if positions is not None:
        rows = positions[b * seq:(b + 1) * seq]
        start = torch.arange(seq) - rows  # each row's segment's first row
        mask = mask & (start[q0:q0 + q_rows, None] == start[None, :kv_rows])
    return mask


def attention(d, c):
    B, S, H, KV, D = c["batch"], c["seq"], c["heads"], c["kv_heads"], c["head_dim"]
    q0 = c["q0"] if c["q_len"] else 0
    Q = c["q_len"] or S
    q = load(d, "q", (B, Q, H, D)).requires_grad_(True)
    k = load(d, "k", (B, S, KV, D)).requires_grad_(True)
    v = load(d, "v", (B, S, KV, D)).requires_grad_(True)
    dout = load(d, "dout", (B, Q, H, D))
    sinks = load(d, "sinks", (H,)).requires_grad_(True) if c["sinks"] else None
    positions = load(d, "positions", (B * S,), "i32") if c["segmented"] else None
    scale = c["scale"] or 1.0 / math.sqrt(D)
    group = H // KV
    outs, lses = [], []
    for b in range(B):
        mask = allowed(c, positions, b)
        kb = k[b, :q0 + Q].repeat_interleave(group, dim=1)  # [kv rows, H, D]
        vb = v[b, :q0 + Q].repeat_interleave(group, dim=1)
        scores = torch.einsum("ihd,jhd->hij", q[b], kb) * scale
        if c["softcap"]:
            scores = torch.tanh(scores / c["softcap"]) * c["softcap"]
        scores = scores.masked_fill(~mask[None], -math.inf)
        if sinks is not None:
            scores = torch.cat([scores, sinks[:, None, None].expand(H, Q, 1)], dim=-1)
        lse = torch.logsumexp(scores, dim=-1)  # [H, Q]
        p = torch.softmax(scores, dim=-1)
        if sinks is not None:
            p = p[..., :-1]
        outs.append(torch.einsum("hij,jhd->ihd", p, vb))
        lses.append(lse)
    out = torch.stack(outs)
    (out * dout).sum().backward()
    save(d, "out", out)
    lse = torch.stack(lses)  # [B, H, Q]
    save(d, "lse", lse.permute(0, 2, 1) if positions is not None else lse)
    save(d, "dq", q.grad)
    save(d, "dk", k.grad)
    save(d, "dv", v.grad)
    if sinks is not None:
        save(d, "dsinks", load(d, "dsinks", (H,)) + sinks.grad)


if __name__ == "__main__":
    run(sys.argv[1:], {"attention": attention})
