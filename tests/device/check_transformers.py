#!/usr/bin/env python3
"""Compares megatrain's cuda-backend loss and gradients with transformers on the same weights.

tests/cuda/test_cuda_engine.c (run with MT_TRANSFORMERS_DIR=DIR) leaves, per model, DIR/NAME/
model (a Hugging Face directory megatrain exported, fp32), grads (megatrain's gradients in the
same layout and names), tokens.bin (int32 [sequences][seq + 1]) and case.json (our loss, the
shape). Here transformers
loads the model in fp32, computes the mean next-token cross-entropy on the tokens and its
gradients, and each is compared: megatrain runs bf16 weights and activations with fp32
accumulation, so the loss must agree within 1% and each tensor's gradient within 5% relative
(||ours - theirs|| / ||theirs||), the same bounds the cuda-vs-cpu test states. Every family
megatrain imports must be among the cases (ARCHITECTURES): Qwen3's per-head q/k norms and its
head_dim that is not hidden / heads are checked against Qwen3ForCausalLM itself.

usage: check_transformers.py DIR   (exit status 1 when any model is out of bounds)
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

LOSS_TOL, GRAD_TOL = 1e-2, 5e-2
ARCHITECTURES = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}


def check(case_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(case_dir, "model"), torch_dtype=torch.float32, attn_implementation="eager")
    architecture = type(model).__name__
    grads = load_file(os.path.join(case_dir, "grads", "model.safetensors"))
    case = json.load(open(os.path.join(case_dir, "case.json")))
    ours_loss = case["loss"]
    tokens = np.fromfile(os.path.join(case_dir, "tokens.bin"), dtype=np.int32)
    tokens = torch.from_numpy(tokens.reshape(case["sequences"], case["seq"] + 1).astype(np.int64))
    out = model(input_ids=tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(
        out.logits.reshape(-1, out.logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    ok = abs(ours_loss - loss.item()) <= LOSS_TOL * loss.item()
    print(f"{os.path.basename(case_dir)} ({architecture}): loss megatrain {ours_loss:.6f} "
          f"transformers {loss.item():.6f}")
    worst, worst_name = 0.0, ""
    for name, p in model.named_parameters():
        if name not in grads:
            print(f"  missing gradient for {name}")
            ok = False
            continue
        theirs = p.grad.detach()
        err = (grads[name] - theirs).norm().item() / max(theirs.norm().item(), 1e-30)
        if err > worst:
            worst, worst_name = err, name
    print(f"  worst gradient {worst_name}: {worst:.3g} relative (bound {GRAD_TOL})")
    return architecture, ok and worst <= GRAD_TOL


def main():
    root = sys.argv[1]
    cases = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not cases:
        print(f"{root}: no cases (run the cuda tests with MT_TRANSFORMERS_DIR={root})")
        return 1
    checked = [check(os.path.join(root, c)) for c in cases]
    results = [ok for _, ok in checked]
    missing = ARCHITECTURES - {architecture for architecture, _ in checked}
    if missing:
        print(f"{root}: no case of {', '.join(sorted(missing))}")
    print(f"transformers: {sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
