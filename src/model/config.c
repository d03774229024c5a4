#include "model/config.h"

#include "model/block_kinds.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    mt_config cfg;
} preset;

#define LLAMA(D, F, L, H, KV, V, MAXPOS, THETA, TIE)                                          \
    {.arch = MT_ARCH_LLAMA, .hidden_size = D, .intermediate_size = F, .num_layers = L,      \
     .num_heads = H, .num_kv_heads = KV, .head_dim = (D) / (H), .vocab_size = V,            \
     .max_position = MAXPOS, .rms_norm_eps = 1e-5f, .rope_theta = THETA,                    \
     .tie_embeddings = TIE, .bos_token_id = -1, .eos_token_id = -1}

/* Qwen3 dense models share all but their width, depth, heads and tying: head_dim 128 whatever the
 * width, per-head q/k RMSNorm, no q/k/v bias (Qwen/Qwen3-*'s config.json). */
#define QWEN3(D, F, L, H, TIE)                                                                  \
    {.arch = MT_ARCH_QWEN3, .hidden_size = D, .intermediate_size = F, .num_layers = L,        \
     .num_heads = H, .num_kv_heads = 8, .head_dim = 128, .vocab_size = 151936,                \
     .max_position = 40960, .rms_norm_eps = 1e-6f, .rope_theta = 1000000.0f,                  \
     .tie_embeddings = TIE, .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = 151643, .eos_token_id = 151645}

