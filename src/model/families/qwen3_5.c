/* Qwen3.5 and Qwen3.6, the text model (Qwen3_5ForCausalLM, model_type qwen3_5_text; and
 * Qwen3_5MoeForCausalLM, qwen3_5_moe_text): three of four layers Gated DeltaNet (layer_types'
 * linear_attention, or every layer but each full_attention_interval-th), the others attention with
 * an output gate, per-head q/k norms and RoPE over the first partial_rotary_factor of each head;
 * every RMSNorm (1 + w) but the Gated DeltaNet's gated one; a SwiGLU MLP, or in the MoE variant
 * experts on every layer (top k renormalised, always) and a shared expert behind its sigmoid gate. */
#include "model/families.h"
#include "model/wrappers.h"

#include <string.h>

/* Qwen3_5TextConfig's defaults where config.json does not say. */
#define DEFAULT_INTERVAL 4 /* full_attention_interval */
#define DEFAULT_PARTIAL_ROTARY 0.25f

/* The hub's Qwen3.5 and Qwen3.6 text models (Qwen/Qwen3.5-27B's text_config): the dense one. */
#define QWEN3_5(D, F, L, H, KV, KH, VH)                                                                          \
    {.arch = MT_ARCH_QWEN3_5, .hidden_size = D, .intermediate_size = F, .num_layers = L, .num_heads = H,        \
     .num_kv_heads = KV, .head_dim = 256, .vocab_size = 248320, .max_position = 262144, .rms_norm_eps = 1e-6f, \
     .rope_theta = 10000000.0f, .partial_rotary_factor = 0.25f, .attn_output_gate = 1,                         \
     .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = -1, .eos_token_id = 248044,                                    \
     .linear_layers = EVERY_FOURTH_FULL(L), .linear_k_heads = KH, .linear_v_heads = VH, .linear_k_dim = 128,       \
     .linear_v_dim = 128}
/* layers l < L with (l + 1) % 4 != 0 linear, L <= 64 */
#define EVERY_FOURTH_FULL(L) {0x7777777777777777ull & ((L) >= 64 ? ~0ull : (1ull << ((L) % 64)) - 1)}

static const mt_preset presets[] = {
    {"qwen3.5-27b", QWEN3_5(5120, 17408, 64, 24, 4, 16, 48)},
};

/* The hub's Qwen3.5 and Qwen3.6 MoE text_configs (Qwen/Qwen3.5-35B-A3B: 256 experts of 512, top 8,
 * a shared expert of 512; Qwen/Qwen3.5-122B-A10B: 256 of 1024, top 8, shared 1024;
 * Qwen/Qwen3.5-397B-A17B: 512 of 1024, top 10, shared 1024). Their intermediate_size, which
 * config.json leaves out, is the shared expert's here. */
#define QWEN3_5_MOE(D, L, H, KV, KH, VH, E, K, F, SHARED)                                                        \
    {.arch = MT_ARCH_QWEN3_5_MOE, .hidden_size = D, .intermediate_size = SHARED, .num_layers = L, .num_heads = H, \
     .num_kv_heads = KV, .head_dim = 256, .vocab_size = 248320, .max_position = 262144, .rms_norm_eps = 1e-6f,   \
     .rope_theta = 10000000.0f, .partial_rotary_factor = 0.25f, .attn_output_gate = 1,                           \
     .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = -1, .eos_token_id = 248044,                                      \
     .linear_layers = EVERY_FOURTH_FULL(L), .linear_k_heads = KH, .linear_v_heads = VH, .linear_k_dim = 128,         \
     .linear_v_dim = 128, .num_experts = E, .experts_per_token = K, .moe_intermediate_size = F,                   \
     .shared_expert_intermediate_size = SHARED, .norm_topk_prob = 1, .decoder_sparse_step = 1,                    \
     .router_aux_loss_coef = 0.001f}

