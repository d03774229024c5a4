/* The registry of families (model/families.h) and what their files share. */
#include "model/families.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

extern const mt_family mt_family_llama, mt_family_mistral, mt_family_qwen2, mt_family_qwen3, mt_family_qwen3_moe,
    mt_family_qwen2_moe, mt_family_mixtral, mt_family_olmoe, mt_family_gemma3, mt_family_gemma2, mt_family_gpt_oss,
    mt_family_qwen3_5, mt_family_qwen3_5_moe, mt_family_qwen3_next;

/* In this order the architectures are named and the presets listed (mt_config_preset_names). */
const mt_family *const mt_families[] = {&mt_family_llama,     &mt_family_mistral,   &mt_family_qwen2,
                                        &mt_family_qwen3,     &mt_family_qwen3_moe, &mt_family_qwen2_moe,
                                        &mt_family_mixtral,   &mt_family_olmoe,     &mt_family_gemma3,
                                        &mt_family_gemma2,    &mt_family_gpt_oss,   &mt_family_qwen3_5,
                                        &mt_family_qwen3_5_moe, &mt_family_qwen3_next, NULL};

const mt_family *mt_family_find(const char *architecture, const char *model_type) {
    for (const mt_family *const *f = mt_families; *f; f++)
        if (architecture ? !strcmp(architecture, (*f)->architecture) : !strcmp(model_type, (*f)->model_type))
            return *f;
    return NULL;
}

const mt_family *mt_family_of(mt_arch arch) {
    for (const mt_family *const *f = mt_families; *f; f++)
        if ((*f)->arch == arch) return *f;
    return NULL;
}

