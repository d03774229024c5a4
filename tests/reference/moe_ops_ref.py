#!/usr/bin/python3
"""PyTorch definitions of megatrain's mixture-of-experts ops (backend.h's moe group), for
tests/test_moe_ops.c: each op's outputs in float64, and its backward by autograd of a probe loss.

Usage: moe_ops_ref.py OP DIR [OP DIR ...]
A case directory, written by the test, holds case.txt (key=value lines: the sizes) and the op's
inputs as little-endian float32 (.f32) or int32 (.i32) files; the script writes each output as
NAME.ref.f64 (float64) or NAME.ref.i32. Ops and their files:

  route     logits.f32 [n, E], dweights.f32 [n, k], aux_grad.f32 [E] (optional); renorm
            -> weights, experts, counts, prob_sum, dlogits: d/dlogits of
               sum(dweights * weights) + sum(aux_grad * softmax(logits))
  permute   experts.i32 [n, k]; seg -> order, slot_row, offsets (slots sorted by expert, segment,
            token)
  gather    x.f32 [n, d], dxs.f32 [n k, d], order.i32, dx.f32 (its value before); accumulate
            -> xs = x[order // k], dx (+)= d/dx sum(xs * dxs)
  grouped   x.f32 [rows, in], w.f32 [E, out, in], dy.f32 [rows, out], offsets.i32 [E S + 1],
            dw.f32 (before) -> y (each expert's rows times its matrix), dx, dw (+)= by autograd of
            sum(y * dy)
  swiglu    gu.f32 [rows, 2F], da.f32 [rows, F] -> a = silu(g) * u, dgu
  combine   ys.f32 [n k, d], weights.f32 [n, k], slot_row.i32, dy.f32 [n, d]
            -> y = sum_j weights[t, j] ys[slot_row[t k + j]], dys, dweights
  gate_add  a.f32, x.f32 [n, d], g.f32 [n], dy.f32 -> y = a + sigmoid(g) x, dx, dg
  aux       logits.f32 [layers, n, E]; scale -> loss = scale * transformers' load_balancing_loss_func
            over the layers' logits together, dlogits = its gradient

Written from the definitions in transformers (Qwen3MoeSparseMoeBlock, load_balancing_loss_func),
not from megatrain's C, so that the two can disagree when either is wrong.
"""
import os
import sys

try:
    import torch
    import torch.nn.functional as F
    from op_cases import load, read_case, run, save
except ImportError:
    sys.exit("moe_ops_ref.py: PyTorch or NumPy is not installed (Debian: apt-get install python3-torch)")


def route(d, c):
    n, E, k = c["n"], c["E"], c["k"]
    logits = load(d, "logits", (n, E)).requires_grad_(True)
    dweights = load(d, "dweights", (n, k))
    p = torch.softmax(logits, dim=-1)
    top, experts = torch.topk(p, k, dim=-1)
    weights = top / top.sum(dim=-1, keepdim=True) if c["renorm"] else top
    probe = (weights * dweights).sum()
    if os.path.exists(os.path.join(d, "aux_grad.f32")):
        probe = probe + (p * load(d, "aux_grad", (E,))).sum()
    probe.backward()
    save(d, "weights", weights)
    save(d, "experts", experts)
    save(d, "counts", torch.bincount(experts.reshape(-1), minlength=E))
    save(d, "prob_sum", p.sum(dim=0))
    save(d, "dlogits", logits.grad)


def permute(d, c):
    n, E, k, seg = c["n"], c["E"], c["k"], c["seg"]
    S = (n + seg - 1) // seg
    experts = load(d, "experts", (n * k,), "i32")
    token = torch.arange(n * k) // k
    key = experts * S + token // seg
    _, order = torch.sort(key, stable=True)
    slot_row = torch.empty_like(order)
    slot_row[order] = torch.arange(n * k)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.bincount(key, minlength=E * S), 0)])
    save(d, "order", order)
    save(d, "slot_row", slot_row)
    save(d, "offsets", offsets)


def gather(d, c):
    n, k, dim = c["n"], c["k"], c["d"]
    x = load(d, "x", (n, dim)).requires_grad_(True)
    order = load(d, "order", (n * k,), "i32")
    xs = x[order // k]
    (xs * load(d, "dxs", (n * k, dim))).sum().backward()
    save(d, "xs", xs)
    save(d, "dx", x.grad + (load(d, "dx", (n, dim)) if c["accumulate"] else 0))


def grouped(d, c):
    rows, E, S, fin, fout = c["rows"], c["E"], c["S"], c["in"], c["out"]
    x = load(d, "x", (rows, fin)).requires_grad_(True)
    w = load(d, "w", (E, fout, fin)).requires_grad_(True)
    offsets = load(d, "offsets", (E * S + 1,), "i32")
    parts = [x[offsets[e * S]:offsets[(e + 1) * S]] @ w[e].t() for e in range(E)]
    y = torch.cat(parts)
    (y * load(d, "dy", (rows, fout))).sum().backward()
    save(d, "y", y)
    save(d, "dx", x.grad)
    save(d, "dw", w.grad + load(d, "dw", (E, fout, fin)))


def swiglu(d, c):
    rows, f = c["rows"], c["F"]
    gu = load(d, "gu", (rows, 2 * f)).requires_grad_(True)
    gate, up = gu.chunk(2, dim=-1)
    a = F.silu(gate) * up
    (a * load(d, "da", (rows, f))).sum().backward()
    save(d, "a", a)
    save(d, "dgu", gu.grad)


def combine(d, c):
    n, k, dim = c["n"], c["k"], c["d"]
    ys = load(d, "ys", (n * k, dim)).requires_grad_(True)
    weights = load(d, "weights", (n, k)).requires_grad_(True)
    slot_row = load(d, "slot_row", (n, k), "i32")
    y = (weights[:, :, None] * ys[slot_row]).sum(dim=1)
    (y * load(d, "dy", (n, dim))).sum().backward()
    save(d, "y", y)
    save(d, "dys", ys.grad)
    save(d, "dweights", weights.grad)


def gate_add(d, c):
    n, dim = c["n"], c["d"]
    x = load(d, "x", (n, dim)).requires_grad_(True)
    g = load(d, "g", (n,)).requires_grad_(True)
    y = load(d, "a", (n, dim)) + torch.sigmoid(g)[:, None] * x
    (y * load(d, "dy", (n, dim))).sum().backward()
    save(d, "y", y)
    save(d, "dx", x.grad)
    save(d, "dg", g.grad)


def load_balancing_loss(gate_logits, num_experts, top_k):
    """transformers' load_balancing_loss_func without an attention mask: the layers' router logits
    concatenated, each row's softmax, the top k one-hot, the tokens' share of each expert times the
    mean probability, summed, times the number of experts."""
    concatenated = torch.cat(list(gate_logits), dim=0)
    routing_weights = torch.softmax(concatenated, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.double(), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts


def aux(d, c):
    layers, n, E, k = c["layers"], c["n"], c["E"], c["k"]
    logits = load(d, "logits", (layers, n, E)).requires_grad_(True)
    loss = c["scale"] * load_balancing_loss(logits.unbind(0), E, k)
    loss.backward()
    save(d, "loss", loss.reshape(1))
    save(d, "dlogits", logits.grad)


OPS = {"route": route, "permute": permute, "gather": gather, "grouped": grouped, "swiglu": swiglu,
       "combine": combine, "gate_add": gate_add, "aux": aux}


if __name__ == "__main__":
    run(sys.argv[1:], OPS, no_grad=("permute",))
