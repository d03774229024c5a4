#!/usr/bin/env python3
"""A mixture of experts' config.json (the hub's values, as src/model/families' presets hold them)
with its depth cut: bench/moe.sh's Qwen3-30B-A3B and bench/moe_profile.sh's OLMoE-1B-7B of as many
blocks as the host holds.

    python3 bench/moe_config.py qwen3-30b-a3b|olmoe-1b-7b LAYERS OUT.json
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
    "olmoe-1b-7b": {
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 50304,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "attention_bias": False, "clip_qkv": None, "num_experts": 64, "num_experts_per_tok": 8,
        "norm_topk_prob": False, "output_router_logits": False, "router_aux_loss_coef": 0.01, "eos_token_id": 50279,
    },
}


def main(argv):
    if len(argv) != 3 or argv[0] not in CONFIGS:
        sys.exit(f"usage: moe_config.py {'|'.join(CONFIGS)} LAYERS OUT.json")
    config = dict(CONFIGS[argv[0]], num_hidden_layers=int(argv[1]))
    with open(argv[2], "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
