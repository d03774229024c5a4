#!/usr/bin/python3
"""Writes the safetensors fixtures that tests/test_safetensors.c reads.

The format is written by hand (struct + json; the safetensors package is not in Debian),
following its rules: an 8-byte little-endian header length, a JSON header of
{name: {dtype, shape, data_offsets}} plus __metadata__ (string -> string), padded with spaces to
a multiple of 8 bytes, then the tensors' bytes back to back in the order of their offsets.
torch (Debian's python3-torch) produces the bytes and checks the values the C test expects.

    /usr/bin/python3 tests/reference/make_safetensors_fixture.py [OUT_DIR]
"""
import json
import os
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64", torch.uint8: "U8",
          torch.int8: "I8"}


def tensor_bytes(t):
    t = t.contiguous()
    # numpy has no bfloat16: reinterpret every dtype as raw bytes through int16/int32/int64 views.
    raw = t.view(torch.int16) if t.element_size() == 2 else t
    return raw.numpy().tobytes()


def write_safetensors(path, tensors, header_order=None):
    """tensors: list of (name, torch tensor) in data order; header_order: key order in the JSON."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    entries = {}
    for name, t in tensors:
        data = tensor_bytes(t)
        entries[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    for name in header_order or [n for n, _ in tensors]:
        header[name] = entries[name]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def bits(values, dtype):
    return torch.tensor(values, dtype=torch.int16).view(dtype)


def write_dtypes(out):
    """Exact-conversion cases: bf16 and f16 bit patterns with the values the C test expects."""
    bf16 = bits([0x3F80, -0x3FB7, 0x0001, 0x7F80, -0x8000, 0x4780], torch.bfloat16)  # 0xC049 as int16 is -0x3FB7
    assert bf16.float().tolist() == [1.0, -3.140625, 2.0**-133, float("inf"), -0.0, 65536.0]
    f16 = bits([0x3C00, 0x0001, 0x03FF, 0x7BFF, -0x0400, -0x8000], torch.float16).reshape(3, 2)  # -0x0400: 0xFC00
    assert f16.float().flatten().tolist() == [1.0, 2.0**-24, 1023 * 2.0**-24, 65504.0, float("-inf"), -0.0]
    f32 = torch.tensor([[0.5, -1.25, 3.0], [1e-30, -0.0, 65504.0]], dtype=torch.float32)
    tensors = [("f16", f16), ("f32", f32), ("i64", torch.tensor([1, -2], dtype=torch.int64)),
               ("scalar", torch.tensor(7.0)), ("bf16", bf16)]
    # The header lists names in another order than the data, as the format allows.
    write_safetensors(os.path.join(out, "dtypes.safetensors"), tensors, sorted(n for n, _ in tensors))


def fixture_value(name, numel):
    """Multiples of 1/16 in [-14/16, 14/16]: exact in bf16, f16 and f32. The C test recomputes them."""
    k = sum(name.encode()) % 31
    return torch.tensor([(((i * 7 + k * 3) % 29) - 14) / 16.0 for i in range(numel)])


def model_tensors(cfg, tied_head):
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    Q, KV = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = [("model.embed_tokens.weight", [V, D])]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes += [(p + "input_layernorm.weight", [D]), (p + "self_attn.q_proj.weight", [Q, D]),
                   (p + "self_attn.k_proj.weight", [KV, D]), (p + "self_attn.v_proj.weight", [KV, D])]
        if cfg["model_type"] == "qwen2":
            shapes += [(p + "self_attn.q_proj.bias", [Q]), (p + "self_attn.k_proj.bias", [KV]),
                       (p + "self_attn.v_proj.bias", [KV])]
        if cfg["model_type"] == "qwen3":
            shapes += [(p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd])]
        shapes += [(p + "self_attn.o_proj.weight", [D, Q]), (p + "post_attention_layernorm.weight", [D]),
                   (p + "mlp.gate_proj.weight", [F, D]), (p + "mlp.up_proj.weight", [F, D]),
                   (p + "mlp.down_proj.weight", [D, F])]
    shapes.append(("model.norm.weight", [D]))
    tensors = {name: fixture_value(name, int(torch.Size(shape).numel())).reshape(shape) for name, shape in shapes}
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"] if tied_head else fixture_value(
        "lm_head.weight", V * D).reshape(V, D)
    return tensors


def write_config(path, cfg):
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def write_sharded_llama(out):
    """Two shards (BF16 and F32) plus an index and an inv_freq buffer older exports carried."""
    path = os.path.join(out, "tiny_llama")
    os.makedirs(path, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
           "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 4, "vocab_size": 10, "max_position_embeddings": 64, "rms_norm_eps": 1e-05,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1,
           "eos_token_id": [2, 3], "rope_scaling": None, "torch_dtype": "bfloat16"}
    write_config(path, cfg)
    tensors = model_tensors(cfg, tied_head=False)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.tensor([1.0, 0.01])
    names = sorted(tensors)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, (shard, dtype) in enumerate(zip(shards, [torch.bfloat16, torch.float32])):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        write_safetensors(os.path.join(path, file), [(n, tensors[n].to(dtype)) for n in shard])
        weight_map.update({n: file for n in shard})
    total = sum(tensors[n].numel() * (2 if i == 0 else 4) for i, shard in enumerate(shards) for n in shard)
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def write_one_file_model(out, name, cfg, tied_head, dtype):
    """config.json and a single model.safetensors of `dtype` in out/name."""
    path = os.path.join(out, name)
    os.makedirs(path, exist_ok=True)
    write_config(path, cfg)
    tensors = model_tensors(cfg, tied_head)
    write_safetensors(os.path.join(path, "model.safetensors"), [(n, t.to(dtype)) for n, t in sorted(tensors.items())])


def write_tied_qwen2(out):
    """One F16 file of a tied Qwen2 (q/k/v biases) that still carries lm_head.weight."""
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
           "intermediate_size": 12, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
           "head_dim": 4, "vocab_size": 10, "max_position_embeddings": 64, "rms_norm_eps": 1e-06,
           "rope_theta": 1000000.0, "tie_word_embeddings": True, "use_sliding_window": False,
           "sliding_window": 32, "eos_token_id": 2}
    write_one_file_model(out, "tiny_qwen2_tied", cfg, tied_head=True, dtype=torch.float16)


def write_qwen3(out):
    """One BF16 file of an untied Qwen3: q/k norms of head_dim 6, where hidden / heads is 4."""
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 8,
           "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 6, "vocab_size": 10, "max_position_embeddings": 64, "rms_norm_eps": 1e-06,
           "rope_theta": 1000000.0, "tie_word_embeddings": False, "attention_bias": False,
           "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2, "bos_token_id": 1,
           "eos_token_id": 2, "rope_scaling": None, "torch_dtype": "bfloat16"}
    write_one_file_model(out, "tiny_qwen3", cfg, tied_head=False, dtype=torch.bfloat16)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "safetensors")
    os.makedirs(out, exist_ok=True)
    write_dtypes(out)
    write_sharded_llama(out)
    write_tied_qwen2(out)
    write_qwen3(out)


if __name__ == "__main__":
    main()
