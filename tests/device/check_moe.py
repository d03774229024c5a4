#!/usr/bin/env python3
"""The mixtures of experts against transformers, for the GPU machine (torch, transformers 5,
safetensors; megatrain built with CUDA=1 and the CUDA backend's moe ops).

For each family, a small model with real-shaped routing (Qwen3-MoE: 64 experts, top 8
renormalised, a dense block among sparse ones; Qwen2-MoE: 60 experts, top 4, a shared expert;
Mixtral: 8 experts, top 2; OLMoE: 64 experts, top 8, q/k norms over the projections), random
weights saved with save_pretrained:

  1. import and export without training (megatrain train --steps 0, export --dtype fp32): the
     export loads in transformers with no missing or unexpected tensor and gives the original's
     logits bit for bit (transformers reads the experts we write one at a time into its fused
     layout);
  2. 8 AdamW steps with clipping (lr 1e-3 constant, betas 0.9/0.95, weight decay 0.1 on the
     matrices, the experts' stacked ones included, --clip 1) from the same weights on the same
     batches, without and with the load-balancing loss (output_router_logits, coefficient 0.05):
     megatrain on the GPU (bf16) against transformers in fp32 and in bf16 autocast. The noise is
     bf16 autocast against fp32, step by step; megatrain's objective (its cross-entropy plus the
     coefficient times its aux loss) must stay within 3 x that noise (+ 1e-3 x the loss) of fp32's
     at every step, and so must its aux loss alone. transformers' objective here is its logits'
     cross-entropy plus the coefficient times load_balancing_loss_func (its definition, written out
     below) over every sparse layer's router logits, recomputed from each router's input;
     transformers' own outputs.aux_loss is printed beside it;
  3. the trained model exported (fp32) loads in transformers, whose cross-entropy on the next batch
     equals megatrain's own on the same weights (the 9th step's loss, resumed from the 8th step's
     checkpoint) within 2e-2 (megatrain computes in bf16).

    python3 tests/device/check_moe.py [--bin build/megatrain] [--keep DIR]
Exits non-zero on the first failure; writes $OUT/check_moe.json when OUT is set.
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
import torch.nn.functional as F
import transformers

STEPS, SEQ, BATCH, LR, WD, CLIP, AUX_COEF = 8, 128, 4, 1e-3, 0.1, 1.0, 0.05
COMMON = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
              max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
              bos_token_id=1, eos_token_id=2, router_aux_loss_coef=AUX_COEF)
FAMILIES = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(head_dim=64, intermediate_size=512, moe_intermediate_size=128, num_experts=64,
                       num_experts_per_tok=8, norm_topk_prob=True, mlp_only_layers=[1], use_sliding_window=False)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(intermediate_size=512, moe_intermediate_size=128, shared_expert_intermediate_size=512,
                       num_experts=60, num_experts_per_tok=4, norm_topk_prob=False, use_sliding_window=False)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(intermediate_size=512, num_local_experts=8, num_experts_per_tok=2, sliding_window=None)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM",
              dict(intermediate_size=128, num_experts=64, num_experts_per_tok=8, norm_topk_prob=False)),
}
results = {}


def check(cond, message):
    if not cond:
        raise SystemExit(f"FAIL: {message}")
    print(f"ok: {message}", flush=True)


def megatrain(binary, *args):
    cmd = [binary, *map(str, args)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def config_of(family, aux):
    config_name, _, extra = FAMILIES[family]
    return getattr(transformers, config_name)(**COMMON, **extra, output_router_logits=aux)


def experts_of(config):
    return getattr(config, "num_experts", None) or config.num_local_experts


def save_random_model(family, aux, path):
    """Every matrix drawn N(0, 0.02) (the routers too, whatever a transformers version's init gives
    them: a router of zeros would tie every expert), norms at 1."""
    torch.manual_seed(0)
    model = getattr(transformers, FAMILIES[family][1])(config_of(family, aux)).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    model.save_pretrained(path, safe_serialization=True)


def write_tokens(path, tokens):
    """llm.c's .bin layout: 256 int32 header (magic, version, count), then uint16 tokens."""
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def stream():
    """Windows of SEQ + 1 tokens, each starting SEQ after the last (megatrain's --sequential): step s
    trains on windows s x BATCH .. s x BATCH + BATCH - 1; one step more for the export's check."""
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, COMMON["vocab_size"], ((STEPS + 1) * BATCH * SEQ + 1,), generator=g)


