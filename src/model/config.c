#include "model/config.h"

#include "model/block_kinds.h"
#include "model/families.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define REQUIRE(cond, ...)                                           \
    do {                                                             \
        if (!(cond)) return mt_fail(MT_ERR_INVALID, __VA_ARGS__);    \
    } while (0)

mt_status mt_config_in_range(const char *name, int value, int lo, int hi) {
    if (value >= lo && value <= hi) return MT_OK;
    if (value < 1 && lo == 1) return mt_fail(MT_ERR_INVALID, "%s must be positive, got %d", name, value);
    return mt_fail(MT_ERR_INVALID, "%s must be from %d to %d, got %d", name, lo, hi, value);
}

int mt_arch_is_moe(mt_arch arch) {
    const mt_family *f = mt_family_of(arch);
    return f && f->moe;
}

static int mlp_only(const mt_config *c, int l) { return (int)(c->mlp_only_layers[l / 64] >> (l % 64)) & 1; }

int mt_config_layer_is_moe(const mt_config *c, int l) { return mt_layer_spec_of(c, l).ffn == MT_FFN_MOE; }

int mt_config_moe_layers(const mt_config *c) {
    int n = 0;
    for (int l = 0; l < c->num_layers; l++) n += mt_config_layer_is_moe(c, l);
    return n;
}

/* The mixture-of-experts fields: present exactly for the MoE families, within what the ops take
 * (the experts' stacked matrices' rows fit an int). The family's own rules are its validate's. */
static mt_status validate_moe(const mt_config *c) {
    if (!mt_arch_is_moe(c->arch)) {
        REQUIRE(c->num_experts == 0 && c->shared_expert_intermediate_size == 0,
                "experts are part of the mixture-of-experts architectures only");
        return MT_OK;
    }
    MT_TRY(mt_config_in_range("num_experts", c->num_experts, 1, MT_CONFIG_MAX_EXPERTS));
    int most = c->num_experts < MT_CONFIG_MAX_TOP_K ? c->num_experts : MT_CONFIG_MAX_TOP_K;
    MT_TRY(mt_config_in_range("num_experts_per_tok", c->experts_per_token, 1, most));
    MT_TRY(mt_config_in_range("moe_intermediate_size", c->moe_intermediate_size, 1, MT_CONFIG_MAX_INTERMEDIATE));
    REQUIRE((int64_t)c->num_experts * 2 * c->moe_intermediate_size <= INT32_MAX,
            "num_experts x 2 x moe_intermediate_size (%lld) must stay below 2^31",
            (long long)c->num_experts * 2 * c->moe_intermediate_size);
    MT_TRY(mt_config_in_range("decoder_sparse_step", c->decoder_sparse_step, 1, c->num_layers));
    for (int l = c->num_layers; l < MT_CONFIG_MAX_LAYERS; l++)
        REQUIRE(!mlp_only(c, l), "mlp_only_layers names layer %d of a model of %d", l, c->num_layers);
    REQUIRE(mt_config_moe_layers(c) > 0, "decoder_sparse_step and mlp_only_layers leave no layer sparse");
    REQUIRE(c->router_aux_loss_coef >= 0 && isfinite(c->router_aux_loss_coef),
            "router_aux_loss_coef must be a finite number >= 0, got %g", (double)c->router_aux_loss_coef);
    return MT_OK;
}

/* A window of at least one key; local layers only with one, and only the model's. */
static mt_status validate_window(const mt_config *c) {
    MT_TRY(mt_config_in_range("sliding_window", c->sliding_window, 0, MT_CONFIG_MAX_POSITION));
    for (int l = 0; l < MT_CONFIG_MAX_LAYERS; l++)
        if (mt_config_layer_is_local(c, l)) {
            REQUIRE(l < c->num_layers, "layer_types makes layer %d local in a model of %d", l, c->num_layers);
            REQUIRE(c->sliding_window > 0, "layer %d is local (sliding_attention) without a sliding_window", l);
        }
    return MT_OK;
}

/* What each layer and the whole model compute, as the family plans them: refused where no op
 * computes it yet. */
static mt_status validate_specs(const mt_config *c) {
    mt_model_spec m = mt_model_spec_of(c);
    MT_TRY(mt_model_spec_check(&m));
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        MT_TRY(mt_layer_spec_check(&s, &m, l));
    }
    return MT_OK;
}

