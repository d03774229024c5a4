#!/usr/bin/python3
"""PyTorch definitions of megatrain's Gated DeltaNet ops (backend.h's gdn group), for
tests/test_gdn_ops.c: each op's outputs in float64, and its backward by autograd of a probe loss.

Usage: gdn_ops_ref.py OP DIR [OP DIR ...]
A case directory, written by the test, holds case.txt (key=value lines: the sizes) and the op's
inputs as little-endian float32 (.f32) or int32 (.i32) files; the script writes each output as
NAME.ref.f64. starts.i32 [segments + 1] gives each segment's first row, then n. Ops and files:

  conv     x [n, C], w [C, 4], dy [n, C], dw (before) -> y = silu(causal depthwise conv1d of x
           within each segment), dx, dw (+)
  qk_norm  q, k [n, Hk, dk], dqn, dkn [n, Hv, dk] -> qn = l2norm(q) dk^-0.5 and kn = l2norm(k),
           each repeated (repeat_interleave) to Hv heads, dq, dk
  decay    a, b [n, Hv], A_log, dt_bias [Hv], dg, dbeta [n, Hv], dA_log, ddt_bias (before)
           -> g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), da, db, dA_log (+), ddt_bias (+)
  rule     q, k [n, H, dk], v [n, H, dv], g, beta [n, H], dout [n, H, dv] -> o, dq, dk, dv, dg, dbeta:
           transformers' torch_recurrent_gated_delta_rule on each segment alone
  norm     x, z [n, H, dv], w [dv], dy, dw (before); eps -> y = Qwen3NextRMSNormGated(x, z), dx, dz, dw (+)

Written from the definitions in transformers (Qwen3NextGatedDeltaNet, l2norm,
torch_recurrent_gated_delta_rule, Qwen3NextRMSNormGated), not from megatrain's C, so that the two
can disagree when either is wrong.
"""
import sys

try:
    import torch
    import torch.nn.functional as F
    from op_cases import load, read_case, run, save
except ImportError:
    sys.exit("gdn_ops_ref.py: PyTorch or NumPy is not installed (Debian: apt-get install python3-torch)")


def segments(d, c):
    starts = load(d, "starts", (c["segments"] + 1,), "i32").tolist()
    return list(zip(starts[:-1], starts[1:]))


def conv(d, c):
    n, C = c["n"], c["C"]
    x = load(d, "x", (n, C)).requires_grad_(True)
    w = load(d, "w", (C, 4)).requires_grad_(True)
    # Qwen3NextGatedDeltaNet: F.silu(self.conv1d(mixed_qkv)[:, :, :seq_len]), one segment at a time
    ys = [F.silu(F.conv1d(x[a:e].t().unsqueeze(0), w.unsqueeze(1), groups=C, padding=3)[0, :, :e - a]).t()
          for a, e in segments(d, c)]
    y = torch.cat(ys)
    (y * load(d, "dy", (n, C))).sum().backward()
    save(d, "y", y)
    save(d, "dx", x.grad)
    save(d, "dw", w.grad + load(d, "dw", (C, 4)))


def l2norm(x, dim=-1, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)


def qk_norm(d, c):
    n, Hk, Hv, dk = c["n"], c["k_heads"], c["v_heads"], c["d_k"]
    q = load(d, "q", (n, Hk, dk)).requires_grad_(True)
    k = load(d, "k", (n, Hk, dk)).requires_grad_(True)
    qn = l2norm(q.repeat_interleave(Hv // Hk, dim=1)) * dk ** -0.5
    kn = l2norm(k.repeat_interleave(Hv // Hk, dim=1))
    ((qn * load(d, "dqn", (n, Hv, dk))).sum() + (kn * load(d, "dkn", (n, Hv, dk))).sum()).backward()
    save(d, "qn", qn)
    save(d, "kn", kn)
    save(d, "dq", q.grad)
    save(d, "dk", k.grad)


def decay(d, c):
    n, H = c["n"], c["v_heads"]
    a = load(d, "a", (n, H)).requires_grad_(True)
    b = load(d, "b", (n, H)).requires_grad_(True)
    A_log = load(d, "A_log", (H,)).requires_grad_(True)
    dt_bias = load(d, "dt_bias", (H,)).requires_grad_(True)
    g = -A_log.exp() * F.softplus(a + dt_bias)
    beta = b.sigmoid()
    ((g * load(d, "dg", (n, H))).sum() + (beta * load(d, "dbeta", (n, H))).sum()).backward()
    save(d, "g", g)
    save(d, "beta", beta)
    save(d, "da", a.grad)
    save(d, "db", b.grad)
    save(d, "dA_log", A_log.grad + load(d, "dA_log", (H,)))
    save(d, "ddt_bias", dt_bias.grad + load(d, "ddt_bias", (H,)))


def recurrent_gated_delta_rule(query, key, value, g, beta):
    """transformers' torch_recurrent_gated_delta_rule on [heads, tokens, dim] (q already scaled)."""
    H, T, dk = key.shape
    out = torch.zeros(H, T, value.shape[-1], dtype=value.dtype)
    state = torch.zeros(H, dk, value.shape[-1], dtype=value.dtype)
    for i in range(T):
        q_t, k_t, v_t = query[:, i], key[:, i], value[:, i]
        g_t = g[:, i].exp().unsqueeze(-1).unsqueeze(-1)
        beta_t = beta[:, i].unsqueeze(-1)
        state = state * g_t
        kv_mem = (state * k_t.unsqueeze(-1)).sum(dim=-2)
        delta = (v_t - kv_mem) * beta_t
        state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        out[:, i] = (state * q_t.unsqueeze(-1)).sum(dim=-2)
    return out


def rule(d, c):
    n, H, dk, dv = c["n"], c["v_heads"], c["d_k"], c["d_v"]
    q = load(d, "q", (n, H, dk)).requires_grad_(True)
    k = load(d, "k", (n, H, dk)).requires_grad_(True)
    v = load(d, "v", (n, H, dv)).requires_grad_(True)
    g = load(d, "g", (n, H)).requires_grad_(True)
    beta = load(d, "beta", (n, H)).requires_grad_(True)
    outs = [recurrent_gated_delta_rule(q[a:e].transpose(0, 1), k[a:e].transpose(0, 1), v[a:e].transpose(0, 1),
                                       g[a:e].t(), beta[a:e].t()).transpose(0, 1) for a, e in segments(d, c)]
    o = torch.cat(outs)
    (o * load(d, "dout", (n, H, dv))).sum().backward()
    save(d, "o", o)
    for name, t in (("dq", q), ("dk", k), ("dv", v), ("dg", g), ("dbeta", beta)):
        save(d, name, t.grad)


def norm(d, c):
    n, H, dv, eps = c["n"], c["v_heads"], c["d_v"], c["eps"]
    x = load(d, "x", (n, H, dv)).requires_grad_(True)
    z = load(d, "z", (n, H, dv)).requires_grad_(True)
    w = load(d, "w", (dv,)).requires_grad_(True)
    variance = x.pow(2).mean(-1, keepdim=True)
    y = w * (x * torch.rsqrt(variance + eps)) * F.silu(z)
    (y * load(d, "dy", (n, H, dv))).sum().backward()
    save(d, "y", y)
    save(d, "dx", x.grad)
    save(d, "dz", z.grad)
    save(d, "dw", w.grad + load(d, "dw", (dv,)))


OPS = {"conv": conv, "qk_norm": qk_norm, "decay": decay, "rule": rule, "norm": norm}


if __name__ == "__main__":
    run(sys.argv[1:], OPS)
