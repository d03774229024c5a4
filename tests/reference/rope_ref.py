#!/usr/bin/python3
"""transformers' YaRN RoPE (modeling_rope_utils._compute_yarn_parameters and the rotary embedding
that multiplies cos and sin by its attention factor) as llama_ref.py computes it, for
tests/test_rope_yarn.c, in float64: the frequencies, the factor, and the scores of q and k turned.

Usage: rope_ref.py yarn DIR [yarn DIR ...]
A case directory, written by the test, holds case.txt (llama_ref.py's keys of a YaRN table:
rope_theta, head_dim, rope_scaling_factor, rope_beta_fast, rope_beta_slow,
rope_original_max_position, rope_truncate, rope_attention_factor (0: not given); and positions,
heads) and q.f32, k.f32 [positions, heads, head_dim]; the script writes
  inv_freq   [head_dim / 2]
  factor     [1]   the attention factor
  scores     [heads, positions, positions]: q and k turned by cos and sin of position x inv_freq,
             both times the attention factor, in the rotate_half form, then q.k / sqrt(head_dim)

The model reference's own YaRN, so that what the op test checks is what the model tests compare
against; written from transformers' definitions, not from megatrain's C.
"""
import math
import sys

try:
    import torch
    from llama_ref import rope_attention_scaling, rotate_half, yarn_inv_freq
    from op_cases import load, run, save
except ImportError:
    sys.exit("rope_ref.py: PyTorch or NumPy is not installed (Debian: apt-get install python3-torch)")


def op_yarn(d, c):
    """llama_ref.py's YaRN (the model reference's) on the case's table."""
    cfg = dict(c, rope_yarn=1)
    hd = c["head_dim"]
    inv_freq = yarn_inv_freq(cfg, 1.0 / c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    attention_factor = rope_attention_scaling(cfg, 0)
    P, H, D = c["positions"], c["heads"], c["head_dim"]
    q, k = load(d, "q", (P, H, D)), load(d, "k", (P, H, D))
    freqs = torch.outer(torch.arange(P, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (emb.cos() * attention_factor)[:, None, :], (emb.sin() * attention_factor)[:, None, :]
    qr, kr = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    scores = torch.einsum("phd,shd->hps", qr, kr) / math.sqrt(D)
    save(d, "inv_freq", inv_freq)
    save(d, "factor", torch.tensor([attention_factor], dtype=torch.float64))
    save(d, "scores", scores)


if __name__ == "__main__":
    run(sys.argv[1:], {"yarn": op_yarn}, no_grad=("yarn",))
