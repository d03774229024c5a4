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

Both: transformers' LlamaForCausalLM (Qwen2, Mistral, Gemma 3; and for the mixtures of experts
OlmoeForCausalLM, Qwen3MoeForCausalLM, GptOssForCausalLM and Qwen3.5's Qwen3_5MoeForCausalLM,
transformers' own MoE modules, --layers cutting the depth) with random weights (no download), SDPA
attention (gpt-oss: eager, the only attention of transformers' that has its sinks; Qwen3.5's
Gated DeltaNet layers: flash-linear-attention where installed, else transformers' torch fallback,
the line's "linear_attention" says which), activation checkpointing, gradient accumulation over
--micro-batches, the global gradient norm clipped at --clip (1.0, megatrain's default; 0 for none),
random tokens. A run that fails (out of memory, say)
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

# src/model/families/*.c's presets, field for field (bench/peers/check_counts.py checks the counts).
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
    # Mixtures of experts, the hub's shapes.
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
    # gpt-oss (transformers' GptOssForCausalLM): every attention projection with a bias, a sink logit a
    # head, a 128-token window on the even layers, YaRN; 128 experts of 2880 (top 4) with biases, the
    # router with a bias.
    "gpt-oss-120b": dict(arch="gpt_oss", hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                         num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088,
                         tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=131072,
                         rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                              beta_slow=1.0, original_max_position_embeddings=4096, truncate=False),
                         attention_bias=True, num_local_experts=128, num_experts_per_tok=4,
                         router_aux_loss_coef=0.9, swiglu_limit=7.0, swiglu_alpha=1.702, sliding_window=128,
                         layer_types=["sliding_attention", "full_attention"] * 18, eos_token_id=200002,
                         pad_token_id=199999),
    # Qwen3.5-35B-A3B's text model (transformers' Qwen3_5MoeForCausalLM): three Gated DeltaNet layers to
    # one gated attention layer (q_proj twice as wide: the query and its gate), RoPE on a quarter of
    # each head; 256 experts of 512 (top 8) and a shared expert of 512 behind its sigmoid gate.
    "qwen3.5-35b-a3b": dict(arch="qwen3_5_moe", hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
                            num_key_value_heads=2, head_dim=256, vocab_size=248320, tie_word_embeddings=False,
                            rms_norm_eps=1e-6, max_position_embeddings=262144,
                            rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                                                 partial_rotary_factor=0.25),
                            linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                            linear_num_key_heads=16, linear_num_value_heads=32, num_experts=256,
                            num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512,
                            router_aux_loss_coef=0.001, eos_token_id=248044,
                            layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 10),
}

ADAMW = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
GIB = 1 << 30


def layer_types(p):
    return p.get("layer_types") or ["full_attention"] * p["num_hidden_layers"]


def num_experts(p):
    return p.get("num_experts") or p.get("num_local_experts") or 0


def mixer_params(p, kind):
    """model/kinds/attention.c's and gdn.c's params: the pre-norm and q k v o (q_proj twice as wide with
    Qwen3.5's output gate; q/k/v biases for Qwen2, every projection's bias and a sink logit a head for
    gpt-oss; q/k norms over each head for Qwen3-MoE and Qwen3.5, over the projections for OLMoE; Gemma's
    output norm), or the Gated DeltaNet's: in_proj_qkv, z, b and a, the depthwise conv1d (kernel 4, no
    bias) over q, k and v, A_log and dt_bias a value head, the gated norm over a value head, out_proj."""
    d = p["hidden_size"]
    if kind == "linear_attention":
        k = p["linear_num_key_heads"] * p["linear_key_head_dim"]
        v = p["linear_num_value_heads"] * p["linear_value_head_dim"]
        h = p["linear_num_value_heads"]
        return (d + (2 * k + v) * d + v * d + 2 * h * d + (2 * k + v) * p["linear_conv_kernel_dim"] + 2 * h
                + p["linear_value_head_dim"] + d * v)
    q = p["num_attention_heads"] * p["head_dim"]
    kv = p["num_key_value_heads"] * p["head_dim"]
    arch = p.get("arch")
    q_out = 2 * q if arch == "qwen3_5_moe" else q
    extra = {"qwen2": q + 2 * kv, "qwen3_moe": 2 * p["head_dim"], "qwen3_5_moe": 2 * p["head_dim"],
             "olmoe": q + kv, "gemma3": d + 2 * p["head_dim"],
             "gpt_oss": q + 2 * kv + d + p["num_attention_heads"]}.get(arch, 0)
    return d + q_out * d + 2 * kv * d + d * q + extra


def ffn_params(p, active):
    """model/kinds/ffn_dense.c's and ffn_moe.c's params: the pre-norm (and Gemma's post-norm) and gate
    up down, or the router (gpt-oss: with a bias) and every expert's gate up down (gpt-oss: with their
    biases), and a shared expert with its gate (Qwen3.5); active: the experts a token goes to
    (mt_config_blocks_active_params)."""
    d = p["hidden_size"]
    if not num_experts(p):
        return d * (2 if p.get("arch") == "gemma3" else 1) + 3 * d * p["intermediate_size"]
    e = num_experts(p)
    k = p["num_experts_per_tok"] if active else e
    f = p.get("moe_intermediate_size") or p["intermediate_size"]
    s = p.get("shared_expert_intermediate_size", 0)
    n = d + e * d + 3 * k * f * d + (3 * s * d + d if s else 0)
    if p.get("arch") == "gpt_oss":
        n += e + k * (2 * f + d)
    return n