static const mt_preset moe_presets[] = {
    {"qwen3.5-35b-a3b", QWEN3_5_MOE(2048, 40, 16, 2, 16, 32, 256, 8, 512, 512)},
    {"qwen3.5-122b-a10b", QWEN3_5_MOE(3072, 48, 32, 2, 16, 64, 256, 8, 1024, 1024)},
    {"qwen3.5-397b-a17b", QWEN3_5_MOE(4096, 60, 32, 2, 16, 64, 512, 10, 1024, 1024)},
};

/* What Qwen3_5TextConfig reads and changes nothing computed here: the multi-token-prediction layers
 * (their tensors are not the text model's), the recurrent state's dtype at inference. */
static const char *const fields[] = {
    "attention_bias", "attention_dropout", "attn_output_gate", "full_attention_interval", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "partial_rotary_factor", "mamba_ssm_dtype", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", NULL};
static const char *const moe_fields[] = {
    "attention_bias", "attention_dropout", "attn_output_gate", "full_attention_interval", "linear_conv_kernel_dim",
    "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "partial_rotary_factor", "mamba_ssm_dtype", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings",
    "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
    "output_router_logits", "router_aux_loss_coef", "decoder_sparse_step", "mlp_only_layers", NULL};

/* Qwen3_5MoeTextConfig's defaults. */
static const mt_experts_defaults experts = {.experts = 256, .top_k = 8, .width = 512, .shared = 512,
                                            .aux_coef = 0.001f};

/* layer_types: linear_attention or full_attention a layer; absent, every full_attention_interval-th
 * layer full. */
static mt_status read_layer_types(const mt_json_src *s, mt_config *c) {
    const json_t *types = mt_json_field(s, "layer_types"), *kind;
    if (!types) {
        int interval = DEFAULT_INTERVAL;
        MT_TRY(mt_json_get_int(s, "full_attention_interval", 0, &interval));
        MT_TRY(mt_config_in_range("full_attention_interval", interval, 1, MT_CONFIG_MAX_LAYERS));
        for (int l = 0; l < c->num_layers; l++)
            if ((l + 1) % interval) mt_config_set_linear(c, l);
        return MT_OK;
    }
    if (!json_is_array(types) || json_array_size(types) != (size_t)c->num_layers)
        return mt_fail(MT_ERR_INVALID, "%s: field 'layer_types' must list num_hidden_layers (%d) strings", s->source,
                       c->num_layers);
    size_t i;
    json_array_foreach(types, i, kind) {
        const char *k = json_is_string(kind) ? json_string_value(kind) : "";
        if (!strcmp(k, "linear_attention")) mt_config_set_linear(c, (int)i);
        else if (strcmp(k, "full_attention"))
            return mt_fail(MT_ERR_INVALID, "%s: field 'layer_types' gives layer %zu '%s', which is not supported "
                           "(linear_attention and full_attention only)", s->source, i, k);
    }
    return MT_OK;
}

static mt_status read_linear(const mt_json_src *s, mt_config *c) {
    int kernel = MT_GDN_CONV_KERNEL;
    MT_TRY(mt_json_get_int(s, "linear_conv_kernel_dim", 0, &kernel));
    if (kernel != MT_GDN_CONV_KERNEL)
        return mt_fail(MT_ERR_INVALID, "%s: field 'linear_conv_kernel_dim' = %d is not supported (%d only)", s->source,
                       kernel, MT_GDN_CONV_KERNEL);
    c->linear_k_heads = 16, c->linear_v_heads = 32, c->linear_k_dim = c->linear_v_dim = 128;
    MT_TRY(mt_json_get_int(s, "linear_num_key_heads", 0, &c->linear_k_heads));
    MT_TRY(mt_json_get_int(s, "linear_num_value_heads", 0, &c->linear_v_heads));
    MT_TRY(mt_json_get_int(s, "linear_key_head_dim", 0, &c->linear_k_dim));
    MT_TRY(mt_json_get_int(s, "linear_value_head_dim", 0, &c->linear_v_dim));
    return read_layer_types(s, c);
}

mt_status mt_family_read_hybrid(const mt_json_src *s, mt_config *c, const char *architecture) {
    MT_TRY(mt_family_refuse_attention_bias(s, architecture));
    c->qk_norm = MT_QK_NORM_HEAD;
    c->partial_rotary_factor = DEFAULT_PARTIAL_ROTARY;
    /* transformers 4's top-level partial_rotary_factor (transformers 5's is in rope_parameters) */
    MT_TRY(mt_json_get_float(s, "partial_rotary_factor", 0, &c->partial_rotary_factor));
    c->attn_output_gate = 1;
    MT_TRY(mt_json_get_bool(s, "attn_output_gate", &c->attn_output_gate));
    return read_linear(s, c);
}

static mt_status read(const mt_json_src *s, mt_config *c) { return mt_family_read_hybrid(s, c, "Qwen3_5ForCausalLM"); }

/* Every layer's feed-forward is experts (Qwen3_5MoeDecoderLayer's), renormalised always; a dense
 * width, which config.json need not give, is the shared expert's. */
static mt_status read_moe(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_hybrid(s, c, "Qwen3_5MoeForCausalLM"));
    MT_TRY(mt_family_read_experts(s, c, &experts));
    MT_TRY(mt_json_get_int(s, "shared_expert_intermediate_size", 0, &c->shared_expert_intermediate_size));
    c->norm_topk_prob = 1;
    if (!c->intermediate_size) c->intermediate_size = c->shared_expert_intermediate_size;
    return MT_OK;
}

