"""megatrain's PyTorch peers: the same model shapes and tokens per optimizer step, timed the way
`megatrain bench` times itself (src/train/bench.c), appended as one JSON line in its format.

  --mode resident        the whole model on the GPU: fp32 parameters, bf16 autocast, fused AdamW
                         on the GPU
  --mode fsdp2-offload   FSDP2 (fully_shard) with CPUOffloadPolicy: fp32 parameters, gradients and
                         AdamW state on the host, bf16 compute on the GPU; one process (world size 1),
                         or one per GPU under torchrun (RANK, WORLD_SIZE, LOCAL_RANK), each rank
                         with its own micro-batches and its shard of the host state

Several ranks: `python3 -m torch.distributed.run --standalone --nproc-per-node N torch_peer.py ...`;
--batch and --micro-batches are per rank, tokens per step count every rank's, rank 0 writes the line.

Both: transformers' LlamaForCausalLM (Qwen2, Mistral; and for the mixtures of experts
OlmoeForCausalLM and Qwen3MoeForCausalLM, transformers' own MoE modules, --layers cutting the
depth) with random weights (no download), SDPA attention,
activation checkpointing, gradient accumulation over --micro-batches, the global gradient norm
clipped at --clip (1.0, megatrain's default; 0 for none), random tokens. A run that fails (out of memory, say)
appends {"system", "model", "error"} instead and exits 1. A run whose next step would not end inside --time-limit
(bench/bench_lib.sh passes each run's limit in BENCH_LIMIT_S) stops after the timed steps it has, at least one,
and its line says how many."""
import argparse
import contextlib
import functools
import json
import os
import resource
import sys
import time
import traceback

import torch

STARTED = time.monotonic()

SYSTEMS = {"resident": "pytorch-resident", "fsdp2-offload": "pytorch-fsdp2-offload"}

# src/model/config.c's presets, field for field.
LLAMA_3_2_ROPE_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
PRESETS = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0,
                         rms_norm_eps=1e-5, max_position_embeddings=131072,
                         rope_scaling=LLAMA_3_2_ROPE_SCALING),
    "llama-3.2-3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                         num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                         vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0,
                         rms_norm_eps=1e-5, max_position_embeddings=131072,
                         rope_scaling=LLAMA_3_2_ROPE_SCALING),
    "llama-3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                       vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0,
                       rms_norm_eps=1e-5, max_position_embeddings=8192),
    # Qwen2 (q, k and v with biases, built by transformers' Qwen2ForCausalLM) and Mistral.
    "qwen2.5-14b": dict(arch="qwen2", hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
                        num_attention_heads=40, num_key_value_heads=8, head_dim=128, vocab_size=152064,
                        tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6,
                        max_position_embeddings=131072),
    "qwen2.5-32b": dict(arch="qwen2", hidden_size=5120, intermediate_size=27648, num_hidden_layers=64,
                        num_attention_heads=40, num_key_value_heads=8, head_dim=128, vocab_size=152064,
                        tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6,
                        max_position_embeddings=131072),
    "mistral-small-24b": dict(arch="mistral", hidden_size=5120, intermediate_size=32768, num_hidden_layers=40,
                              num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=131072,
                              tie_word_embeddings=False, rope_theta=100000000.0, rms_norm_eps=1e-5,
                              max_position_embeddings=32768),
    # Mixtures of experts, the hub's shapes (src/model/config.c's presets).
    "olmoe-1b-7b": dict(arch="olmoe", hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
                        num_attention_heads=16, num_key_value_heads=16, head_dim=128, vocab_size=50304,
                        tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-5,
                        max_position_embeddings=4096, num_experts=64, num_experts_per_tok=8,
                        norm_topk_prob=False),
    "qwen3-30b-a3b": dict(arch="qwen3_moe", hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                          num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936,
                          tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6,
                          max_position_embeddings=40960, num_experts=128, num_experts_per_tok=8,
                          moe_intermediate_size=768, norm_topk_prob=True),
    # Gemma 3 (transformers' Gemma3ForCausalLM): five sliding-window layers (1024 keys) to a global
    # one, q/k norms, the sandwich norms, GeGLU, tied embeddings. The global layers' linear RoPE
    # scaling (factor 8) is left at transformers' default: it changes no work.
    "gemma-3-4b": dict(arch="gemma3", hidden_size=2560, intermediate_size=10240, num_hidden_layers=34,
                       num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=262208,
                       tie_word_embeddings=True, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                       rms_norm_eps=1e-6, max_position_embeddings=131072, query_pre_attn_scalar=256,
                       sliding_window=1024, layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 5
                       + ["sliding_attention"] * 4),
}