def block_params(p, layer, active=False):
    """mt_config_block_params of one layer (its mixer and its feed-forward)."""
    return mixer_params(p, layer_types(p)[layer]) + ffn_params(p, active)


def blocks_params(p, active=False):
    return sum(block_params(p, l, active) for l in range(p["num_hidden_layers"]))


def ends_params(p):
    """The embedding, the LM head unless tied, the final norm."""
    embed = p["vocab_size"] * p["hidden_size"]
    return embed * (1 if p["tie_word_embeddings"] else 2) + p["hidden_size"]


def total_params(p):
    return ends_params(p) + blocks_params(p)


def active_params(p):
    return ends_params(p) + blocks_params(p, active=True)


def extra_flops(p, kind, seq):
    """A layer's forward FLOPs a token past its parameters' (the kinds' extra_flops): attention's scores
    and values, 4 x heads x head_dim x the keys a query sees, seq / 2 under the causal mask and
    window - window^2 / (2 seq) for a sliding-window layer; the Gated DeltaNet's recurrence, 7 x
    value heads x d_k x d_v (the state's decay, S^T k, the rank-one update, S^T q), whatever seq."""
    if kind == "linear_attention":
        return 7 * p["linear_num_value_heads"] * p["linear_key_head_dim"] * p["linear_value_head_dim"]
    w = p.get("sliding_window") or 0
    keys = w - w * w / (2 * seq) if kind == "sliding_attention" and 0 < w < seq else seq / 2
    return 4 * keys * p["num_attention_heads"] * p["head_dim"]


def model_flops_per_token(p, seq):
    """src/train/bench.c's count: 6 x (the blocks' active parameters + vocab x hidden) for the linear
    layers (recomputation not counted; a mixture of experts counts its router, the experts a token
    goes to and a shared expert) + 3 x every layer's extra FLOPs (forward 1, backward 2)."""
    linear = blocks_params(p, active=True) + p["vocab_size"] * p["hidden_size"]
    return 6 * linear + 3 * sum(extra_flops(p, kind, seq) for kind in layer_types(p))


def preset_shape(preset, layers):
    """The preset, its depth cut to `layers` (0: as it is)."""
    shape = dict(PRESETS[preset])
    if layers:
        shape["num_hidden_layers"] = layers
        if "layer_types" in shape:
            shape["layer_types"] = shape["layer_types"][:layers]
    return shape


# Each arch's transformers config class; attention through SDPA but where the model has no SDPA path.
CONFIGS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "mistral": "MistralConfig", "olmoe": "OlmoeConfig",
           "qwen3_moe": "Qwen3MoeConfig", "gemma3": "Gemma3TextConfig", "gpt_oss": "GptOssConfig",
           "qwen3_5_moe": "Qwen3_5MoeTextConfig"}
# gpt-oss's sinks: GptOssPreTrainedModel has no SDPA path (_supports_sdpa False); eager is the
# attention its modeling file writes the sinks into.
ATTENTION = {"gpt_oss": "eager"}


def attention_of(shape):
    return ATTENTION.get(shape.get("arch"), "sdpa")


def linear_attention_of(shape):
    """Which Gated DeltaNet transformers runs: flash-linear-attention's kernels where installed, else
    its own torch fallback (torch_chunk_gated_delta_rule); None without linear layers."""
    if "linear_attention" not in layer_types(shape):
        return None
    from transformers.utils import is_flash_linear_attention_available
    return ("flash-linear-attention" if is_flash_linear_attention_available()
            else "transformers' torch fallback (flash-linear-attention absent)")


def build_model(shape, device):
    import transformers

    attention = attention_of(shape)
    shape = dict(shape)
    arch = shape.pop("arch", "llama")
    kind = getattr(transformers, CONFIGS[arch])
    if arch == "olmoe":
        shape.pop("head_dim")  # hidden / heads, which OlmoeConfig derives
    config = kind(**shape, use_cache=False)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attention)
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
    linear = linear_attention_of(p)
    return {**({"note": note} if note else {}), "timed_steps": len(times),
            "step_s": step_s, "tokens_per_s": tokens / step_s,
            "tflops": tokens / step_s * model_flops_per_token(p, a.seq) / 1e12,
            "peak_gpu_gib": torch.cuda.max_memory_allocated() / GIB,
            "host_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
            "optimizer": optimizer_name, "clip": a.clip, "gpus": world,
            "experts_implementation": getattr(model.config, "_experts_implementation", None),
            "attention": getattr(model.config, "_attn_implementation", None),
            **({"linear_attention": linear} if linear else {})}


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
        record.update(params=total_params(p), active_params=active_params(p),
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
