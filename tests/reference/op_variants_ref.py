#!/usr/bin/python3
"""PyTorch definitions of the op variants that Gemma and gpt-oss need (backend.h: mt_glu_params,
mt_rmsnorm_params, the embedding's scale, the LM head's soft-cap), for tests/test_op_variants.c:
each op's outputs in float64, and its backward by autograd of a probe loss.

Usage: op_variants_ref.py OP DIR [OP DIR ...]
A case directory, written by the test, holds case.txt (key=value lines) and the op's inputs as
little-endian float32 (.f32) or int32 (.i32) files; the script writes each output as NAME.ref.f64.
Ops and their files:

  glu        g.f32, u.f32, da.f32 [count]; act (0 silu, 1 gelu_tanh, 2 gpt-oss's clamped silu),
             limit, alpha -> a, dg, du (d/dg, d/du of sum(a * da))
  moe_glu    gu.f32 [rows, 2F] (gate's F columns, then up's), da.f32 [rows, F]; act, limit, alpha
             -> a, dgu
  rmsnorm    x.f32 [n, d], w.f32 [d], dy.f32 [n, d]; eps, unit_offset -> y, rstd, dx, dw
  embedding  wte.f32 [vocab, d], tokens.i32 [n], dx.f32 [n, d]; scale -> x, dwte
  grouped    x.f32 [rows, in], w.f32 [E, out, in], bias.f32 [E, out], dy.f32 [rows, out],
             offsets.i32 [E + 1] -> y (each expert's rows times its matrix plus its bias), dx, dw,
             dbias
  lmhead     x.f32 [n, d], w.f32 [vocab, d], targets.i32 [n] (< 0: ignored); scale, softcap, v0,
             rows -> loss (the summed cross-entropy), lse (0 on ignored rows), dx, dw (scale times
             the loss's gradients), dw_slice (dw's rows [v0, v0 + rows)), logits (row 0's)

Written from transformers' definitions (GptOssExperts (its biases too), Gemma3RMSNorm, Gemma3TextScaledWordEmbedding,
Gemma2ForCausalLM's final_logit_softcapping, ACT2FN["gelu_pytorch_tanh"]), not from megatrain's C,
so that the two can disagree when either is wrong.
"""
import sys

try:
    import torch
    import torch.nn.functional as F
    from op_cases import load, read_case, run, save
except ImportError:
    sys.exit("op_variants_ref.py: PyTorch or NumPy is not installed (Debian: apt-get install python3-torch)")


def activate(gate, up, c):
    """The GLU of act: Llama's silu(gate) * up; Gemma's gelu_pytorch_tanh(gate) * up; gpt-oss's
    GptOssExperts: gate clamped from above and up on both sides at limit, (up + 1) * gate *
    sigmoid(alpha * gate)."""
    if c["act"] == 0:
        return F.silu(gate) * up
    if c["act"] == 1:
        return F.gelu(gate, approximate="tanh") * up
    gate = gate.clamp(min=None, max=c["limit"])
    up = up.clamp(min=-c["limit"], max=c["limit"])
    glu = gate * torch.sigmoid(gate * c["alpha"])
    return (up + 1) * glu


def glu(d, c):
    n = c["count"]
    g = load(d, "g", (n,)).requires_grad_(True)
    u = load(d, "u", (n,)).requires_grad_(True)
    a = activate(g, u, c)
    (a * load(d, "da", (n,))).sum().backward()
    save(d, "a", a)
    save(d, "dg", g.grad)
    save(d, "du", u.grad)


def moe_glu(d, c):
    rows, f = c["rows"], c["F"]
    gu = load(d, "gu", (rows, 2 * f)).requires_grad_(True)
    gate, up = gu.chunk(2, dim=-1)
    a = activate(gate, up, c)
    (a * load(d, "da", (rows, f))).sum().backward()
    save(d, "a", a)
    save(d, "dgu", gu.grad)


def rmsnorm(d, c):
    """Llama's weight * normed x, or Gemma3RMSNorm's normed x * (1 + weight)."""
    n, dim = c["n"], c["d"]
    x = load(d, "x", (n, dim)).requires_grad_(True)
    w = load(d, "w", (dim,)).requires_grad_(True)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["eps"])
    y = x * rstd * ((1.0 + w) if c["unit_offset"] else w)
    (y * load(d, "dy", (n, dim))).sum().backward()
    save(d, "y", y)
    save(d, "rstd", rstd.reshape(n))
    save(d, "dx", x.grad)
    save(d, "dw", w.grad)


def embedding(d, c):
    """Gemma3TextScaledWordEmbedding: the lookup times embed_scale."""
    n, vocab, dim = c["n"], c["vocab"], c["d"]
    wte = load(d, "wte", (vocab, dim)).requires_grad_(True)
    x = F.embedding(load(d, "tokens", (n,), "i32"), wte) * c["scale"]
    (x * load(d, "dx", (n, dim))).sum().backward()
    save(d, "x", x)
    save(d, "dwte", wte.grad)


def grouped(d, c):
    """GptOssExperts' projections of an expert's rows: rows @ weight^T + bias."""
    rows, E, fin, fout = c["rows"], c["E"], c["in"], c["out"]
    x = load(d, "x", (rows, fin)).requires_grad_(True)
    w = load(d, "w", (E, fout, fin)).requires_grad_(True)
    bias = load(d, "bias", (E, fout)).requires_grad_(True)
    offsets = load(d, "offsets", (E + 1,), "i32")
    y = torch.cat([x[offsets[e]:offsets[e + 1]] @ w[e].t() + bias[e] for e in range(E)])
    (y * load(d, "dy", (rows, fout))).sum().backward()
    save(d, "y", y)
    save(d, "dx", x.grad)
    save(d, "dw", w.grad)
    save(d, "dbias", bias.grad)


def soft_cap(logits, cap):
    """Gemma 2's final_logit_softcapping (0: none)."""
    if cap > 0:
        logits = logits / cap
        logits = torch.tanh(logits)
        logits = logits * cap
    return logits


def lmhead(d, c):
    n, vocab, dim = c["n"], c["vocab"], c["d"]
    x = load(d, "x", (n, dim)).requires_grad_(True)
    w = load(d, "w", (vocab, dim)).requires_grad_(True)
    targets = load(d, "targets", (n,), "i32")
    logits = soft_cap(x @ w.t(), c["softcap"])
    loss = F.cross_entropy(logits, targets.masked_fill(targets < 0, -100), ignore_index=-100, reduction="sum")
    (c["scale"] * loss).backward()
    lse = torch.logsumexp(logits, dim=-1) * (targets >= 0)
    save(d, "loss", loss.reshape(1))
    save(d, "lse", lse)
    save(d, "dx", x.grad)
    save(d, "dw", w.grad)
    save(d, "dw_slice", w.grad[c["v0"]:c["v0"] + c["rows"]])
    save(d, "logits", logits[0])


OPS = {"glu": glu, "moe_glu": moe_glu, "rmsnorm": rmsnorm, "embedding": embedding, "grouped": grouped,
       "lmhead": lmhead}


if __name__ == "__main__":
    run(sys.argv[1:], OPS)