ADAMW = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
GIB = 1 << 30


def block_params(p, active=False):
    """mt_config_block_params: two RMSNorm weights, q k v o (q/k/v biases for Qwen2; q/k norms over
    each head for Qwen3-MoE, over the projections for OLMoE), then gate up down, or for a mixture of
    experts the router and every expert's gate up down (active: the router and the experts a token
    goes to, mt_config_blocks_active_params)."""
    d, f = p["hidden_size"], p["intermediate_size"]
    q = p["num_attention_heads"] * p["head_dim"]
    kv = p["num_key_value_heads"] * p["head_dim"]
    arch = p.get("arch")
    extra = {"qwen2": q + 2 * kv, "qwen3_moe": 2 * p["head_dim"], "olmoe": q + kv,
             "gemma3": 2 * d + 2 * p["head_dim"]}.get(arch, 0)  # Gemma: two more norms a block
    attention = 2 * d + q * d + 2 * kv * d + d * q + extra
    if "num_experts" not in p:
        return attention + 3 * d * f
    experts = p["num_experts_per_tok"] if active else p["num_experts"]
    return attention + p["num_experts"] * d + 3 * experts * p.get("moe_intermediate_size", f) * d


def total_params(p):
    embed = p["vocab_size"] * p["hidden_size"]
    tied = p["tie_word_embeddings"]
    return embed * (1 if tied else 2) + p["hidden_size"] + p["num_hidden_layers"] * block_params(p)


def model_flops_per_token(p, seq):
    """src/train/bench.c's count: 6 x (the blocks' active parameters + vocab x hidden) for the linear
    layers (recomputation not counted; a mixture of experts counts its router and the experts a
    token goes to) + 12 x heads x head_dim x the keys a query sees for attention, a layer: seq / 2
    under the causal mask, window - window^2 / (2 seq) for a sliding-window layer
    (src/model/kinds/attention.c)."""
    layers = p["num_hidden_layers"]
    linear = block_params(p, active=True) * layers + p["vocab_size"] * p["hidden_size"]
    w = p.get("sliding_window") or 0
    local = w - w * w / (2 * seq) if 0 < w < seq else seq / 2
    keys = sum(local if t == "sliding_attention" else seq / 2
               for t in p.get("layer_types", ["full_attention"] * layers))
    return 6 * linear + 12 * keys * p["num_attention_heads"] * p["head_dim"]


def preset_shape(preset, layers):
    """The preset, its depth cut to `layers` (0: as it is)."""
    shape = dict(PRESETS[preset])
    if layers:
        shape["num_hidden_layers"] = layers
        if "layer_types" in shape:
            shape["layer_types"] = shape["layer_types"][:layers]
    return shape