static const preset presets[] = {
    /* The README's demo: bytes as tokens, trains in minutes on two CPU cores. */
    {"demo", LLAMA(256, 688, 4, 8, 4, 256, 1024, 10000.0f, 1)},
    /* The smallest shape the tests train. */
    {"tiny", LLAMA(64, 176, 2, 4, 2, 256, 256, 10000.0f, 0)},
    {"llama-3.2-1b", {.arch = MT_ARCH_LLAMA, .hidden_size = 2048, .intermediate_size = 8192,
                      .num_layers = 16, .num_heads = 32, .num_kv_heads = 8, .head_dim = 64,
                      .vocab_size = 128256, .max_position = 131072, .rms_norm_eps = 1e-5f,
                      .rope_theta = 500000.0f, .tie_embeddings = 1, .rope_scaling_factor = 32.0f,
                      .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
                      .rope_original_max_position = 8192, .bos_token_id = 128000,
                      .eos_token_id = 128001}},
    {"llama-3.2-3b", {.arch = MT_ARCH_LLAMA, .hidden_size = 3072, .intermediate_size = 8192,
                      .num_layers = 28, .num_heads = 24, .num_kv_heads = 8, .head_dim = 128,
                      .vocab_size = 128256, .max_position = 131072, .rms_norm_eps = 1e-5f,
                      .rope_theta = 500000.0f, .tie_embeddings = 1, .rope_scaling_factor = 32.0f,
                      .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
                      .rope_original_max_position = 8192, .bos_token_id = 128000,
                      .eos_token_id = 128001}},
    {"llama-3-8b", {.arch = MT_ARCH_LLAMA, .hidden_size = 4096, .intermediate_size = 14336,
                    .num_layers = 32, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                    .vocab_size = 128256, .max_position = 8192, .rms_norm_eps = 1e-5f,
                    .rope_theta = 500000.0f, .tie_embeddings = 0, .bos_token_id = 128000,
                    .eos_token_id = 128001}},
    /* Llama 3's shape with Llama 3.1's rope scaling: 131072 positions. */
    {"llama-3.1-8b", {.arch = MT_ARCH_LLAMA, .hidden_size = 4096, .intermediate_size = 14336,
                      .num_layers = 32, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                      .vocab_size = 128256, .max_position = 131072, .rms_norm_eps = 1e-5f,
                      .rope_theta = 500000.0f, .tie_embeddings = 0, .rope_scaling_factor = 8.0f,
                      .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
                      .rope_original_max_position = 8192, .bos_token_id = 128000,
                      .eos_token_id = 128001}},
    {"qwen2.5-14b", {.arch = MT_ARCH_QWEN2, .hidden_size = 5120, .intermediate_size = 13824,
                     .num_layers = 48, .num_heads = 40, .num_kv_heads = 8, .head_dim = 128,
                     .vocab_size = 152064, .max_position = 131072, .rms_norm_eps = 1e-6f,
                     .rope_theta = 1000000.0f, .tie_embeddings = 0, .attention_bias = 1,
                     .bos_token_id = -1, .eos_token_id = 151643}},
    {"qwen2.5-32b", {.arch = MT_ARCH_QWEN2, .hidden_size = 5120, .intermediate_size = 27648,
                     .num_layers = 64, .num_heads = 40, .num_kv_heads = 8, .head_dim = 128,
                     .vocab_size = 152064, .max_position = 131072, .rms_norm_eps = 1e-6f,
                     .rope_theta = 1000000.0f, .tie_embeddings = 0, .attention_bias = 1,
                     .bos_token_id = -1, .eos_token_id = 151643}},
    /* Mistral-Small-24B-Base-2501: 32 query heads of 128 over a 5120 width (head_dim is not
     * hidden / heads), the Tekken vocabulary, 32k positions. */
    {"mistral-small-24b", {.arch = MT_ARCH_MISTRAL, .hidden_size = 5120, .intermediate_size = 32768,
                           .num_layers = 40, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                           .vocab_size = 131072, .max_position = 32768, .rms_norm_eps = 1e-5f,
                           .rope_theta = 100000000.0f, .tie_embeddings = 0, .bos_token_id = 1,
                           .eos_token_id = 2}},
    /* Meta-Llama-3-70B: 64 query heads of 128, 8 key/value heads, Llama 3's vocabulary. */
    {"llama-3-70b", {.arch = MT_ARCH_LLAMA, .hidden_size = 8192, .intermediate_size = 28672,
                     .num_layers = 80, .num_heads = 64, .num_kv_heads = 8, .head_dim = 128,
                     .vocab_size = 128256, .max_position = 8192, .rms_norm_eps = 1e-5f,
                     .rope_theta = 500000.0f, .tie_embeddings = 0, .bos_token_id = 128000,
                     .eos_token_id = 128001}},
    /* Mistral-Large-Instruct-2407 (Mistral Large 2, 123 B): 88 blocks of a 12288 width, 96 query heads
     * of 128 and 8 key/value heads, the 32768-token vocabulary, 131072 positions. */
    {"mistral-large-2", {.arch = MT_ARCH_MISTRAL, .hidden_size = 12288, .intermediate_size = 28672,
                         .num_layers = 88, .num_heads = 96, .num_kv_heads = 8, .head_dim = 128,
                         .vocab_size = 32768, .max_position = 131072, .rms_norm_eps = 1e-5f,
                         .rope_theta = 1000000.0f, .tie_embeddings = 0, .bos_token_id = 1,
                         .eos_token_id = 2}},
    {"qwen3-0.6b", QWEN3(1024, 3072, 28, 16, 1)},
    {"qwen3-1.7b", QWEN3(2048, 6144, 28, 16, 1)},
    {"qwen3-4b", QWEN3(2560, 9728, 36, 32, 1)},
    {"qwen3-8b", QWEN3(4096, 12288, 36, 32, 0)},
    /* Mixtures of experts, as their config.json on the hub gives them. Qwen/Qwen3-30B-A3B: 128 experts
     * of 768, top 8 renormalised, every block sparse. */
    {"qwen3-30b-a3b", {.arch = MT_ARCH_QWEN3_MOE, .hidden_size = 2048, .intermediate_size = 6144,
                       .num_layers = 48, .num_heads = 32, .num_kv_heads = 4, .head_dim = 128,
                       .vocab_size = 151936, .max_position = 40960, .rms_norm_eps = 1e-6f,
                       .rope_theta = 1000000.0f, .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = 151643,
                       .eos_token_id = 151645, .num_experts = 128, .experts_per_token = 8,
                       .moe_intermediate_size = 768, .norm_topk_prob = 1, .decoder_sparse_step = 1,
                       .router_aux_loss_coef = 0.001f}},
    /* Qwen/Qwen1.5-MoE-A2.7B (Qwen2MoeForCausalLM): 60 experts of 1408, top 4, and a shared expert
     * of 5632 behind a sigmoid gate; q/k/v biases. */
    {"qwen1.5-moe-a2.7b", {.arch = MT_ARCH_QWEN2_MOE, .hidden_size = 2048, .intermediate_size = 5632,
                           .num_layers = 24, .num_heads = 16, .num_kv_heads = 16, .head_dim = 128,
                           .vocab_size = 151936, .max_position = 8192, .rms_norm_eps = 1e-6f,
                           .rope_theta = 1000000.0f, .attention_bias = 1, .bos_token_id = 151643,
                           .eos_token_id = 151643, .num_experts = 60, .experts_per_token = 4,
                           .moe_intermediate_size = 1408, .shared_expert_intermediate_size = 5632,
                           .decoder_sparse_step = 1, .router_aux_loss_coef = 0.001f}},
    /* mistralai/Mixtral-8x7B-v0.1: 8 experts of 14336, top 2 (a softmax over the two). */
    {"mixtral-8x7b", {.arch = MT_ARCH_MIXTRAL, .hidden_size = 4096, .intermediate_size = 14336,
                      .num_layers = 32, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                      .vocab_size = 32000, .max_position = 32768, .rms_norm_eps = 1e-5f,
                      .rope_theta = 1000000.0f, .bos_token_id = 1, .eos_token_id = 2, .num_experts = 8,
                      .experts_per_token = 2, .moe_intermediate_size = 14336, .norm_topk_prob = 1,
                      .decoder_sparse_step = 1, .router_aux_loss_coef = 0.02f}},
    /* allenai/OLMoE-1B-7B-0924: 64 experts of 1024, top 8 not renormalised; q/k RMSNorm over the
     * whole projections. */
    {"olmoe-1b-7b", {.arch = MT_ARCH_OLMOE, .hidden_size = 2048, .intermediate_size = 1024,
                     .num_layers = 16, .num_heads = 16, .num_kv_heads = 16, .head_dim = 128,
                     .vocab_size = 50304, .max_position = 4096, .rms_norm_eps = 1e-5f,
                     .rope_theta = 10000.0f, .qk_norm = MT_QK_NORM_FULL, .bos_token_id = -1,
                     .eos_token_id = 50279, .num_experts = 64, .experts_per_token = 8,
                     .moe_intermediate_size = 1024, .decoder_sparse_step = 1, .router_aux_loss_coef = 0.01f}},
};

