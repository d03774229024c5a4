/* RoPE's fields of config.json <-> mt_config (model/rope_config.h). */
#include "model/rope_config.h"

#include <string.h>

/* transformers' _compute_yarn_parameters: beta_fast 32 and beta_slow 1 and truncate true when
 * absent; the attention factor given, or 0.1 ln(factor) + 1 (mscale and mscale_all_dim, DeepSeek's
 * other form of it, refused). */
static mt_status read_yarn(const mt_json_src *top, const mt_json_src *s, const char *scope, mt_config *cfg) {
    static const char *const mscales[] = {"mscale", "mscale_all_dim"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = mt_json_field(s, mscales[i]);
        if (v && !json_is_null(v))
            return mt_fail(MT_ERR_INVALID, "%s: field '%s%s' is not supported (yarn's attention_factor only)",
                           top->source, scope, mscales[i]);
    }
    cfg->rope_scaling_yarn = 1;
    cfg->rope_beta_fast = 32.0f;
    cfg->rope_beta_slow = 1.0f;
    cfg->rope_truncate = 1;
    MT_TRY(mt_json_get_float(s, "factor", 1, &cfg->rope_scaling_factor));
    MT_TRY(mt_json_get_int(s, "original_max_position_embeddings", 1, &cfg->rope_original_max_position));
    MT_TRY(mt_json_get_float(s, "beta_fast", 0, &cfg->rope_beta_fast));
    MT_TRY(mt_json_get_float(s, "beta_slow", 0, &cfg->rope_beta_slow));
    MT_TRY(mt_json_get_bool(s, "truncate", &cfg->rope_truncate));
    return mt_json_get_float(s, "attention_factor", 0, &cfg->rope_attention_factor);
}

/* RoPE settings: transformers 4 writes rope_theta and rope_scaling at the top level; transformers 5
 * writes rope_parameters, which holds rope_theta as well. Either is read; a theta given both ways
 * must agree. */
static mt_status read_one(const mt_json_src *top, const char *key, const char *scope, mt_config *cfg) {
    const json_t *rs = mt_json_field(top, key);
    if (!rs) return MT_OK;
    if (!json_is_object(rs)) return mt_json_wrong_type(top, key, "an object or null", rs);
    mt_json_src s = {top->source, rs, scope};
    if (strcmp(key, "rope_scaling")) { /* rope_parameters, or its full_attention's */
        float theta = cfg->rope_theta, partial = 1.0f;
        MT_TRY(mt_json_get_float(&s, "rope_theta", 0, &theta));
        if (mt_json_field(top, "rope_theta") && theta != cfg->rope_theta)
            return mt_fail(MT_ERR_INVALID, "%s: fields 'rope_theta' (%g) and '%srope_theta' (%g) disagree",
                           top->source, (double)cfg->rope_theta, scope, (double)theta);
        cfg->rope_theta = theta;
        if (cfg->partial_rotary_factor > 0) partial = cfg->partial_rotary_factor; /* the family's default */
        MT_TRY(mt_json_get_float(&s, "partial_rotary_factor", 0, &partial));
        if (partial != 1.0f && !(cfg->partial_rotary_factor > 0)) /* a family whose RoPE turns all of a head */
            return mt_fail(MT_ERR_INVALID, "%s: field '%spartial_rotary_factor' = %g is not supported (1 only)",
                           top->source, scope, (double)partial);
        if (!(partial > 0 && partial <= 1))
            return mt_fail(MT_ERR_INVALID, "%s: field '%spartial_rotary_factor' = %g is not in (0, 1]", top->source,
                           scope, (double)partial);
        cfg->partial_rotary_factor = partial == 1.0f ? 0.0f : partial;
    }
    const char *type = NULL;
    MT_TRY(mt_json_get_string(&s, "rope_type", &type));
    if (!type) MT_TRY(mt_json_get_string(&s, "type", &type));
    if (!type) return mt_json_missing(&s, "rope_type");
    if (!strcmp(type, "default")) return MT_OK;
    if (!strcmp(type, "linear")) {
        cfg->rope_scaling_linear = 1;
        return mt_json_get_float(&s, "factor", 1, &cfg->rope_scaling_factor);
    }
    if (!strcmp(type, "yarn")) return read_yarn(top, &s, scope, cfg);
    if (strcmp(type, "llama3"))
        return mt_fail(MT_ERR_INVALID, "%s: field '%srope_type' = '%s' is not supported (default, linear, llama3 "
                       "and yarn only)", top->source, scope, type);
    MT_TRY(mt_json_get_float(&s, "factor", 1, &cfg->rope_scaling_factor));
    MT_TRY(mt_json_get_float(&s, "low_freq_factor", 1, &cfg->rope_low_freq_factor));
    MT_TRY(mt_json_get_float(&s, "high_freq_factor", 1, &cfg->rope_high_freq_factor));
    return mt_json_get_int(&s, "original_max_position_embeddings", 1, &cfg->rope_original_max_position);
}

