/* Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention, and experts in the blocks decoder_sparse_step
 * and mlp_only_layers leave sparse, the chosen ones' weights renormalised where norm_topk_prob says. */
#include "model/families.h"

#define DEFAULT_SLIDING_WINDOW 4096

static const mt_preset presets[] = {
    /* Qwen/Qwen3-30B-A3B: 128 experts of 768, top 8 renormalised, every block sparse. */
    {"qwen3-30b-a3b", {.arch = MT_ARCH_QWEN3_MOE, .hidden_size = 2048, .intermediate_size = 6144,
                       .num_layers = 48, .num_heads = 32, .num_kv_heads = 4, .head_dim = 128,
                       .vocab_size = 151936, .max_position = 40960, .rms_norm_eps = 1e-6f,
                       .rope_theta = 1000000.0f, .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = 151643,
                       .eos_token_id = 151645, .num_experts = 128, .experts_per_token = 8,
                       .moe_intermediate_size = 768, .norm_topk_prob = 1, .decoder_sparse_step = 1,
                       .router_aux_loss_coef = 0.001f}},
};

static const char *const fields[] = {
    "attention_bias", "sliding_window", "use_sliding_window", "num_experts", "num_local_experts",
    "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
    "output_router_logits", "router_aux_loss_coef", NULL};

static const mt_experts_defaults experts = {.experts = 128, .top_k = 8, .width = 768, .aux_coef = 0.001f};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_full_attention(s));
    MT_TRY(mt_family_refuse_attention_bias(s, "Qwen3MoeForCausalLM"));
    c->qk_norm = MT_QK_NORM_HEAD;
    MT_TRY(mt_family_read_experts(s, c, &experts));
    MT_TRY(mt_json_get_bool(s, "norm_topk_prob", &c->norm_topk_prob));
    return mt_family_read_window(s, c, DEFAULT_SLIDING_WINDOW, 1);
}

static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "use_sliding_window", json_false());
    json_object_set_new(o, "attention_bias", json_false());
    mt_family_write_experts(c, o, "num_experts");
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    mt_family_write_sparse_layers(c, o);
}

static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_HEAD));
    MT_TRY(mt_family_no_o_bias(c));
    return mt_family_no_shared_expert(c);
}

const mt_family mt_family_qwen3_moe = {
    .arch = MT_ARCH_QWEN3_MOE, .architecture = "Qwen3MoeForCausalLM", .model_type = "qwen3_moe",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_eps = 1e-6f, .default_theta = 10000.0f, .moe = 1,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common};
