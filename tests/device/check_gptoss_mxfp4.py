#!/usr/bin/env python3
"""gpt-oss's MXFP4 checkpoints against transformers, for the GPU machine (torch, transformers 5 with
its mxfp4 integration, safetensors; megatrain built with CUDA=1).

A small GptOssForCausalLM (hidden 64, experts 64 wide: MXFP4's blocks are 32 columns), random
weights saved in BF16 with save_pretrained; tests/reference/make_gpt_oss_checkpoint.py (the CI's
reference, which tests/test_hf_model_gpt_oss.c reads) replaces its experts by random MXFP4 codes
(OUT/mxfp4, quantization_config mxfp4) and writes their BF16 twin (OUT/bf16). Then:

  1. transformers loads OUT/mxfp4 dequantized (Mxfp4Config(dequantize=True)) to the same weights,
     bit for bit, as OUT/bf16: the reference's format and layout are transformers' own;
  2. megatrain imports OUT/mxfp4 and OUT/bf16 (train --steps 0) and exports each (--dtype bf16):
     both exports load in transformers with no missing or unexpected tensor, to OUT/bf16's weights
     bit for bit.

    python3 tests/device/check_gptoss_mxfp4.py [--bin build/megatrain] [--keep DIR]
Exits non-zero on the first failure."""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_families import megatrain, train_args, write_tokens  # noqa: E402

REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "make_gpt_oss_checkpoint.py")


def save_model(path):
    config = transformers.GptOssConfig(
        vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(4)
    model = transformers.GptOssForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if "norm" in name else p.normal_(0.0, 0.02)
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    return config


def weights(path, **kwargs):
    model, info = transformers.GptOssForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                                                 output_loading_info=True, **kwargs)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        sys.exit(f"{path}: transformers loads it with {bad}")
    return {k: v.detach().float().cpu() for k, v in model.state_dict().items()}


def expect_same(got, want, what):
    if got.keys() != want.keys():
        sys.exit(f"{what}: tensors {sorted(got.keys() ^ want.keys())} are not in both")
    differ = [k for k in want if not torch.equal(got[k], want[k])]
    if differ:
        sys.exit(f"{what}: differs in {differ}")
    print(f"{what}: the same {len(want)} tensors, bit for bit", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="build/megatrain")
    parser.add_argument("--keep")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="mt-gptoss-mxfp4-")
    os.makedirs(work, exist_ok=True)
    init = os.path.join(work, "init")
    config = save_model(init)
    subprocess.run([sys.executable, REF, init, work, "7"], check=True)
    twin = weights(os.path.join(work, "bf16"))
    expect_same(weights(os.path.join(work, "mxfp4"), quantization_config=transformers.Mxfp4Config(dequantize=True)),
                twin, "transformers: the MXFP4 checkpoint dequantized against its BF16 twin")
    data = os.path.join(work, "tokens.bin")
    write_tokens(data, torch.randint(3, config.vocab_size, (4096,)).tolist(), config.vocab_size)
    for form in ("mxfp4", "bf16"):
        run, out = os.path.join(work, f"run-{form}"), os.path.join(work, f"export-{form}")
        megatrain(args.bin, *train_args(os.path.join(work, form), data, 0, run))
        megatrain(args.bin, "export", run, out, "--dtype", "bf16")
        expect_same(weights(out), twin, f"megatrain: {form} imported and exported, in transformers")


if __name__ == "__main__":
    main()
