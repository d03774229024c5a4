"""Why a key bias's update is noisier under flash-style attention than under transformers' eager one:
the backward's delta_i = sum_j p_ij dp_ij, which a flash-style backward (cuDNN's, the CUDA-core
kernels', FlashAttention's, PyTorch SDPA's) forms as dout_i . out_i from the bf16-rounded output.

A key's bias adds q_i . R_j b to row i's scores, R_j the RoPE rotation at key j: were it not for
R_j the softmax would ignore it, so its gradient is mostly cancellation (sum_j ds_ij = 0), which the
rounding of delta breaks. Here a small Qwen2-shaped model (4 layers, hidden 256, 4 query heads over
2 key/value heads of 64, biases on q, k and v, a window of 100 on layers 2 and 3, random weights
N(0, 0.02), 2 x 512 random tokens a step) takes 8 clipped AdamW steps (lr 1e-3, betas 0.9/0.95,
weight decay 0.1 on matrices) in float32, and again with bf16 rounding where the GPU rounds (the
projections' inputs, weights and outputs, q and k after RoPE, the attention's output and gradients)
and one of three backwards of the attention, identical but for delta:

  eager      sum_j p_ij dp_ij in fp32 (transformers' eager attention: the softmax's backward from
             its fp32 probabilities), ds rounded to bf16 as its matmul takes it
  flash      dout_i . out_i from the bf16 output
  flash-f32  dout_i . out_i from the output before its rounding

and prints each tensor's update cosine against float32's (the lowest, and every k_proj.bias), with
and without gpt-oss's sinks (a learned logit a head in the softmax, which breaks the cancellation).

    /usr/bin/python3 bench/attention/delta_precision.py [OUT_PREFIX]     (torch on the CPU; ~3 minutes)

writes OUT_PREFIX.md and .json when given (bench/results/2026-12-07-cpu-attention-delta.*)."""
import json
import math
import sys

import torch

V, D, L, H, KV, HD, F, SEQ, B, STEPS, WINDOW = 4000, 256, 4, 4, 2, 64, 512, 512, 2, 8, 100
WINDOWED = (2, 3)
MODES = ("eager", "flash", "flash-f32")


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


def rope_tables(dim=HD, theta=10000.0):
    """cos and sin of RoPE over `dim` features, [SEQ, dim]."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.outer(torch.arange(SEQ, dtype=torch.float64), inv)
    angles = torch.cat([angles, angles], -1)
    return angles.cos().float(), angles.sin().float()


COS, SIN = rope_tables()


def rope(x):
    return x * COS + torch.cat([-x[..., HD // 2:], x[..., :HD // 2]], -1) * SIN


class Attention(torch.autograd.Function):
    """softmax(q k^T / sqrt(HD) [with a sink column]) v, its backward by `mode` (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, mask, mode):
        s = (q @ k.transpose(-1, -2) / math.sqrt(HD)).masked_fill(~mask, float("-inf"))
        if sinks is not None:
            s = torch.cat([s, sinks.view(1, H, 1, 1).expand(*s.shape[:3], 1)], -1)
        p = torch.softmax(s, -1)
        p_sink = p[..., -1:] if sinks is not None else None
        p = p[..., :SEQ]
        out = p @ v
        rounded = bf16(out) if mode else out
        ctx.save_for_backward(q, k, v, p, out if mode == "flash-f32" else rounded)
        ctx.mode, ctx.p_sink = mode, p_sink
        return rounded

    @staticmethod
    def backward(ctx, dout):
        q, k, v, p, out = ctx.saved_tensors
        mode = ctx.mode
        dout = bf16(dout) if mode else dout
        dp = dout @ v.transpose(-1, -2)
        delta = (p * dp).sum(-1, keepdim=True) if mode in (None, "eager") else (dout * out).sum(-1, keepdim=True)
        dsinks = -(ctx.p_sink * delta).sum((0, 2, 3)) if ctx.p_sink is not None else None
        ds = p * (dp - delta) / math.sqrt(HD)
        if mode == "eager":
            ds = bf16(ds)
        dq, dk, dv = ds @ k, ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ dout
        if mode:
            dq, dk, dv = bf16(dq), bf16(dk), bf16(dv)
        return dq, dk, dv, dsinks, None, None


def initial(sinks):
    g = torch.Generator().manual_seed(1)
    normal = lambda *shape: torch.randn(*shape, generator=g) * 0.02
    norm = lambda: torch.ones(D) + torch.randn(D, generator=g) * 0.1
    params = {"embed": normal(V, D), "head": normal(V, D), "norm": norm()}
    for l in range(L):
        params.update({f"{l}.attn_norm": norm(), f"{l}.mlp_norm": norm(), f"{l}.q_proj": normal(H * HD, D),
                       f"{l}.q_proj.bias": normal(H * HD), f"{l}.k_proj": normal(KV * HD, D),
                       f"{l}.k_proj.bias": normal(KV * HD), f"{l}.v_proj": normal(KV * HD, D),
                       f"{l}.v_proj.bias": normal(KV * HD), f"{l}.o_proj": normal(D, H * HD),
                       f"{l}.gate": normal(F, D), f"{l}.up": normal(F, D), f"{l}.down": normal(D, F)})
        if sinks:
            params[f"{l}.sinks"] = normal(H)
    return params


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def linear(x, w, b, mode):
    y = (bf16(x) @ bf16(w).t() if mode else x @ w.t()) + (b if b is not None else 0)
    return bf16(y) if mode else y


