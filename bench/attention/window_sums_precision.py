"""How to sum the windows' shares of dk and dv (engine/kinds/attention_run.c): in fp32, or in bf16.

One head of causal attention (head_dim 128, bf16-rounded random inputs) is computed in float64,
whole and in windows of T queries cut from the end of the sequence as the engine cuts them. Each
window's share of dk and dv is rounded to bf16, as cuDNN writes it; the shares are then summed,
last window first, either in fp32 (rounded to bf16 once at the end: what the engine does) or in
bf16 (rounded after every window). Printed: the relative L2 error of each against the float64
whole, beside that of one bf16 rounding of the whole (what untiled attention writes).

    python3 bench/attention/window_sums_precision.py [SEQ]      (default 4096; numpy only)

At 4096 (2026-11-26): one rounding 1.65e-3; fp32 sums 2.35e-3 for 4, 16 and 64 windows; bf16 sums
2.55e-3, 3.22e-3 and 4.84e-3: the bf16 error grows with the number of windows, the fp32 one does
not. docs/memory.md ("Attention tiles") cites these."""
import sys

import numpy as np


def bf16(x):
    """x rounded to bf16 (round to nearest even), as float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def main():
    seq, d = int(sys.argv[1]) if len(sys.argv) > 1 else 4096, 128
    rng = np.random.default_rng(0)
    q, k, v, dout = (bf16(rng.standard_normal((seq, d))) for _ in range(4))
    scale = 1 / np.sqrt(d)

    def shares(q0, q1):
        """The share of dk and dv of queries [q0, q1), which see keys [0, q1)."""
        s = q[q0:q1] @ k[:q1].T * scale
        s = np.where(np.arange(q0, q1)[:, None] >= np.arange(q1)[None, :], s, -np.inf)
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        o = p @ v[:q1]
        ds = p * (dout[q0:q1] @ v[:q1].T - (dout[q0:q1] * o).sum(1, keepdims=True))
        return ds.T @ q[q0:q1] * scale, p.T @ dout[q0:q1]

    def rel(got, want):
        return np.linalg.norm(got - want) / np.linalg.norm(want)

    dk, dv = shares(0, seq)
    print("seq %d: one bf16 rounding of the whole: dk %.2e, dv %.2e" % (seq, rel(bf16(dk), dk), rel(bf16(dv), dv)))
    for T in (seq // 4, seq // 16, seq // 64):
        sums32 = [np.zeros((seq, d), np.float32) for _ in range(2)]
        sums16 = [np.zeros((seq, d)) for _ in range(2)]
        for q0 in range(seq - T, -1, -T):
            for i, share in enumerate(shares(q0, q0 + T)):
                share, end = bf16(share), q0 + T
                sums32[i][:end] += share.astype(np.float32)
                sums16[i][:end] = bf16(sums16[i][:end] + share)
        print("  %2d windows of %4d: fp32 sums dk %.2e dv %.2e; bf16 sums dk %.2e dv %.2e" % (
            seq // T, T, rel(bf16(sums32[0]), dk), rel(bf16(sums32[1]), dv), rel(sums16[0], dk), rel(sums16[1], dv)))


if __name__ == "__main__":
    main()
