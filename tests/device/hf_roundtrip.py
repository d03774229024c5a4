#!/usr/bin/env python3
"""Hugging Face round trip through the megatrain CLI, for the GPU machine (needs torch,
transformers and safetensors, which CI's Debian image does not have).

For each of LlamaForCausalLM, Qwen2ForCausalLM (tied), MistralForCausalLM and Qwen3ForCausalLM
(untied and tied, with q/k norms and a head_dim of twice hidden / heads):
  1. save a random tiny model with save_pretrained (fp32 and bf16);
  2. import + export without training: every exported tensor and the logits on a fixed batch
     must be bitwise equal to the original;
  3. train 3 steps from it, export as fp32 and bf16, load both with transformers: the logits must
     be finite, the bf16 export must match the fp32 one to bf16 precision, the loss on the
     training batch must be lower than the original model's, and it must equal megatrain's own
     loss on that batch with the same weights (the loss of a 4th step, resumed from the exported
     checkpoint, before its update) to bf16 precision.

The training data is one stream of tokens whose windows (megatrain's --sequential windows of
SEQ tokens, each starting SEQ - 1 tokens after the last) are exactly the rows of the fixed batch,
and which holds one step's worth: every step trains on that batch.

It drives the CLI: megatrain train --init-from DIR --data FILE --steps N --out RUN (N = 0 writes
the imported weights as a checkpoint) and megatrain export RUN/ckpt-NNNNNN OUTDIR --dtype bf16|fp32.

    python3 tests/device/hf_roundtrip.py [--bin build/megatrain] [--keep DIR]
Exits non-zero on the first failure.
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file

SHAPE = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=256, rms_norm_eps=1e-5,
             rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
MODELS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(tie_word_embeddings=False)),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(tie_word_embeddings=True, use_sliding_window=False)),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                dict(tie_word_embeddings=False, sliding_window=None)),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
              dict(tie_word_embeddings=False, head_dim=32, use_sliding_window=False)),
    "qwen3_tied": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
                   dict(tie_word_embeddings=True, head_dim=32, use_sliding_window=False)),
}
SEQ, BATCH = 64, 4


def save_random_model(kind, dtype, path):
    config_cls, model_cls, extra = MODELS[kind]
    torch.manual_seed(0)
    model = model_cls(config_cls(**SHAPE, **extra)).to(dtype)
    model.save_pretrained(path, safe_serialization=True)
    return model


def write_tokens(path, tokens):
    """llm.c's .bin layout: 256 int32 header (magic, version, count), then uint16 tokens."""
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def fixed_stream():
    """BATCH windows of SEQ tokens, each starting SEQ - 1 tokens after the previous one."""
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, SHAPE["vocab_size"], (BATCH * (SEQ - 1) + 1,), generator=g)


def windows(stream):
    return torch.stack([stream[b * (SEQ - 1):b * (SEQ - 1) + SEQ] for b in range(BATCH)])


