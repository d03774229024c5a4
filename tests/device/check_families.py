#!/usr/bin/env python3
"""The families with sliding windows, soft-caps and Gemma's block against transformers, for the GPU
machine (torch, transformers 5, safetensors; megatrain built with CUDA=1).

For each family a small model at realistic inner shapes (head_dim 256 and grouped-query attention for
Gemma; a window shorter than the sequence everywhere; Gemma's real vocabulary sizes), random weights
saved with save_pretrained:

  1. import and export without training (train --steps 0, export --dtype fp32): the export loads in
     transformers with no missing or unexpected tensor and gives the original's logits bit for bit;
  2. 8 AdamW steps with clipping (lr 1e-3 constant, betas 0.9/0.95, weight decay 0.1 on matrices,
     --clip 1) from the same weights on the same batches: megatrain on the GPU (bf16) against
     transformers in fp32 and in bf16 autocast. megatrain's loss must stay within 3 x the bf16
     autocast's distance from fp32 (+ 1e-3 x the first loss) at every step, and each tensor's update
     (its weights after the 8 steps less before) must point where fp32's does: cosine >= 0.99, or
     at least as close as transformers' own bf16 autocast runs come (eager attention; where that is
     closer, sdpa on each of torch's fused backends and, for the Gated DeltaNet with FLA_SRC set,
     flash-linear-attention's kernels): their lowest, less the spread of the sdpa backends' (draws of
     one noise). That is the bf16 noise floor of a tensor whose gradient is mostly cancellation: a key
     bias under RoPE without sinks, whose flash-style backward rounds delta = dout . out from the
     bf16 output (measured on an H100, qwen2_window's windowed k_proj.bias: 0.88-0.89 with sdpa,
     0.99 with eager; bench/attention/delta_precision.py isolates the cause on the CPU);
  3. the trained model exported (fp32) loads in transformers, whose loss on the next batch equals
     megatrain's own on the same weights within 2e-2;
  4. the CI's own reference (tests/reference/llama_ref.py, which the cpu backend's gradients are
     checked against) gives transformers' float64 loss on a cut of the same model (2 layers, a
     smaller vocabulary), within 1e-9 relative: the reference is the definition it claims to be.

And Gemma3ForConditionalGeneration (gemma3_conditional): gemma3's text model beside a small SigLIP
vision tower, saved as transformers 5 names it and as the hub does (language_model.model.*,
vision_tower.*): its export, untrained and trained, loads whole as Gemma3ForConditionalGeneration,
the vision tower and projector bit for bit the original's; untrained, its text logits are the
original's bit for bit; trained, transformers' loss on the next batch equals megatrain's.

    python3 tests/device/check_families.py [--bin build/megatrain] [--only NAME,...] [--keep DIR]
Checks every family whatever the one before gave; exits non-zero naming those that failed; writes
$OUT/check_families.json when OUT is set.
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import traceback

import numpy
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file

STEPS, SEQ, BATCH, LR, WD, CLIP, COSINE = 8, 512, 2, 1e-3, 0.1, 1.0, 0.99
GEMMA3_TYPES = ["sliding_attention"] * 5 + ["full_attention"]
FAMILIES = {
    # Gemma 3 1B's inner shapes (head_dim 256, 4 heads over 1 key/value head... here 4 over 2), its
    # vocabulary, five local layers to one global, a window of 128 in a 512-token sequence.
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=6,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=256, max_position_embeddings=2048,
                    rms_norm_eps=1e-6, query_pre_attn_scalar=256, sliding_window=128, layer_types=GEMMA3_TYPES,
                    rope_theta=1000000.0, rope_local_base_freq=10000.0, tie_word_embeddings=True,
                    hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0)),
    # Gemma 2: attention-logit and final-logit soft-caps, local and global layers in turn.
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(vocab_size=256000, hidden_size=512, intermediate_size=2048, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=256, max_position_embeddings=2048,
                    rms_norm_eps=1e-6, query_pre_attn_scalar=144, sliding_window=128,
                    layer_types=["sliding_attention", "full_attention"] * 2, attn_logit_softcapping=50.0,
                    final_logit_softcapping=30.0, rope_theta=10000.0, tie_word_embeddings=True,
                    hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0)),
    # Mistral v0.1's sliding window, and Qwen2's from max_window_layers on.
    "mistral_window": ("MistralConfig", "MistralForCausalLM",
                       dict(vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                            sliding_window=100, rope_theta=10000.0, tie_word_embeddings=False)),
    "qwen2_window": ("Qwen2Config", "Qwen2ForCausalLM",
                     dict(vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                          use_sliding_window=True, sliding_window=100, max_window_layers=2,
                          rope_theta=10000.0, tie_word_embeddings=False)),
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


def config_of(family):
    name, _, kwargs = FAMILIES[family]
    return getattr(transformers, name)(**kwargs)


def norm_start(family, name):
    """Where a norm's weight starts: 0 for the (1 + w) norms (Gemma's; Qwen3.5's and Qwen3-Next's but
    their Gated DeltaNet's gated norm, a plain w), else 1."""
    zero_centered = family.startswith(("gemma", "qwen3_5", "qwen3_next"))
    return 0.0 if zero_centered and "linear_attn.norm" not in name else 1.0


