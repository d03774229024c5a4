#!/usr/bin/python3
"""An independent PyTorch reference for megatrain's Llama-family model (Llama, Mistral, Qwen2, and
Qwen3 with qk_norm=1: an RMSNorm over each head of q and k before RoPE; qk_norm=2: OLMoE's RMSNorm over
the whole q and k projections), and its mixtures of experts (num_experts > 0: Qwen3-MoE, Qwen2-MoE
with its shared expert, Mixtral, OLMoE), with the router's load-balancing loss when
output_router_logits is 1; gpt-oss's attention where the fixture asks (o_bias=1: an o_proj bias;
attn_sinks=1: a learned sink logit a head, an extra softmax column with no value); and Qwen3.5's
Gated DeltaNet mixer on the layers layer_mixers marks 1.

Usage: llama_ref.py MODE DIR [MODE DIR ...]
Each pair runs one fixture directory (several pairs share one start of Python and torch).

A fixture directory, written by tests/ref_fixture.c, holds:
  config.txt   key=value lines: the model shape, and for training the optimizer settings;
               mlp_only_layers is a comma-separated list of layers, or "-" for none; micro_batches
               splits each step's batch for the load-balancing loss (the mean of each part's)
  tensors.txt  one line per tensor, in order: Hugging Face name, rows, cols (cols 1: a vector)
  weights.bin  float32 little-endian, the tensors concatenated in that order
  tokens.bin   int32 [steps][batch][seq_len + 1]; inputs are [:, :-1], targets [:, 1:]
  probes.bin   optional (grads mode): records of int64 tensor index, int64 element, float64 delta
  mask.bin     optional: uint8 [steps][batch][seq_len], 0 where a target carries no loss; the
               loss is then PyTorch's ignore_index mean over the targets that do
  positions.bin optional: int32 [steps][batch][seq_len], each input token's position in its
               segment (packed examples): 0 starts a segment, which then attends only within
               itself, causally, with RoPE at these positions

Modes:
  grads  float64, one forward and backward on step 0's tokens. Writes ref_loss.txt (the mean
         cross-entropy) and ref_grads.bin (float64 gradients, same order as weights.bin); with
         probes.bin, also ref_probe_losses.bin: float64 loss with each probe's delta added to
         that one element (for finite-difference checks of this very script).
  train  float32, `steps` AdamW steps (weight decay on matrices only, constant lr, gradient
         clipping by the global norm when max_grad_norm > 0), step s on step s's tokens. Writes
         ref_losses.txt (each step's loss before its update) and ref_weights_after.bin (float32).

gpt-oss's feed-forward where the fixture asks (router_bias=1: GptOssTopKRouter, mlp.router with a
bias, the top k of the logits then a softmax over them; expert_bias=1: the experts' gate_up and down
biases; glu_act=2: the clamped SwiGLU of swiglu_limit and swiglu_alpha) and YaRN RoPE (rope_yarn=1:
rope_beta_fast, rope_beta_slow, rope_truncate, rope_attention_factor, its factor on cos and sin).

This is deliberately its own code, written from the Hugging Face Llama definition, not a port
of megatrain's C, so that the two can disagree when either is wrong.
"""
import math
import os
import sys

try:
    import numpy
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("llama_ref.py: PyTorch or NumPy is not installed "
             "(Debian: apt-get install python3-torch)")

INT_KEYS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
            "head_dim", "vocab_size", "tie_embeddings", "attention_bias", "qk_norm",
            "rope_original_max_position", "steps", "seq_len", "batch", "num_experts",
            "experts_per_token", "moe_intermediate_size", "norm_topk_prob",
            "shared_expert_intermediate_size", "decoder_sparse_step", "output_router_logits",
            "micro_batches")
FLOAT_KEYS = ("rms_norm_eps", "rope_theta", "rope_scaling_factor", "rope_low_freq_factor",
              "rope_high_freq_factor", "lr", "beta1", "beta2", "eps", "weight_decay",
              "max_grad_norm", "router_aux_loss_coef")
LIST_KEYS = ("mlp_only_layers",)
# Keys a fixture may leave out, and what their absence means (the Llama block).
# rope_fp32: the RoPE tables in float32 as transformers computes them whatever the model's dtype
# (its rotary embeddings' inv_freq, angles, cos and sin), for a comparison with its float64 models.
OPTIONAL_INT_KEYS = {"sandwich_norms": 0, "norm_unit_offset": 0, "glu_act": 0, "o_bias": 0, "attn_sinks": 0,
                     "rope_yarn": 0, "rope_truncate": 1, "router_bias": 0, "expert_bias": 0, "rope_fp32": 0,
                     "linear_k_heads": 0, "linear_v_heads": 0, "linear_k_dim": 0, "linear_v_dim": 0,
                     "attn_output_gate": 0, "gdn_fused": 0}