const char *mt_family_architectures(void) {
    static char list[512];
    if (list[0]) return list;
    size_t at = 0;
    for (const mt_family *const *f = mt_families; *f && at < sizeof list; f++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", f == mt_families ? "" : ", ", (*f)->architecture);
    return list;
}

mt_layer_spec mt_layer_spec_of(const mt_config *c, int l) {
    mt_layer_spec s;
    memset(&s, 0, sizeof s);
    mt_family_of(c->arch)->plan(c, l, &s);
    mt_model_spec m = mt_model_spec_of(c);
    if (s.attn.rope >= 0 && s.attn.rope < m.num_ropes) {
        float factor = mt_rope_attention_factor(&m.rope[s.attn.rope]);
        if (factor != 1.0f)
            s.attn.q_scale = (s.attn.q_scale > 0 ? s.attn.q_scale : 1.0f / sqrtf((float)c->head_dim)) * factor * factor;
    }
    return s;
}

mt_model_spec mt_model_spec_of(const mt_config *c) {
    mt_model_spec m;
    memset(&m, 0, sizeof m);
    mt_family_of(c->arch)->plan_model(c, &m);
    return m;
}

static int mlp_only(const mt_config *c, int l) { return (int)(c->mlp_only_layers[l / 64] >> (l % 64)) & 1; }

/* Block l is sparse when (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers. */
static int sparse(const mt_config *c, int l) {
    return c->num_experts > 0 && c->decoder_sparse_step > 0 && (l + 1) % c->decoder_sparse_step == 0 &&
           !mlp_only(c, l);
}

void mt_family_plan_common(const mt_config *c, int l, mt_layer_spec *s) {
    s->mixer = MT_MIXER_ATTENTION;
    s->attn.flags = (c->attention_bias ? MT_ATTN_BIAS_QKV : 0) |
                    (c->qk_norm == MT_QK_NORM_HEAD ? MT_ATTN_QK_NORM_HEAD : 0) |
                    (c->qk_norm == MT_QK_NORM_FULL ? MT_ATTN_QK_NORM_FULL : 0) |
                    (c->attention_sinks ? MT_ATTN_SINKS : 0);
    s->ffn = sparse(c, l) ? MT_FFN_MOE : MT_FFN_DENSE;
    s->ffn_spec.act = MT_GLU_SILU;
    if (s->ffn == MT_FFN_MOE)
        s->ffn_spec.flags = (c->shared_expert_intermediate_size ? MT_FFN_SHARED_EXPERT : 0) |
                            (c->norm_topk_prob ? MT_FFN_RENORM : 0);
    s->norm_eps = c->rms_norm_eps;
    s->attn.window = mt_config_layer_is_local(c, l) ? c->sliding_window : 0;
}

void mt_family_plan_model_common(const mt_config *c, mt_model_spec *m) {
    m->norm_eps = c->rms_norm_eps;
    m->embed_scale = 1.0f;
    m->num_ropes = 1;
    mt_rope_type scaled = c->rope_scaling_linear ? MT_ROPE_LINEAR
                          : c->rope_scaling_yarn ? MT_ROPE_YARN
                                                 : MT_ROPE_LLAMA3;
    m->rope[0] = (mt_rope_spec){.type = c->rope_scaling_factor != 0 ? scaled : MT_ROPE_DEFAULT,
                                .theta = c->rope_theta,
                                .factor = c->rope_scaling_factor,
                                .low_freq_factor = c->rope_low_freq_factor,
                                .high_freq_factor = c->rope_high_freq_factor,
                                .original_max_position = c->rope_original_max_position,
                                .beta_fast = c->rope_beta_fast,
                                .beta_slow = c->rope_beta_slow,
                                .truncate = c->rope_truncate,
                                .attention_factor = c->rope_attention_factor,
                                .partial = c->partial_rotary_factor};
}

/* ---- Gemma's block (families/gemma3.c, families/gemma2.c) ---- */

const mt_family_names mt_family_gemma_names = {.suffix = {
    [MT_T_ATTN_POST_NORM] = "post_attention_layernorm.weight",
    [MT_T_MLP_NORM] = "pre_feedforward_layernorm.weight",
    [MT_T_FFN_POST_NORM] = "post_feedforward_layernorm.weight",
}};

void mt_family_plan_gemma(const mt_config *c, int l, mt_layer_spec *s) {
    mt_family_plan_common(c, l, s);
    s->attn.flags |= MT_ATTN_POST_NORM;
    s->attn.q_scale = c->query_pre_attn_scalar > 0 ? 1.0f / sqrtf(c->query_pre_attn_scalar) : 0.0f;
    s->attn.logit_softcap = c->attn_logit_softcap;
    s->attn.rope = mt_config_layer_is_local(c, l) && c->rope_local_theta > 0 ? 1 : 0;
    s->ffn_spec.act = MT_GLU_GELU_TANH;
    s->ffn_spec.flags |= MT_FFN_POST_NORM;
    s->norm_unit_offset = 1;
}

void mt_family_plan_model_gemma(const mt_config *c, mt_model_spec *m) {
    mt_family_plan_model_common(c, m);
    m->norm_unit_offset = 1;
    m->embed_scale = sqrtf((float)c->hidden_size);
    m->logit_softcap = c->final_logit_softcap;
    if (c->rope_local_theta > 0)
        m->rope[m->num_ropes++] = (mt_rope_spec){.type = MT_ROPE_DEFAULT, .theta = c->rope_local_theta};
}

/* A soft cap: its default when absent, none when null. */
static mt_status read_softcap(const mt_json_src *s, const char *key, float default_cap, float *cap) {
    *cap = default_cap;
    if (!json_object_get(s->obj, key)) return MT_OK;
    *cap = 0;
    MT_TRY(mt_json_get_float(s, key, 0, cap));
    if (!(*cap >= 0) || !isfinite(*cap))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' must be positive or null, got %g", s->source, key,
                       (double)*cap);
    return MT_OK;
}

mt_status mt_family_read_gemma(const mt_json_src *s, mt_config *c, const char *act, float default_scalar,
                               float default_attn_cap, float default_final_cap) {
    const char *activation = act;
    MT_TRY(mt_json_get_string(s, "hidden_activation", &activation));
    if (strcmp(activation, act))
        return mt_fail(MT_ERR_INVALID, "%s: field 'hidden_activation' = '%s' is not supported (%s only)", s->source,
                       activation, act);
    if (!mt_json_field(s, "tie_word_embeddings")) c->tie_embeddings = 1; /* Gemma's configs tie by default */
    /* Gemma2Config's and Gemma3TextConfig's default, not Llama's "as many as the query heads" */
    if (!mt_json_field(s, "num_key_value_heads")) c->num_kv_heads = 4;
    c->query_pre_attn_scalar = default_scalar;
    MT_TRY(mt_json_get_float(s, "query_pre_attn_scalar", 0, &c->query_pre_attn_scalar));
    if (!(c->query_pre_attn_scalar > 0) || !isfinite(c->query_pre_attn_scalar))
        return mt_fail(MT_ERR_INVALID, "%s: field 'query_pre_attn_scalar' must be positive, got %g", s->source,
                       (double)c->query_pre_attn_scalar);
    MT_TRY(read_softcap(s, "attn_logit_softcapping", default_attn_cap, &c->attn_logit_softcap));
    return read_softcap(s, "final_logit_softcapping", default_final_cap, &c->final_logit_softcap);
}

