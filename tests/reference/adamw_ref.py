"""torch.optim.AdamW for a few steps on values from tests/test_adamw.c.

Input file (float32, native byte order): the n initial weights, then steps x n gradients.
The first --decay-n weights take weight decay and the rest none (two parameter groups, so one
run covers both). Output file (float32): the n weights, n exp_avg and n exp_avg_sq after the
last step.
Exit status 3 when torch cannot be imported, so the test can say what is missing."""
import argparse
import sys

try:
    import numpy as np
    import torch
except ImportError as err:
    print(f"adamw_ref.py: {err}", file=sys.stderr)
    sys.exit(3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--decay-n", type=int, required=True)
    for name in ("lr", "beta1", "beta2", "eps", "weight-decay", "grad-scale"):
        ap.add_argument("--" + name, type=float, required=True)
    a = ap.parse_args()

    data = np.fromfile(a.inp, dtype=np.float32)
    if data.size != a.n * (a.steps + 1):
        sys.exit(f"adamw_ref.py: {a.inp} holds {data.size} floats, expected {a.n * (a.steps + 1)}")
    weights = torch.from_numpy(data[: a.n].copy())
    grads = torch.from_numpy(data[a.n:].copy()).view(a.steps, a.n)
    params = [torch.nn.Parameter(weights[: a.decay_n].clone()),
              torch.nn.Parameter(weights[a.decay_n:].clone())]
    groups = [{"params": [params[0]], "weight_decay": a.weight_decay},
              {"params": [params[1]], "weight_decay": 0.0}]
    # foreach=False: the single-tensor path, whose operation order megatrain follows.
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, foreach=False)
    for s in range(a.steps):
        params[0].grad = grads[s, : a.decay_n] * a.grad_scale
        params[1].grad = grads[s, a.decay_n:] * a.grad_scale
        opt.step()
    states = [opt.state[p] for p in params]
    out = torch.cat([p.detach() for p in params] + [s["exp_avg"] for s in states] +
                    [s["exp_avg_sq"] for s in states])
    out.numpy().astype(np.float32).tofile(a.out)


if __name__ == "__main__":
    main()
