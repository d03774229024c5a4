"""PyTorch's SDPA (causal, GQA) beside bench_attention at the same shapes and the same inputs: times
forward and backward, and checks megatrain's sample (bench_attention --sample) against its own
results: the first and last rows of out and dq, relative L2 error. One line per length, key=value.

    python3 bench/attention/torch_attention.py --seqs 32768,65536 [--heads 24 --kv-heads 8
        --head-dim 128 --iters 2 --sample DIR]
"""
import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F

SAMPLE_ROWS = 64
M64 = (1 << 64) - 1


def signed(c):
    return c - (1 << 64) if c >= 1 << 63 else c


def srl(x, k):  # logical right shift of int64 bit patterns
    return (x >> k) & ((1 << (64 - k)) - 1)


def inputs(which, count, device):
    """bench_attention_input(which, i) for i < count, as bf16 (the C side's hash, in int64 bits)."""
    out = torch.empty(count, dtype=torch.bfloat16, device=device)
    step = 1 << 26
    for lo in range(0, count, step):
        i = torch.arange(lo, min(lo + step, count), dtype=torch.int64, device=device)
        x = (i + 1) * signed(0x9E3779B97F4A7C15) ^ signed(((which + 1) * 0xD1B54A32D192ED03) & M64)
        x = x ^ srl(x, 31)
        x = x * signed(0xBF58476D1CE4E5B9)
        x = x ^ srl(x, 29)
        out[lo:lo + len(i)] = (srl(x, 40) & 0xFFFFFF).to(torch.float32) / float(1 << 23) - 1.0
    return out


def rel(got, want):
    got, want = got.float(), want.float()
    return (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", default="32768,65536,131072,262144,524288")
    ap.add_argument("--heads", type=int, default=24)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--sample")
    a = ap.parse_args()
    dev = torch.device("cuda")
    H, KV, D = a.heads, a.kv_heads, a.head_dim
    for seq in [int(s) for s in a.seqs.split(",")]:
        try:
            # [seq, heads * D] rows, as megatrain lays them out, viewed as [1, heads, seq, D]
            def view(t, heads):
                return t.view(seq, heads, D).transpose(0, 1).unsqueeze(0)
            q = view(inputs(0, seq * H * D, dev), H).requires_grad_()
            k = view(inputs(1, seq * KV * D, dev), KV).requires_grad_()
            v = view(inputs(2, seq * KV * D, dev), KV).requires_grad_()
            dout = view(inputs(3, seq * H * D, dev), H)
            torch.cuda.reset_peak_memory_stats()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            fwd = bwd = 0.0
            for it in range(a.iters + 1):
                q.grad = k.grad = v.grad = None
                ev[0].record()
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                ev[1].record()
                out.backward(dout)
                ev[2].record()
                torch.cuda.synchronize()
                if it > 0:
                    fwd += ev[0].elapsed_time(ev[1]) / a.iters
                    bwd += ev[1].elapsed_time(ev[2]) / a.iters
            flops = 2.0 * seq * seq * H * D
            line = ("system=torch seq=%d heads=%d kv_heads=%d head_dim=%d fwd_ms=%.2f bwd_ms=%.2f fwd_tflops=%.1f "
                    "bwd_tflops=%.1f peak_gib=%.2f" % (seq, H, KV, D, fwd, bwd, flops / fwd * 1e-9,
                                                      2.5 * flops / bwd * 1e-9, torch.cuda.max_memory_allocated() / 2**30))
            path = a.sample and os.path.join(a.sample, "attention-%d.bin" % seq)
            if path and os.path.exists(path):
                rows = min(SAMPLE_ROWS, seq)
                raw = np.fromfile(path, dtype=np.uint8)
                width = H * D
                bf = torch.from_numpy(raw[: 4 * rows * width * 2].copy()).view(torch.bfloat16).view(4, rows, width)
                mine = {"out": out, "dq": q.grad}
                errs = []
                for t, name in enumerate(("out", "dq")):
                    rowsof = mine[name].detach()[0].transpose(0, 1).reshape(seq, width)
                    errs.append("rel_%s_first=%.2e rel_%s_last=%.2e" % (
                        name, rel(bf[2 * t].to(dev), rowsof[:rows]), name, rel(bf[2 * t + 1].to(dev), rowsof[-rows:])))
                line += " " + " ".join(errs)
            print(line, flush=True)
            del q, k, v, dout, out
        except torch.OutOfMemoryError:
            print("system=torch seq=%d error=\"out of GPU memory\"" % seq, flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
