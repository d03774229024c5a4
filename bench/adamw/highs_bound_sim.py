"""How many bytes a clipped step's pass after the norm would read if m, v and the gradient were
kept as split halves (as the masters are) and each new high half were formed from their high halves
with an error bound, the elements near a bf16 rounding boundary going to the exact computation
(issue 25, docs/memory.md "The step's time floor"). A simulation in numpy's fp32, not megatrain's
kernels: weights ~ N(0, 0.02), gradients of scale 1e-4..1e-2, Adam's state late in a run, a clip
coefficient of 0.05, the bound 1.5 x 2^-7 of the step's terms (checked against the exact high
halves: the script fails if an element it calls decided is wrong). Prints, per learning rate, the
elements that need the exact computation and the bytes a parameter the pass would read at cache
line granularity (both halves of the master and the high halves of m, v, gradient: 10; the low
halves of a 64-byte line of them wherever one element of the line needs them: 6 more).

    /usr/bin/python3 bench/adamw/highs_bound_sim.py
"""
import numpy as np

f = np.float32


def high_bits(x):
    """The split's high half (util/split_f32.h) of finite values: bf16 rounded to nearest, ties away."""
    return (x.astype(f).view(np.uint32) + np.uint32(0x8000)) >> 16


def rounded(x):
    return (high_bits(x) << 16).view(f)


def adam_step(m, v, g, c, lr, step=1000):
    ns, c2 = f(-lr / (1 - 0.9**step)), f(np.sqrt(1 - 0.95**step))
    gg = g * c
    mi = f(0.9) * m + f(0.1) * gg
    vi = f(0.95) * v + f(0.05) * gg * gg
    denom = np.sqrt(vi) / c2 + f(1e-8)
    return ns * mi / denom, mi, denom, ns


def main():
    rng = np.random.default_rng(0)
    n, c = 4_000_000, f(0.05)
    for lr in (1e-5, 1e-4, 3e-4, 3e-3):
        w = (rng.standard_normal(n) * 0.02).astype(f)
        s = (10 ** rng.uniform(-4, -2, n)).astype(f)
        g = (rng.standard_normal(n) * s).astype(f)
        m = (rng.standard_normal(n) * 0.3 * s).astype(f)
        v = (s * s * rng.uniform(0.5, 1.5, n)).astype(f)
        decayed = w * f(1 - lr * 0.1)
        exact = decayed + adam_step(m, v, g, c, lr)[0]
        mh, vh, gh = rounded(m), rounded(v), rounded(g)
        step, mi, denom, ns = adam_step(mh, vh, gh, c, lr)
        bound = np.abs(ns) / denom * f(1.5 * 2**-7) * (np.abs(f(0.9) * mh) + f(0.1) * np.abs(gh * c) + np.abs(mi))
        low, high = decayed + step - bound, decayed + step + bound
        decided = high_bits(low) == high_bits(high)
        assert np.all(high_bits(exact)[decided] == high_bits(low)[decided]), "the bound missed an element"
        exact_share = 1 - decided.mean()
        lines = 1 - (1 - exact_share) ** 32
        moved = np.mean(high_bits(exact) != high_bits(w))
        print(f"lr {lr:g}: {exact_share * 100:.2f}% of elements need the exact computation, {lines * 100:.1f}% of "
              f"the low halves' lines: ~{10 + 6 * lines:.1f} bytes a parameter read (the masters' pass: 16); "
              f"{moved * 100:.1f}% of the high halves move")


if __name__ == "__main__":
    main()
