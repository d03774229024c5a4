/* gpt-oss (GptOssForCausalLM, model_type gpt_oss): every projection of the attention with a bias,
 * a learned sink logit a head, a 128-token sliding window on the even layers (layer_types), YaRN
 * RoPE; every block a mixture of experts of intermediate_size, the router with a bias, top-k by
 * logit then a softmax over the chosen (the same as a softmax renormalised over them), experts with
 * biases computing the clamped SwiGLU (util/glu.h: swiglu_limit, swiglu_alpha). On the hub its
 * experts are whole, x @ W's way round, gate and up interleaved, or as MXFP4 pairs (their forms). */
#include "model/families.h"

#include <math.h>
#include <string.h>

/* GptOssConfig's defaults where config.json does not say. */
#define DEFAULT_SLIDING_WINDOW 128
#define DEFAULT_SWIGLU_LIMIT 7.0f
#define DEFAULT_SWIGLU_ALPHA 1.702f

/* openai/gpt-oss-20b and -120b (config.json): L layers of E experts, sliding on the even layers. */
#define EVEN_LAYERS(L) {0x5555555555555555ull & ((1ull << (L)) - 1)} /* L < 64 */
#define GPT_OSS(L, E)                                                                                           \
    {.arch = MT_ARCH_GPT_OSS, .hidden_size = 2880, .intermediate_size = 2880, .num_layers = L, .num_heads = 64, \
     .num_kv_heads = 8, .head_dim = 64, .vocab_size = 201088, .max_position = 131072, .rms_norm_eps = 1e-5f,    \
     .rope_theta = 150000.0f, .rope_scaling_factor = 32.0f, .rope_scaling_yarn = 1,                             \
     .rope_original_max_position = 4096, .rope_beta_fast = 32.0f, .rope_beta_slow = 1.0f, .rope_truncate = 0,   \
     .attention_bias = 1, .attention_sinks = 1, .bos_token_id = -1, .eos_token_id = 200002, .num_experts = E,   \
     .experts_per_token = 4, .moe_intermediate_size = 2880, .norm_topk_prob = 1, .decoder_sparse_step = 1,      \
     .router_aux_loss_coef = 0.9f, .sliding_window = 128, .local_layers = EVEN_LAYERS(L),                       \
     .swiglu_limit = DEFAULT_SWIGLU_LIMIT, .swiglu_alpha = DEFAULT_SWIGLU_ALPHA}

static const mt_preset presets[] = {
    {"gpt-oss-20b", GPT_OSS(24, 32)},
    {"gpt-oss-120b", GPT_OSS(36, 128)},
};

/* experts_per_token: the original release's name for num_experts_per_tok (they must agree);
 * initial_context_length: its context before YaRN, which transformers does not read (rope_scaling's
 * original_max_position_embeddings holds it). */
static const char *const fields[] = {
    "attention_bias", "sliding_window", "num_experts", "num_local_experts", "num_experts_per_tok",
    "experts_per_token", "output_router_logits", "router_aux_loss_coef", "swiglu_limit", "swiglu_alpha",
    "initial_context_length", NULL};

static const mt_experts_defaults experts = {.experts = 128, .top_k = 4, .aux_coef = 0.001f};

static mt_status read_positive(const mt_json_src *s, const char *key, float *v) {
    MT_TRY(mt_json_get_float(s, key, 0, v));
    if (!(*v > 0) || !isfinite(*v))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' must be positive, got %g", s->source, key, (double)*v);
    return MT_OK;
}

/* An older name's value, where given, must be the one read. */
static mt_status agree(const mt_json_src *s, const char *key, int value, const char *with) {
    int v = value;
    MT_TRY(mt_json_get_int(s, key, 0, &v));
    if (v != value)
        return mt_fail(MT_ERR_INVALID, "%s: fields '%s' (%d) and '%s' (%d) disagree", s->source, key, v, with, value);
    return MT_OK;
}

/* sliding_window on the even layers, as GptOssConfig makes layer_types when absent. */
static mt_status read_window(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_sliding_window(s, c, DEFAULT_SLIDING_WINDOW, NULL, 0));
    if (mt_json_field(s, "layer_types") || !c->sliding_window) return MT_OK;
    memset(c->local_layers, 0, sizeof c->local_layers);
    for (int l = 0; l < c->num_layers; l += 2) mt_config_set_local(c, l);
    return MT_OK;
}

