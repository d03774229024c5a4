#!/usr/bin/python3
"""Writes a gpt-oss-120b-shaped checkpoint cut to a few blocks as the hub holds it, for
bench/gpt_oss_load.sh: config.json (openai/gpt-oss-120b's, num_hidden_layers and layer_types cut,
its quantization_config) and one model.safetensors: every tensor BF16 but the experts', which are
MXFP4 pairs (gate_up_proj_blocks [E, 2I, H / 32, 16] and _scales [E, 2I, H / 32], down_proj's
[E, H, I / 32, 16] and [E, H, I / 32]) of random codes under scales of 2^-8 to 2^-4 (weights of the
size trained ones have). Tensors are written a slice at a time, so that making it needs little
memory; random bytes, not a trained model's.

usage: gpt_oss_checkpoint.py OUT_DIR BLOCKS [EXPERTS [VOCAB]]   (defaults: 128 experts, 201088)
       gpt_oss_checkpoint.py --bytes BLOCKS [EXPERTS [VOCAB]]   prints the directory's size"""
import json
import os
import struct
import sys

import numpy

H, I, HEADS, KV, HEAD_DIM = 2880, 2880, 64, 8, 64
SLICE = 1 << 26  # bytes generated at a time


def tensors(blocks, experts, vocab):
    """(name, dtype, shape, kind) in file order; kind: 'weight', 'norm', 'codes', 'scales'."""
    out = [("model.embed_tokens.weight", "BF16", [vocab, H], "weight")]
    for l in range(blocks):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", "BF16", [H], "norm")]
        for proj, rows in (("q", HEADS * HEAD_DIM), ("k", KV * HEAD_DIM), ("v", KV * HEAD_DIM)):
            out += [(p + f"self_attn.{proj}_proj.weight", "BF16", [rows, H], "weight"),
                    (p + f"self_attn.{proj}_proj.bias", "BF16", [rows], "weight")]
        out += [(p + "self_attn.o_proj.weight", "BF16", [H, HEADS * HEAD_DIM], "weight"),
                (p + "self_attn.o_proj.bias", "BF16", [H], "weight"),
                (p + "self_attn.sinks", "BF16", [HEADS], "weight"),
                (p + "post_attention_layernorm.weight", "BF16", [H], "norm"),
                (p + "mlp.router.weight", "BF16", [experts, H], "weight"),
                (p + "mlp.router.bias", "BF16", [experts], "weight")]
        for proj, rows, cols in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
            e = p + "mlp.experts." + proj
            out += [(e + "_blocks", "U8", [experts, rows, cols // 32, 16], "codes"),
                    (e + "_scales", "U8", [experts, rows, cols // 32], "scales"),
                    (e + "_bias", "BF16", [experts, rows], "weight")]
    out += [("model.norm.weight", "BF16", [H], "norm"), ("lm_head.weight", "BF16", [vocab, H], "weight")]
    return out


def nbytes(dtype, shape):
    n = 2 if dtype == "BF16" else 1
    for d in shape:
        n *= d
    return n


def header(ts):
    h, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, _ in ts:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes(dtype, shape)]}
        offset += nbytes(dtype, shape)
    text = json.dumps(h, separators=(",", ":")).encode()
    return text + b" " * (-len(text) % 8), offset


def slice_bytes(rng, kind, n):
    if kind == "codes":
        return rng.integers(0, 256, n, dtype=numpy.uint8).tobytes()
    if kind == "scales":
        return rng.integers(119, 124, n, dtype=numpy.uint8).tobytes()
    if kind == "norm":
        return numpy.full(n // 2, 0x3F80, dtype=numpy.uint16).tobytes()  # 1.0
    x = (rng.standard_normal(n // 2, dtype=numpy.float32) * 0.02).view(numpy.uint32)
    return (x >> 16).astype(numpy.uint16).tobytes()  # bf16: the high halves


def config(blocks, experts, vocab):
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "hidden_size": H, "initial_context_length": 4096, "initializer_range": 0.02,
        "intermediate_size": I, "layer_types": ["sliding_attention" if l % 2 == 0 else "full_attention"
                                                for l in range(blocks)],
        "max_position_embeddings": 131072, "num_attention_heads": HEADS, "num_experts_per_tok": 4,
        "num_hidden_layers": blocks, "num_key_value_heads": KV, "num_local_experts": experts,
        "output_router_logits": False, "pad_token_id": 199999,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
        "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                                "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                                "truncate": False},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": vocab}


def main(argv):
    size_only = argv[0] == "--bytes"
    out = None if size_only else argv[0]
    blocks = int(argv[1])
    experts = int(argv[2]) if len(argv) > 2 else 128
    vocab = int(argv[3]) if len(argv) > 3 else 201088
    ts = tensors(blocks, experts, vocab)
    text, data = header(ts)
    if size_only:
        print(8 + len(text) + data)
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config(blocks, experts, vocab), f, indent=2)
    rng = numpy.random.default_rng(0)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, dtype, shape, kind in ts:
            left = nbytes(dtype, shape)
            while left:
                n = min(left, SLICE)
                f.write(slice_bytes(rng, kind, n))
                left -= n


if __name__ == "__main__":
    main(sys.argv[1:])