mt_status mt_config_preset(const char *name, mt_config *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (!strcmp(presets[i].name, name)) {
            *cfg = presets[i].cfg;
            return MT_OK;
        }
    }
    return mt_fail(MT_ERR_INVALID, "unknown model preset '%s' (known: %s)", name,
                   mt_config_preset_names());
}

const char *mt_config_preset_names(void) {
    static char names[512];
    if (!names[0]) {
        size_t used = 0;
        for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", presets[i].name);
    }
    return names;
}

#define REQUIRE(cond, ...)                                           \
    do {                                                             \
        if (!(cond)) return mt_fail(MT_ERR_INVALID, __VA_ARGS__);    \
    } while (0)

/* `value` of config field `name` in [lo, hi]. */
static mt_status in_range(const char *name, int value, int lo, int hi) {
    if (value >= lo && value <= hi) return MT_OK;
    if (value < 1 && lo == 1) return mt_fail(MT_ERR_INVALID, "%s must be positive, got %d", name, value);
    return mt_fail(MT_ERR_INVALID, "%s must be from %d to %d, got %d", name, lo, hi, value);
}

int mt_arch_is_moe(mt_arch arch) {
    return arch == MT_ARCH_QWEN3_MOE || arch == MT_ARCH_QWEN2_MOE || arch == MT_ARCH_MIXTRAL || arch == MT_ARCH_OLMOE;
}

static int mlp_only(const mt_config *c, int l) { return (int)(c->mlp_only_layers[l / 64] >> (l % 64)) & 1; }

int mt_config_layer_is_moe(const mt_config *c, int l) {
    return c->num_experts > 0 && c->decoder_sparse_step > 0 && (l + 1) % c->decoder_sparse_step == 0 &&
           !mlp_only(c, l);
}

int mt_config_moe_layers(const mt_config *c) {
    int n = 0;
    for (int l = 0; l < c->num_layers; l++) n += mt_config_layer_is_moe(c, l);
    return n;
}

/* The mixture-of-experts fields: present exactly for the MoE architectures, within what the ops take
 * (the experts' stacked matrices' rows fit an int). */