void mt_family_write_hybrid(const mt_config *c, json_t *o) {
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "attn_output_gate", json_boolean(c->attn_output_gate));
    json_object_set_new(o, "linear_conv_kernel_dim", json_integer(MT_GDN_CONV_KERNEL));
    json_object_set_new(o, "linear_num_key_heads", json_integer(c->linear_k_heads));
    json_object_set_new(o, "linear_num_value_heads", json_integer(c->linear_v_heads));
    json_object_set_new(o, "linear_key_head_dim", json_integer(c->linear_k_dim));
    json_object_set_new(o, "linear_value_head_dim", json_integer(c->linear_v_dim));
    json_t *types = json_array();
    for (int l = 0; l < c->num_layers; l++)
        json_array_append_new(types, json_string(mt_config_layer_is_linear(c, l) ? "linear_attention"
                                                                                 : "full_attention"));
    json_object_set_new(o, "layer_types", types);
}

static void write_moe(const mt_config *c, json_t *o) {
    mt_family_write_hybrid(c, o);
    mt_family_write_experts(c, o, "num_experts");
    json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->shared_expert_intermediate_size));
    mt_family_write_sparse_layers(c, o);
}

/* The Gated DeltaNet's heads: value heads a multiple of the q/k heads, each head at most 256 wide
 * (the backends' bound) and a multiple of 4. */
mt_status mt_family_validate_hybrid(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_HEAD));
    MT_TRY(mt_family_no_o_bias(c));
    int rotary = c->partial_rotary_factor > 0 ? (int)(c->head_dim * (double)c->partial_rotary_factor) : c->head_dim;
    if (!(c->partial_rotary_factor >= 0 && c->partial_rotary_factor <= 1) || rotary < 2 || rotary % 2)
        return mt_fail(MT_ERR_INVALID, "partial_rotary_factor %g of head_dim %d turns %d values of a head: not a "
                       "positive even number", (double)c->partial_rotary_factor, c->head_dim, rotary);
    MT_TRY(mt_config_in_range("linear_num_key_heads", c->linear_k_heads, 1, MT_CONFIG_MAX_HEADS));
    MT_TRY(mt_config_in_range("linear_num_value_heads", c->linear_v_heads, 1, MT_CONFIG_MAX_HEADS));
    if (c->linear_v_heads % c->linear_k_heads)
        return mt_fail(MT_ERR_INVALID, "linear_num_value_heads (%d) must be a multiple of linear_num_key_heads (%d)",
                       c->linear_v_heads, c->linear_k_heads);
    MT_TRY(mt_config_in_range("linear_key_head_dim", c->linear_k_dim, 4, 256));
    MT_TRY(mt_config_in_range("linear_value_head_dim", c->linear_v_dim, 4, 256));
    if (c->linear_k_dim % 4 || c->linear_v_dim % 4)
        return mt_fail(MT_ERR_INVALID, "linear_key_head_dim (%d) and linear_value_head_dim (%d) must be multiples of 4",
                       c->linear_k_dim, c->linear_v_dim);
    return MT_OK;
}

