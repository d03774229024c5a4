"""megatrain's attention of packed examples (bench_attention --packed ... --sample DIR) against
PyTorch's SDPA run on each example alone (causal, GQA), on the same inputs: the whole of out and dq,
relative L2 error over all rows and the worst single example's. At lengths up to --mask-max also
against one SDPA call with a block-diagonal causal mask, an independent second reference. One
line per (length, mean), key=value.

    python3 bench/attention/torch_packed.py --seqs 4096,16384,32768 --packed 256,1024,4096
        [--heads 32 --kv-heads 8 --head-dim 64 --sample DIR --mask-max 8192]
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_attention import inputs, rel  # noqa: E402  (the C side's inputs, the error measure)


def per_example(q, k, v, dout, lengths):
    """out and dq of SDPA run on each example alone, [seq, heads * D] rows."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    outs, at = [], 0
    for n in lengths:
        outs.append(F.scaled_dot_product_attention(q[:, :, at:at + n], k[:, :, at:at + n], v[:, :, at:at + n],
                                                   is_causal=True, enable_gqa=True))
        at += n
    out = torch.cat(outs, dim=2)
    out.backward(dout)
    return out.detach(), q.grad


def block_diagonal(q, k, v, dout, lengths):
    """The same from one SDPA call with a boolean mask: causal, and within each example."""
    seq = q.shape[2]
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=q.device),
                                      torch.tensor(lengths, device=q.device))
    row = torch.arange(seq, device=q.device)
    mask = (segment[:, None] == segment[None, :]) & (row[:, None] >= row[None, :])
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    out.backward(dout)
    return out.detach(), q.grad


def rows(t, seq):  # [1, heads, seq, D] -> [seq, heads * D]
    return t[0].transpose(0, 1).reshape(seq, -1)


def worst_example(got, want, lengths):
    worst, at = 0.0, 0
    for n in lengths:
        worst = max(worst, rel(got[at:at + n], want[at:at + n]))
        at += n
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", default="4096,16384,32768")
    ap.add_argument("--packed", default="256,1024,4096")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--sample", required=True)
    ap.add_argument("--mask-max", type=int, default=8192)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    dev = torch.device(a.device)
    H, KV, D = a.heads, a.kv_heads, a.head_dim
    for seq in [int(s) for s in a.seqs.split(",")]:
        def view(t, heads):
            return t.view(seq, heads, D).transpose(0, 1).unsqueeze(0)
        q, k, v = view(inputs(0, seq * H * D, dev), H), view(inputs(1, seq * KV * D, dev), KV), \
            view(inputs(2, seq * KV * D, dev), KV)
        dout = view(inputs(3, seq * H * D, dev), H)
        for mean in [int(m) for m in a.packed.split(",")]:
            base = os.path.join(a.sample, "attention-%d-packed-%d" % (seq, mean))
            if not os.path.exists(base + ".bin"):
                print("system=torch-check seq=%d packed=%d error=\"no sample %s.bin\"" % (seq, mean, base), flush=True)
                continue
            lengths = np.fromfile(base + ".lengths", dtype=np.int32).tolist()
            raw = np.fromfile(base + ".bin", dtype=np.uint8)
            mine = torch.from_numpy(raw.copy()).view(torch.bfloat16).view(2, seq, H * D).to(dev)
            out, dq = per_example(q, k, v, dout, lengths)
            out, dq = rows(out, seq), rows(dq, seq)
            line = ("system=torch-check seq=%d packed=%d segments=%d rel_out=%.2e rel_dq=%.2e worst_example_out=%.2e "
                    "worst_example_dq=%.2e" % (seq, mean, len(lengths), rel(mine[0], out), rel(mine[1], dq),
                                               worst_example(mine[0], out, lengths), worst_example(mine[1], dq, lengths)))
            if seq <= a.mask_max:
                mout, mdq = block_diagonal(q, k, v, dout, lengths)
                line += " rel_out_mask=%.2e rel_dq_mask=%.2e" % (rel(mine[0], rows(mout, seq)), rel(mine[1], rows(mdq, seq)))
            print(line, flush=True)
        del q, k, v, dout
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