mt_status mt_config_validate(const mt_config *c) {
    const mt_family *family = mt_family_of(c->arch);
    REQUIRE(family, "unknown architecture %d", (int)c->arch);
    MT_TRY(mt_config_in_range("hidden_size", c->hidden_size, 1, MT_CONFIG_MAX_HIDDEN));
    MT_TRY(mt_config_in_range("intermediate_size", c->intermediate_size, 1, MT_CONFIG_MAX_INTERMEDIATE));
    MT_TRY(mt_config_in_range("num_hidden_layers", c->num_layers, 1, MT_CONFIG_MAX_LAYERS));
    MT_TRY(mt_config_in_range("num_attention_heads", c->num_heads, 1, MT_CONFIG_MAX_HEADS));
    REQUIRE(c->num_kv_heads > 0 && c->num_kv_heads <= c->num_heads && c->num_heads % c->num_kv_heads == 0,
            "num_key_value_heads (%d) must divide num_attention_heads (%d)", c->num_kv_heads,
            c->num_heads);
    REQUIRE(c->head_dim > 0 && c->head_dim % 2 == 0 && c->head_dim <= 256,
            "head_dim must be even and at most 256, got %d", c->head_dim);
    MT_TRY(mt_config_in_range("vocab_size", c->vocab_size, 2, MT_CONFIG_MAX_VOCAB));
    MT_TRY(mt_config_in_range("max_position_embeddings", c->max_position, 1, MT_CONFIG_MAX_POSITION));
    REQUIRE(c->rms_norm_eps > 0 && isfinite(c->rms_norm_eps), "rms_norm_eps must be positive, got %g",
            (double)c->rms_norm_eps);
    REQUIRE(c->rope_theta > 0 && isfinite(c->rope_theta), "rope_theta must be positive, got %g",
            (double)c->rope_theta);
    MT_TRY(validate_moe(c));
    MT_TRY(validate_window(c));
    REQUIRE(c->rope_local_theta >= 0 && isfinite(c->rope_local_theta), "rope_local_base_freq must be positive");
    REQUIRE(c->query_pre_attn_scalar >= 0 && isfinite(c->query_pre_attn_scalar),
            "query_pre_attn_scalar must be positive, got %g", (double)c->query_pre_attn_scalar);
    REQUIRE(c->swiglu_limit >= 0 && isfinite(c->swiglu_limit) && c->swiglu_alpha >= 0 && isfinite(c->swiglu_alpha),
            "swiglu_limit and swiglu_alpha must be positive, got %g and %g", (double)c->swiglu_limit,
            (double)c->swiglu_alpha);
    MT_TRY(family->validate(c));
    if (c->rope_scaling_factor != 0) {
        REQUIRE(c->rope_scaling_factor >= 1 && isfinite(c->rope_scaling_factor),
                "rope_scaling.factor must be >= 1, got %g", (double)c->rope_scaling_factor);
    }
    if (c->rope_scaling_factor != 0 && c->rope_scaling_yarn) {
        MT_TRY(mt_config_in_range("rope_scaling.original_max_position_embeddings", c->rope_original_max_position, 1,
                                  MT_CONFIG_MAX_POSITION));
        REQUIRE(c->rope_beta_fast > 0 && c->rope_beta_slow > 0 && isfinite(c->rope_beta_fast) &&
                    isfinite(c->rope_beta_slow),
                "rope_scaling.beta_fast and beta_slow must be positive, got %g and %g", (double)c->rope_beta_fast,
                (double)c->rope_beta_slow);
        REQUIRE(c->rope_attention_factor >= 0 && isfinite(c->rope_attention_factor),
                "rope_scaling.attention_factor must be positive, got %g", (double)c->rope_attention_factor);
    }
    if (c->rope_scaling_factor != 0 && !c->rope_scaling_linear && !c->rope_scaling_yarn) { /* llama3's */
        REQUIRE(c->rope_high_freq_factor > c->rope_low_freq_factor && isfinite(c->rope_high_freq_factor) &&
                    isfinite(c->rope_low_freq_factor),
                "rope_scaling.high_freq_factor must exceed low_freq_factor");
        MT_TRY(mt_config_in_range("rope_scaling.original_max_position_embeddings", c->rope_original_max_position, 1,
                        MT_CONFIG_MAX_POSITION));
    }
    MT_TRY(validate_specs(c));
    /* Each field within its limit, the totals below cannot overflow; the whole must stay in reach. */
    int64_t params = mt_config_total_params(c);
    REQUIRE(params <= MT_CONFIG_MAX_PARAMS, "the model has %lld parameters, more than the %lld this code takes",
            (long long)params, (long long)MT_CONFIG_MAX_PARAMS);
    return MT_OK;
}

int64_t mt_config_block_params(const mt_config *c, int l) {
    mt_layer_spec s = mt_layer_spec_of(c, l);
    return mt_mixer_kind_of(s.mixer)->params(c, &s) + mt_ffn_kind_of(s.ffn)->params(c, &s);
}

int64_t mt_config_blocks_params(const mt_config *c) {
    int64_t n = 0;
    for (int l = 0; l < c->num_layers; l++) n += mt_config_block_params(c, l);
    return n;
}

int64_t mt_config_blocks_active_params(const mt_config *c) {
    int64_t n = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        n += mt_mixer_kind_of(s.mixer)->active_params(c, &s) + mt_ffn_kind_of(s.ffn)->active_params(c, &s);
    }
    return n;
}

double mt_config_blocks_extra_flops(const mt_config *c, int seq) {
    double f = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(c, l);
        f += mt_mixer_kind_of(s.mixer)->extra_flops(c, &s, seq) + mt_ffn_kind_of(s.ffn)->extra_flops(c, &s, seq);
    }
    return f;
}

int mt_config_dense_mlp_width(const mt_config *c) {
    int F = c->shared_expert_intermediate_size;
    for (int l = 0; l < c->num_layers; l++)
        if (mt_layer_spec_of(c, l).ffn == MT_FFN_DENSE && c->intermediate_size > F) return c->intermediate_size;
    return F;
}

int64_t mt_config_total_params(const mt_config *c) {
    int64_t embed = (int64_t)c->vocab_size * c->hidden_size;
    return embed + (c->tie_embeddings ? 0 : embed) + c->hidden_size + mt_config_blocks_params(c);
}