def save_random_model(family, path):
    """Every matrix N(0, 0.02); norms as each family starts them (norm_start), then small noise so
    that the offset matters."""
    torch.manual_seed(0)
    model = getattr(transformers, FAMILIES[family][1])(config_of(family)).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn_like(p) * 0.1 + norm_start(family, name))
            else:
                p.normal_(0.0, 0.02)
    model.save_pretrained(path, safe_serialization=True)
    return model.config


def write_tokens(path, tokens, vocab):
    """llm.c's .bin layout: 256 int32 header (magic, version 1: uint16 tokens; 2: uint32), then tokens."""
    wide = vocab > 65536
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 2 if wide else 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}{'I' if wide else 'H'}", *tokens))


def stream(vocab):
    g = torch.Generator().manual_seed(1)
    return torch.randint(3, vocab, ((STEPS + 1) * BATCH * SEQ + 1,), generator=g)


def batch_of(tokens, step):
    first = step * BATCH
    return torch.stack([tokens[(first + b) * SEQ:(first + b) * SEQ + SEQ + 1] for b in range(BATCH)])


def hf_train(init, tokens, bf16, attention="eager"):
    model = transformers.AutoModelForCausalLM.from_pretrained(init, torch_dtype=torch.float32,
                                                              attn_implementation=attention).cuda().train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for step in range(STEPS):
        batch = batch_of(tokens, step).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=batch[:, :-1])
        loss = F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().float().cpu() for n, p in model.named_parameters()}


