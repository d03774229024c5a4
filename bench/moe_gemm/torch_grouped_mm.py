"""PyTorch's grouped GEMM (torch._grouped_mm, CUTLASS's Hopper grouped kernels with the offsets on the
device: what torchtitan's MoE runs) on bench_moe_gemm's shapes and routing: the six GEMMs of a layer,
one line each in bench_moe_gemm's key=value format (way=torch_grouped_mm). dw comes out in bf16 here
(megatrain's accumulates in fp32). Each GEMM is the mean of --iters calls after one warm-up.

    python3 bench/moe_gemm/torch_grouped_mm.py [--tokens 16384] [--shapes olmoe,qwen3] [--iters 5]
                                               [--load uniform|skewed]
"""
import argparse

import torch

SHAPES = {"olmoe": (64, 8, 2048, 1024), "qwen3": (128, 8, 2048, 768), "mixtral": (8, 2, 4096, 14336)}


def routing(tokens, E, k, skewed, gen):
    """Each token's k distinct experts: uniform, or expert e about as likely as 1 / (e + 1)."""
    weights = 1.0 / torch.arange(1, E + 1, dtype=torch.float64) if skewed else torch.ones(E, dtype=torch.float64)
    return torch.multinomial(weights.expand(tokens, E), k, replacement=False, generator=gen)


def timed(fn, iters):
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--shapes", default="olmoe,qwen3")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--load", choices=["uniform", "skewed"], default="uniform")
    a = p.parse_args()
    if not hasattr(torch, "_grouped_mm"):
        print("way=torch_grouped_mm error=\"this PyTorch (%s) has no torch._grouped_mm\"" % torch.__version__)
        return
    gen = torch.Generator().manual_seed(1234)
    dev, bf = "cuda", torch.bfloat16
    for name in a.shapes.split(","):
        E, k, D, F = SHAPES[name]
        experts = routing(a.tokens, E, k, a.load == "skewed", gen).flatten()
        rows = experts.numel()
        counts = torch.bincount(experts, minlength=E)
        offs = torch.cumsum(counts, 0).to(torch.int32).to(dev)
        x = torch.randn(rows, D, device=dev, dtype=bf)
        act = torch.randn(rows, F, device=dev, dtype=bf)
        w_gu = torch.randn(E, 2 * F, D, device=dev, dtype=bf) * 0.02  # transformers 5's [E, 2F, D]
        w_down = torch.randn(E, D, F, device=dev, dtype=bf) * 0.02
        dgu = torch.randn(rows, 2 * F, device=dev, dtype=bf)
        dy = torch.randn(rows, D, device=dev, dtype=bf)
        gemms = [
            ("gate_up", rows * D * 2 * F, lambda: torch._grouped_mm(x, w_gu.transpose(-2, -1), offs=offs)),
            ("down", rows * F * D, lambda: torch._grouped_mm(act, w_down.transpose(-2, -1), offs=offs)),
            ("gate_up_dx", rows * D * 2 * F, lambda: torch._grouped_mm(dgu, w_gu, offs=offs)),
            ("down_dx", rows * F * D, lambda: torch._grouped_mm(dy, w_down, offs=offs)),
            ("gate_up_dw", rows * D * 2 * F, lambda: torch._grouped_mm(dgu.t(), x, offs=offs)),
            ("down_dw", rows * F * D, lambda: torch._grouped_mm(dy.t(), act, offs=offs)),
        ]
        total_ms, total_flops = 0.0, 0.0
        for gemm, macs, fn in gemms:
            try:
                ms = timed(fn, a.iters)
            except Exception as e:  # noqa: BLE001 -- report and go on with the next GEMM
                print('shape=%s way=torch_grouped_mm gemm=%s error="%s"' % (name, gemm, str(e).splitlines()[0][:200]))
                continue
            total_ms += ms
            total_flops += 2.0 * macs
            print("shape=%s way=torch_grouped_mm gemm=%s ms=%.3f tflops=%.1f" % (name, gemm, ms, 2.0 * macs / ms * 1e-9))
        if total_ms:
            print("shape=%s way=torch_grouped_mm gemm=all ms=%.3f tflops=%.1f" % (name, total_ms, total_flops / total_ms * 1e-9))


if __name__ == "__main__":
    main()