def batch_of(tokens, step):
    first = step * BATCH
    return torch.stack([tokens[(first + b) * SEQ:(first + b) * SEQ + SEQ + 1] for b in range(BATCH)])


def load_balancing_loss(router_logits, num_experts, top_k):
    """transformers' load_balancing_loss_func without an attention mask: every layer's logits of one
    forward together, their softmax, the top k one-hot, each expert's share of the rows times its mean
    probability, summed, times the number of experts."""
    logits = torch.cat(router_logits, dim=0)
    routing_weights = torch.softmax(logits.float(), dim=-1)
    _, selected = torch.topk(routing_weights, top_k, dim=-1)
    tokens_per_expert = F.one_hot(selected, num_experts).float().mean(dim=0)
    router_prob_per_expert = routing_weights.mean(dim=0)
    return (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * num_experts


def routers(model, num_experts):
    """Each sparse block's router: the module named `gate` under its feed-forward (mlp, or Mixtral's
    block_sparse_moe before transformers 5) holding an [E, hidden] weight."""
    found = []
    for layer in model.model.layers:
        moe = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
        gate = getattr(moe, "gate", None)
        if gate is not None and getattr(gate, "weight", None) is not None and gate.weight.shape[0] == num_experts:
            found.append(gate)
    return found


def hf_train(init, family, aux, tokens, bf16):
    config = config_of(family, aux)
    E, k = experts_of(config), config.num_experts_per_tok
    model = transformers.AutoModelForCausalLM.from_pretrained(init, torch_dtype=torch.float32).cuda().train()
    captured = []

    def keep_logits(module, args):
        hidden = args[0]
        captured.append(F.linear(hidden.reshape(-1, hidden.shape[-1]), module.weight))

    hooks = [gate.register_forward_pre_hook(keep_logits) for gate in routers(model, E)]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    ces, auxes, theirs = [], [], []
    for step in range(STEPS):
        batch = batch_of(tokens, step).cuda()
        captured.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=batch[:, :-1], output_router_logits=True)
        ce = F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]), batch[:, 1:].reshape(-1))
        lb = load_balancing_loss(captured, E, k)
        loss = ce + AUX_COEF * lb if aux else ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        ces.append(ce.item())
        auxes.append(lb.item())
        theirs.append(out.aux_loss.item() if getattr(out, "aux_loss", None) is not None else float("nan"))
    for hook in hooks:
        hook.remove()
    return ces, auxes, theirs


def metrics(run, key):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    by_step = {line["step"]: line[key] for line in lines if key in line and "step" in line}
    return [by_step[s] for s in sorted(by_step)]


def train_args(init, data, steps, run, *extra):
    return ("train", "--init-from", init, "--data", data, "--steps", steps, "--out", run, "--seq", SEQ, "--batch",
            BATCH, "--sequential", "--val-fraction", 0, "--eval-every", 0, "--lr", LR, "--warmup", 0, "--schedule",
            "constant", "--clip", CLIP, "--weight-decay", WD, "--beta1", 0.9, "--beta2", 0.95, "--eps", 1e-8,
            "--backend", "cuda", "--ckpt-every", STEPS, *extra)


def load(path):
    model, info = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                                    output_loading_info=True)
    return model.cuda().eval(), info


@torch.no_grad()
def logits_of(model, batch):
    return model(input_ids=batch.cuda()).logits.float()


def check_unchanged(binary, family, work, data, tokens):
    init = os.path.join(work, f"{family}-init")
    save_random_model(family, False, init)
    run, out = os.path.join(work, f"{family}-imported"), os.path.join(work, f"{family}-export0")
    megatrain(binary, *train_args(init, data, 0, run))
    megatrain(binary, "export", sorted(glob.glob(os.path.join(run, "ckpt-*")))[-1], out, "--dtype", "fp32")
    model, info = load(out)
    check(not info["missing_keys"] and not info["unexpected_keys"],
          f"{family}: the export loads with no missing or unexpected tensor ({sorted(info['missing_keys'])[:3]}, "
          f"{sorted(info['unexpected_keys'])[:3]})")
    original, _ = load(init)
    batch = batch_of(tokens, 0)[:, :-1]
    check(torch.equal(logits_of(original, batch), logits_of(model, batch)),
          f"{family}: the export's logits are the original's, bit for bit")