def sdpa_floors(init, tokens, cosine, names):
    """transformers' bf16 autocast with its sdpa attention under each of torch's fused SDPA backends that
    runs this model (a backend that cannot, such as flash attention under an explicit window mask, is
    left out): {"sdpa-BACKEND": {name: update cosine against fp32's}}."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    floors = {}
    for backend in ("EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION"):
        try:
            with sdpa_kernel([getattr(SDPBackend, backend)]):
                _, weights = hf_train(init, tokens, bf16=True, attention="sdpa")
        except (RuntimeError, ValueError) as e:
            print(f"transformers' sdpa on {backend}: not run ({str(e).splitlines()[0][:120]})")
            continue
        floors[f"sdpa-{backend.split('_')[0].lower()}"] = {name: cosine(weights, name) for name in names}
    return floors


def hf_train_with(path, init, tokens):
    """hf_train(bf16=True) in a fresh interpreter with `path` first on its module path (a copy of
    flash-linear-attention's source: transformers then runs its Triton kernels for the Gated DeltaNet
    instead of its float32 torch fallback): the trained weights, or None (said) where it cannot run."""
    with tempfile.TemporaryDirectory() as d:
        torch.save(tokens, os.path.join(d, "tokens.pt"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p))
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--lr", str(LR), "--train-bf16", init,
                              os.path.join(d, "tokens.pt"), os.path.join(d, "weights.pt")], env=env)
        if run.returncode != 0:
            print(f"transformers' bf16 autocast with {path} first on the path: not run (exit {run.returncode})")
            return None
        return torch.load(os.path.join(d, "weights.pt"))


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
                                                                    attn_implementation="eager",
                                                                    output_loading_info=True)
    return model.cuda().eval(), info


@torch.no_grad()
def logits_of(model, batch):
    return model(input_ids=batch.cuda()).logits.float()


def weights_of(directory):
    out = {}
    for path in glob.glob(os.path.join(directory, "*.safetensors")):
        out.update({k: v.float() for k, v in load_file(path).items()})
    return out


def export(binary, run, out):
    megatrain(binary, "export", sorted(glob.glob(os.path.join(run, "ckpt-*")))[-1], out, "--dtype", "fp32")


def import_and_export(binary, name, init, data, work, loader):
    """The model imported without training (train --steps 0) and exported (fp32), loaded by `loader`;
    it must load with no missing or unexpected tensor."""
    run0, out0 = os.path.join(work, f"{name}-imported"), os.path.join(work, f"{name}-export0")
    megatrain(binary, *train_args(init, data, 0, run0))
    export(binary, run0, out0)
    model, info = loader(out0)
    check(not info["missing_keys"] and not info["unexpected_keys"],
          f"{name}: the export loads with no missing or unexpected tensor")
    return model


def check_next_loss(binary, name, model, tokens, init, data, run):
    """transformers' loss on the batch after the run's (its trained export, `model`) against megatrain's
    own on the same weights (the run resumed a step)."""
    batch = batch_of(tokens, STEPS).cuda()
    logits = logits_of(model, batch[:, :-1])
    theirs = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item()
    megatrain(binary, *train_args(init, data, STEPS + 1, run, "--resume"))
    mine = metrics(run, "loss")[STEPS]
    check(abs(mine - theirs) < 2e-2, f"{name}: transformers' loss on the trained export {theirs:.5f} equals "
          f"megatrain's on the same weights {mine:.5f}")
    return mine, theirs


def check_family(binary, family, work):
    init = os.path.join(work, f"{family}-init")
    config = save_random_model(family, init)
    tokens = stream(config.vocab_size)
    data = os.path.join(work, f"{family}-tokens.bin")
    write_tokens(data, tokens.tolist(), config.vocab_size)

    model = import_and_export(binary, family, init, data, work, load)
    original, _ = load(init)
    batch = batch_of(tokens, 0)[:, :-1]
    check(torch.equal(logits_of(original, batch), logits_of(model, batch)),
          f"{family}: the export's logits are the original's, bit for bit")
    del model, original

    run = os.path.join(work, f"{family}-run")
    megatrain(binary, *train_args(init, data, STEPS, run))
    ours = metrics(run, "loss")
    fp32, fp32_weights = hf_train(init, tokens, bf16=False)
    bf16, bf16_weights = hf_train(init, tokens, bf16=True)
    print(f"{family}: step, megatrain, transformers fp32, bf16 autocast")
    for s in range(STEPS):
        print(f"  {s + 1}  {ours[s]:.5f}  {fp32[s]:.5f}  {bf16[s]:.5f}")
    noise = max(abs(b - f) for b, f in zip(bf16, fp32))
    diff = max(abs(o - f) for o, f in zip(ours, fp32))
    bound = 3 * noise + 1e-3 * fp32[0]
    check(diff <= bound, f"{family}: loss within bf16 noise of fp32 (max |diff| {diff:.2e}, noise {noise:.2e}, "
          f"bound {bound:.2e})")

    out = os.path.join(work, f"{family}-export-trained")
    export(binary, run, out)
    before, after = weights_of(init), weights_of(out)
    # Each tensor's update against fp32's: cosine >= COSINE, or at least as close as transformers' own
    # bf16 autocast comes with one of its attention implementations (a tensor whose gradient is mostly
    # cancellation has a bf16 noise floor below COSINE: a key bias under RoPE, whose gradient in a
    # flash-style backward carries the rounding of delta = dout . out, computed from the bf16 output;
    # transformers' eager attention forms the softmax's gradient in fp32 instead).
    def cosine(weights, name):
        return F.cosine_similarity((weights[name] - before[name]).flatten(),
                                   (fp32_weights[name] - before[name]).flatten(), dim=0).item()
    for name in fp32_weights:
        check(name in after, f"{family}: the export holds {name}")
    cosines = {name: cosine(after, name) for name in fp32_weights}
    floors = {"eager": {name: cosine(bf16_weights, name) for name in fp32_weights}}
    if any(c < COSINE and c < floors["eager"][n] for n, c in cosines.items()):
        floors.update(sdpa_floors(init, tokens, cosine, list(fp32_weights)))
        if os.environ.get("FLA_SRC") and "linear_attention" in (getattr(config, "layer_types", None) or []):
            weights = hf_train_with(os.environ["FLA_SRC"], init, tokens)
            if weights:
                floors["fla"] = {name: cosine(weights, name) for name in fp32_weights}
    def floor_of(name):
        """The lowest of transformers' bf16 runs, less the spread of its sdpa backends' (draws of one
        noise, the rounding of a flash-style backward's delta: bench/attention/delta_precision.py)."""
        sdpa = [f[name] for impl, f in floors.items() if impl.startswith("sdpa")]
        return min(f[name] for f in floors.values()) - (max(sdpa) - min(sdpa) if sdpa else 0.0)
    short = {n: c for n, c in cosines.items() if c < COSINE and c < floor_of(n)}
    for name in sorted(cosines, key=cosines.get)[:len(cosines) if short else 6]:  # all of them on a failure
        theirs = ", ".join(f"{impl} {floor[name]:.4f}" for impl, floor in floors.items())
        print(f"{family}: update cosine {cosines[name]:.4f} (bf16 autocast's: {theirs}; floor "
              f"{floor_of(name):.4f}) {name}")
    worst = min(cosines, key=cosines.get)
    results[family] = dict(megatrain=ours, fp32=fp32, bf16=bf16, noise=noise, diff=diff, bound=bound,
                           lowest_cosine=cosines[worst], lowest_cosine_tensor=worst, cosines=cosines,
                           floors={n: floor_of(n) for n in cosines}, short=sorted(short))

    # the trained export's checks before the cosines' verdict, so that a failure there reports them too
    model, info = load(out)
    check(not info["missing_keys"] and not info["unexpected_keys"], f"{family}: the trained export loads whole")
    results[family]["next_loss"] = check_next_loss(binary, family, model, tokens, init, data, run)
    check(not short, f"{family}: every tensor's update cosine >= {COSINE} or >= the floor of transformers' bf16 runs "
          f"{sorted(floors)} (lowest {cosines[worst]:.4f}, {worst}; short: {sorted(short)})")


WRAPPER = "gemma3_conditional"
HUB_NAMES = {"model.language_model.": "language_model.model.", "model.vision_tower.": "vision_tower.",
             "model.multi_modal_projector.": "multi_modal_projector."}


def save_random_wrapper(path, hub_names):
    """gemma3's text model (FAMILIES) in Gemma3ForConditionalGeneration with a 2-layer SigLIP tower, the
    weights as save_random_model makes them; hub_names: renamed as the hub's checkpoints name them."""
    text = transformers.Gemma3TextConfig(**FAMILIES["gemma3"][2]).to_dict()
    vision = transformers.SiglipVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                             num_attention_heads=2, image_size=56, patch_size=14,
                                             vision_use_head=False).to_dict()
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn_like(p) * 0.1)
            else:
                p.normal_(0.0, 0.02)
    model.save_pretrained(path, safe_serialization=True)
    if not hub_names:
        return
    renamed = {}
    for file in glob.glob(os.path.join(path, "*.safetensors")):
        tensors = {}
        for name, t in load_file(file).items():
            if name == "lm_head.weight":
                continue  # tied: the hub's files do not hold it
            new = next((hub + name[len(ours):] for ours, hub in HUB_NAMES.items() if name.startswith(ours)), name)
            tensors[new] = t
            renamed[name] = new
        save_file(tensors, file, metadata={"format": "pt"})
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        doc = json.load(open(index))
        doc["weight_map"] = {renamed[k]: v for k, v in doc["weight_map"].items() if k in renamed}
        json.dump(doc, open(index, "w"), indent=2)


