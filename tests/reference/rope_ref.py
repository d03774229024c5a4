#!/usr/bin/python3
"""transformers' YaRN RoPE (modeling_rope_utils._compute_yarn_parameters and the rotary embedding
that multiplies cos and sin by its attention factor), for tests/test_rope_yarn.c, in float64.

Usage: rope_ref.py yarn DIR [yarn DIR ...]
A case directory, written by the test, holds case.txt (theta, head_dim, factor, beta_fast,
beta_slow, original (original_max_position_embeddings), truncate, attention_factor (0: not given),
positions, heads) and q.f32, k.f32 [positions, heads, head_dim]; the script writes
  inv_freq   [head_dim / 2]
  factor     [1]   the attention factor
  scores     [heads, positions, positions]: q and k turned by cos and sin of position x inv_freq,
             both times the attention factor, in the rotate_half form, then q.k / sqrt(head_dim)

Written from transformers' definitions, not from megatrain's C, so that the two can disagree
when either is wrong.
"""
import math
import sys

try:
    import torch
    from op_cases import load, run, save
except ImportError:
    sys.exit("rope_ref.py: PyTorch or NumPy is not installed (Debian: apt-get install python3-torch)")


def yarn(c):
    base, dim, factor = c["theta"], c["head_dim"], c["factor"]
    attention_factor = c["attention_factor"] or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)

    def correction_dim(rotations):
        return (dim * math.log(c["original"] / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(c["beta_fast"]), correction_dim(c["beta_slow"])
    if c["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv_freq, attention_factor


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def op_yarn(d, c):
    inv_freq, attention_factor = yarn(c)
    P, H, D = c["positions"], c["heads"], c["head_dim"]
    q, k = load(d, "q", (P, H, D)), load(d, "k", (P, H, D))
    freqs = torch.outer(torch.arange(P, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (emb.cos() * attention_factor)[:, None, :], (emb.sin() * attention_factor)[:, None, :]
    qr, kr = rotate(q, cos, sin), rotate(k, cos, sin)
    scores = torch.einsum("phd,shd->hps", qr, kr) / math.sqrt(D)
    save(d, "inv_freq", inv_freq)
    save(d, "factor", torch.tensor([attention_factor], dtype=torch.float64))
    save(d, "scores", scores)


if __name__ == "__main__":
    run(sys.argv[1:], {"yarn": op_yarn}, no_grad=("yarn",))
