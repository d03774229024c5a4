#!/usr/bin/python3
"""gpt-oss checkpoints as the hub holds them, for tests/test_hf_model_gpt_oss.c, made from a BF16
export of megatrain's (transformers' layout: mlp.experts.gate_up_proj [E, D, 2F], gate the even
columns; down_proj [E, F, D]).

Each experts' matrix is replaced by random MXFP4 codes: blocks [E, rows, cols / 32, 16] (two E2M1
codes a byte, the low nibble first) and scales [E, rows, cols / 32] (2^(s - 127)), rows the output
features as the hub holds them (gate_up's interleaved). OUT/mxfp4 holds the pairs and the
quantization_config the hub's config.json has; OUT/bf16 their twin: the pairs decoded as
transformers' integrations/mxfp4.py convert_moe_packed_tensors does (a lookup table, torch.ldexp,
then the transpose to [E, cols, rows]); OUT/expected.f32 the layout megatrain must load them to,
worked out from GptOssExperts' forward: per expert, gate = gate_up_proj[e][:, ::2].T, then up =
gate_up_proj[e][:, 1::2].T ([2F, D], stacked over experts), then down = down_proj[e].T ([D, F]), a
layer after the other. Each OUT/<case> is a broken variant of OUT/mxfp4 that must be refused:
corrupt (a scale of 255, E8M0's NaN, in layer 1's down_proj), scales_shape (gate_up's scales a
group short), mixed (layer 1's gate_up plain BF16 beside layer 0's MXFP4), dtype (layer 0's
down_proj_blocks as I8), both (layer 0's gate_up_proj held plain as well as in MXFP4),
no_scales (layer 1's down_proj_scales left out).

The safetensors files are written by tests/reference/make_safetensors_fixture.py's writer.

usage: make_gpt_oss_checkpoint.py EXPORT_DIR OUT_DIR SEED
Exits 3 when torch is missing."""
import json
import os
import shutil
import struct
import sys

try:
    import numpy
    import torch
except ImportError:
    sys.exit(3)

from make_safetensors_fixture import write_safetensors

FP4_VALUES = [+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "U8": torch.uint8, "I8": torch.int8}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        raw = numpy.frombuffer(data[lo:hi], dtype=numpy.uint8).copy()
        t = torch.from_numpy(raw)
        if e["dtype"] == "BF16":
            t = t.view(torch.int16).view(torch.bfloat16)
        elif e["dtype"] != "U8":
            t = t.view(DTYPES[e["dtype"]])
        tensors[name] = t.reshape(e["shape"])
    return tensors


def decode(blocks, scales):
    """transformers' convert_moe_packed_tensors in fp32: [*prefix, G, 16] -> [*prefix, G * 32], transposed."""
    *prefix, groups, width = blocks.shape
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    flat = blocks.reshape(-1, width)
    out = torch.empty(flat.shape[0], width * 2, dtype=torch.float32)
    out[:, 0::2] = lut[(flat & 0x0F).to(torch.long)]
    out[:, 1::2] = lut[(flat >> 4).to(torch.long)]
    out = torch.ldexp(out, scales.reshape(-1, 1).to(torch.int32).to(torch.float32) - 127)
    return out.reshape(*prefix, groups * width * 2).transpose(1, 2).contiguous()


def random_pair(gen, experts, rows, cols):
    blocks = torch.randint(0, 256, (experts, rows, cols // 32, 16), generator=gen, dtype=torch.uint8)
    scales = torch.randint(120, 131, (experts, rows, cols // 32), generator=gen, dtype=torch.uint8)
    return blocks, scales


def write_dir(path, config, tensors, quantized):
    os.makedirs(path)
    cfg = dict(config)
    if quantized:
        cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.embed_tokens"]}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(path, "model.safetensors"), list(tensors.items()))


def main(export_dir, out_dir, seed):
    gen = torch.Generator().manual_seed(int(seed))
    with open(os.path.join(export_dir, "config.json")) as f:
        config = json.load(f)
    plain = read_safetensors(os.path.join(export_dir, "model.safetensors"))
    pairs, twins, expected = {}, {}, []
    for layer in range(config["num_hidden_layers"]):
        for proj in ("gate_up_proj", "down_proj"):
            name = f"model.layers.{layer}.mlp.experts.{proj}"
            experts, cols, rows = plain.pop(name).shape  # transformers' [E, in, out]
            blocks, scales = random_pair(gen, experts, rows, cols)
            pairs[name] = (blocks, scales)
            twins[name] = decode(blocks, scales)  # [E, cols, rows] as GptOssExperts holds it
            w = twins[name]
            if proj == "gate_up_proj":
                expected.append(torch.cat([w[:, :, 0::2].transpose(1, 2), w[:, :, 1::2].transpose(1, 2)], dim=1))
            else:
                expected.append(w.transpose(1, 2))
    torch.cat([e.reshape(-1) for e in expected]).numpy().astype(numpy.float32).tofile(
        os.path.join(out_dir, "expected.f32"))

    def mxfp4_tensors(pairs):
        t = dict(plain)
        for name, (blocks, scales) in pairs.items():
            t[name + "_blocks"], t[name + "_scales"] = blocks, scales
        return t

    write_dir(os.path.join(out_dir, "mxfp4"), config, mxfp4_tensors(pairs), True)
    bf16 = dict(plain)
    for name, w in twins.items():
        assert torch.equal(w.to(torch.bfloat16).float(), w), "an MXFP4 value that bf16 does not hold"
        bf16[name] = w.to(torch.bfloat16)
    write_dir(os.path.join(out_dir, "bf16"), config, bf16, False)

    gu0, gu1 = "model.layers.0.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.gate_up_proj"
    down0, down1 = "model.layers.0.mlp.experts.down_proj", "model.layers.1.mlp.experts.down_proj"
    corrupt = dict(pairs)
    scales = pairs[down1][1].clone()
    scales[1, 2, 0] = 255
    corrupt[down1] = (pairs[down1][0], scales)
    short = dict(pairs)
    short[gu0] = (pairs[gu0][0], pairs[gu0][1][:, :, 1:].contiguous())
    cases = {"corrupt": mxfp4_tensors(corrupt), "scales_shape": mxfp4_tensors(short)}
    mixed = {k: v for k, v in pairs.items() if k != gu1}
    cases["mixed"] = dict(mxfp4_tensors(mixed), **{gu1: bf16[gu1]})
    cases["dtype"] = mxfp4_tensors(pairs)
    cases["dtype"][down0 + "_blocks"] = pairs[down0][0].view(torch.int8)
    cases["both"] = dict(mxfp4_tensors(pairs), **{gu0: bf16[gu0]})
    cases["no_scales"] = mxfp4_tensors(pairs)
    del cases["no_scales"][down1 + "_scales"]
    for case, tensors in cases.items():
        write_dir(os.path.join(out_dir, case), config, tensors, True)
    for name in os.listdir(export_dir):  # the tokenizer's files and the like, as a hub directory has them
        if not name.endswith(".safetensors") and name != "config.json":
            shutil.copy(os.path.join(export_dir, name), os.path.join(out_dir, "mxfp4", name))


if __name__ == "__main__":
    main(*sys.argv[1:])