def load_wrapper(path):
    model, info = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        path, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    return model.cuda().eval(), info


def kept_of(model):
    return {n: p.detach().cpu() for n, p in model.named_parameters() if "language_model" not in n and
            not n.startswith("lm_head")}


def check_wrapper(binary, work, hub_names):
    name = f"{WRAPPER}-{'hub' if hub_names else 'transformers5'}"
    init = os.path.join(work, f"{name}-init")
    save_random_wrapper(init, hub_names)
    vocab = FAMILIES["gemma3"][2]["vocab_size"]  # the image token (262144) is not among the text's
    tokens = stream(vocab)
    data = os.path.join(work, f"{name}-tokens.bin")
    write_tokens(data, tokens.tolist(), vocab)
    original, info = load_wrapper(init)
    check(not info["missing_keys"] and not info["unexpected_keys"], f"{name}: transformers loads the original whole")
    kept, batch = kept_of(original), batch_of(tokens, 0)[:, :-1]

    model = import_and_export(binary, name, init, data, work, load_wrapper)
    check(kept_of(model).keys() == kept.keys() and all(torch.equal(p, kept[n]) for n, p in kept_of(model).items()),
          f"{name}: the vision tower and projector are the original's, bit for bit")
    check(torch.equal(logits_of(original, batch), logits_of(model, batch)),
          f"{name}: the export's text logits are the original's, bit for bit")
    del model, original

    run, out = os.path.join(work, f"{name}-run"), os.path.join(work, f"{name}-export-trained")
    megatrain(binary, *train_args(init, data, STEPS, run))
    export(binary, run, out)
    model, info = load_wrapper(out)
    check(not info["missing_keys"] and not info["unexpected_keys"], f"{name}: the trained export loads whole")
    check(kept_of(model).keys() == kept.keys() and all(torch.equal(p, kept[n]) for n, p in kept_of(model).items()),
          f"{name}: the trained export's vision tower and projector are the original's, bit for bit")
    mine, theirs = check_next_loss(binary, name, model, tokens, init, data, run)
    results[name] = dict(megatrain=metrics(run, "loss"), next_loss=[mine, theirs])


REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "llama_ref.py")


def fixture_config(config, seq, batch):
    """llama_ref.py's config.txt for a transformers config of these families."""
    window = getattr(config, "sliding_window", None) or 0
    # Mistral's config has no layer_types: its sliding_window is every layer's
    types = getattr(config, "layer_types", None) or \
        ["sliding_attention" if window else "full_attention"] * config.num_hidden_layers
    gemma = config.model_type.startswith("gemma")
    rope = getattr(config, "rope_parameters", None) or {}
    full = rope.get("full_attention", rope) if isinstance(rope, dict) else {}
    local = rope.get("sliding_attention", {}) if isinstance(rope, dict) else {}
    theta = full.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    local_theta = local.get("rope_theta", getattr(config, "rope_local_base_freq", 0.0)) if gemma else 0.0
    lines = dict(hidden_size=config.hidden_size, intermediate_size=getattr(config, "intermediate_size", 0),
                 num_layers=config.num_hidden_layers, num_heads=config.num_attention_heads,
                 num_kv_heads=config.num_key_value_heads,
                 head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
                 vocab_size=config.vocab_size, tie_embeddings=int(config.tie_word_embeddings),
                 attention_bias=int(config.model_type == "qwen2"),  # Qwen2's q, k and v biases
                 qk_norm=1 if config.model_type == "gemma3_text" else 0, rope_original_max_position=0,
                 steps=1, seq_len=seq, batch=batch, num_experts=0, experts_per_token=0, moe_intermediate_size=0,
                 norm_topk_prob=0, shared_expert_intermediate_size=0, decoder_sparse_step=1,
                 output_router_logits=0, micro_batches=1, rms_norm_eps=config.rms_norm_eps, rope_theta=theta,
                 rope_scaling_factor=0, rope_low_freq_factor=0, rope_high_freq_factor=0, router_aux_loss_coef=0,
                 mlp_only_layers="-", rope_fp32=1,
                 layer_windows=",".join(str(window if t == "sliding_attention" else 0) for t in types),
                 layer_ropes=",".join(str(1 if local_theta and t == "sliding_attention" else 0) for t in types))
    if gemma:
        lines.update(sandwich_norms=1, norm_unit_offset=1, glu_act=1, rope_local_theta=local_theta,
                     query_pre_attn_scalar=config.query_pre_attn_scalar,
                     attn_logit_softcap=config.attn_logit_softcapping or 0,
                     final_logit_softcap=config.final_logit_softcapping or 0,
                     embed_scale=float(torch.tensor(config.hidden_size ** 0.5, dtype=torch.float64)))
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def check_reference(family, work, layers=2, fixture=fixture_config, tolerance=None):
    """llama_ref.py against transformers in float64 on a cut of the family's model (its last `layers`
    layers' kinds), its config.txt by `fixture`, the losses within `tolerance` relative (by default
    the family's own)."""
    name, model_class, kwargs = FAMILIES[family]
    kwargs = dict(kwargs, num_hidden_layers=layers, vocab_size=512)
    if "layer_types" in kwargs:
        kwargs["layer_types"] = kwargs["layer_types"][-layers:]
    config = getattr(transformers, name)(**kwargs)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # torch's grouped_mm takes no float64: the experts' loop
    torch.manual_seed(2)
    model = getattr(transformers, model_class)(config).double()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.1 if "norm" in n else 0.05))
    seq, batch = 160, 2
    tokens = torch.randint(0, config.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(3))
    out = model(input_ids=tokens[:, :-1])
    theirs = F.cross_entropy(out.logits.reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1)).item()
    d = os.path.join(work, f"{family}-ref")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.txt"), "w") as f:
        f.write(fixture(config, seq, batch))
    params = [(n, p) for n, p in model.named_parameters() if n != "lm_head.weight" or not config.tie_word_embeddings]
    with open(os.path.join(d, "tensors.txt"), "w") as f:
        for n, p in params:  # 3-D as 2-D: a conv1d's [C, 1, 4] as [C, 4], experts' [E, R, C] as [E R, C];
            cols = p.shape[-1] if p.dim() >= 2 and not n.endswith("_bias") else 1  # experts' biases [E R]
            f.write(f"{n} {p.numel() // cols} {cols}\n")
    numpy.concatenate([p.detach().float().numpy().reshape(-1) for _, p in params]).astype("<f4").tofile(
        os.path.join(d, "weights.bin"))
    tokens.numpy().astype("<i4").tofile(os.path.join(d, "tokens.bin"))
    # transformers again on the float32-rounded weights the fixture holds
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(p.float().double())
    out = model(input_ids=tokens[:, :-1])
    theirs = F.cross_entropy(out.logits.reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1)).item()
    subprocess.run(["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, REF, "grads", d],
                   check=True)
    ours = float(open(os.path.join(d, "ref_loss.txt")).read())
    # transformers' Gemma runs its RMSNorms in float32 (x.float()) and holds its embedding scale as a
    # float32 buffer even in a float64 model: its loss there is exact to float32's ~1e-8 (measured
    # 1.6e-8 relative on an H100, 2026-12-07), where a wrong definition moves it by 1e-4 or more.
    if tolerance is None:
        tolerance = 1e-6 if family.startswith("gemma") else 1e-9
    check(abs(ours - theirs) <= tolerance * abs(theirs), f"{family}: llama_ref.py's loss {ours:.12f} is "
          f"transformers' float64 loss {theirs:.12f} (within {tolerance:g} relative)")


def check_each(name, families, check_one):
    """check_one(family) for each family whatever the one before gave, the results to $OUT/NAME.json
    when OUT is set; fails at the end naming the families that failed."""
    failed = []
    try:
        for family in families:
            try:
                check_one(family)
            except SystemExit as e:
                print(e, flush=True)
                failed.append(family)
            except Exception:  # a harness's or transformers' error: this family fails, the next still runs
                traceback.print_exc()
                print(f"FAIL: {family}: the check raised (above)", flush=True)
                failed.append(family)
    finally:
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], f"{name}.json"), "w") as f:
                json.dump(results, f, indent=1)
    if failed:
        raise SystemExit(f"FAIL: {name}: {', '.join(failed)}")
    print(f"PASS: {name}")