static json_t *softcap_json(float cap) { return cap > 0 ? mt_json_float(cap) : json_null(); }

void mt_family_write_gemma(const mt_config *c, json_t *o, const char *act) {
    json_object_set_new(o, "hidden_activation", json_string(act));
    /* an integer where it is one: transformers 5's Gemma configs type it int and refuse 256.0 */
    float scalar = c->query_pre_attn_scalar;
    json_object_set_new(o, "query_pre_attn_scalar", scalar == floorf(scalar) && scalar < 1e9f
                                                        ? json_integer((json_int_t)scalar) : mt_json_float(scalar));
    json_object_set_new(o, "attn_logit_softcapping", softcap_json(c->attn_logit_softcap));
    json_object_set_new(o, "final_logit_softcapping", softcap_json(c->final_logit_softcap));
}

/* ---- what the families' config.json readers and writers share ---- */

mt_status mt_family_read_window(const mt_json_src *s, const mt_config *c, int default_window, int gated) {
    int window = default_window;
    const char *key = "sliding_window";
    if (gated) {
        int use = 0;
        MT_TRY(mt_json_get_bool(s, "use_sliding_window", &use));
        if (!use) return MT_OK;
        key = "use_sliding_window";
    }
    if (json_object_get(s->obj, "sliding_window")) { /* present, possibly null */
        window = 0;
        MT_TRY(mt_json_get_int(s, "sliding_window", 0, &window));
    }
    if (window > 0 && window < c->max_position)
        return mt_fail(MT_ERR_INVALID,
                       "%s: field '%s' enables a sliding attention window of %d tokens (< "
                       "max_position_embeddings %d), which is not supported",
                       s->source, key, window, c->max_position);
    return MT_OK;
}

mt_status mt_family_read_sliding_window(const mt_json_src *s, mt_config *c, int default_window, const char *gate,
                                        int default_first_local) {
    int window = default_window, first_local = 0;
    if (gate) {
        int use = 0;
        MT_TRY(mt_json_get_bool(s, gate, &use));
        if (!use) return mt_family_read_layer_types(s, c);
        first_local = default_first_local;
        MT_TRY(mt_json_get_int(s, "max_window_layers", 0, &first_local));
        MT_TRY(mt_config_in_range("max_window_layers", first_local, 0, MT_CONFIG_MAX_LAYERS));
    }
    if (json_object_get(s->obj, "sliding_window")) { /* present, possibly null */
        window = 0;
        MT_TRY(mt_json_get_int(s, "sliding_window", 0, &window));
    }
    /* A window the context never reaches changes nothing: kept as none, so that the config writes
     * back as it did. */
    if (window > 0 && window < c->max_position) {
        c->sliding_window = window;
        for (int l = first_local; l < c->num_layers; l++) mt_config_set_local(c, l);
    }
    return mt_family_read_layer_types(s, c);
}

mt_status mt_family_read_layer_types(const mt_json_src *s, mt_config *c) {
    const json_t *types = mt_json_field(s, "layer_types"), *kind;
    if (!types) return MT_OK;
    if (!json_is_array(types) || json_array_size(types) != (size_t)c->num_layers)
        return mt_fail(MT_ERR_INVALID, "%s: field 'layer_types' must list num_hidden_layers (%d) strings",
                       s->source, c->num_layers);
    memset(c->local_layers, 0, sizeof c->local_layers);
    size_t i;
    json_array_foreach(types, i, kind) {
        const char *k = json_is_string(kind) ? json_string_value(kind) : "";
        if (!strcmp(k, "sliding_attention")) {
            if (!c->sliding_window)
                return mt_fail(MT_ERR_INVALID, "%s: field 'layer_types' makes layer %zu sliding_attention, but "
                               "sliding_window gives no window shorter than the context", s->source, i);
            mt_config_set_local(c, (int)i);
        } else if (strcmp(k, "full_attention")) {
            return mt_fail(MT_ERR_INVALID, "%s: field 'layer_types' gives layer %zu '%s', which is not supported "
                           "(full_attention and sliding_attention only)", s->source, i, k);
        }
    }
    return MT_OK;
}

