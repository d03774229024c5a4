"""Times torch.optim.AdamW on the CPU over one parameter tensor, in bench_adamw's line format.

fused=True where this torch has the fused CPU kernel (2.4 and later); older ones fall back to the
single-tensor loop and say so in the impl field. Each time is the best of --iters steps after
one warm-up step. Bytes counted: 28 per parameter (reads param, grad, exp_avg, exp_avg_sq;
writes param, exp_avg, exp_avg_sq)."""
import argparse
import time

import torch

BYTES_PER_PARAM = 28


def make_optimizer(param):
    kwargs = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    try:
        return torch.optim.AdamW([param], fused=True, **kwargs), "torch_fused"
    except (TypeError, RuntimeError):
        return torch.optim.AdamW([param], foreach=False, **kwargs), "torch_single"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=256 << 20)
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()

    x = torch.arange(a.params, dtype=torch.float32)
    param = torch.nn.Parameter((x % 1021) / 1021 - 0.5)
    param.grad = 1e-2 * ((x % 977) / 977 - 0.5)
    del x
    opt, impl = make_optimizer(param)
    print(f"# torch {torch.__version__} params={a.params} iters={a.iters}")
    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        best = float("inf")
        for it in range(a.iters + 1):
            t0 = time.perf_counter()
            opt.step()
            t = time.perf_counter() - t0
            if it > 0:  # step 0 is the warm-up (and allocates the moments)
                best = min(best, t)
        print(f"kind=torch impl={impl} threads={threads} seconds={best:.6f} "
              f"gparams_per_s={a.params / best / 1e9:.3f} "
              f"gb_per_s={BYTES_PER_PARAM * a.params / best / 1e9:.2f}", flush=True)


if __name__ == "__main__":
    main()
