"""How close bf16 training of a Qwen3.5-shaped hybrid can come to fp32's, whoever computes it: what
tests/device/check_qwen35.py's fixture must be for its update cosines (>= 0.99, A_log, dt_bias and
conv1d among them) to measure megatrain rather than the fixture's own chaos. On an H100 (2026-12-07)
the check's model (hidden 1024, an untied vocabulary of 248,320, lr 1e-3) gave transformers' own
bf16 autocast 0.93 on the embedding and 0.95-0.98 on the linear layers' tensors.

A small model of Qwen3.5's kinds (4 layers: three Gated DeltaNet layers to one gated attention layer;
hidden 256; the linear layers' 2 key heads over 4 value heads of 64, their causal depthwise conv1d
of 4 with SiLU, l2-normalised q and k, beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), the
delta rule run token by token, the gated RMSNorm and out_proj; the attention layer's 4 query heads
over 2 key/value heads of 64 with the output gate, (1 + w) q/k norms and a quarter of each head
rotated; (1 + w) block norms; a SwiGLU MLP of 512; random weights N(0, STD)) takes 8 clipped AdamW
steps (lr LR, betas 0.9/0.95, weight decay 0.1 on matrices) on 2 x 512 random tokens in float32, and
again with bf16 rounding where the GPU rounds (the projections' inputs, weights and outputs, the
delta rule's inputs and output, the attention's as bench/attention/delta_precision.py's flash
backward rounds them); printed: the lowest update cosines against float32's, for the case the check
used (untied, lr 1e-3) and the ones that might replace it.

    /usr/bin/python3 bench/qwen35_precision.py [OUT_PREFIX]      (torch on the CPU, one thread; ~10 minutes)

writes OUT_PREFIX.md and .json when given."""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention"))
from delta_precision import Attention, bf16, linear, masks, rope_tables, train_from  # noqa: E402  (H 4, KV 2, HD 64, SEQ 512: the same)

V, D, H, KV, HD, FF, SEQ, B, STEPS = 4000, 256, 4, 2, 64, 512, 512, 2, 8
KH, VH, DK, DV, CONV = 2, 4, 64, 64, 4
MIXERS = ("linear", "linear", "linear", "full")
ROT = HD // 4  # the rotated quarter of a head
# (name, tied embeddings, init std, lr)
CASES = [("the check's: untied, N(0, 0.02), lr 1e-3", False, 0.02, 1e-3),
         ("tied, N(0, 0.02), lr 1e-3", True, 0.02, 1e-3),
         ("untied, N(0, 0.02), lr 3e-4", False, 0.02, 3e-4),
         ("tied, N(0, 0.02), lr 3e-4", True, 0.02, 3e-4),
         ("untied, N(0, 0.02), lr 1e-4", False, 0.02, 1e-4),
         ("tied, N(0, 0.02), lr 1e-4 (check_qwen35.py's since)", True, 0.02, 1e-4)]


COS, SIN = rope_tables(ROT, 10000000.0)


