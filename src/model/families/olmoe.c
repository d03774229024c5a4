/* OLMoE (OlmoeForCausalLM): RMSNorm of q and k over the whole projections, every block sparse,
 * experts of intermediate_size, the chosen ones' weights renormalised where norm_topk_prob says. */
#include "model/families.h"

static const mt_preset presets[] = {
    /* allenai/OLMoE-1B-7B-0924: 64 experts of 1024, top 8 not renormalised; q/k RMSNorm over the
     * whole projections. */
    {"olmoe-1b-7b", {.arch = MT_ARCH_OLMOE, .hidden_size = 2048, .intermediate_size = 1024,
                     .num_layers = 16, .num_heads = 16, .num_kv_heads = 16, .head_dim = 128,
                     .vocab_size = 50304, .max_position = 4096, .rms_norm_eps = 1e-5f,
                     .rope_theta = 10000.0f, .qk_norm = MT_QK_NORM_FULL, .bos_token_id = -1,
                     .eos_token_id = 50279, .num_experts = 64, .experts_per_token = 8,
                     .moe_intermediate_size = 1024, .decoder_sparse_step = 1, .router_aux_loss_coef = 0.01f}},
};

static const char *const fields[] = {
    "attention_bias", "clip_qkv", "num_experts", "num_local_experts", "num_experts_per_tok", "norm_topk_prob",
    "output_router_logits", "router_aux_loss_coef", NULL};

static const mt_experts_defaults experts = {.experts = 64, .top_k = 8, .aux_coef = 0.01f};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_full_attention(s));
    MT_TRY(mt_family_refuse_attention_bias(s, "OlmoeForCausalLM"));
    c->qk_norm = MT_QK_NORM_FULL;
    MT_TRY(mt_family_read_experts(s, c, &experts));
    MT_TRY(mt_json_get_bool(s, "norm_topk_prob", &c->norm_topk_prob));
    if (mt_json_field(s, "clip_qkv"))
        return mt_fail(MT_ERR_INVALID, "%s: field 'clip_qkv' is not supported (null only)", s->source);
    return MT_OK;
}

static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "attention_bias", json_false());
    mt_family_write_experts(c, o, "num_experts");
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    json_object_set_new(o, "clip_qkv", json_null());
}

static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_FULL));
    MT_TRY(mt_family_no_o_bias(c));
    MT_TRY(mt_family_no_shared_expert(c));
    MT_TRY(mt_family_experts_full_width(c));
    if (c->num_heads * c->head_dim != c->hidden_size)
        return mt_fail(MT_ERR_INVALID, "OLMoE's head_dim is hidden_size / num_attention_heads");
    return MT_OK;
}

const mt_family mt_family_olmoe = {
    .arch = MT_ARCH_OLMOE, .architecture = "OlmoeForCausalLM", .model_type = "olmoe",
    .hidden_act = "silu",
    .default_max_position = 4096, .default_eps = 1e-5f, .default_theta = 10000.0f, .moe = 1,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common};