OPTIONAL_FLOAT_KEYS = {"partial_rotary_factor": 0.0, "query_pre_attn_scalar": 0.0, "attn_logit_softcap": 0.0,
                       "final_logit_softcap": 0.0, "embed_scale": 1.0, "rope_local_theta": 0.0,
                       "rope_linear_factor": 0.0, "rope_beta_fast": 32.0, "rope_beta_slow": 1.0,
                       "rope_attention_factor": 0.0, "swiglu_limit": 0.0, "swiglu_alpha": 0.0}
OPTIONAL_LIST_KEYS = {"layer_windows": [], "layer_ropes": [], "layer_mixers": []}
TRAIN_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm")


IGNORE = -100  # cross_entropy's ignore_index for masked targets


class FixtureError(Exception):
    pass


def read_config(path):
    cfg = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise FixtureError(f"{path}:{lineno}: expected key=value, got '{line}'")
            if key in INT_KEYS or key in OPTIONAL_INT_KEYS:
                cfg[key] = int(value)
            elif key in FLOAT_KEYS or key in OPTIONAL_FLOAT_KEYS:
                cfg[key] = float(value)
            elif key in LIST_KEYS or key in OPTIONAL_LIST_KEYS:
                cfg[key] = [] if value == "-" else [int(v) for v in value.split(",")]
            else:
                raise FixtureError(f"{path}:{lineno}: unknown key '{key}'")
    for key in INT_KEYS + FLOAT_KEYS + LIST_KEYS:
        if key not in cfg and key not in TRAIN_KEYS:
            raise FixtureError(f"{path}: missing key '{key}'")
    for defaults in (OPTIONAL_INT_KEYS, OPTIONAL_FLOAT_KEYS, OPTIONAL_LIST_KEYS):
        for key, value in defaults.items():
            cfg.setdefault(key, value)
    for key in OPTIONAL_LIST_KEYS:
        if cfg[key] and len(cfg[key]) != cfg["num_layers"]:
            raise FixtureError(f"{path}: '{key}' has {len(cfg[key])} entries for {cfg['num_layers']} layers")
    return cfg


def window_of(cfg, layer):
    """The layer's attention window (0: every earlier key)."""
    return cfg["layer_windows"][layer] if cfg["layer_windows"] else 0


def rope_of(cfg, layer):
    """The layer's RoPE table: 0 the global one, 1 the local layers' (rope_local_theta)."""
    return cfg["layer_ropes"][layer] if cfg["layer_ropes"] else 0


def linear(cfg, layer):
    """Whether the layer's mixer is Gated DeltaNet (layer_mixers 1) rather than attention."""
    return bool(cfg["layer_mixers"]) and cfg["layer_mixers"][layer] == 1


def gdn_shapes(cfg, p):
    """Qwen3_5GatedDeltaNet's tensors (the conv1d's [C, 1, 4] as megatrain lists it, [C, 4])."""
    d = cfg["hidden_size"]
    key, value, hv = cfg["linear_k_heads"] * cfg["linear_k_dim"], cfg["linear_v_heads"] * cfg["linear_v_dim"], \
        cfg["linear_v_heads"]
    if cfg["gdn_fused"]:  # Qwen3-Next's
        projections = {p + "in_proj_qkvz.weight": (2 * key + 2 * value, d), p + "in_proj_ba.weight": (2 * hv, d)}
    else:
        projections = {p + "in_proj_qkv.weight": (2 * key + value, d), p + "in_proj_z.weight": (value, d),
                       p + "in_proj_b.weight": (hv, d), p + "in_proj_a.weight": (hv, d)}
    return {**projections, p + "conv1d.weight": (2 * key + value, 4), p + "A_log": (hv, 1), p + "dt_bias": (hv, 1),
            p + "norm.weight": (cfg["linear_v_dim"], 1), p + "out_proj.weight": (d, value)}


def sparse(cfg, layer):
    """Qwen2MoeDecoderLayer's rule: a mixture of experts unless the layer is in mlp_only_layers or
    off the decoder_sparse_step."""
    return (cfg["num_experts"] > 0 and layer not in cfg["mlp_only_layers"]
            and (layer + 1) % cfg["decoder_sparse_step"] == 0)


def router_name(cfg):
    """gpt-oss's router (the one with a bias) is mlp.router, the others' mlp.gate."""
    return "router" if cfg["router_bias"] else "gate"