/* transformers makes every layer sparse, whatever decoder_sparse_step or mlp_only_layers say. */
static mt_status validate_moe(const mt_config *c) {
    MT_TRY(mt_family_validate_hybrid(c));
    MT_TRY(mt_config_in_range("shared_expert_intermediate_size", c->shared_expert_intermediate_size, 1,
                              MT_CONFIG_MAX_INTERMEDIATE));
    for (int l = 0; l < c->num_layers; l++)
        if (!mt_config_layer_is_moe(c, l))
            return mt_fail(MT_ERR_INVALID, "layer %d has no experts (decoder_sparse_step %d, mlp_only_layers): "
                           "Qwen3_5MoeForCausalLM has them on every layer", l, c->decoder_sparse_step);
    return MT_OK;
}

void mt_family_plan_hybrid(const mt_config *c, int l, mt_layer_spec *s) {
    mt_family_plan_common(c, l, s);
    s->norm_unit_offset = 1;
    if (mt_config_layer_is_linear(c, l)) s->mixer = MT_MIXER_GDN, s->attn.flags = 0;
    else if (c->attn_output_gate) s->attn.flags |= MT_ATTN_OUT_GATE;
}

void mt_family_plan_model_hybrid(const mt_config *c, mt_model_spec *m) {
    mt_family_plan_model_common(c, m);
    m->norm_unit_offset = 1;
}

const mt_family mt_family_qwen3_5 = {
    .arch = MT_ARCH_QWEN3_5, .architecture = "Qwen3_5ForCausalLM", .model_type = "qwen3_5_text",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_head_dim = 256, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields, .read = read, .write = mt_family_write_hybrid, .validate = mt_family_validate_hybrid,
    .plan = mt_family_plan_hybrid, .plan_model = mt_family_plan_model_hybrid};

const mt_family mt_family_qwen3_5_moe = {
    .arch = MT_ARCH_QWEN3_5_MOE, .architecture = "Qwen3_5MoeForCausalLM", .model_type = "qwen3_5_moe_text",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_head_dim = 256, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .moe = 1, .experts_only = 1, .presets = moe_presets, .num_presets = sizeof moe_presets / sizeof moe_presets[0],
    .fields = moe_fields, .read = read_moe, .write = write_moe, .validate = validate_moe, .plan = mt_family_plan_hybrid,
    .plan_model = mt_family_plan_model_hybrid};

/* Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration (the hub's Qwen3.5 and
 * Qwen3.6 checkpoints): the text model under text_config and model.language_model.*, a vision tower
 * (model.visual.*) and the multi-token prediction head (mtp.*), which are kept as they are. The
 * hub's text_configs spell every size, so the defaults are none: a config silent on one is refused
 * naming the field rather than given Qwen3_5TextConfig's. */
#define QWEN3_5_WRAPPER(ARCH, TYPE, TEXT_ARCH)                                                                    \
    {.architecture = ARCH, .model_type = TYPE, .text_key = "text_config", .text_architecture = TEXT_ARCH,          \
     .text_defaults = "{}", .layouts = {{"model.language_model.", "lm_head.weight", {"model.visual.", "mtp."}}},   \
     .kept_files = {"preprocessor_config.json", "video_preprocessor_config.json"}}
const mt_wrapper mt_wrapper_qwen3_5 =
    QWEN3_5_WRAPPER("Qwen3_5ForConditionalGeneration", "qwen3_5", "Qwen3_5ForCausalLM");
const mt_wrapper mt_wrapper_qwen3_5_moe =
    QWEN3_5_WRAPPER("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", "Qwen3_5MoeForCausalLM");