def megatrain(binary, *args):
    cmd = [binary, *map(str, args)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def latest_checkpoint(run):
    ckpts = sorted(glob.glob(os.path.join(run, "ckpt-*")))
    if not ckpts:
        raise SystemExit(f"FAIL: no checkpoint in {run}")
    return ckpts[-1]


def train(binary, model_dir, data, steps, run, *extra):
    # Windows of SEQ tokens over the stream, in order, all of it for training: the fixed batch.
    megatrain(binary, "train", "--init-from", model_dir, "--data", data, "--steps", steps, "--out", run,
              "--seq", SEQ - 1, "--batch", BATCH, "--sequential", "--val-fraction", 0, "--eval-every", 0,
              "--lr", "1e-3", "--warmup", 0, "--schedule", "constant", *extra)


def train_and_export(binary, model_dir, data, steps, work, dtypes):
    run = os.path.join(work, f"run-{steps}")
    train(binary, model_dir, data, steps, run)
    ckpt = latest_checkpoint(run)
    outs = {}
    for dtype in dtypes:
        outs[dtype] = os.path.join(work, f"export-{steps}-{dtype}")
        megatrain(binary, "export", ckpt, outs[dtype], "--dtype", dtype)
    return outs, run


def megatrain_loss(binary, model_dir, data, run, step):
    """megatrain's loss on the fixed batch with the weights of step - 1: step `step`'s loss, from a
    resume of the run (the loss is taken before the step's update)."""
    train(binary, model_dir, data, step, run, "--resume")
    with open(os.path.join(run, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    losses = [line["loss"] for line in lines if line.get("step") == step and "loss" in line]
    if not losses:
        raise SystemExit(f"FAIL: no loss of step {step} in {run}/metrics.jsonl")
    return losses[-1]


def tensors_of(path):
    tensors = {}
    for file in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        tensors.update(load_file(file))
    return tensors


@torch.no_grad()
def logits_and_loss(model, batch):
    out = model(input_ids=batch, labels=batch)
    return out.logits.float(), out.loss.item()


def load(kind, path):
    return MODELS[kind][1].from_pretrained(path, torch_dtype=torch.float32).eval()


def check(cond, message):
    if not cond:
        raise SystemExit(f"FAIL: {message}")
    print(f"ok: {message}", flush=True)


def check_unchanged(binary, kind, work, data, batch):
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        src = os.path.join(work, f"{kind}-{name}")
        save_random_model(kind, dtype, src)
        out = train_and_export(binary, src, data, 0, os.path.join(work, f"{kind}-{name}-unchanged"), [name])[0][name]
        want, got = tensors_of(src), tensors_of(out)
        check(set(want) == set(got), f"{kind} {name}: export has the original's tensor names")
        for tensor in want:
            check(torch.equal(want[tensor], got[tensor]) and want[tensor].dtype == got[tensor].dtype,
                  f"{kind} {name}: {tensor} bitwise unchanged")
        # Both directories loaded the same way: an in-memory bf16 model would carry a bf16-rounded
        # rotary inv_freq buffer that a fresh load recomputes in fp32.
        ref, _ = logits_and_loss(load(kind, src), batch)
        back, _ = logits_and_loss(load(kind, out), batch)
        check(torch.equal(ref, back), f"{kind} {name}: logits bitwise unchanged")


def check_trained(binary, kind, work, data, batch):
    src = os.path.join(work, f"{kind}-fp32")
    outs, run = train_and_export(binary, src, data, 3, os.path.join(work, f"{kind}-trained"), ["fp32", "bf16"])
    _, loss_before = logits_and_loss(load(kind, src), batch)
    logits32, loss_after = logits_and_loss(load(kind, outs["fp32"]), batch)
    logits16, _ = logits_and_loss(load(kind, outs["bf16"]), batch)
    check(torch.isfinite(logits32).all().item(), f"{kind}: trained export gives finite logits")
    check(loss_after < loss_before, f"{kind}: loss on the training batch fell ({loss_before:.4f} -> {loss_after:.4f})")
    # bf16 weights carry 8 mantissa bits: logits of this tiny model move by about 1e-2 at most.
    err = (logits16 - logits32).abs().max().item()
    check(err < 5e-2, f"{kind}: bf16 export matches fp32 export (max |dlogit| {err:.3g})")
    # megatrain computes with bf16 working weights: its loss may differ from transformers' fp32
    # one by about what the bf16 export moves the logits (above); 1e-2 is a few times that, and
    # far below what a misplaced tensor would do (the trained loss moved by ~0.3).
    ours = megatrain_loss(binary, src, data, run, 4)
    check(abs(ours - loss_after) < 1e-2,
          f"{kind}: transformers' loss on the export equals megatrain's on the same weights "
          f"({loss_after:.5f} against {ours:.5f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="build/megatrain")
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="mt-hf-roundtrip-")
    os.makedirs(work, exist_ok=True)
    stream = fixed_stream()
    batch = windows(stream)
    data = os.path.join(work, "batch.bin")
    write_tokens(data, stream.tolist())  # one step's worth: every step trains on the batch
    for kind in MODELS:
        check_unchanged(args.bin, kind, work, data, batch)
        check_trained(args.bin, kind, work, data, batch)
    print("PASS: hf_roundtrip")


if __name__ == "__main__":
    sys.exit(main())