def expected_shapes(cfg):
    """Hugging Face name -> (rows, cols) for every tensor the config implies (the experts' matrices
    stacked as transformers 5 fuses them, [E x 2F, D] and [E x D, F]; their biases [E x 2F] and
    [E x D] alike)."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_heads"] * cfg["head_dim"]
    kv = cfg["num_kv_heads"] * cfg["head_dim"]
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d, 1)}
    if not cfg["tie_embeddings"]:
        shapes["lm_head.weight"] = (v, d)
    for layer in range(cfg["num_layers"]):
        p = f"model.layers.{layer}."
        if cfg["sandwich_norms"]:
            shapes.update({p + "pre_feedforward_layernorm.weight": (d, 1),
                           p + "post_feedforward_layernorm.weight": (d, 1)})
        shapes.update({
            p + "input_layernorm.weight": (d, 1),
            p + "post_attention_layernorm.weight": (d, 1),
        })
        if linear(cfg, layer):
            shapes.update(gdn_shapes(cfg, p + "linear_attn."))
        else:
            shapes.update({
                p + "self_attn.q_proj.weight": (q * (2 if cfg["attn_output_gate"] else 1), d),
                p + "self_attn.k_proj.weight": (kv, d),
                p + "self_attn.v_proj.weight": (kv, d),
                p + "self_attn.o_proj.weight": (d, q),
            })
        if sparse(cfg, layer):
            e, fm, sh = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
            shapes.update({p + f"mlp.{router_name(cfg)}.weight": (e, d),
                           p + "mlp.experts.gate_up_proj": (e * 2 * fm, d),
                           p + "mlp.experts.down_proj": (e * d, fm)})
            if cfg["router_bias"]:
                shapes[p + "mlp.router.bias"] = (e, 1)
            if cfg["expert_bias"]:
                shapes.update({p + "mlp.experts.gate_up_proj_bias": (e * 2 * fm, 1),
                               p + "mlp.experts.down_proj_bias": (e * d, 1)})
            if sh:
                shapes.update({p + "mlp.shared_expert.gate_proj.weight": (sh, d),
                               p + "mlp.shared_expert.up_proj.weight": (sh, d),
                               p + "mlp.shared_expert.down_proj.weight": (d, sh),
                               p + "mlp.shared_expert_gate.weight": (1, d)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (f, d),
                           p + "mlp.up_proj.weight": (f, d),
                           p + "mlp.down_proj.weight": (d, f)})
        if linear(cfg, layer):
            continue
        if cfg["attention_bias"]:
            shapes.update({p + "self_attn.q_proj.bias": (q, 1),
                           p + "self_attn.k_proj.bias": (kv, 1),
                           p + "self_attn.v_proj.bias": (kv, 1)})
        if cfg["o_bias"]:
            shapes[p + "self_attn.o_proj.bias"] = (d, 1)
        if cfg["attn_sinks"]:
            shapes[p + "self_attn.sinks"] = (cfg["num_heads"], 1)
        if cfg["qk_norm"] == 1:
            shapes.update({p + "self_attn.q_norm.weight": (cfg["head_dim"], 1),
                           p + "self_attn.k_norm.weight": (cfg["head_dim"], 1)})
        elif cfg["qk_norm"] == 2:
            shapes.update({p + "self_attn.q_norm.weight": (q, 1),
                           p + "self_attn.k_norm.weight": (kv, 1)})
    return shapes


def read_tensor_list(path, cfg):
    """[(name, rows, cols)] in file order, checked against the config's shapes."""
    expected = expected_shapes(cfg)
    tensors = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            name, rows, cols = line.split()
            rows, cols = int(rows), int(cols)
            if name not in expected:
                raise FixtureError(f"{path}: tensor '{name}' is not part of this config")
            if expected[name] != (rows, cols):
                raise FixtureError(f"{path}: tensor '{name}' is [{rows}, {cols}], "
                                   f"the config implies {list(expected[name])}")
            tensors.append((name, rows, cols))
    missing = set(expected) - {name for name, _, _ in tensors}
    if missing:
        raise FixtureError(f"{path}: missing tensor '{sorted(missing)[0]}'")
    return tensors


def read_binary(path, dtype, count):
    data = torch.from_numpy(numpy.fromfile(path, dtype=dtype))
    if data.numel() != count:
        raise FixtureError(f"{path}: holds {data.numel()} values, expected {count}")
    return data