static mt_status validate_moe(const mt_config *c) {
    if (!mt_arch_is_moe(c->arch)) {
        REQUIRE(c->num_experts == 0 && c->shared_expert_intermediate_size == 0,
                "experts are part of the mixture-of-experts architectures only");
        return MT_OK;
    }
    MT_TRY(in_range("num_experts", c->num_experts, 1, MT_CONFIG_MAX_EXPERTS));
    int most = c->num_experts < MT_CONFIG_MAX_TOP_K ? c->num_experts : MT_CONFIG_MAX_TOP_K;
    MT_TRY(in_range("num_experts_per_tok", c->experts_per_token, 1, most));
    MT_TRY(in_range("moe_intermediate_size", c->moe_intermediate_size, 1, MT_CONFIG_MAX_INTERMEDIATE));
    REQUIRE((int64_t)c->num_experts * 2 * c->moe_intermediate_size <= INT32_MAX,
            "num_experts x 2 x moe_intermediate_size (%lld) must stay below 2^31",
            (long long)c->num_experts * 2 * c->moe_intermediate_size);
    MT_TRY(in_range("decoder_sparse_step", c->decoder_sparse_step, 1, c->num_layers));
    for (int l = c->num_layers; l < MT_CONFIG_MAX_LAYERS; l++)
        REQUIRE(!mlp_only(c, l), "mlp_only_layers names layer %d of a model of %d", l, c->num_layers);
    REQUIRE(mt_config_moe_layers(c) > 0, "decoder_sparse_step and mlp_only_layers leave no layer sparse");
    if (c->arch == MT_ARCH_QWEN2_MOE)
        MT_TRY(in_range("shared_expert_intermediate_size", c->shared_expert_intermediate_size, 1,
                        MT_CONFIG_MAX_INTERMEDIATE));
    else
        REQUIRE(c->shared_expert_intermediate_size == 0, "a shared expert is part of Qwen2-MoE only");
    REQUIRE(c->arch != MT_ARCH_MIXTRAL || c->norm_topk_prob, "Mixtral's routing weights are always renormalised");
    REQUIRE((c->arch != MT_ARCH_MIXTRAL && c->arch != MT_ARCH_OLMOE) || c->moe_intermediate_size == c->intermediate_size,
            "Mixtral's and OLMoE's experts are intermediate_size wide (%d), not %d", c->intermediate_size,
            c->moe_intermediate_size);
    REQUIRE(c->router_aux_loss_coef >= 0 && isfinite(c->router_aux_loss_coef),
            "router_aux_loss_coef must be a finite number >= 0, got %g", (double)c->router_aux_loss_coef);
    REQUIRE(c->arch != MT_ARCH_OLMOE || c->num_heads * c->head_dim == c->hidden_size,
            "OLMoE's head_dim is hidden_size / num_attention_heads");
    return MT_OK;
}