def masks(window):
    """The causal mask and the one of a sliding window of `window` keys, [SEQ, SEQ]."""
    i = torch.arange(SEQ)
    causal = i[:, None] >= i[None, :]
    return causal, causal & (i[:, None] - i[None, :] < window)


def attention_residual(params, l, x, mask, mode):
    """x + o(attention(rope(q(h)), rope(k(h)), v(h))), h = norm(x): layer l's attention, biases and
    sinks where params hold them."""
    h = rms(x, params[f"{l}.attn_norm"])
    heads = lambda name, n: linear(h, params[f"{l}.{name}"], params[f"{l}.{name}.bias"], mode).view(
        B, SEQ, n, HD).transpose(1, 2)
    q, k, v = rope(heads("q_proj", H)), rope(heads("k_proj", KV)), heads("v_proj", KV)
    if mode:
        q, k = bf16(q), bf16(k)
    k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
    out = Attention.apply(q, k, v, params.get(f"{l}.sinks"), mask, mode)
    return x + linear(out.transpose(1, 2).reshape(B, SEQ, H * HD), params[f"{l}.o_proj"],
                      params.get(f"{l}.o_proj.bias"), mode)


def loss_of(params, tokens, mode):
    x = params["embed"][tokens[:, :-1]]
    causal, windowed = masks(WINDOW)
    for l in range(L):
        x = attention_residual(params, l, x, windowed if l in WINDOWED else causal, mode)
        h = rms(x, params[f"{l}.mlp_norm"])
        gated = torch.nn.functional.silu(linear(h, params[f"{l}.gate"], None, mode)) * linear(
            h, params[f"{l}.up"], None, mode)
        x = x + linear(gated, params[f"{l}.down"], None, mode)
    logits = linear(rms(x, params["norm"]), params["head"], None, mode)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))


def train(mode, batches, sinks):
    return train_from(initial(sinks), lambda params, tokens: loss_of(params, tokens, mode), batches)


def train_from(start, loss_fn, batches, lr=1e-3):
    """8 clipped AdamW steps (module docstring; lr `lr`) of loss_fn(params, tokens) from the tensors `start`."""
    params = {k: v.clone().requires_grad_(True) for k, v in start.items()}
    opt = torch.optim.AdamW([{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    for tokens in batches:
        loss = loss_fn(params, tokens)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
    return {k: v.detach() for k, v in params.items()}


def main(argv):
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(3, V, (B, SEQ + 1), generator=g) for _ in range(STEPS)]
    results = {}
    for sinks in (False, True):
        start = initial(sinks)
        reference = train(None, batches, sinks)
        model = "with sinks" if sinks else "without sinks"
        for mode in MODES:
            trained = train(mode, batches, sinks)
            cosines = {k: torch.nn.functional.cosine_similarity((trained[k] - start[k]).flatten(),
                                                                (reference[k] - start[k]).flatten(), dim=0).item()
                       for k in start}
            results[f"{model}, {mode}"] = cosines
            lowest = min(cosines, key=cosines.get)
            biases = " ".join(f"{l}:{cosines[f'{l}.k_proj.bias']:.4f}" for l in range(L))
            print(f"{model:14s} {mode:9s} k_proj.bias by layer {biases}   lowest {lowest} {cosines[lowest]:.4f}",
                  flush=True)
    if argv:
        with open(argv[0] + ".json", "w") as f:
            json.dump({"machine": "cpu", "steps": STEPS, "window_layers": list(WINDOWED), "cosines": results}, f,
                      indent=1)
        rows = ["| model | delta | " + " | ".join(f"k_proj.bias layer {l}" for l in range(L)) + " | lowest other |",
                "|---|---|" + "---|" * (L + 1)]
        for name, cosines in results.items():
            model, mode = name.split(", ")
            others = {k: c for k, c in cosines.items() if not k.endswith("k_proj.bias")}
            low = min(others, key=others.get)
            rows.append(f"| {model} | {mode} | " + " | ".join(f"{cosines[f'{l}.k_proj.bias']:.4f}" for l in range(L))
                        + f" | {low} {others[low]:.4f} |")
        with open(argv[0] + ".md", "w") as f:
            f.write("# Update cosines against float32 under three attention backwards (CPU simulation)\n\n"
                    + __doc__.split("\n\n    /usr/bin")[0] + "\n\nCommand: `/usr/bin/python3 "
                    "bench/attention/delta_precision.py " + argv[0] + "`\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