def load_params(directory, tensors, dtype):
    """name -> leaf tensor (1-D for vectors, 2-D for matrices) requiring grad."""
    total = sum(rows * cols for _, rows, cols in tensors)
    flat = read_binary(os.path.join(directory, "weights.bin"), "<f4", total).to(dtype)
    params, at = {}, 0
    for name, rows, cols in tensors:
        t = flat[at:at + rows * cols].clone()
        params[name] = (t if cols == 1 else t.view(rows, cols)).requires_grad_(True)
        at += rows * cols
    return params


def load_tokens(directory, cfg):
    steps = cfg.get("steps", 1)
    shape = (steps, cfg["batch"], cfg["seq_len"] + 1)
    tokens = read_binary(os.path.join(directory, "tokens.bin"), "<i4", math.prod(shape))
    tokens = tokens.view(shape).long()
    bad = (tokens < 0) | (tokens >= cfg["vocab_size"])
    if bad.any():
        raise FixtureError(f"tokens.bin: token id {int(tokens[bad][0])} is outside "
                           f"[0, {cfg['vocab_size']})")
    return tokens


def load_targets(directory, cfg, tokens):
    """Targets [steps][batch][seq]: tokens[..., 1:], IGNORE where mask.bin says 0."""
    targets = tokens[..., 1:].clone()
    path = os.path.join(directory, "mask.bin")
    if os.path.exists(path):
        mask = read_binary(path, "u1", targets.numel()).view(targets.shape)
        targets[mask == 0] = IGNORE
    return targets


def load_positions(directory, cfg):
    """Positions [steps][batch][seq] from positions.bin, or None."""
    path = os.path.join(directory, "positions.bin")
    if not os.path.exists(path):
        return None
    shape = (cfg.get("steps", 1), cfg["batch"], cfg["seq_len"])
    return read_binary(path, "<i4", math.prod(shape)).view(shape).long()


def rotary_dim(cfg):
    """The values of each head RoPE turns: transformers' int(head_dim * partial_rotary_factor)."""
    factor = cfg["partial_rotary_factor"]
    return int(cfg["head_dim"] * factor) if factor else cfg["head_dim"]


def yarn_inv_freq(cfg, inv_freq):
    """transformers' _compute_yarn_parameters: each frequency between its extrapolated (unscaled) and
    interpolated (divided by the factor) value along a linear ramp over the dimensions from where
    it turns beta_fast times over the original context to where it turns beta_slow times."""
    # dim: the values turned (all of head_dim, or partial_rotary_factor's share), two a frequency
    dim, base, factor = 2 * inv_freq.numel(), cfg["rope_theta"], cfg["rope_scaling_factor"]

    def correction_dim(rotations):
        return dim * math.log(cfg["rope_original_max_position"] / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(cfg["rope_beta_fast"]), correction_dim(cfg["rope_beta_slow"])
    if cfg["rope_truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolation_factor = 1 - ramp
    return inv_freq / factor * (1 - extrapolation_factor) + inv_freq * extrapolation_factor


def rope_attention_scaling(cfg, table):
    """What the rotary embedding multiplies cos and sin by: YaRN's attention factor, else 1."""
    if table == 1 or not cfg["rope_yarn"]:
        return 1.0
    factor = cfg["rope_scaling_factor"]
    return cfg["rope_attention_factor"] or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)


def rope_inv_freq(cfg, table=0, dtype=torch.float64):
    """Inverse frequencies in dtype: table 0 with rope_theta and its scaling (llama3's as
    transformers' _compute_llama3_parameters applies it, linear: divided by the factor, or yarn),
    table 1 the local layers' plain one with rope_local_theta."""
    hd = rotary_dim(cfg)
    theta = cfg["rope_local_theta"] if table == 1 else cfg["rope_theta"]
    inv_freq = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(dtype) / hd)
    if table == 1:
        return inv_freq
    if cfg["rope_linear_factor"]:
        return inv_freq / cfg["rope_linear_factor"]
    if cfg["rope_yarn"]:
        return yarn_inv_freq(cfg, inv_freq)
    factor = cfg["rope_scaling_factor"]
    if factor == 0:
        return inv_freq
    low, high = cfg["rope_low_freq_factor"], cfg["rope_high_freq_factor"]
    old_context = cfg["rope_original_max_position"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def gelu_tanh(x):
    """transformers' gelu_pytorch_tanh, written out (torch 1.13's F.gelu takes approximate="tanh" too)."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))


def l2norm(x, eps=1e-6):
    """transformers' l2norm (FLA's): x / sqrt(sum x^2 + eps) over the last dimension."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def gated_delta_rule(q, k, v, g, beta):
    """transformers' torch_recurrent_gated_delta_rule over one segment, [heads, tokens, dim], from a
    zero state: S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q."""
    heads, tokens, dk = k.shape
    state = torch.zeros(heads, dk, v.shape[-1], dtype=v.dtype)
    out = []
    for t in range(tokens):
        state = state * g[:, t].exp()[:, None, None]
        kv_mem = (state * k[:, t, :, None]).sum(dim=-2)
        delta = (v[:, t] - kv_mem) * beta[:, t, None]
        state = state + k[:, t, :, None] * delta[:, None, :]
        out.append((state * q[:, t, :, None]).sum(dim=-2))
    return torch.stack(out, dim=1)


