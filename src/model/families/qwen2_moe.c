/* Qwen2-MoE and Qwen1.5-MoE (Qwen2MoeForCausalLM): Qwen2's q/k/v biases (qkv_bias), experts in the
 * blocks decoder_sparse_step and mlp_only_layers leave sparse, and a shared expert behind a sigmoid
 * gate. */
#include "model/families.h"

#define DEFAULT_SLIDING_WINDOW 4096

static const mt_preset presets[] = {
    /* Qwen/Qwen1.5-MoE-A2.7B: 60 experts of 1408, top 4, and a shared expert of 5632 behind a
     * sigmoid gate; q/k/v biases. */
    {"qwen1.5-moe-a2.7b", {.arch = MT_ARCH_QWEN2_MOE, .hidden_size = 2048, .intermediate_size = 5632,
                           .num_layers = 24, .num_heads = 16, .num_kv_heads = 16, .head_dim = 128,
                           .vocab_size = 151936, .max_position = 8192, .rms_norm_eps = 1e-6f,
                           .rope_theta = 1000000.0f, .attention_bias = 1, .bos_token_id = 151643,
                           .eos_token_id = 151643, .num_experts = 60, .experts_per_token = 4,
                           .moe_intermediate_size = 1408, .shared_expert_intermediate_size = 5632,
                           .decoder_sparse_step = 1, .router_aux_loss_coef = 0.001f}},
};

static const char *const fields[] = {
    "sliding_window", "use_sliding_window", "qkv_bias", "num_experts", "num_local_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
    "mlp_only_layers", "output_router_logits", "router_aux_loss_coef", NULL};

static const mt_experts_defaults experts = {
    .experts = 60, .top_k = 4, .width = 1408, .shared = 5632, .aux_coef = 0.001f};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_full_attention(s));
    c->attention_bias = 1; /* Qwen2MoeConfig's qkv_bias (transformers 5; always on before) */
    MT_TRY(mt_json_get_bool(s, "qkv_bias", &c->attention_bias));
    MT_TRY(mt_family_read_experts(s, c, &experts));
    MT_TRY(mt_json_get_int(s, "shared_expert_intermediate_size", 0, &c->shared_expert_intermediate_size));
    MT_TRY(mt_json_get_bool(s, "norm_topk_prob", &c->norm_topk_prob));
    return mt_family_read_window(s, c, DEFAULT_SLIDING_WINDOW, 1);
}

static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "use_sliding_window", json_false());
    mt_family_write_experts(c, o, "num_experts");
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->shared_expert_intermediate_size));
    json_object_set_new(o, "qkv_bias", json_boolean(c->attention_bias));
    mt_family_write_sparse_layers(c, o);
}

static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_NONE));
    return mt_config_in_range("shared_expert_intermediate_size", c->shared_expert_intermediate_size, 1,
                              MT_CONFIG_MAX_INTERMEDIATE);
}

const mt_family mt_family_qwen2_moe = {
    .arch = MT_ARCH_QWEN2_MOE, .architecture = "Qwen2MoeForCausalLM", .model_type = "qwen2_moe",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_eps = 1e-6f, .default_theta = 10000.0f, .moe = 1,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common};
