/* Mixtral (MixtralForCausalLM): Mistral's attention and every block sparse, experts of
 * intermediate_size, a softmax over the chosen ones' logits; on the hub its experts and router go
 * by block_sparse_moe names (before transformers 5). */
#include "model/families.h"

static const mt_preset presets[] = {
    /* mistralai/Mixtral-8x7B-v0.1: 8 experts of 14336, top 2 (a softmax over the two). */
    {"mixtral-8x7b", {.arch = MT_ARCH_MIXTRAL, .hidden_size = 4096, .intermediate_size = 14336,
                      .num_layers = 32, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                      .vocab_size = 32000, .max_position = 32768, .rms_norm_eps = 1e-5f,
                      .rope_theta = 1000000.0f, .bos_token_id = 1, .eos_token_id = 2, .num_experts = 8,
                      .experts_per_token = 2, .moe_intermediate_size = 14336, .norm_topk_prob = 1,
                      .decoder_sparse_step = 1, .router_aux_loss_coef = 0.02f}},
};

static const char *const fields[] = {
    "sliding_window", "num_experts", "num_local_experts", "num_experts_per_tok", "output_router_logits",
    "router_aux_loss_coef", "router_jitter_noise", NULL};

static const mt_experts_defaults experts = {.experts = 8, .top_k = 2, .aux_coef = 0.001f};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_full_attention(s));
    MT_TRY(mt_family_read_experts(s, c, &experts));
    float jitter = 0;
    MT_TRY(mt_json_get_float(s, "router_jitter_noise", 0, &jitter));
    if (jitter != 0)
        return mt_fail(MT_ERR_INVALID, "%s: field 'router_jitter_noise' = %g is not supported (0 only)", s->source,
                       (double)jitter);
    c->norm_topk_prob = 1; /* a softmax over the chosen experts' logits */
    return mt_family_read_window(s, c, 0, 0); /* MixtralConfig's default: none */
}

static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "sliding_window", json_null());
    mt_family_write_experts(c, o, "num_local_experts");
    json_object_set_new(o, "router_jitter_noise", json_real(0.0));
}

static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_NONE));
    MT_TRY(mt_family_no_o_bias(c));
    MT_TRY(mt_family_no_shared_expert(c));
    if (!c->norm_topk_prob) return mt_fail(MT_ERR_INVALID, "Mixtral's routing weights are always renormalised");
    return mt_family_experts_full_width(c);
}

/* block_sparse_moe.experts.N.w1 (gate), w3 (up), w2 (down), block_sparse_moe.gate (the router). */
static const mt_family_names names = {
    .prefix = "block_sparse_moe", .gate = "w1", .up = "w3", .down = "w2", .router = "block_sparse_moe.gate.weight"};

const mt_family mt_family_mixtral = {
    .arch = MT_ARCH_MIXTRAL, .architecture = "MixtralForCausalLM", .model_type = "mixtral",
    .hidden_act = "silu",
    .default_max_position = 131072, .default_eps = 1e-5f, .default_theta = 1000000.0f, .moe = 1,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common, .names = &names};