def build_model(shape, device):
    from transformers import (AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, MistralConfig, OlmoeConfig,
                              Qwen2Config, Qwen3MoeConfig)

    shape = dict(shape)
    kind = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig, "olmoe": OlmoeConfig,
            "qwen3_moe": Qwen3MoeConfig, "gemma3": Gemma3TextConfig}[shape.pop("arch", "llama")]
    if kind is OlmoeConfig:
        shape.pop("head_dim")  # hidden / heads, which OlmoeConfig derives
    config = kind(**shape, use_cache=False)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.to(device=device, dtype=torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def make_adamw(params):
    """Fused AdamW where this torch has the kernel for the parameters' device, else foreach; the
    name says which ran."""
    device = params[0].device.type
    try:
        return torch.optim.AdamW(params, fused=True, **ADAMW), f"AdamW fused ({device})"
    except RuntimeError:
        return torch.optim.AdamW(params, foreach=True, **ADAMW), f"AdamW foreach ({device})"


def resident(shape):
    model = build_model(shape, "cuda")
    return model, functools.partial(torch.autocast, "cuda", dtype=torch.bfloat16)


def rank_and_world():
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def fsdp2_offload(shape):
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    rank, world = rank_and_world()
    # gloo for what runs on the host (the gradient norm over CPU shards), NCCL for the GPU.
    dist.init_process_group(backend="cpu:gloo,cuda:nccl", init_method="env://", rank=rank, world_size=world)
    # CPU offload wants the parameters materialized on the host before sharding.
    model = build_model(shape, "cpu")
    policy = dict(offload_policy=CPUOffloadPolicy(),
                  mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    for layer in model.model.layers:
        fully_shard(layer, **policy)
    fully_shard(model, **policy)
    return model, contextlib.nullcontext


def train_step(model, optimizer, autocast, a, vocab):
    optimizer.zero_grad(set_to_none=True)
    for _ in range(a.micro_batches):
        inputs = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
        labels = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
        with autocast():
            loss = model(input_ids=inputs, labels=labels).loss / a.micro_batches
        loss.backward()
    if a.clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
    optimizer.step()
    return loss.item() * a.micro_batches


def out_of_time(limit, last_step_s, world):
    """Whether another step like the last would end past the limit (from the process's start); with
    several ranks, any rank's lateness stops them all."""
    late = bool(limit) and time.monotonic() - STARTED + 1.2 * last_step_s + 20 > limit
    if world > 1:
        flag = torch.tensor([float(late)], device="cuda")
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        late = flag.item() > 0
    return late


def run(a):
    p = preset_shape(a.preset, a.layers)
    rank, world = rank_and_world()
    if world > 1 and a.mode != "fsdp2-offload":
        raise RuntimeError(f"--mode {a.mode} runs on one GPU; several ranks are for fsdp2-offload")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(a.seed)
    model, autocast = resident(p) if a.mode == "resident" else fsdp2_offload(p)
    torch.manual_seed(a.seed + rank)  # the same weights on every rank, each its own tokens
    built = sum(t.numel() for t in model.parameters())
    if built != total_params(p):
        raise RuntimeError(f"transformers built {built} parameters for {a.preset}, "
                           f"megatrain's preset has {total_params(p)}")
    optimizer, optimizer_name = make_adamw(list(model.parameters()))
    tokens = world * a.batch * a.micro_batches * a.seq
    times, note = [], None
    for s in range(a.warmup_steps + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = train_step(model, optimizer, autocast, a, p["vocab_size"])
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
        warm = s < a.warmup_steps
        print(f"{'warmup' if warm else 'timed'} step {s}: {t:.3f} s, {tokens / t:.0f} tokens/s, "
              f"loss {loss:.4f}", flush=True)
        if not warm:
            times.append(t)
        left = a.warmup_steps + a.steps - 1 - s
        if left and times and out_of_time(a.time_limit, t, world):
            note = (f"cut by its {a.time_limit:.0f} s limit after {len(times)} of {a.steps} timed steps "
                    f"({', '.join(f'{x:.1f}' for x in times)} s): their median")
            print(note, flush=True)
            break
    step_s = sorted(times)[len(times) // 2]  # the median as bench.c takes it
    return {**({"note": note} if note else {}), "timed_steps": len(times),
            "step_s": step_s, "tokens_per_s": tokens / step_s,
            "tflops": tokens / step_s * model_flops_per_token(p, a.seq) / 1e12,
            "peak_gpu_gib": torch.cuda.max_memory_allocated() / GIB,
            "host_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
            "optimizer": optimizer_name, "clip": a.clip, "gpus": world,
            "experts_implementation": getattr(model.config, "_experts_implementation", None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=sorted(SYSTEMS), required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4, help="sequences per micro-batch")
    ap.add_argument("--micro-batches", type=int, default=1, help="gradient accumulation steps")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clipping, 0 for none")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--layers", type=int, default=0, help="cut the preset to this many blocks (0: all)")
    ap.add_argument("--json", required=True, help="append the result here as one JSON line")
    ap.add_argument("--time-limit", type=float, default=float(os.environ.get("BENCH_LIMIT_S", 0)),
                    help="seconds from the start: stop after the timed steps that end inside it (0: none)")
    a = ap.parse_args()

    p = preset_shape(a.preset, a.layers)
    model_name = f"{a.preset} ({a.layers} layers)" if a.layers else a.preset
    record = {"system": SYSTEMS[a.mode], "model": model_name, "seq": a.seq, "batch": a.batch,
              "micro_batches": a.micro_batches}
    try:
        result = run(a)
    except Exception as e:  # any failure is a result to record, an OOM above all
        traceback.print_exc()
        message = str(e).strip().splitlines()
        record["error"] = f"{type(e).__name__}: {message[0] if message else ''}"[:300]
    else:
        record.update(params=total_params(p), active_params=block_params(p, active=True) * p["num_hidden_layers"]
                      + p["vocab_size"] * p["hidden_size"] * (1 if p["tie_word_embeddings"] else 2) + p["hidden_size"],
                      tokens_per_step=result["gpus"] * a.batch * a.micro_batches * a.seq,
                      **result, torch=torch.__version__)
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if rank_and_world()[0] != 0:  # one line a run: rank 0's
        return 1 if "error" in record else 0
    with open(a.json, "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)
    return 1 if "error" in record else 0


if __name__ == "__main__":
    sys.exit(main())
