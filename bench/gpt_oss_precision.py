"""How close bf16 training of a gpt-oss-shaped model can come to fp32's, whoever computes it: the
reason tests/device/check_gptoss.py holds its routed model to transformers' bf16 floor and its
every-expert one to 0.99.

A small model of gpt-oss's kinds (4 layers, hidden 256, 4 query heads over 2 key/value heads of 64,
q/k/v/o biases, a sink logit a head, a window of 128 on the even layers, RoPE; 8 experts of 256 with
the router's and the experts' biases, top k by logit then a softmax over the chosen, the clamped
SwiGLU at 7 with alpha 1.702; random weights N(0, 0.02) but gate and up N(0, GATE_UP)) takes 8
clipped AdamW steps (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on matrices) on 2 x 512 random
tokens in float32, and again with bf16 rounding where the GPU rounds (bench/attention/
delta_precision.py's, with its flash-style attention backward); printed: the lowest update cosines
against float32's, for top 4 and top 8 of 8 and two draws of gate and up.

    /usr/bin/python3 bench/gpt_oss_precision.py [OUT_PREFIX]      (torch on the CPU; ~5 minutes)

writes OUT_PREFIX.md and .json when given (bench/results/2026-12-07-cpu-gpt-oss-precision.*)."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention"))
from delta_precision import attention_residual, bf16, linear, masks, rms, train_from  # noqa: E402  (HD 64, SEQ 512: the same)

V, D, L, H, KV, HD, SEQ, B, STEPS, WINDOW = 2048, 256, 4, 4, 2, 64, 512, 2, 8, 128
E, F, LIMIT, ALPHA = 8, 256, 7.0, 1.702
CASES = [(4, 0.4), (8, 0.4), (4, 0.02), (8, 0.1)]  # (top k, gate and up's std)


def initial(gate_up):
    g = torch.Generator().manual_seed(1)
    normal = lambda *shape, std=0.02: torch.randn(*shape, generator=g) * std
    params = {"embed": normal(V, D), "head": normal(V, D), "norm": torch.ones(D)}
    for l in range(L):
        params.update({f"{l}.attn_norm": torch.ones(D), f"{l}.mlp_norm": torch.ones(D),
                       f"{l}.q_proj": normal(H * HD, D), f"{l}.q_proj.bias": normal(H * HD),
                       f"{l}.k_proj": normal(KV * HD, D), f"{l}.k_proj.bias": normal(KV * HD),
                       f"{l}.v_proj": normal(KV * HD, D), f"{l}.v_proj.bias": normal(KV * HD),
                       f"{l}.o_proj": normal(D, H * HD), f"{l}.o_proj.bias": normal(D), f"{l}.sinks": normal(H),
                       f"{l}.router": normal(E, D), f"{l}.router.bias": normal(E),
                       f"{l}.gate": normal(E, F, D, std=gate_up), f"{l}.gate.bias": normal(E, F),
                       f"{l}.up": normal(E, F, D, std=gate_up), f"{l}.up.bias": normal(E, F),
                       f"{l}.down": normal(E, D, F), f"{l}.down.bias": normal(E, D)})
    return params


def experts(params, l, h, mode, top_k):
    x = h.reshape(-1, D)
    logits = linear(x, params[f"{l}.router"], params[f"{l}.router.bias"], mode)
    top, chosen = logits.topk(top_k, -1)
    weights = torch.softmax(top, -1)
    out = torch.zeros_like(x)
    for e in range(E):
        rows, slot = (chosen == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        gate = linear(x[rows], params[f"{l}.gate"][e], params[f"{l}.gate.bias"][e], mode).clamp(max=LIMIT)
        up = linear(x[rows], params[f"{l}.up"][e], params[f"{l}.up.bias"][e], mode).clamp(-LIMIT, LIMIT)
        act = (up + 1) * gate * torch.sigmoid(ALPHA * gate)
        y = linear(bf16(act) if mode else act, params[f"{l}.down"][e], params[f"{l}.down.bias"][e], mode)
        out = out.index_add(0, rows, y * weights[rows, slot, None])
    return out.view_as(h)


def loss_of(params, tokens, mode, top_k):
    x = params["embed"][tokens[:, :-1]]
    causal, windowed = masks(WINDOW)
    for l in range(L):
        x = attention_residual(params, l, x, windowed if l % 2 == 0 else causal, mode)
        x = x + experts(params, l, rms(x, params[f"{l}.mlp_norm"]), mode, top_k)
    logits = linear(rms(x, params["norm"]), params["head"], None, mode)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))


def train(mode, batches, top_k, gate_up):
    return train_from(initial(gate_up), lambda params, tokens: loss_of(params, tokens, mode, top_k), batches)


def main(argv):
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(3, V, (B, SEQ + 1), generator=g) for _ in range(STEPS)]
    results, rows = {}, []
    for top_k, gate_up in CASES:
        start = initial(gate_up)
        reference, trained = train(None, batches, top_k, gate_up), train("flash", batches, top_k, gate_up)
        cosines = {k: torch.nn.functional.cosine_similarity((trained[k] - start[k]).flatten(),
                                                            (reference[k] - start[k]).flatten(), dim=0).item()
                   for k in start}
        results[f"top {top_k} of {E}, gate and up N(0, {gate_up})"] = cosines
        lowest = sorted(cosines, key=cosines.get)[:5]
        sinks = min((k for k in cosines if k.endswith("sinks")), key=cosines.get)
        rows.append(f"| {top_k} of {E} | {gate_up} | " + ", ".join(f"{k} {cosines[k]:.4f}" for k in lowest)
                    + f" | {sinks} {cosines[sinks]:.4f} |")
        print(rows[-1], flush=True)
    if argv:
        with open(argv[0] + ".json", "w") as f:
            json.dump({"machine": "cpu", "steps": STEPS, "cosines": results}, f, indent=1)
        with open(argv[0] + ".md", "w") as f:
            f.write("# bf16 against fp32 training of a gpt-oss-shaped model (CPU simulation)\n\n"
                    + __doc__.split("\n\n    /usr/bin")[0] + "\n\nCommand: `/usr/bin/python3 bench/gpt_oss_precision.py "
                    + argv[0] + "`\n\n| top k | gate and up std | lowest update cosines | lowest sinks |\n|---|---|---|---|\n"
                    + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
