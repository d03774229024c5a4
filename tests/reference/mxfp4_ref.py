#!/usr/bin/python3
"""MXFP4 decoding as transformers' integrations/mxfp4.py does it (convert_moe_packed_tensors, before
its final transpose), for tests/test_mxfp4.c: a lookup table of the 16 E2M1 values, the low nibble
of each byte first, then torch.ldexp by the scale less 127.

usage: mxfp4_ref.py BLOCKS SCALES ROWS GROUPS OUT
BLOCKS: uint8 [ROWS, GROUPS, 16]; SCALES: uint8 [ROWS, GROUPS]; OUT: float32 [ROWS, GROUPS * 32].
Exits 3 when torch is missing."""
import sys

try:
    import numpy
    import torch
except ImportError:
    sys.exit(3)

FP4_VALUES = [+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def main(blocks_path, scales_path, rows, groups, out_path):
    rows, groups = int(rows), int(groups)
    blocks = torch.from_numpy(numpy.fromfile(blocks_path, dtype=numpy.uint8).reshape(rows * groups, 16))
    scales = torch.from_numpy(numpy.fromfile(scales_path, dtype=numpy.uint8).reshape(rows * groups, 1))
    exponent = scales.to(torch.int32) - 127
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    out = torch.empty(rows * groups, 32, dtype=torch.float32)
    out[:, 0::2] = lut[(blocks & 0x0F).to(torch.long)]
    out[:, 1::2] = lut[(blocks >> 4).to(torch.long)]
    out = torch.ldexp(out, exponent.to(torch.float32))
    out.reshape(rows, groups * 32).numpy().tofile(out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