def check_trajectory(binary, family, aux, work, data, tokens):
    tag = f"{family}{'-aux' if aux else ''}"
    init = os.path.join(work, f"{tag}-init")
    save_random_model(family, aux, init)
    run = os.path.join(work, f"{tag}-run")
    megatrain(binary, *train_args(init, data, STEPS, run))
    ce, lb = metrics(run, "loss"), metrics(run, "aux_loss")
    fp32_ce, fp32_lb, theirs = hf_train(init, family, aux, tokens, bf16=False)
    bf16_ce, bf16_lb, _ = hf_train(init, family, aux, tokens, bf16=True)
    coef = AUX_COEF if aux else 0.0
    obj = [c + coef * a for c, a in zip(ce, lb)]
    fp32 = [c + coef * a for c, a in zip(fp32_ce, fp32_lb)]
    bf16 = [c + coef * a for c, a in zip(bf16_ce, bf16_lb)]
    print(f"{tag}: step, megatrain objective (ce, aux), transformers fp32 (ce, aux, its own aux_loss), bf16 autocast")
    for s in range(STEPS):
        print(f"  {s + 1}  {obj[s]:.5f} ({ce[s]:.5f}, {lb[s]:.5f})  {fp32[s]:.5f} ({fp32_ce[s]:.5f}, "
              f"{fp32_lb[s]:.5f}, {theirs[s]:.5f})  {bf16[s]:.5f}")
    noise = max(abs(b - f) for b, f in zip(bf16, fp32))
    ours = max(abs(o - f) for o, f in zip(obj, fp32))
    bound = 3 * noise + 1e-3 * fp32[0]
    aux_noise = max(abs(b - f) for b, f in zip(bf16_lb, fp32_lb))
    aux_ours = max(abs(o - f) for o, f in zip(lb, fp32_lb))
    aux_bound = 3 * aux_noise + 1e-3 * fp32_lb[0]
    results[tag] = dict(megatrain=obj, megatrain_aux=lb, fp32=fp32, fp32_aux=fp32_lb, bf16=bf16, noise=noise,
                        diff=ours, bound=bound, aux_noise=aux_noise, aux_diff=aux_ours, aux_bound=aux_bound,
                        transformers_aux_loss=theirs)
    check(ours <= bound, f"{tag}: objective within bf16 noise of fp32 (max |diff| {ours:.2e}, noise {noise:.2e}, "
          f"bound {bound:.2e})")
    check(aux_ours <= aux_bound, f"{tag}: aux loss within bf16 noise of fp32 (max |diff| {aux_ours:.2e}, noise "
          f"{aux_noise:.2e}, bound {aux_bound:.2e})")
    return init, run


def check_trained_export(binary, family, init, run, work, data, tokens):
    out = os.path.join(work, f"{family}-export-trained")
    megatrain(binary, "export", sorted(glob.glob(os.path.join(run, "ckpt-*")))[-1], out, "--dtype", "fp32")
    model, info = load(out)
    check(not info["missing_keys"] and not info["unexpected_keys"], f"{family}: the trained export loads whole")
    batch = batch_of(tokens, STEPS).cuda()
    logits = logits_of(model, batch[:, :-1])
    theirs = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item()
    megatrain(binary, *train_args(init, data, STEPS + 1, run, "--resume"))
    ours = metrics(run, "loss")[STEPS]
    check(abs(ours - theirs) < 2e-2, f"{family}: transformers' loss on the trained export {theirs:.5f} equals "
          f"megatrain's on the same weights {ours:.5f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="build/megatrain")
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="mt-check-moe-")
    os.makedirs(work, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    tokens = stream()
    data = os.path.join(work, "tokens.bin")
    write_tokens(data, tokens.tolist())
    try:
        for family in FAMILIES:
            check_unchanged(args.bin, family, work, data, tokens)
            check_trajectory(args.bin, family, False, work, data, tokens)
            init, run = check_trajectory(args.bin, family, True, work, data, tokens)
            check_trained_export(args.bin, family, init, run, work, data, tokens)
    finally:
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], "check_moe.json"), "w") as f:
                json.dump(results, f, indent=1)
    print("PASS: check_moe")


if __name__ == "__main__":
    sys.exit(main())