void mt_family_write_sliding_window(const mt_config *c, json_t *o) {
    json_object_set_new(o, "sliding_window", c->sliding_window ? json_integer(c->sliding_window) : json_null());
    if (!c->sliding_window) return;
    json_t *types = json_array();
    for (int l = 0; l < c->num_layers; l++)
        json_array_append_new(types, json_string(mt_config_layer_is_local(c, l) ? "sliding_attention"
                                                                                 : "full_attention"));
    json_object_set_new(o, "layer_types", types);
}

/* transformers 5 lists each layer's attention kind; anything but full attention is refused. */
mt_status mt_family_read_full_attention(const mt_json_src *s) {
    const json_t *types = mt_json_field(s, "layer_types"), *kind;
    if (!types) return MT_OK;
    if (!json_is_array(types)) return mt_json_wrong_type(s, "layer_types", "a list of strings", types);
    size_t i;
    json_array_foreach(types, i, kind) {
        if (!json_is_string(kind)) return mt_json_wrong_type(s, "layer_types", "a list of strings", types);
        if (strcmp(json_string_value(kind), "full_attention"))
            return mt_fail(MT_ERR_INVALID, "%s: field 'layer_types' gives layer %zu '%s', which is not supported "
                           "(full_attention only)", s->source, i, json_string_value(kind));
    }
    return MT_OK;
}


mt_status mt_family_refuse_attention_bias(const mt_json_src *s, const char *architecture) {
    int bias = 0;
    MT_TRY(mt_json_get_bool(s, "attention_bias", &bias));
    if (bias)
        return mt_fail(MT_ERR_INVALID, "%s: field 'attention_bias' = true is not supported for %s (it adds "
                       "q/k/v and o_proj biases)", s->source, architecture);
    return MT_OK;
}

