#!/usr/bin/env python3
"""A mixture of experts' config.json (the hub's values, as src/model/families/*.c's presets hold them)
with its depth cut (layer_types cut with it): bench/moe.sh's Qwen3-30B-A3B, bench/moe_profile.sh's
OLMoE-1B-7B, bench/gpt_oss.sh's gpt-oss-120b and bench/qwen35.sh's Qwen3.5-35B-A3B text model, of as
many blocks as the host holds.

    python3 bench/moe_config.py qwen3-30b-a3b|olmoe-1b-7b|gpt-oss-120b|qwen3.5-35b-a3b LAYERS OUT.json
"""
import json
import sys

CONFIGS = {
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "tie_word_embeddings": False, "attention_bias": False,
        "use_sliding_window": False, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.001,
        "output_router_logits": False, "bos_token_id": 151643, "eos_token_id": 151645,
    },
    # openai/gpt-oss-120b's, without its quantization_config (random weights, no checkpoint).
    "gpt-oss-120b": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
        "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 18,
        "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
        "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128, "output_router_logits": False,
        "pad_token_id": 199999, "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                         "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "vocab_size": 201088,
    },
    # Qwen/Qwen3.5-35B-A3B's text_config as a text model's config.json.
    "qwen3.5-35b-a3b": {
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text", "attention_bias": False,
        "attention_dropout": 0.0, "attn_output_gate": True, "eos_token_id": 248044, "full_attention_interval": 4,
        "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_value_head_dim": 128, "max_position_embeddings": 262144, "moe_intermediate_size": 512,
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False, "num_attention_heads": 16,
        "num_experts": 256, "num_experts_per_tok": 8, "num_hidden_layers": 40, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False, "vocab_size": 248320,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
    },
    "olmoe-1b-7b": {
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 50304,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "attention_bias": False, "clip_qkv": None, "num_experts": 64, "num_experts_per_tok": 8,
        "norm_topk_prob": False, "output_router_logits": False, "router_aux_loss_coef": 0.01, "eos_token_id": 50279,
    },
}


def config(name, layers):
    """The hub's config of `name` cut to `layers` blocks."""
    cut = dict(CONFIGS[name], num_hidden_layers=layers)
    if "layer_types" in cut:
        cut["layer_types"] = cut["layer_types"][:layers]
    return cut


def main(argv):
    if len(argv) != 3 or argv[0] not in CONFIGS:
        sys.exit(f"usage: moe_config.py {'|'.join(CONFIGS)} LAYERS OUT.json")
    with open(argv[2], "w") as f:
        json.dump(config(argv[0], int(argv[1])), f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
