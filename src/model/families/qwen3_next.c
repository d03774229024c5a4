/* Qwen3-Next (Qwen3NextForCausalLM): Qwen3.5's hybrid of Gated DeltaNet and gated attention
 * (families/qwen3_5.c) with the linear layers' projections fused, in_proj_qkvz and in_proj_ba, their
 * rows grouped by q/k head; experts (top k, renormalised where norm_topk_prob says) and a shared
 * expert behind its sigmoid gate in the blocks decoder_sparse_step and mlp_only_layers leave sparse,
 * a dense SwiGLU MLP in the others. */
#include "model/families.h"

/* Qwen/Qwen3-Next-80B-A3B: 512 experts of 512, top 10, a shared expert of 512, every layer sparse;
 * three Gated DeltaNet layers (32 value heads over 16 q/k heads of 128) to one attention layer. */
static const mt_preset presets[] = {
    {"qwen3-next-80b-a3b", {.arch = MT_ARCH_QWEN3_NEXT, .hidden_size = 2048, .intermediate_size = 5120,
                            .num_layers = 48, .num_heads = 16, .num_kv_heads = 2, .head_dim = 256,
                            .vocab_size = 151936, .max_position = 262144, .rms_norm_eps = 1e-6f,
                            .rope_theta = 10000000.0f, .partial_rotary_factor = 0.25f, .attn_output_gate = 1,
                            .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = 151643, .eos_token_id = 151645,
                            .linear_layers = {0x0000777777777777ull}, .linear_k_heads = 16, .linear_v_heads = 32,
                            .linear_k_dim = 128, .linear_v_dim = 128, .num_experts = 512, .experts_per_token = 10,
                            .moe_intermediate_size = 512, .shared_expert_intermediate_size = 512,
                            .norm_topk_prob = 1, .decoder_sparse_step = 1, .router_aux_loss_coef = 0.001f}},
};

static const char *const fields[] = {
    "attention_bias", "attention_dropout", "full_attention_interval", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "partial_rotary_factor", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
    "output_router_logits", "router_aux_loss_coef", NULL};

/* Qwen3NextConfig's defaults. */
static const mt_experts_defaults experts = {.experts = 512, .top_k = 10, .width = 512, .shared = 512,
                                            .aux_coef = 0.001f};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_hybrid(s, c, "Qwen3NextForCausalLM"));
    if (!c->attn_output_gate) /* Qwen3NextAttention always gates: no config field turns it off */
        return mt_fail(MT_ERR_INVALID, "%s: field 'attn_output_gate' = false: Qwen3-Next's attention always has its "
                       "output gate", s->source);
    MT_TRY(mt_family_read_experts(s, c, &experts));
    MT_TRY(mt_json_get_int(s, "shared_expert_intermediate_size", 0, &c->shared_expert_intermediate_size));
    c->norm_topk_prob = 1;
    return mt_json_get_bool(s, "norm_topk_prob", &c->norm_topk_prob);
}

/* The hybrid's fields but the output gate, which Qwen3NextConfig does not have. */
static void write(const mt_config *c, json_t *o) {
    mt_family_write_hybrid(c, o);
    json_object_del(o, "attn_output_gate");
    mt_family_write_experts(c, o, "num_experts");
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->shared_expert_intermediate_size));
    mt_family_write_sparse_layers(c, o);
}

static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_validate_hybrid(c));
    return mt_config_in_range("shared_expert_intermediate_size", c->shared_expert_intermediate_size, 1,
                              MT_CONFIG_MAX_INTERMEDIATE);
}

static void plan(const mt_config *c, int l, mt_layer_spec *s) {
    mt_family_plan_hybrid(c, l, s);
    if (s->mixer == MT_MIXER_GDN) s->gdn.flags |= MT_GDN_FUSED;
}

const mt_family mt_family_qwen3_next = {
    .arch = MT_ARCH_QWEN3_NEXT, .architecture = "Qwen3NextForCausalLM", .model_type = "qwen3_next",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_head_dim = 256, .default_eps = 1e-6f, .default_theta = 10000.0f, .moe = 1,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate, .plan = plan, .plan_model = mt_family_plan_model_hybrid};