/* mlp_only_layers: the blocks that keep a dense MLP, each named once within the model. */
static mt_status read_mlp_only(const mt_json_src *s, mt_config *c) {
    const json_t *list = mt_json_field(s, "mlp_only_layers"), *item;
    if (!list) return MT_OK;
    if (!json_is_array(list)) return mt_json_wrong_type(s, "mlp_only_layers", "a list of integers", list);
    size_t i;
    json_array_foreach(list, i, item) {
        if (!json_is_integer(item)) return mt_json_wrong_type(s, "mlp_only_layers", "a list of integers", list);
        json_int_t l = json_integer_value(item);
        if (l < 0 || l >= c->num_layers)
            return mt_fail(MT_ERR_INVALID, "%s: field 'mlp_only_layers' names layer %lld of a model of %d "
                           "(num_hidden_layers)", s->source, (long long)l, c->num_layers);
        c->mlp_only_layers[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return MT_OK;
}

mt_status mt_family_read_experts(const mt_json_src *s, mt_config *c, const mt_experts_defaults *d) {
    c->num_experts = d->experts;
    c->experts_per_token = d->top_k;
    c->moe_intermediate_size = d->width;
    c->shared_expert_intermediate_size = d->shared;
    c->router_aux_loss_coef = d->aux_coef;
    c->decoder_sparse_step = 1;
    int experts = -1, local = -1;
    MT_TRY(mt_json_get_int(s, "num_experts", 0, &experts));
    MT_TRY(mt_json_get_int(s, "num_local_experts", 0, &local));
    /* -1 above means not given: a negative count given is refused by name, never defaulted. */
    const char *negative = mt_json_field(s, "num_experts") && experts < 0         ? "num_experts"
                           : mt_json_field(s, "num_local_experts") && local < 0 ? "num_local_experts"
                                                                                 : NULL;
    if (negative)
        return mt_fail(MT_ERR_INVALID, "%s: field '%s%s' = %d: a count of experts cannot be negative", s->source,
                       s->scope, negative, experts < 0 && mt_json_field(s, "num_experts") ? experts : local);
    if (experts >= 0 && local >= 0 && experts != local)
        return mt_fail(MT_ERR_INVALID, "%s: fields 'num_experts' (%d) and 'num_local_experts' (%d) disagree",
                       s->source, experts, local);
    if (experts >= 0 || local >= 0) c->num_experts = experts >= 0 ? experts : local;
    MT_TRY(mt_json_get_int(s, "num_experts_per_tok", 0, &c->experts_per_token));
    MT_TRY(mt_json_get_bool(s, "output_router_logits", &c->output_router_logits));
    MT_TRY(mt_json_get_float(s, "router_aux_loss_coef", 0, &c->router_aux_loss_coef));
    if (!d->width) { /* the experts are intermediate_size wide, every block sparse */
        c->moe_intermediate_size = c->intermediate_size;
        return MT_OK;
    }
    MT_TRY(mt_json_get_int(s, "moe_intermediate_size", 0, &c->moe_intermediate_size));
    MT_TRY(mt_json_get_int(s, "decoder_sparse_step", 0, &c->decoder_sparse_step));
    return read_mlp_only(s, c);
}

void mt_family_write_experts(const mt_config *c, json_t *o, const char *experts_key) {
    json_object_set_new(o, experts_key, json_integer(c->num_experts));
    json_object_set_new(o, "num_experts_per_tok", json_integer(c->experts_per_token));
    json_object_set_new(o, "output_router_logits", json_boolean(c->output_router_logits));
    json_object_set_new(o, "router_aux_loss_coef", mt_json_float(c->router_aux_loss_coef));
}

void mt_family_write_sparse_layers(const mt_config *c, json_t *o) {
    json_object_set_new(o, "moe_intermediate_size", json_integer(c->moe_intermediate_size));
    json_object_set_new(o, "decoder_sparse_step", json_integer(c->decoder_sparse_step));
    json_t *only = json_array();
    for (int l = 0; l < c->num_layers; l++)
        if (mlp_only(c, l)) json_array_append_new(only, json_integer(l));
    json_object_set_new(o, "mlp_only_layers", only);
}

/* ---- what the families' rules share ---- */

mt_status mt_family_require_qk_norm(const mt_config *c, mt_qk_norm want) {
    if (c->qk_norm == (int)want) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "q/k RMSNorm %s",
                   want == MT_QK_NORM_HEAD   ? "over each head is part of every Qwen3, Qwen3-MoE and Gemma 3 model"
                   : want == MT_QK_NORM_FULL ? "over the whole projections is part of every OLMoE model"
                                             : "is part of OLMoE, Qwen3-MoE, Gemma 3 and Qwen3 only");
}

mt_status mt_family_no_o_bias(const mt_config *c) {
    if (!c->attention_bias) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "attention_bias is not supported for this architecture (it adds an o_proj bias)");
}

mt_status mt_family_no_shared_expert(const mt_config *c) {
    if (c->shared_expert_intermediate_size == 0) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "a shared expert is part of Qwen2-MoE only");
}

mt_status mt_family_experts_full_width(const mt_config *c) {
    if (c->moe_intermediate_size == c->intermediate_size) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "Mixtral's and OLMoE's experts are intermediate_size wide (%d), not %d",
                   c->intermediate_size, c->moe_intermediate_size);
}

/* ---- the presets, family by family ---- */

mt_status mt_config_preset(const char *name, mt_config *cfg) {
    for (const mt_family *const *f = mt_families; *f; f++) {
        for (int i = 0; i < (*f)->num_presets; i++) {
            if (!strcmp((*f)->presets[i].name, name)) {
                *cfg = (*f)->presets[i].cfg;
                return MT_OK;
            }
        }
    }
    return mt_fail(MT_ERR_INVALID, "unknown model preset '%s' (known: %s)", name, mt_config_preset_names());
}

const char *mt_config_preset_names(void) {
    static char names[512];
    if (names[0]) return names;
    size_t used = 0;
    for (const mt_family *const *f = mt_families; *f; f++)
        for (int i = 0; i < (*f)->num_presets && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                                     (*f)->presets[i].name);
    return names;
}