def partial_rope(x):
    r, rest = x[..., :ROT], x[..., ROT:]
    r = r * COS + torch.cat([-r[..., ROT // 2:], r[..., :ROT // 2]], -1) * SIN
    return torch.cat([r, rest], -1)


def norm1(x, w):
    """Qwen3.5's (1 + w) RMSNorm, from the input in fp32."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w)


def initial(tied, std):
    g = torch.Generator().manual_seed(1)
    normal = lambda *shape: torch.randn(*shape, generator=g) * std
    params = {"embed": normal(V, D), "norm": torch.zeros(D)}
    if not tied:
        params["head"] = normal(V, D)
    qkv = 2 * KH * DK + VH * DV
    for l, mixer in enumerate(MIXERS):
        params.update({f"{l}.attn_norm": torch.zeros(D), f"{l}.mlp_norm": torch.zeros(D),
                       f"{l}.gate": normal(FF, D), f"{l}.up": normal(FF, D), f"{l}.down": normal(D, FF)})
        if mixer == "linear":
            params.update({f"{l}.in_qkv": normal(qkv, D), f"{l}.in_z": normal(VH * DV, D), f"{l}.in_b": normal(VH, D),
                           f"{l}.in_a": normal(VH, D), f"{l}.conv": normal(qkv, CONV) * 10,
                           f"{l}.A_log": torch.log(torch.empty(VH).uniform_(1, 16, generator=g)),
                           f"{l}.dt_bias": torch.ones(VH), f"{l}.gnorm": torch.ones(DV),
                           f"{l}.out": normal(D, VH * DV)})
        else:
            params.update({f"{l}.q_proj": normal(2 * H * HD, D), f"{l}.k_proj": normal(KV * HD, D),
                           f"{l}.v_proj": normal(KV * HD, D), f"{l}.o_proj": normal(D, H * HD),
                           f"{l}.q_norm": torch.zeros(HD), f"{l}.k_norm": torch.zeros(HD)})
    return params


def delta_rule(q, k, v, g, beta):
    """The gated delta rule token by token (transformers' torch_recurrent_gated_delta_rule), [B, VH, SEQ, d]."""
    q, k = F.normalize(q, dim=-1) / math.sqrt(DK), F.normalize(k, dim=-1)
    state = q.new_zeros(B, VH, DK, DV)
    out = []
    for t in range(SEQ):
        state = state * g[:, :, t].exp()[..., None, None]
        kv = (state * k[:, :, t, :, None]).sum(-2)
        state = state + k[:, :, t, :, None] * ((v[:, :, t] - kv) * beta[:, :, t, None])[:, :, None, :]
        out.append((state * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, 2)


def linear_mixer(params, l, h, mode):
    r = lambda t: bf16(t) if mode else t
    mixed = linear(h, params[f"{l}.in_qkv"], None, mode).transpose(1, 2)  # [B, C, SEQ]
    conv = F.conv1d(F.pad(mixed, (CONV - 1, 0)), params[f"{l}.conv"].unsqueeze(1), groups=mixed.shape[1])
    mixed = r(F.silu(conv)).transpose(1, 2)
    q, k, v = mixed.split([KH * DK, KH * DK, VH * DV], -1)
    heads = lambda t, n, d: t.reshape(B, SEQ, n, d).transpose(1, 2)
    q, k, v = heads(q, KH, DK), heads(k, KH, DK), heads(v, VH, DV)
    q, k = q.repeat_interleave(VH // KH, 1), k.repeat_interleave(VH // KH, 1)
    beta = torch.sigmoid(linear(h, params[f"{l}.in_b"], None, mode)).transpose(1, 2)
    a = linear(h, params[f"{l}.in_a"], None, mode)
    g = (-params[f"{l}.A_log"].exp() * F.softplus(a + params[f"{l}.dt_bias"])).transpose(1, 2)
    o = r(delta_rule(q, k, v, g, beta)).transpose(1, 2)  # [B, SEQ, VH, DV]
    z = linear(h, params[f"{l}.in_z"], None, mode).reshape(B, SEQ, VH, DV)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * params[f"{l}.gnorm"] * F.silu(z)
    return linear(r(o.reshape(B, SEQ, VH * DV)), params[f"{l}.out"], None, mode)


def attention_mixer(params, l, h, mode, causal):
    r = lambda t: bf16(t) if mode else t
    qg = linear(h, params[f"{l}.q_proj"], None, mode).view(B, SEQ, H, 2 * HD)
    q, gate = qg[..., :HD], qg[..., HD:]
    heads = lambda name: linear(h, params[f"{l}.{name}"], None, mode).view(B, SEQ, KV, HD)
    q = r(partial_rope(norm1(q, params[f"{l}.q_norm"]).transpose(1, 2)))
    k = r(partial_rope(norm1(heads("k_proj"), params[f"{l}.k_norm"]).transpose(1, 2)))
    v = heads("v_proj").transpose(1, 2)
    k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
    out = Attention.apply(q, k, v, None, causal, "flash" if mode else None).transpose(1, 2)
    out = r(out * torch.sigmoid(gate))
    return linear(out.reshape(B, SEQ, H * HD), params[f"{l}.o_proj"], None, mode)


def loss_of(params, tokens, mode):
    causal, _ = masks(SEQ)
    x = params["embed"][tokens[:, :-1]]
    for l, mixer in enumerate(MIXERS):
        h = norm1(x, params[f"{l}.attn_norm"])
        x = x + (linear_mixer(params, l, h, mode) if mixer == "linear" else attention_mixer(params, l, h, mode, causal))
        h = norm1(x, params[f"{l}.mlp_norm"])
        gated = F.silu(linear(h, params[f"{l}.gate"], None, mode)) * linear(h, params[f"{l}.up"], None, mode)
        x = x + linear(gated, params[f"{l}.down"], None, mode)
    logits = linear(norm1(x, params["norm"]), params.get("head", params["embed"]), None, mode)
    return F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))


def main(argv):
    torch.set_num_threads(1)  # the token-by-token recurrence: small ops, where threads cost more than they give
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(3, V, (B, SEQ + 1), generator=g) for _ in range(STEPS)]
    results, rows = {}, []
    for name, tied, std, lr in CASES:
        start = initial(tied, std)
        loss = lambda mode: lambda params, tokens: loss_of(params, tokens, mode)
        reference, trained = train_from(start, loss(None), batches, lr), train_from(start, loss("bf16"), batches, lr)
        cosines = {k: F.cosine_similarity((trained[k] - start[k]).flatten(), (reference[k] - start[k]).flatten(),
                                          dim=0).item() for k in start}
        results[name] = cosines
        lowest = sorted(cosines, key=cosines.get)[:5]
        kinds = {kind: min((k for k in cosines if k.endswith(kind)), key=cosines.get)
                 for kind in ("A_log", "dt_bias", "conv", "embed")}
        rows.append(f"| {name} | " + ", ".join(f"{k} {cosines[k]:.4f}" for k in lowest) + " | "
                    + ", ".join(f"{k} {cosines[k]:.4f}" for k in kinds.values()) + " |")
        print(rows[-1], flush=True)
    if argv:
        with open(argv[0] + ".json", "w") as f:
            json.dump({"machine": "cpu", "steps": STEPS, "cosines": results}, f, indent=1)
        with open(argv[0] + ".md", "w") as f:
            f.write("# bf16 against fp32 training of a Qwen3.5-shaped hybrid (CPU simulation)\n\n"
                    + __doc__.split("\n\n    /usr/bin")[0] + "\n\nCommand: `/usr/bin/python3 bench/qwen35_precision.py "
                    + argv[0] + "`\n\n| case | lowest update cosines | lowest A_log, dt_bias, conv1d, embedding |\n"
                    "|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