def segments_of(positions):
    """[(start, end)] of one row's segments: each starts where its position is 0."""
    starts = (positions == 0).nonzero().flatten().tolist()
    return list(zip(starts, starts[1:] + [positions.numel()]))


def clamped_swiglu(gate, up, cfg):
    """GptOssExperts' activation: gate clamped from above and up on both sides at swiglu_limit,
    (up + 1) * gate * sigmoid(swiglu_alpha * gate)."""
    limit = cfg["swiglu_limit"]
    gate, up = gate.clamp(max=limit), up.clamp(min=-limit, max=limit)
    return (up + 1) * gate * torch.sigmoid(gate * cfg["swiglu_alpha"])


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Llama:
    def __init__(self, cfg, params, dtype):
        self.cfg, self.p, self.dtype = cfg, params, dtype

    def rms_norm(self, x, w):
        # Normalized in float64 whatever the model's dtype, then scaled in it (by 1 + w for Gemma).
        x64 = x.to(torch.float64)
        x64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        return x64.to(self.dtype) * (1 + w if self.cfg["norm_unit_offset"] else w)

    def softcap(self, x, cap):
        return cap * torch.tanh(x / cap) if cap else x

    def linear(self, x, name, bias=False):
        return F.linear(x, self.p[name + ".weight"], self.p[name + ".bias"] if bias else None)

    def attention(self, x, prefix, cos, sin, blocked):
        cfg = self.cfg
        b, s, _ = x.shape
        h, kvh, hd = cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]
        bias = bool(cfg["attention_bias"])
        # [b, s, heads*hd] -> [b, s, heads, hd]
        q = self.linear(x, prefix + "q_proj", bias)
        if cfg["attn_output_gate"]:
            # Qwen3NextAttention: each head's query, then its gate
            q, gate = torch.chunk(q.view(b, s, h, 2 * hd), 2, dim=-1)
            q, gate = q.reshape(b, s, h * hd), gate.reshape(b, s, h * hd)
        k = self.linear(x, prefix + "k_proj", bias)
        if cfg["qk_norm"] == 2:
            # OLMoE: one RMSNorm over the whole projection, before the heads are split.
            q = self.rms_norm(q, self.p[prefix + "q_norm.weight"])
            k = self.rms_norm(k, self.p[prefix + "k_norm.weight"])
        q, k = q.view(b, s, h, hd), k.view(b, s, kvh, hd)
        v = self.linear(x, prefix + "v_proj", bias).view(b, s, kvh, hd)
        if cfg["qk_norm"] == 1:
            # Qwen3: each head's hd values normalized on their own, one weight shared by the heads.
            q = self.rms_norm(q, self.p[prefix + "q_norm.weight"])
            k = self.rms_norm(k, self.p[prefix + "k_norm.weight"])
        # -> [b, heads, s, hd]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        # RoPE on the first rotary_dim values of each head, the rest as they are
        rot = cos.shape[-1]
        q = torch.cat((q[..., :rot] * cos + rotate_half(q[..., :rot]) * sin, q[..., rot:]), dim=-1)
        k = torch.cat((k[..., :rot] * cos + rotate_half(k[..., :rot]) * sin, k[..., rot:]), dim=-1)
        # Query head i reads key/value head i // (h / kvh).
        k = k.repeat_interleave(h // kvh, dim=1)
        v = v.repeat_interleave(h // kvh, dim=1)
        scalar = cfg["query_pre_attn_scalar"] or hd
        scores = self.softcap(q @ k.transpose(-1, -2) / math.sqrt(scalar), cfg["attn_logit_softcap"])
        scores = scores.masked_fill(blocked, float("-inf"))
        if cfg["attn_sinks"]:
            # gpt-oss: each head's sink logit, unscaled, one more softmax column whose value is none.
            sinks = self.p[prefix + "sinks"].view(1, h, 1, 1).expand(b, h, s, 1)
            probs = torch.softmax(torch.cat((scores, sinks), dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(b, s, h * hd)
        if cfg["attn_output_gate"]:
            out = out * torch.sigmoid(gate)
        return self.linear(out, prefix + "o_proj", bool(cfg["o_bias"]))

    def gdn(self, x, prefix, positions):
        """Qwen3_5GatedDeltaNet: the q/k/v projection through the causal depthwise conv1d and SiLU, q
        and k l2-normalised (q times dk^-0.5) and repeated to the value heads, the decay
        g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b), the gated delta rule, the gated
        RMSNorm with silu(z), out_proj. The convolution and the state start afresh on each segment."""
        cfg, p = self.cfg, self.p
        b, s, _ = x.shape
        hk, hv, dk, dv = cfg["linear_k_heads"], cfg["linear_v_heads"], cfg["linear_k_dim"], cfg["linear_v_dim"]
        key, value = hk * dk, hv * dv
        channels = 2 * key + value
        if cfg["gdn_fused"]:
            # Qwen3NextGatedDeltaNet.fix_query_key_value_ordering: each q/k head's group holds its q, its
            # k, its value heads' v and z; in_proj_ba's, its value heads' b and a
            r = hv // hk
            qkvz = self.linear(x, prefix + "in_proj_qkvz").view(b, s, hk, 2 * dk + 2 * r * dv)
            q, k, v, z = torch.split(qkvz, [dk, dk, r * dv, r * dv], dim=-1)
            mixed = torch.cat([t.reshape(b, s, -1) for t in (q, k, v)], dim=-1)
            z = z.reshape(b, s, hv, dv)
            b_in, a_in = torch.split(self.linear(x, prefix + "in_proj_ba").view(b, s, hk, 2 * r), [r, r], dim=-1)
            b_in, a_in = b_in.reshape(b, s, hv), a_in.reshape(b, s, hv)
        else:
            mixed = self.linear(x, prefix + "in_proj_qkv")
            z = self.linear(x, prefix + "in_proj_z").view(b, s, hv, dv)
            b_in, a_in = self.linear(x, prefix + "in_proj_b"), self.linear(x, prefix + "in_proj_a")
        beta = b_in.sigmoid()
        g = -p[prefix + "A_log"].exp() * F.softplus(a_in + p[prefix + "dt_bias"])
        kernel = p[prefix + "conv1d.weight"].view(channels, 1, 4)
        rows = []
        for i in range(b):
            for start, end in segments_of(positions[i]):
                n = end - start
                y = F.conv1d(mixed[i, start:end].t()[None], kernel, groups=channels, padding=3)[0, :, :n]
                q, k, v = torch.split(F.silu(y).t(), [key, key, value], dim=-1)
                q = l2norm(q.reshape(n, hk, dk).repeat_interleave(hv // hk, dim=1)) * dk ** -0.5
                k = l2norm(k.reshape(n, hk, dk).repeat_interleave(hv // hk, dim=1))
                v = v.reshape(n, hv, dv)
                o = gated_delta_rule(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                     g[i, start:end].t(), beta[i, start:end].t())
                rows.append(o.transpose(0, 1))
        o = torch.cat(rows).view(b, s, hv, dv)
        # Qwen3_5RMSNormGated: a plain weight, whatever the other norms' (1 + w)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"])
        o = p[prefix + "norm.weight"] * o * F.silu(z)
        return self.linear(o.reshape(b, s, value), prefix + "out_proj")

    def mlp(self, x, prefix):
        gate = self.linear(x, prefix + "gate_proj")
        up = self.linear(x, prefix + "up_proj")
        act = gelu_tanh(gate) if self.cfg["glu_act"] == 1 else F.silu(gate)
        return self.linear(act * up, prefix + "down_proj")

    def moe(self, x, prefix):
        """The sparse block of transformers' Qwen3Moe/Qwen2Moe/Mixtral/Olmoe SparseMoeBlock: the
        router's softmax, its top k (renormalised with norm_topk_prob), each expert's SwiGLU over its
        tokens weighted and added back, and Qwen2-MoE's shared expert behind a sigmoid gate. The
        router logits are kept for the load-balancing loss."""
        cfg, p = self.cfg, self.p
        b, s, d = x.shape
        e, k, fm = cfg["num_experts"], cfg["experts_per_token"], cfg["moe_intermediate_size"]
        h = x.reshape(-1, d)
        logits = F.linear(h, p[prefix + f"{router_name(cfg)}.weight"], p.get(prefix + "router.bias"))
        self.router_logits.append(logits)
        if cfg["router_bias"]:
            # GptOssTopKRouter: the k largest logits, then a softmax over them.
            top, chosen = torch.topk(logits, k, dim=-1)
            weights = torch.softmax(top, dim=-1)
        else:
            weights, chosen = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
            if cfg["norm_topk_prob"]:
                weights = weights / weights.sum(dim=-1, keepdim=True)
        gate_up = p[prefix + "experts.gate_up_proj"].view(e, 2 * fm, d)
        down = p[prefix + "experts.down_proj"].view(e, d, fm)
        gate_up_bias = p[prefix + "experts.gate_up_proj_bias"].view(e, 2 * fm) if cfg["expert_bias"] else None
        down_bias = p[prefix + "experts.down_proj_bias"].view(e, d) if cfg["expert_bias"] else None
        out = torch.zeros_like(h)
        for expert in range(e):
            token, slot = torch.where(chosen == expert)
            if token.numel() == 0:
                continue
            gu = F.linear(h[token], gate_up[expert], None if gate_up_bias is None else gate_up_bias[expert])
            gate, up = gu.chunk(2, dim=-1)
            act = clamped_swiglu(gate, up, cfg) if cfg["glu_act"] == 2 else F.silu(gate) * up
            y = F.linear(act, down[expert], None if down_bias is None else down_bias[expert])
            out = out.index_add(0, token, y * weights[token, slot, None])
        if cfg["shared_expert_intermediate_size"]:
            shared = self.mlp(h, prefix + "shared_expert.")
            out = out + torch.sigmoid(F.linear(h, p[prefix + "shared_expert_gate.weight"])) * shared
        return out.view(b, s, d)

    def load_balancing_loss(self, micro_batches):
        """transformers' load_balancing_loss_func over every sparse layer's router logits of one
        forward, without an attention mask; a step of several micro-batches is the mean of each
        one's (each a forward of its own)."""
        e, k = self.cfg["num_experts"], self.cfg["experts_per_token"]
        total = 0
        for part in range(micro_batches):
            logits = torch.cat([l.view(micro_batches, -1, e)[part] for l in self.router_logits], dim=0)
            probs = torch.softmax(logits, dim=-1)
            _, chosen = torch.topk(probs, k, dim=-1)
            tokens_per_expert = F.one_hot(chosen, e).to(probs.dtype).mean(dim=0)
            total = total + (tokens_per_expert * probs.mean(dim=0)[None, :]).sum() * e
        return total / micro_batches

    def loss(self, tokens, targets, positions=None):
        """Mean cross-entropy over the targets that are not IGNORE; inputs are tokens[:, :-1]; with
        output_router_logits, plus router_aux_loss_coef times the load-balancing loss.
        positions [batch, seq] (None: 0..seq-1): a query sees the keys at or before it whose
        segment (a run that starts where the position is 0) is its own."""
        self.router_logits = []
        cfg, p = self.cfg, self.p
        inputs = tokens[:, :-1]
        b, seq = inputs.shape
        if positions is None:
            positions = torch.arange(seq).expand(b, seq)
        tables = []
        rope_dtype = torch.float32 if cfg["rope_fp32"] else torch.float64
        for table in range(2):
            angles = positions.to(rope_dtype)[..., None] * rope_inv_freq(cfg, table, rope_dtype)
            angles = torch.cat((angles, angles), dim=-1)[:, None]  # [b, 1, seq, hd]: every head alike
            scaling = rope_attention_scaling(cfg, table)
            tables.append(((angles.cos() * scaling).to(self.dtype), (angles.sin() * scaling).to(self.dtype)))
        segment = torch.cumsum(positions == 0, dim=-1)
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        other = (segment[:, :, None] != segment[:, None, :])[:, None]
        # A window of w: a query at position i sees the keys at positions in (i - w, i].
        distance = positions[:, :, None] - positions[:, None, :]
        wte = p["model.embed_tokens.weight"]
        x = wte[inputs] * cfg["embed_scale"]
        for layer in range(cfg["num_layers"]):
            prefix = f"model.layers.{layer}."
            window = window_of(cfg, layer)
            blocked = future | other
            if window:
                blocked = blocked | (distance >= window)[:, None]
            cos, sin = tables[rope_of(cfg, layer)]
            n = self.rms_norm(x, p[prefix + "input_layernorm.weight"])
            if linear(cfg, layer):
                y = self.gdn(n, prefix + "linear_attn.", positions)
            else:
                y = self.attention(n, prefix + "self_attn.", cos, sin, blocked)
            if cfg["sandwich_norms"]:
                x = x + self.rms_norm(y, p[prefix + "post_attention_layernorm.weight"])
                n = self.rms_norm(x, p[prefix + "pre_feedforward_layernorm.weight"])
                x = x + self.rms_norm(self.mlp(n, prefix + "mlp."), p[prefix + "post_feedforward_layernorm.weight"])
                continue
            x = x + y
            n = self.rms_norm(x, p[prefix + "post_attention_layernorm.weight"])
            x = x + (self.moe(n, prefix + "mlp.") if sparse(cfg, layer) else self.mlp(n, prefix + "mlp."))
        x = self.rms_norm(x, p["model.norm.weight"])
        head = wte if cfg["tie_embeddings"] else p["lm_head.weight"]
        logits = self.softcap(x @ head.t(), cfg["final_logit_softcap"])
        ce = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1), ignore_index=IGNORE)
        if cfg["num_experts"] and cfg["output_router_logits"]:
            ce = ce + cfg["router_aux_loss_coef"] * self.load_balancing_loss(cfg["micro_batches"])
        return ce


def write_binary(path, values, numpy_dtype):
    values.detach().numpy().astype(numpy_dtype).tofile(path)


def flatten(tensors, params, what):
    return torch.cat([what(params[name]).reshape(-1) for name, _, _ in tensors])


def read_probes(path, tensors):
    record = numpy.dtype([("tensor", "<i8"), ("element", "<i8"), ("delta", "<f8")])
    probes = numpy.fromfile(path, dtype=record)
    for tensor, element, _ in probes:
        if not 0 <= tensor < len(tensors):
            raise FixtureError(f"{path}: probe tensor index {tensor} out of range")
        name, rows, cols = tensors[tensor]
        if not 0 <= element < rows * cols:
            raise FixtureError(f"{path}: probe element {element} outside '{name}'")
    return probes


def run_grads(directory, cfg, tensors):
    params = load_params(directory, tensors, torch.float64)
    tokens = load_tokens(directory, cfg)
    targets = load_targets(directory, cfg, tokens)[0]
    tokens = tokens[0]
    positions = load_positions(directory, cfg)
    positions = None if positions is None else positions[0]
    model = Llama(cfg, params, torch.float64)
    loss = model.loss(tokens, targets, positions)
    loss.backward()
    with open(os.path.join(directory, "ref_loss.txt"), "w") as f:
        f.write(f"{loss.item():.17g}\n")
    grads = flatten(tensors, params, lambda t: t.grad)
    write_binary(os.path.join(directory, "ref_grads.bin"), grads, "<f8")

    probes_path = os.path.join(directory, "probes.bin")
    if os.path.exists(probes_path):
        losses = []
        with torch.no_grad():
            for tensor, element, delta in read_probes(probes_path, tensors):
                flat = params[tensors[tensor][0]].view(-1)
                saved = flat[element].item()
                flat[element] = saved + delta
                losses.append(model.loss(tokens, targets, positions).item())
                flat[element] = saved
        write_binary(os.path.join(directory, "ref_probe_losses.bin"),
                     torch.tensor(losses, dtype=torch.float64), "<f8")


def run_train(directory, cfg, tensors):
    for key in TRAIN_KEYS:
        if key not in cfg:
            raise FixtureError(f"config.txt: train mode needs '{key}'")
    params = load_params(directory, tensors, torch.float32)
    tokens = load_tokens(directory, cfg)
    targets = load_targets(directory, cfg, tokens)
    positions = load_positions(directory, cfg)
    model = Llama(cfg, params, torch.float32)
    decay = [t for t in params.values() if t.dim() == 2]  # the experts' stacked matrices too
    no_decay = [t for t in params.values() if t.dim() != 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    losses = []
    for step in range(cfg["steps"]):
        optimizer.zero_grad()
        loss = model.loss(tokens[step], targets[step], None if positions is None else positions[step])
        loss.backward()
        if cfg["max_grad_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["max_grad_norm"])
        optimizer.step()
        losses.append(loss.item())
    with open(os.path.join(directory, "ref_losses.txt"), "w") as f:
        f.writelines(f"{v:.9g}\n" for v in losses)
    weights = flatten(tensors, params, lambda t: t)
    write_binary(os.path.join(directory, "ref_weights_after.bin"), weights, "<f4")


MODES = {"grads": run_grads, "train": run_train}


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        sys.exit("usage: llama_ref.py MODE DIR [MODE DIR ...]  (MODE: grads or train)")
    torch.set_num_threads(1)  # tiny models: threads only add noise to the timings
    for mode, directory in zip(argv[0::2], argv[1::2]):
        if mode not in MODES:
            sys.exit(f"llama_ref.py: unknown mode '{mode}' (grads or train)")
        try:
            cfg = read_config(os.path.join(directory, "config.txt"))
            tensors = read_tensor_list(os.path.join(directory, "tensors.txt"), cfg)
            MODES[mode](directory, cfg, tensors)
        except (FixtureError, OSError, ValueError) as e:
            sys.exit(f"llama_ref.py: {directory}: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