def main():
    global LR
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="build/megatrain")
    parser.add_argument("--only", help="comma-separated families (default: all)")
    parser.add_argument("--keep", help="work in this directory and keep it")
    parser.add_argument("--train-bf16", nargs=3, metavar=("INIT", "TOKENS_PT", "OUT_PT"),
                        help="only hf_train INIT in bf16 autocast on the tokens saved at TOKENS_PT, its weights to "
                             "OUT_PT (hf_train_with's child)")
    parser.add_argument("--lr", type=float, default=LR, help="the learning rate of every run (a check's own, e.g. "
                        "check_qwen35.py's)")
    args = parser.parse_args()
    LR = args.lr
    if args.train_bf16:
        init, tokens, out = args.train_bf16
        torch.save(hf_train(init, torch.load(tokens), bf16=True)[1], out)
        return 0
    work = args.keep or tempfile.mkdtemp(prefix="mt-check-families-")
    os.makedirs(work, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    def check_one(family):
        if family == WRAPPER:
            check_wrapper(args.bin, work, hub_names=False)
            check_wrapper(args.bin, work, hub_names=True)
        else:
            check_reference(family, work)
            check_family(args.bin, family, work)
    check_each("check_families", args.only.split(",") if args.only else [*FAMILIES, WRAPPER], check_one)


if __name__ == "__main__":
    sys.exit(main())
