#!/usr/bin/env python3
"""gpt-oss against transformers' GptOssForCausalLM, for the GPU machine (torch, transformers 5,
safetensors; megatrain built with CUDA=1).

A small model at gpt-oss's inner shapes (head_dim 64, 8 query heads over 2 key/value heads, q 512
wide over a hidden size of 384; every projection with a bias, a sink logit a head; a window of 128
on the even layers in 512-token sequences; YaRN as GptOssConfig defaults it; 8 experts, top 4, with
the router's and the experts' biases, gate and up interleaved on the hub), random weights saved
with save_pretrained: every tensor N(0, 0.02), the biases and sinks included, the norms at 1, and
the experts' gate_up N(0, 0.4) so that the clamped SwiGLU's clamps (at 7) bind:

  1. llama_ref.py (the CI's reference, which the cpu backend's gradients are checked against) gives
     transformers' float64 loss on a 2-layer cut, the hub's tensors turned into megatrain's layout
     here (gate and up apart, each expert's matrices [out, in]), within 1e-9 relative;
  2. import and export without training (train --steps 0, export --dtype fp32): the export loads in
     transformers with no missing or unexpected tensor and gives the original's logits bit for bit;
  3. 8 AdamW steps with clipping (lr 1e-3 constant, betas 0.9/0.95, weight decay 0.1 on matrices,
     --clip 1) with the load-balancing loss (output_router_logits, coefficient 0.05): megatrain on
     the GPU (bf16) against transformers in fp32 and in bf16 autocast. megatrain's objective (its
     cross-entropy plus the coefficient times its aux loss) must stay within 3 x the bf16 autocast's
     distance from fp32 (+ 1e-3 x the first loss) at every step, and each tensor's update (its
     weights after the 8 steps less before: the sinks and every bias included) must point where
     fp32's does. With top 4 of 8 experts the cosines are printed and recorded, not held to a bound:
     a choice that flips between fp32 and bf16 parts the trajectories, and no bf16 run stays near
     fp32 there (transformers' own bf16 autocast: 0.49-0.69 on an H100, 2026-12-07; on the cpu a
     2^-8 perturbation of the masters moved this family's gradients 7.6%), and one such draw is no
     floor for another (megatrain's bf16 weights and activations round more than autocast's fp32
     ones). So the bound is held with every expert chosen (top 8 of 8: no choice to flip) and gate
     and up drawn N(0, 0.08), where the clamps seldom bind (their gradient is checked by step 1,
     the CI's reference and the GPU engine's test against the cpu backend): every tensor, the
     sinks and each bias among them, must reach cosine >= 0.99;
  4. the trained model exported (fp32) loads in transformers, whose cross-entropy on the next batch
     equals megatrain's own on the same weights within 2e-2.

    python3 tests/device/check_gptoss.py [--bin build/megatrain] [--keep DIR]
Runs every part whatever the one before gave; exits non-zero naming those that failed; writes
$OUT/check_gptoss.json when OUT is set.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback

import numpy
import torch
import torch.nn.functional as F
import transformers

# The families' check's steps, shapes, optimizer and helpers (its train_args, the token stream).
from check_families import (CLIP, COSINE, LR, STEPS, WD, batch_of, check, export, load, logits_of, megatrain,
                            metrics, stream, train_args, weights_of, write_tokens)
from check_moe import load_balancing_loss  # transformers' load_balancing_loss_func, written out

AUX_COEF = 0.05
LAYERS = 4
CONFIG = dict(vocab_size=2048, hidden_size=384, intermediate_size=256, num_hidden_layers=LAYERS,
              num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
              rms_norm_eps=1e-5, sliding_window=128, num_local_experts=8, num_experts_per_tok=4,
              router_aux_loss_coef=AUX_COEF, output_router_logits=True, attention_bias=True,
              tie_word_embeddings=False, eos_token_id=2, pad_token_id=0,
              layer_types=["sliding_attention", "full_attention"] * (LAYERS // 2))
results = {}


def config_of(**changes):
    config = transformers.GptOssConfig(**dict(CONFIG, **changes))
    config._attn_implementation = "eager"  # the sinks: eager attention is transformers' own
    config._experts_implementation = "eager"  # the experts' loop: float64 on the CPU too
    return config


def draw(model, gate_up_std=0.4):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            elif name.endswith("experts.gate_up_proj"):
                p.normal_(0.0, gate_up_std)
            else:
                p.normal_(0.0, 0.02)


def save_random_model(path, gate_up_std=0.4, **changes):
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(config_of(**changes)).float()
    draw(model, gate_up_std)
    model.save_pretrained(path, safe_serialization=True)
    return model.config


def hf_train(init, tokens, bf16):
    model = transformers.AutoModelForCausalLM.from_pretrained(init, torch_dtype=torch.float32,
                                                              attn_implementation="eager").cuda().train()
    captured = []

    def keep_logits(module, args):
        hidden = args[0]
        captured.append(F.linear(hidden.reshape(-1, hidden.shape[-1]), module.weight, module.bias))

    hooks = [layer.mlp.router.register_forward_pre_hook(keep_logits) for layer in model.model.layers]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    objective, auxes = [], []
    for step in range(STEPS):
        batch = batch_of(tokens, step).cuda()
        captured.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=batch[:, :-1])
        ce = F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]), batch[:, 1:].reshape(-1))
        lb = load_balancing_loss(captured, model.config.num_local_experts, model.config.num_experts_per_tok)
        loss = ce + AUX_COEF * lb
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        objective.append(loss.item())
        auxes.append(lb.item())
    for hook in hooks:
        hook.remove()
    return objective, auxes, {n: p.detach().float().cpu() for n, p in model.named_parameters()}


REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "llama_ref.py")


def rope_of(config):
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    theta = rope.get("rope_theta", getattr(config, "rope_theta", 150000.0))
    return theta, rope


def fixture_config(config, seq, batch):
    """llama_ref.py's config.txt for a GptOssConfig."""
    theta, rope = rope_of(config)
    check(rope.get("rope_type") == "yarn", "the config's RoPE is yarn")
    window = config.sliding_window
    lines = dict(hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
                 num_layers=config.num_hidden_layers, num_heads=config.num_attention_heads,
                 num_kv_heads=config.num_key_value_heads, head_dim=config.head_dim, vocab_size=config.vocab_size,
                 tie_embeddings=int(config.tie_word_embeddings), attention_bias=1, qk_norm=0,
                 rope_original_max_position=rope["original_max_position_embeddings"], steps=1, seq_len=seq,
                 batch=batch, num_experts=config.num_local_experts, experts_per_token=config.num_experts_per_tok,
                 moe_intermediate_size=config.intermediate_size, norm_topk_prob=1, shared_expert_intermediate_size=0,
                 decoder_sparse_step=1, output_router_logits=0, micro_batches=1, rms_norm_eps=config.rms_norm_eps,
                 rope_theta=theta, rope_scaling_factor=rope["factor"], rope_low_freq_factor=0,
                 rope_high_freq_factor=0, router_aux_loss_coef=0, mlp_only_layers="-",
                 layer_windows=",".join(str(window if t == "sliding_attention" else 0) for t in config.layer_types),
                 rope_yarn=1, rope_beta_fast=rope.get("beta_fast", 32.0), rope_beta_slow=rope.get("beta_slow", 1.0),
                 rope_truncate=int(rope.get("truncate", True)), rope_attention_factor=rope.get("attention_factor") or 0,
                 o_bias=1, attn_sinks=1, router_bias=1, expert_bias=1, glu_act=2,
                 swiglu_limit=getattr(config, "swiglu_limit", 7.0), swiglu_alpha=getattr(config, "swiglu_alpha", 1.702))
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def megatrain_layout(name, p):
    """The hub's tensor as megatrain's layout holds it: the experts' gate_up [E, D, 2F] (gate the
    even columns) as [E x 2F, D], each expert's F gate rows then its F up rows, and its bias alike;
    down [E, F, D] as [E x D, F], its bias [E, D] as [E x D]; every other tensor as it is."""
    d, f = CONFIG["hidden_size"], CONFIG["intermediate_size"]
    if name.endswith("experts.gate_up_proj"):
        check(tuple(p.shape[1:]) == (d, 2 * f), f"{name} is [E, {d}, {2 * f}] (found {list(p.shape)})")
        return torch.cat((p[:, :, 0::2], p[:, :, 1::2]), dim=2).transpose(1, 2).reshape(-1, d)
    if name.endswith("experts.gate_up_proj_bias"):
        return torch.cat((p[:, 0::2], p[:, 1::2]), dim=1).reshape(-1)
    if name.endswith("experts.down_proj"):
        check(tuple(p.shape[1:]) == (f, d), f"{name} is [E, {f}, {d}] (found {list(p.shape)})")
        return p.transpose(1, 2).reshape(-1, f)
    if name.endswith("experts.down_proj_bias"):
        return p.reshape(-1)
    return p