/* transformers 5's rope_parameters by layer type (Gemma 3): full_attention's as the model's,
 * sliding_attention's theta as the local layers' (rope_local_theta), unscaled. */
static mt_status read_by_layer_type(const mt_json_src *top, const json_t *params, mt_config *cfg) {
    mt_json_src by_type = {top->source, params, "rope_parameters."};
    const json_t *local = mt_json_field(&by_type, "sliding_attention");
    if (local) {
        if (!json_is_object(local)) return mt_json_wrong_type(&by_type, "sliding_attention", "an object", local);
        mt_json_src s = {top->source, local, "rope_parameters.sliding_attention."};
        const char *type = "default";
        MT_TRY(mt_json_get_string(&s, "rope_type", &type));
        if (strcmp(type, "default"))
            return mt_fail(MT_ERR_INVALID, "%s: field 'rope_parameters.sliding_attention.rope_type' = '%s' is not "
                           "supported (default only)", top->source, type);
        MT_TRY(mt_json_get_float(&s, "rope_theta", 1, &cfg->rope_local_theta));
    }
    return read_one(&by_type, "full_attention", "rope_parameters.full_attention.", cfg);
}

mt_status mt_rope_config_read(const mt_json_src *s, mt_config *c) {
    MT_TRY(read_one(s, "rope_scaling", "rope_scaling.", c));
    const json_t *params = mt_json_field(s, "rope_parameters");
    if (json_is_object(params) && (json_object_get(params, "full_attention") ||
                                   json_object_get(params, "sliding_attention")))
        return read_by_layer_type(s, params, c);
    return read_one(s, "rope_parameters", "rope_parameters.", c);
}

void mt_rope_config_write(const mt_config *c, json_t *o) {
    json_t *rs = json_null();
    if (c->rope_scaling_linear) {
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("linear"));
        json_object_set_new(rs, "factor", mt_json_float(c->rope_scaling_factor));
    } else if (c->rope_scaling_yarn) {
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("yarn"));
        json_object_set_new(rs, "factor", mt_json_float(c->rope_scaling_factor));
        json_object_set_new(rs, "beta_fast", mt_json_float(c->rope_beta_fast));
        json_object_set_new(rs, "beta_slow", mt_json_float(c->rope_beta_slow));
        json_object_set_new(rs, "truncate", json_boolean(c->rope_truncate));
        json_object_set_new(rs, "original_max_position_embeddings", json_integer(c->rope_original_max_position));
        if (c->rope_attention_factor > 0)
            json_object_set_new(rs, "attention_factor", mt_json_float(c->rope_attention_factor));
    } else if (c->rope_scaling_factor != 0) {
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        json_object_set_new(rs, "factor", mt_json_float(c->rope_scaling_factor));
        json_object_set_new(rs, "low_freq_factor", mt_json_float(c->rope_low_freq_factor));
        json_object_set_new(rs, "high_freq_factor", mt_json_float(c->rope_high_freq_factor));
        json_object_set_new(rs, "original_max_position_embeddings", json_integer(c->rope_original_max_position));
    }
    json_object_set_new(o, "rope_scaling", rs);
    if (c->partial_rotary_factor > 0) { /* transformers 5 reads it from rope_parameters */
        json_t *params = json_object();
        json_object_set_new(params, "rope_type", json_string("default"));
        json_object_set_new(params, "rope_theta", mt_json_float(c->rope_theta));
        json_object_set_new(params, "partial_rotary_factor", mt_json_float(c->partial_rotary_factor));
        json_object_set_new(o, "rope_parameters", params);
    }
}