mt_status mt_config_validate(const mt_config *c) {
    MT_TRY(in_range("hidden_size", c->hidden_size, 1, MT_CONFIG_MAX_HIDDEN));
    MT_TRY(in_range("intermediate_size", c->intermediate_size, 1, MT_CONFIG_MAX_INTERMEDIATE));
    MT_TRY(in_range("num_hidden_layers", c->num_layers, 1, MT_CONFIG_MAX_LAYERS));
    MT_TRY(in_range("num_attention_heads", c->num_heads, 1, MT_CONFIG_MAX_HEADS));
    REQUIRE(c->num_kv_heads > 0 && c->num_kv_heads <= c->num_heads && c->num_heads % c->num_kv_heads == 0,
            "num_key_value_heads (%d) must divide num_attention_heads (%d)", c->num_kv_heads,
            c->num_heads);
    REQUIRE(c->head_dim > 0 && c->head_dim % 2 == 0 && c->head_dim <= 256,
            "head_dim must be even and at most 256, got %d", c->head_dim);
    MT_TRY(in_range("vocab_size", c->vocab_size, 2, MT_CONFIG_MAX_VOCAB));
    MT_TRY(in_range("max_position_embeddings", c->max_position, 1, MT_CONFIG_MAX_POSITION));
    REQUIRE(c->rms_norm_eps > 0 && isfinite(c->rms_norm_eps), "rms_norm_eps must be positive, got %g",
            (double)c->rms_norm_eps);
    REQUIRE(c->rope_theta > 0 && isfinite(c->rope_theta), "rope_theta must be positive, got %g",
            (double)c->rope_theta);
    /* config.json carries no flag for the q/k norms: its architecture implies them. */
    int head_norm = c->arch == MT_ARCH_QWEN3 || c->arch == MT_ARCH_QWEN3_MOE;
    int want_qk = head_norm ? MT_QK_NORM_HEAD : c->arch == MT_ARCH_OLMOE ? MT_QK_NORM_FULL : MT_QK_NORM_NONE;
    REQUIRE(c->qk_norm == want_qk, "q/k RMSNorm %s",
            want_qk == MT_QK_NORM_HEAD   ? "over each head is part of every Qwen3 and Qwen3-MoE model"
            : want_qk == MT_QK_NORM_FULL ? "over the whole projections is part of every OLMoE model"
                                         : "is part of OLMoE, Qwen3-MoE and Qwen3 only");
    /* Qwen3's, Qwen3-MoE's and OLMoE's attention_bias puts a bias on o_proj as well, which the block
     * does not have; Mixtral has none. */
    REQUIRE(!(c->attention_bias && (head_norm || c->arch == MT_ARCH_OLMOE || c->arch == MT_ARCH_MIXTRAL)),
            "attention_bias is not supported for this architecture (it adds an o_proj bias)");
    MT_TRY(validate_moe(c));
    if (c->rope_scaling_factor != 0) {
        REQUIRE(c->rope_scaling_factor >= 1 && isfinite(c->rope_scaling_factor),
                "rope_scaling.factor must be >= 1, got %g", (double)c->rope_scaling_factor);
        REQUIRE(c->rope_high_freq_factor > c->rope_low_freq_factor && isfinite(c->rope_high_freq_factor) &&
                    isfinite(c->rope_low_freq_factor),
                "rope_scaling.high_freq_factor must exceed low_freq_factor");
        MT_TRY(in_range("rope_scaling.original_max_position_embeddings", c->rope_original_max_position, 1,
                        MT_CONFIG_MAX_POSITION));
    }
    /* Each field within its limit, the totals below cannot overflow; the whole must stay in reach. */
    int64_t params = mt_config_total_params(c);
    REQUIRE(params <= MT_CONFIG_MAX_PARAMS, "the model has %lld parameters, more than the %lld this code takes",
            (long long)params, (long long)MT_CONFIG_MAX_PARAMS);
    return MT_OK;
}

int64_t mt_config_block_params(const mt_config *c, int l) {
    mt_block_kinds k = mt_block_kinds_of(c, l);
    return mt_mixer_kind_of(k.mixer)->params(c) + mt_ffn_kind_of(k.ffn)->params(c);
}

int64_t mt_config_blocks_params(const mt_config *c) {
    int64_t n = 0;
    for (int l = 0; l < c->num_layers; l++) n += mt_config_block_params(c, l);
    return n;
}

int64_t mt_config_blocks_active_params(const mt_config *c) {
    int64_t n = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_block_kinds k = mt_block_kinds_of(c, l);
        n += mt_mixer_kind_of(k.mixer)->active_params(c) + mt_ffn_kind_of(k.ffn)->active_params(c);
    }
    return n;
}

double mt_config_blocks_extra_flops(const mt_config *c, int seq) {
    double f = 0;
    for (int l = 0; l < c->num_layers; l++) {
        mt_block_kinds k = mt_block_kinds_of(c, l);
        f += mt_mixer_kind_of(k.mixer)->extra_flops(c, seq) + mt_ffn_kind_of(k.ffn)->extra_flops(c, seq);
    }
    return f;
}

int mt_config_dense_mlp_width(const mt_config *c) {
    int F = c->shared_expert_intermediate_size;
    for (int l = 0; l < c->num_layers; l++)
        if (!mt_config_layer_is_moe(c, l) && c->intermediate_size > F) return c->intermediate_size;
    return F;
}

int64_t mt_config_total_params(const mt_config *c) {
    int64_t embed = (int64_t)c->vocab_size * c->hidden_size;
    return embed + (c->tie_embeddings ? 0 : embed) + c->hidden_size + mt_config_blocks_params(c);
}

void mt_config_rope_inv_freq(const mt_config *c, float *inv_freq) {
    int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow((double)c->rope_theta, (2.0 * i) / c->head_dim);
        if (c->rope_scaling_factor != 0) {
            /* transformers' _compute_llama3_parameters */
            double low_wavelen = c->rope_original_max_position / c->rope_low_freq_factor;
            double high_wavelen = c->rope_original_max_position / c->rope_high_freq_factor;
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / c->rope_scaling_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (c->rope_original_max_position / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1 - smooth) * f / c->rope_scaling_factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}