/* GptOssConfig's RoPE where config.json gives none (rope_scaling and rope_parameters read after). */
static void default_yarn(mt_config *c) {
    c->rope_scaling_yarn = 1;
    c->rope_scaling_factor = 32.0f;
    c->rope_beta_fast = 32.0f;
    c->rope_beta_slow = 1.0f;
    c->rope_truncate = 0;
    c->rope_original_max_position = 4096;
}

static mt_status read(const mt_json_src *s, mt_config *c) {
    if (!mt_json_field(s, "rope_scaling") && !mt_json_field(s, "rope_parameters")) default_yarn(c);
    c->attention_bias = 1;
    c->attention_sinks = 1; /* GptOssAttention's, whatever config.json says */
    MT_TRY(mt_json_get_bool(s, "attention_bias", &c->attention_bias));
    MT_TRY(mt_family_read_experts(s, c, &experts));
    MT_TRY(agree(s, "experts_per_token", c->experts_per_token, "num_experts_per_tok"));
    c->norm_topk_prob = 1; /* a softmax over the chosen experts' logits */
    c->swiglu_limit = DEFAULT_SWIGLU_LIMIT;
    c->swiglu_alpha = DEFAULT_SWIGLU_ALPHA;
    MT_TRY(read_positive(s, "swiglu_limit", &c->swiglu_limit));
    MT_TRY(read_positive(s, "swiglu_alpha", &c->swiglu_alpha));
    return read_window(s, c);
}

static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
    mt_family_write_experts(c, o, "num_local_experts");
    json_object_set_new(o, "swiglu_limit", mt_json_float(c->swiglu_limit));
    json_object_set_new(o, "swiglu_alpha", mt_json_float(c->swiglu_alpha));
    mt_family_write_sliding_window(c, o);
}

/* RoPE other than yarn would write back as none, which GptOssConfig reads as its yarn; every
 * GptOssAttention has sinks. */
static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_NONE));
    if (!c->attention_sinks) return mt_fail(MT_ERR_INVALID, "gpt-oss's attention has sinks (attention_sinks)");
    if (!c->rope_scaling_yarn) return mt_fail(MT_ERR_INVALID, "gpt-oss's RoPE is yarn (rope_scaling.rope_type)");
    MT_TRY(mt_family_no_shared_expert(c));
    if (!c->norm_topk_prob) return mt_fail(MT_ERR_INVALID, "gpt-oss's routing weights are always renormalised");
    if (!(c->swiglu_limit > 0) || !(c->swiglu_alpha > 0))
        return mt_fail(MT_ERR_INVALID, "gpt-oss's swiglu_limit and swiglu_alpha must be positive");
    return mt_family_experts_full_width(c);
}

static void plan(const mt_config *c, int l, mt_layer_spec *s) {
    mt_family_plan_common(c, l, s);
    s->attn.flags |= c->attention_bias ? MT_ATTN_BIAS_O : 0;
    s->ffn_spec.act = MT_GLU_SILU_CLAMPED;
    s->ffn_spec.clamp = c->swiglu_limit;
    s->ffn_spec.alpha = c->swiglu_alpha;
    s->ffn_spec.flags |= MT_FFN_EXPERT_BIAS | MT_FFN_ROUTER_BIAS;
}

/* mlp.router.weight and .bias; the experts whole under the roles' names, as GptOssExperts holds
 * them: gate_up_proj [E, D, 2F] (x @ W's way round, gate the even columns: gate_up[..., ::2]), its
 * bias [E, 2F] interleaved alike, down_proj [E, F, D]; the hub's MXFP4 pairs gate_up_proj_blocks
 * [E, 2F, D / 32, 16] and down_proj_blocks [E, D, F / 32, 16] (transformers' convert_moe_packed_tensors
 * decodes them, then transposes). */
static const mt_family_names names = {
    .suffix = {[MT_T_ROUTER] = "mlp.router.weight", [MT_T_ROUTER_BIAS] = "mlp.router.bias"},
    .form = {[MT_T_EXPERTS_GATE_UP] = {.interleaved = 1, .transposed = 1, .mxfp4 = 1},
             [MT_T_EXPERTS_GATE_UP_BIAS] = {.interleaved = 1},
             [MT_T_EXPERTS_DOWN] = {.transposed = 1, .mxfp4 = 1}}};

const mt_family mt_family_gpt_oss = {
    .arch = MT_ARCH_GPT_OSS, .architecture = "GptOssForCausalLM", .model_type = "gpt_oss",
    .hidden_act = "silu",
    .default_max_position = 131072, .default_head_dim = 64, .default_eps = 1e-5f, .default_theta = 150000.0f,
    .moe = 1, .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = plan, .plan_model = mt_family_plan_model_common, .names = &names};