def check_reference(work):
    """llama_ref.py against transformers in float64 on a 2-layer cut."""
    config = config_of(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                       output_router_logits=False)
    torch.manual_seed(2)
    model = transformers.GptOssForCausalLM(config).double()
    draw(model)
    with torch.no_grad():  # the float32-rounded weights the fixture holds
        for p in model.parameters():
            p.copy_(p.float().double())
    seq, batch = 160, 2
    tokens = torch.randint(0, config.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(3))
    out = model(input_ids=tokens[:, :-1])
    theirs = F.cross_entropy(out.logits.reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1)).item()
    d = os.path.join(work, "gptoss-ref")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.txt"), "w") as f:
        f.write(fixture_config(config, seq, batch))
    params = [(n, megatrain_layout(n, p.detach())) for n, p in model.named_parameters()]
    with open(os.path.join(d, "tensors.txt"), "w") as f:
        for n, p in params:
            f.write(f"{n} {p.shape[0]} {p.shape[1] if p.dim() == 2 else 1}\n")
    numpy.concatenate([p.float().numpy().reshape(-1) for _, p in params]).astype("<f4").tofile(
        os.path.join(d, "weights.bin"))
    tokens.numpy().astype("<i4").tofile(os.path.join(d, "tokens.bin"))
    subprocess.run(["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, REF, "grads", d],
                   check=True)
    ours = float(open(os.path.join(d, "ref_loss.txt")).read())
    check(abs(ours - theirs) <= 1e-9 * abs(theirs), f"gpt-oss: llama_ref.py's loss {ours:.12f} is transformers' "
          f"float64 loss {theirs:.12f}")


def check_unchanged(binary, init, data, tokens, work):
    run, out = os.path.join(work, "imported"), os.path.join(work, "export0")
    megatrain(binary, *train_args(init, data, 0, run))
    export(binary, run, out)
    model, info = load(out)
    check(not info["missing_keys"] and not info["unexpected_keys"],
          f"gpt-oss: the export loads with no missing or unexpected tensor ({sorted(info['missing_keys'])[:3]}, "
          f"{sorted(info['unexpected_keys'])[:3]})")
    original, _ = load(init)
    batch = batch_of(tokens, 0)[:, :-1]
    check(torch.equal(logits_of(original, batch), logits_of(model, batch)),
          "gpt-oss: the export's logits are the original's, bit for bit")


def check_training(binary, init, data, tokens, work, name, strict):
    """8 steps against transformers; strict: every update cosine >= COSINE, else the cosines recorded
    beside transformers' bf16 autocast's (a top-k choice that flips between fp32 and bf16 sends a
    token to other experts: the trajectories part, for transformers' bf16 run as for megatrain's)."""
    run = os.path.join(work, f"{name}-run")
    megatrain(binary, *train_args(init, data, STEPS, run))
    ce, lb = metrics(run, "loss"), metrics(run, "aux_loss")
    ours = [c + AUX_COEF * a for c, a in zip(ce, lb)]
    fp32, fp32_lb, fp32_weights = hf_train(init, tokens, bf16=False)
    bf16, bf16_lb, bf16_weights = hf_train(init, tokens, bf16=True)
    print(f"gpt-oss {name}: step, megatrain objective (ce, aux), transformers fp32 (aux), bf16 autocast (aux)")
    for s in range(STEPS):
        print(f"  {s + 1}  {ours[s]:.5f} ({ce[s]:.5f}, {lb[s]:.5f})  {fp32[s]:.5f} ({fp32_lb[s]:.5f})  "
              f"{bf16[s]:.5f} ({bf16_lb[s]:.5f})")
    noise = max(abs(b - f) for b, f in zip(bf16, fp32))
    diff = max(abs(o - f) for o, f in zip(ours, fp32))
    bound = 3 * noise + 1e-3 * fp32[0]
    check(diff <= bound, f"gpt-oss {name}: objective within bf16 noise of fp32 (max |diff| {diff:.2e}, noise {noise:.2e}, "
          f"bound {bound:.2e})")
    out = os.path.join(work, f"{name}-export-trained")
    export(binary, run, out)
    before, after = weights_of(init), weights_of(out)
    cosines, floors = {}, {}  # floors: transformers' bf16 autocast's, for the reader
    for tensor, theirs in fp32_weights.items():
        check(tensor in after, f"gpt-oss: the export holds {tensor}")
        d_theirs = (theirs - before[tensor]).flatten()
        cosines[tensor] = F.cosine_similarity((after[tensor] - before[tensor]).flatten(), d_theirs, dim=0).item()
        floors[tensor] = F.cosine_similarity((bf16_weights[tensor] - before[tensor]).flatten(), d_theirs, dim=0).item()
    worst = min(cosines, key=cosines.get)
    for kind in ("sinks", "o_proj.bias", "router.bias", "gate_up_proj_bias", "down_proj_bias"):
        names = [n for n in cosines if n.endswith(kind)]
        check(names, f"gpt-oss: the updates compared include {kind}")
        low = min(names, key=cosines.get)
        print(f"  lowest {kind}: {low} {cosines[low]:.4f} (bf16 autocast's {floors[low]:.4f})")
    for tensor in sorted(cosines, key=cosines.get)[:12]:
        print(f"  update cosine {cosines[tensor]:.4f} (bf16 autocast's {floors[tensor]:.4f}) {tensor}")
    print(f"gpt-oss {name}: update cosines, lowest {worst} {cosines[worst]:.4f}")
    short = sorted(n for n, c in cosines.items() if c < COSINE)
    results[f"training-{name}"] = dict(megatrain=ours, megatrain_ce=ce, megatrain_aux=lb, fp32=fp32, fp32_aux=fp32_lb,
                                       bf16=bf16, noise=noise, diff=diff, bound=bound, cosines=cosines,
                                       bf16_cosines=floors, short=short)
    if strict:
        check(not short, f"gpt-oss {name}: every tensor's update cosine >= {COSINE} (lowest {worst} "
              f"{cosines[worst]:.4f}; short: {short})")


def check_trained_export(binary, init, data, tokens, run, out):
    model, info = load(out)
    check(not info["missing_keys"] and not info["unexpected_keys"], "gpt-oss: the trained export loads whole")
    batch = batch_of(tokens, STEPS).cuda()
    logits = logits_of(model, batch[:, :-1])
    theirs = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item()
    megatrain(binary, *train_args(init, data, STEPS + 1, run, "--resume"))
    mine = metrics(run, "loss")[STEPS]
    check(abs(mine - theirs) < 2e-2, f"gpt-oss: transformers' loss on the trained export {theirs:.5f} equals "
          f"megatrain's on the same weights {mine:.5f}")
    results["next_loss"] = [mine, theirs]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="build/megatrain")
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="mt-check-gptoss-")
    os.makedirs(work, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failed = []

    def part(name, fn):
        """fn() whatever the part before gave; a failure is named at the end."""
        try:
            return fn()
        except SystemExit as e:
            print(e, flush=True)
        except Exception:  # a harness's or transformers' error: this part fails, the next still runs
            traceback.print_exc()
        failed.append(name)
        return None

    try:
        part("reference", lambda: check_reference(work))
        init = os.path.join(work, "init")
        config = save_random_model(init)
        tokens = stream(config.vocab_size)
        data = os.path.join(work, "tokens.bin")
        write_tokens(data, tokens.tolist(), config.vocab_size)
        part("unchanged", lambda: check_unchanged(args.bin, init, data, tokens, work))
        part("routed", lambda: check_training(args.bin, init, data, tokens, work, "routed", strict=False))
        run, out = os.path.join(work, "routed-run"), os.path.join(work, "routed-export-trained")
        if os.path.isdir(out):  # the run trained and exported, whatever its cosines gave
            part("trained export", lambda: check_trained_export(args.bin, init, data, tokens, run, out))
        # Every expert chosen (top 8 of 8): no choice to flip; gate and up N(0, 0.08) (about N(0, 1.6)
        # at this width), where the clamps at 7 seldom bind: every tensor, the sinks and each bias
        # among them, must reach COSINE. (Where the clamps bind often, as in the routed model, the
        # activations reach ~50 and bf16's noise grows with them: a CPU simulation of this shape in
        # bf16 gave 0.89 at N(0, 0.4), 0.98 at N(0, 0.2), >= 0.995 at N(0, 0.1) over a width of 256.)
        every = os.path.join(work, "every-expert-init")
        save_random_model(every, gate_up_std=0.08, num_experts_per_tok=CONFIG["num_local_experts"])
        part("every expert", lambda: check_training(args.bin, every, data, tokens, work, "every_expert", strict=True))
    finally:
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], "check_gptoss.json"), "w") as f:
                json.dump(results, f, indent=1)
    if failed:
        raise SystemExit(f"FAIL: check_gptoss: {', '.join(failed)}")
    print("PASS: check_gptoss")


if __name__ == "__main__":
    sys.exit(main())
