#include "io/hf_config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json_kind.h"
#include "util/log.h"

/* One supported architecture and transformers' defaults for what its config.json may omit. */
typedef struct {
    mt_arch arch;
    const char *architecture; /* architectures[0] */
    const char *model_type;
    int default_max_position;
    int default_head_dim; /* 0: hidden_size / num_attention_heads */
    float default_eps, default_theta;
    /* A mixture of experts' defaults (its Config class's): experts, of them a token's, their width
     * (0: intermediate_size, Mixtral's and OLMoE's), the shared expert's, the aux loss coefficient. */
    int default_experts, default_top_k, default_moe_width, default_shared;
    float default_aux_coef;
} arch_info;

static const arch_info archs[] = {
    {MT_ARCH_LLAMA, "LlamaForCausalLM", "llama", 2048, 0, 1e-6f, 10000.0f, 0, 0, 0, 0, 0},
    {MT_ARCH_MISTRAL, "MistralForCausalLM", "mistral", 131072, 0, 1e-6f, 10000.0f, 0, 0, 0, 0, 0},
    {MT_ARCH_QWEN2, "Qwen2ForCausalLM", "qwen2", 32768, 0, 1e-6f, 10000.0f, 0, 0, 0, 0, 0},
    {MT_ARCH_QWEN3, "Qwen3ForCausalLM", "qwen3", 32768, 128, 1e-6f, 10000.0f, 0, 0, 0, 0, 0},
    {MT_ARCH_QWEN3_MOE, "Qwen3MoeForCausalLM", "qwen3_moe", 32768, 0, 1e-6f, 10000.0f, 128, 8, 768, 0, 0.001f},
    {MT_ARCH_QWEN2_MOE, "Qwen2MoeForCausalLM", "qwen2_moe", 32768, 0, 1e-6f, 10000.0f, 60, 4, 1408, 5632, 0.001f},
    {MT_ARCH_MIXTRAL, "MixtralForCausalLM", "mixtral", 131072, 0, 1e-5f, 1000000.0f, 8, 2, 0, 0, 0.001f},
    {MT_ARCH_OLMOE, "OlmoeForCausalLM", "olmoe", 4096, 0, 1e-5f, 10000.0f, 64, 8, 0, 0, 0.01f},
};
#define NUM_ARCHS (sizeof archs / sizeof archs[0])

/* The sliding_window of MistralConfig, Qwen2Config and Qwen3Config when the file does not say. */
#define DEFAULT_SLIDING_WINDOW 4096

/* Where a value is being read from, for messages: "<source>: field '<scope><key>'". */
typedef struct {
    const char *source;
    const json_t *obj;
    const char *scope; /* "" at the top level, "rope_scaling." inside it */
} field_src;

/* The value of `key`, or NULL when it is absent or null (transformers treats both as "unset"). */
static const json_t *field(const field_src *s, const char *key) {
    const json_t *v = json_object_get(s->obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static mt_status wrong_type(const field_src *s, const char *key, const char *expected, const json_t *v) {
    return mt_fail(MT_ERR_INVALID, "%s: field '%s%s' must be %s, found %s", s->source, s->scope, key,
                   expected, mt_json_kind(v));
}

static mt_status missing(const field_src *s, const char *key) {
    return mt_fail(MT_ERR_INVALID, "%s: required field '%s%s' is missing", s->source, s->scope, key);
}

/* Reads an integer into `out`; an absent field is an error when `required`, else leaves `out`. */
static mt_status get_int(const field_src *s, const char *key, int required, int *out) {
    const json_t *v = field(s, key);
    if (!v) return required ? missing(s, key) : MT_OK;
    if (!json_is_integer(v)) return wrong_type(s, key, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return mt_fail(MT_ERR_INVALID, "%s: field '%s%s' = %lld is out of range", s->source, s->scope,
                       key, (long long)x);
    *out = (int)x;
    return MT_OK;
}

static mt_status get_float(const field_src *s, const char *key, int required, float *out) {
    const json_t *v = field(s, key);
    if (!v) return required ? missing(s, key) : MT_OK;
    if (!json_is_number(v)) return wrong_type(s, key, "a number", v);
    *out = (float)json_number_value(v);
    return MT_OK;
}

static mt_status get_bool(const field_src *s, const char *key, int *out) {
    const json_t *v = field(s, key);
    if (!v) return MT_OK;
    if (!json_is_boolean(v)) return wrong_type(s, key, "true or false", v);
    *out = json_is_true(v);
    return MT_OK;
}

static mt_status get_string(const field_src *s, const char *key, const char **out) {
    const json_t *v = field(s, key);
    if (!v) return MT_OK;
    if (!json_is_string(v)) return wrong_type(s, key, "a string", v);
    *out = json_string_value(v);
    return MT_OK;
}

/* eos_token_id may be an integer or a list of them (Llama 3 instruct); the first one is kept. */
static mt_status get_token_id(const field_src *s, const char *key, int *out) {
    const json_t *v = field(s, key);
    if (v && json_is_array(v)) {
        if (json_array_size(v) == 0) return MT_OK;
        const json_t *first = json_array_get(v, 0);
        if (!json_is_integer(first)) return wrong_type(s, key, "an integer or a list of integers", v);
        *out = (int)json_integer_value(first);
        return MT_OK;
    }
    return get_int(s, key, 0, out);
}

static const arch_info *find_arch(const char *architecture, const char *model_type) {
    for (size_t i = 0; i < NUM_ARCHS; i++) {
        if (architecture ? !strcmp(architecture, archs[i].architecture) : !strcmp(model_type, archs[i].model_type))
            return &archs[i];
    }
    return NULL;
}

/* architectures[0] decides; model_type, when present, must agree (it is all older files have). */
static mt_status parse_arch(const field_src *s, const arch_info **out) {
    const char *architecture = NULL, *model_type = NULL;
    const json_t *list = field(s, "architectures");
    if (list) {
        if (!json_is_array(list) || json_array_size(list) == 0 || !json_is_string(json_array_get(list, 0)))
            return wrong_type(s, "architectures", "a non-empty list of strings", list);
        architecture = json_string_value(json_array_get(list, 0));
    }
    MT_TRY(get_string(s, "model_type", &model_type));
    if (!architecture && !model_type) return missing(s, "architectures");
    *out = find_arch(architecture, model_type);
    if (!*out)
        return mt_fail(MT_ERR_INVALID,
                       "%s: field '%s' = '%s' is not supported (LlamaForCausalLM, MistralForCausalLM, "
                       "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, "
                       "MixtralForCausalLM, OlmoeForCausalLM)",
                       s->source, architecture ? "architectures" : "model_type",
                       architecture ? architecture : model_type);
    if (model_type && strcmp(model_type, (*out)->model_type))
        return mt_fail(MT_ERR_INVALID, "%s: field 'model_type' ('%s') disagrees with architectures[0] ('%s')",
                       s->source, model_type, architecture);
    return MT_OK;
}

/* RoPE settings: transformers 4 writes rope_theta and rope_scaling at the top level; transformers 5
 * writes rope_parameters, which holds rope_theta as well. Either is read; a theta given both ways
 * must agree. */
static mt_status parse_rope(const field_src *top, const char *key, const char *scope, mt_config *cfg) {
    const json_t *rs = field(top, key);
    if (!rs) return MT_OK;
    if (!json_is_object(rs)) return wrong_type(top, key, "an object or null", rs);
    field_src s = {top->source, rs, scope};
    if (!strcmp(key, "rope_parameters")) {
        float theta = cfg->rope_theta, partial = 1.0f;
        MT_TRY(get_float(&s, "rope_theta", 0, &theta));
        if (field(top, "rope_theta") && theta != cfg->rope_theta)
            return mt_fail(MT_ERR_INVALID, "%s: fields 'rope_theta' (%g) and 'rope_parameters.rope_theta' (%g) "
                           "disagree", top->source, (double)cfg->rope_theta, (double)theta);
        cfg->rope_theta = theta;
        MT_TRY(get_float(&s, "partial_rotary_factor", 0, &partial));
        if (partial != 1.0f)
            return mt_fail(MT_ERR_INVALID, "%s: field 'rope_parameters.partial_rotary_factor' = %g is not "
                           "supported (1 only)", top->source, (double)partial);
    }
    const char *type = NULL;
    MT_TRY(get_string(&s, "rope_type", &type));
    if (!type) MT_TRY(get_string(&s, "type", &type));
    if (!type) return missing(&s, "rope_type");
    if (!strcmp(type, "default")) return MT_OK;
    if (strcmp(type, "llama3"))
        return mt_fail(MT_ERR_INVALID, "%s: field '%srope_type' = '%s' is not supported (llama3 only)",
                       top->source, scope, type);
    MT_TRY(get_float(&s, "factor", 1, &cfg->rope_scaling_factor));
    MT_TRY(get_float(&s, "low_freq_factor", 1, &cfg->rope_low_freq_factor));
    MT_TRY(get_float(&s, "high_freq_factor", 1, &cfg->rope_high_freq_factor));
    return get_int(&s, "original_max_position_embeddings", 1, &cfg->rope_original_max_position);
}

/* A sliding window shorter than the context changes attention; refuse it rather than ignore it. */
static mt_status check_sliding_window(const field_src *s, const mt_config *cfg) {
    int window = DEFAULT_SLIDING_WINDOW;
    const char *key = "sliding_window";
    if (cfg->arch == MT_ARCH_LLAMA || cfg->arch == MT_ARCH_OLMOE) return MT_OK;
    if (cfg->arch == MT_ARCH_MIXTRAL) window = 0; /* MixtralConfig's default: none */
    if (cfg->arch == MT_ARCH_QWEN2 || cfg->arch == MT_ARCH_QWEN3 || cfg->arch == MT_ARCH_QWEN2_MOE ||
        cfg->arch == MT_ARCH_QWEN3_MOE) {
        int use = 0;
        MT_TRY(get_bool(s, "use_sliding_window", &use));
        if (!use) return MT_OK;
        key = "use_sliding_window";
    }
    if (json_object_get(s->obj, "sliding_window")) { /* present, possibly null */
        window = 0;
        MT_TRY(get_int(s, "sliding_window", 0, &window));
    }
    if (window > 0 && window < cfg->max_position)
        return mt_fail(MT_ERR_INVALID,
                       "%s: field '%s' enables a sliding attention window of %d tokens (< "
                       "max_position_embeddings %d), which is not supported",
                       s->source, key, window, cfg->max_position);
    return MT_OK;
}

/* transformers 5 lists each layer's attention kind; anything but full attention is refused. */
static mt_status check_layer_types(const field_src *s) {
    const json_t *types = field(s, "layer_types"), *kind;
    if (!types) return MT_OK;
    if (!json_is_array(types)) return wrong_type(s, "layer_types", "a list of strings", types);
    size_t i;
    json_array_foreach(types, i, kind) {
        if (!json_is_string(kind)) return wrong_type(s, "layer_types", "a list of strings", types);
        if (strcmp(json_string_value(kind), "full_attention"))
            return mt_fail(MT_ERR_INVALID, "%s: field 'layer_types' gives layer %zu '%s', which is not supported "
                           "(full_attention only)", s->source, i, json_string_value(kind));
    }
    return MT_OK;
}

/* Every top-level field of a config.json megatrain knows. What it reads: */
static const char *const read_fields[] = {
    "architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "attention_bias", "bos_token_id", "eos_token_id",
    "hidden_act", "mlp_bias", "quantization_config", "layer_types", "sliding_window", "use_sliding_window",
    "qkv_bias", "clip_qkv", "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", NULL};
/* What changes nothing megatrain computes: the file's provenance and inference settings, the
 * initialization of a model transformers builds (megatrain's random weights are its own), the
 * layers a sliding window would have spared (none is used), HF's slicing of the MLP in
 * pretraining_tp parts (the same products). */
static const char *const metadata_fields[] = {
    "_name_or_path", "torch_dtype", "dtype", "transformers_version", "use_cache", "initializer_range",
    "pad_token_id", "pretraining_tp", "max_window_layers", "_from_model_config",
    "output_attentions", "output_hidden_states", "return_dict", "is_decoder", "id2label", "label2id",
    "tokenizer_class", "torchscript", "use_return_dict", NULL};
/* What changes the math where it is not the neutral value, which megatrain's math is: dropout
 * (megatrain trains without any). Any other value is refused, not ignored. */
static const struct {
    const char *name;
    double neutral;
} neutral_fields[] = {{"attention_dropout", 0}, {"hidden_dropout", 0}, {"dropout", 0}, {"resid_pdrop", 0},
                      {"embd_pdrop", 0}, {"attn_pdrop", 0}, {"hidden_dropout_prob", 0},
                      {"attention_probs_dropout_prob", 0}, {"embedding_dropout", 0}, {"residual_dropout", 0},
                      {NULL, 0}};

static int listed(const char *const *names, const char *key) {
    for (; *names; names++)
        if (!strcmp(*names, key)) return 1;
    return 0;
}

/* Nothing in the file is passed over in silence: a field that would change the math is refused,
 * one megatrain does not know is named in a warning. */
static mt_status check_fields(const field_src *s) {
    const char *key;
    const json_t *v;
    char unknown[512] = "";
    size_t at = 0;
    int count = 0;
    json_object_foreach((json_t *)s->obj, key, v) {
        int neutral_known = 0;
        for (int i = 0; neutral_fields[i].name; i++) {
            if (strcmp(key, neutral_fields[i].name)) continue;
            neutral_known = 1;
            if (json_is_null(v) || (json_is_number(v) && json_number_value(v) == neutral_fields[i].neutral)) continue;
            if (!json_is_number(v)) return wrong_type(s, key, "a number", v);
            return mt_fail(MT_ERR_INVALID, "%s: field '%s' = %g is not supported (megatrain trains without dropout: "
                           "%g only)", s->source, key, json_number_value(v), neutral_fields[i].neutral);
        }
        if (neutral_known || listed(read_fields, key) || listed(metadata_fields, key)) continue;
        if (count++ < 8 && at < sizeof unknown)
            at += (size_t)snprintf(unknown + at, sizeof unknown - at, "%s%s", count > 1 ? ", " : "", key);
    }
    if (count)
        mt_log_warn("%s: field%s megatrain does not know, taken as if absent: %s%s", s->source, count > 1 ? "s" : "",
                    unknown, count > 8 ? ", ..." : "");
    return MT_OK;
}

static mt_status check_unsupported(const field_src *s) {
    const char *act = "silu";
    int mlp_bias = 0;
    MT_TRY(get_string(s, "hidden_act", &act));
    if (strcmp(act, "silu"))
        return mt_fail(MT_ERR_INVALID, "%s: field 'hidden_act' = '%s' is not supported (silu only)", s->source, act);
    MT_TRY(get_bool(s, "mlp_bias", &mlp_bias));
    if (mlp_bias) return mt_fail(MT_ERR_INVALID, "%s: field 'mlp_bias' = true is not supported", s->source);
    if (field(s, "quantization_config"))
        return mt_fail(MT_ERR_INVALID, "%s: field 'quantization_config': quantized checkpoints are not supported",
                       s->source);
    return check_layer_types(s);
}

/* mlp_only_layers: the blocks that keep a dense MLP, each named once within the model. */
static mt_status parse_mlp_only(const field_src *s, mt_config *cfg) {
    const json_t *list = field(s, "mlp_only_layers"), *item;
    if (!list) return MT_OK;
    if (!json_is_array(list)) return wrong_type(s, "mlp_only_layers", "a list of integers", list);
    size_t i;
    json_array_foreach(list, i, item) {
        if (!json_is_integer(item)) return wrong_type(s, "mlp_only_layers", "a list of integers", list);
        json_int_t l = json_integer_value(item);
        if (l < 0 || l >= cfg->num_layers)
            return mt_fail(MT_ERR_INVALID, "%s: field 'mlp_only_layers' names layer %lld of a model of %d "
                           "(num_hidden_layers)", s->source, (long long)l, cfg->num_layers);
        cfg->mlp_only_layers[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return MT_OK;
}

/* The experts: transformers' field names (num_experts, or num_local_experts as Mixtral and transformers
 * 5's Qwen3MoeConfig write it) and defaults; what would change the routing is refused by name. */
static mt_status parse_moe(const field_src *s, const arch_info *a, mt_config *cfg) {
    cfg->num_experts = a->default_experts;
    cfg->experts_per_token = a->default_top_k;
    cfg->moe_intermediate_size = a->default_moe_width;
    cfg->shared_expert_intermediate_size = a->default_shared;
    cfg->router_aux_loss_coef = a->default_aux_coef;
    cfg->decoder_sparse_step = 1;
    int experts = -1, local = -1;
    MT_TRY(get_int(s, "num_experts", 0, &experts));
    MT_TRY(get_int(s, "num_local_experts", 0, &local));
    /* -1 above means not given: a negative count given is refused by name, never defaulted. */
    const char *negative = field(s, "num_experts") && experts < 0 ? "num_experts" :
                           field(s, "num_local_experts") && local < 0 ? "num_local_experts" : NULL;
    if (negative)
        return mt_fail(MT_ERR_INVALID, "%s: field '%s%s' = %d: a count of experts cannot be negative", s->source,
                       s->scope, negative, experts < 0 && field(s, "num_experts") ? experts : local);
    if (experts >= 0 && local >= 0 && experts != local)
        return mt_fail(MT_ERR_INVALID, "%s: fields 'num_experts' (%d) and 'num_local_experts' (%d) disagree",
                       s->source, experts, local);
    if (experts >= 0 || local >= 0) cfg->num_experts = experts >= 0 ? experts : local;
    MT_TRY(get_int(s, "num_experts_per_tok", 0, &cfg->experts_per_token));
    MT_TRY(get_bool(s, "output_router_logits", &cfg->output_router_logits));
    MT_TRY(get_float(s, "router_aux_loss_coef", 0, &cfg->router_aux_loss_coef));
    if (a->arch == MT_ARCH_QWEN3_MOE || a->arch == MT_ARCH_QWEN2_MOE) {
        MT_TRY(get_int(s, "moe_intermediate_size", 0, &cfg->moe_intermediate_size));
        MT_TRY(get_int(s, "decoder_sparse_step", 0, &cfg->decoder_sparse_step));
        MT_TRY(parse_mlp_only(s, cfg));
    } else { /* Mixtral's and OLMoE's experts are intermediate_size wide, every block sparse */
        cfg->moe_intermediate_size = cfg->intermediate_size;
    }
    if (a->arch == MT_ARCH_QWEN2_MOE)
        MT_TRY(get_int(s, "shared_expert_intermediate_size", 0, &cfg->shared_expert_intermediate_size));
    if (a->arch == MT_ARCH_MIXTRAL) {
        float jitter = 0;
        MT_TRY(get_float(s, "router_jitter_noise", 0, &jitter));
        if (jitter != 0)
            return mt_fail(MT_ERR_INVALID, "%s: field 'router_jitter_noise' = %g is not supported (0 only)", s->source,
                           (double)jitter);
        cfg->norm_topk_prob = 1; /* a softmax over the chosen experts' logits */
    } else {
        MT_TRY(get_bool(s, "norm_topk_prob", &cfg->norm_topk_prob));
    }
    if (a->arch == MT_ARCH_OLMOE && field(s, "clip_qkv"))
        return mt_fail(MT_ERR_INVALID, "%s: field 'clip_qkv' is not supported (null only)", s->source);
    return MT_OK;
}

static mt_status parse_root(const field_src *s, mt_config *cfg) {
    const arch_info *a = NULL;
    MT_TRY(parse_arch(s, &a));
    MT_TRY(check_fields(s));
    MT_TRY(check_unsupported(s));
    memset(cfg, 0, sizeof *cfg);
    cfg->arch = a->arch;
    cfg->max_position = a->default_max_position;
    cfg->rms_norm_eps = a->default_eps;
    cfg->rope_theta = a->default_theta;
    cfg->bos_token_id = cfg->eos_token_id = -1;
    cfg->num_kv_heads = cfg->head_dim = 0; /* 0: derived below */
    MT_TRY(get_int(s, "hidden_size", 1, &cfg->hidden_size));
    MT_TRY(get_int(s, "intermediate_size", 1, &cfg->intermediate_size));
    MT_TRY(get_int(s, "num_hidden_layers", 1, &cfg->num_layers));
    MT_TRY(get_int(s, "num_attention_heads", 1, &cfg->num_heads));
    MT_TRY(get_int(s, "vocab_size", 1, &cfg->vocab_size));
    MT_TRY(get_int(s, "num_key_value_heads", 0, &cfg->num_kv_heads));
    MT_TRY(get_int(s, "head_dim", 0, &cfg->head_dim));
    MT_TRY(get_int(s, "max_position_embeddings", 0, &cfg->max_position));
    MT_TRY(get_float(s, "rms_norm_eps", 0, &cfg->rms_norm_eps));
    MT_TRY(get_float(s, "rope_theta", 0, &cfg->rope_theta));
    MT_TRY(get_bool(s, "tie_word_embeddings", &cfg->tie_embeddings));
    /* Qwen2's q/k/v projections always carry biases; Mistral's never do. Qwen3 normalizes each
     * head of q and k instead; its attention_bias would add biases to o_proj too. */
    if (a->arch == MT_ARCH_QWEN2) cfg->attention_bias = 1;
    if (a->arch == MT_ARCH_LLAMA) MT_TRY(get_bool(s, "attention_bias", &cfg->attention_bias));
    if (a->arch == MT_ARCH_QWEN3 || a->arch == MT_ARCH_QWEN3_MOE || a->arch == MT_ARCH_OLMOE) {
        int bias = 0;
        MT_TRY(get_bool(s, "attention_bias", &bias));
        if (bias)
            return mt_fail(MT_ERR_INVALID, "%s: field 'attention_bias' = true is not supported for %s (it adds "
                           "q/k/v and o_proj biases)", s->source, a->architecture);
        cfg->qk_norm = a->arch == MT_ARCH_OLMOE ? MT_QK_NORM_FULL : MT_QK_NORM_HEAD;
    }
    if (a->arch == MT_ARCH_QWEN2_MOE) { /* Qwen2MoeConfig's qkv_bias (transformers 5; always on before) */
        cfg->attention_bias = 1;
        MT_TRY(get_bool(s, "qkv_bias", &cfg->attention_bias));
    }
    if (cfg->arch != MT_ARCH_LLAMA && cfg->arch != MT_ARCH_MISTRAL && cfg->arch != MT_ARCH_QWEN2 &&
        cfg->arch != MT_ARCH_QWEN3)
        MT_TRY(parse_moe(s, a, cfg));
    MT_TRY(get_token_id(s, "bos_token_id", &cfg->bos_token_id));
    MT_TRY(get_token_id(s, "eos_token_id", &cfg->eos_token_id));
    MT_TRY(parse_rope(s, "rope_scaling", "rope_scaling.", cfg));
    MT_TRY(parse_rope(s, "rope_parameters", "rope_parameters.", cfg));
    MT_TRY(check_sliding_window(s, cfg));
    if (cfg->num_kv_heads == 0) cfg->num_kv_heads = cfg->num_heads;
    if (cfg->head_dim == 0) cfg->head_dim = a->default_head_dim;
    if (cfg->head_dim == 0 && cfg->num_heads > 0) cfg->head_dim = cfg->hidden_size / cfg->num_heads;
    mt_status st = mt_config_validate(cfg);
    return st == MT_OK ? MT_OK : mt_fail_context(st, "%s", s->source);
}

/* Takes ownership of `root`, the document jansson parsed (NULL when it failed, with `err`). */
static mt_status parse_document(json_t *root, const json_error_t *err, const char *source, mt_config *cfg) {
    if (!root)
        return mt_fail(MT_ERR_INVALID, "%s: not readable as JSON: %s (line %d, column %d)", source, err->text,
                       err->line, err->column);
    field_src s = {source, root, ""};
    mt_status st = json_is_object(root)
                       ? parse_root(&s, cfg)
                       : mt_fail(MT_ERR_INVALID, "%s: must hold a JSON object, found %s", source, mt_json_kind(root));
    json_decref(root);
    return st;
}

mt_status mt_hf_config_parse(const char *text, size_t len, const char *source, mt_config *cfg) {
    json_error_t err;
    return parse_document(json_loadb(text, len, JSON_REJECT_DUPLICATES, &err), &err, source, cfg);
}

mt_status mt_hf_config_read(const char *path, mt_config *cfg) {
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    /* jansson's text already says "unable to open <path>: <strerror>"; this is I/O, not bad JSON. */
    if (!root && json_error_code(&err) == json_error_cannot_open_file) return mt_fail(MT_ERR_IO, "%s", err.text);
    return parse_document(root, &err, path, cfg);
}

/* The float as the shortest decimal that reads back to it, so 1e-5f is written "1e-05" and
 * not "9.9999997473787516e-06": Python then reads the value the original config held. */
static json_t *json_float(float x) {
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return json_real(strtod(buf, NULL));
}

static json_t *json_token_id(int id) { return id >= 0 ? json_integer(id) : json_null(); }

static const arch_info *arch_of(mt_arch arch) {
    for (size_t i = 0; i < NUM_ARCHS; i++)
        if (archs[i].arch == arch) return &archs[i];
    return NULL;
}

/* The experts, under each family's field names (Mixtral's num_local_experts and intermediate_size). */
static void moe_json(json_t *o, const mt_config *c) {
    int mixtral = c->arch == MT_ARCH_MIXTRAL, qwen = c->arch == MT_ARCH_QWEN3_MOE || c->arch == MT_ARCH_QWEN2_MOE;
    json_object_set_new(o, mixtral ? "num_local_experts" : "num_experts", json_integer(c->num_experts));
    json_object_set_new(o, "num_experts_per_tok", json_integer(c->experts_per_token));
    json_object_set_new(o, "output_router_logits", json_boolean(c->output_router_logits));
    json_object_set_new(o, "router_aux_loss_coef", json_float(c->router_aux_loss_coef));
    if (mixtral) json_object_set_new(o, "router_jitter_noise", json_real(0.0));
    else json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    if (c->arch == MT_ARCH_OLMOE) json_object_set_new(o, "clip_qkv", json_null());
    if (c->arch == MT_ARCH_QWEN2_MOE) {
        json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->shared_expert_intermediate_size));
        json_object_set_new(o, "qkv_bias", json_boolean(c->attention_bias));
    }
    if (!qwen) return; /* Mixtral's and OLMoE's experts are intermediate_size wide, every block sparse */
    json_object_set_new(o, "moe_intermediate_size", json_integer(c->moe_intermediate_size));
    json_object_set_new(o, "decoder_sparse_step", json_integer(c->decoder_sparse_step));
    json_t *only = json_array();
    for (int l = 0; l < c->num_layers; l++)
        if ((c->mlp_only_layers[l / 64] >> (l % 64)) & 1) json_array_append_new(only, json_integer(l));
    json_object_set_new(o, "mlp_only_layers", only);
}

static json_t *config_json(const mt_config *c, const arch_info *a, const char *torch_dtype) {
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", a->architecture));
    json_object_set_new(o, "model_type", json_string(a->model_type));
    json_object_set_new(o, "torch_dtype", json_string(torch_dtype));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->num_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->num_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position));
    json_object_set_new(o, "rms_norm_eps", json_float(c->rms_norm_eps));
    json_object_set_new(o, "rope_theta", json_float(c->rope_theta));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    if (c->arch == MT_ARCH_LLAMA) {
        json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
        json_object_set_new(o, "mlp_bias", json_false());
    }
    if (c->arch == MT_ARCH_MISTRAL || c->arch == MT_ARCH_MIXTRAL) json_object_set_new(o, "sliding_window", json_null());
    if (c->arch == MT_ARCH_QWEN2 || c->arch == MT_ARCH_QWEN3 || c->arch == MT_ARCH_QWEN2_MOE ||
        c->arch == MT_ARCH_QWEN3_MOE)
        json_object_set_new(o, "use_sliding_window", json_false());
    if (c->arch == MT_ARCH_QWEN3 || c->arch == MT_ARCH_QWEN3_MOE || c->arch == MT_ARCH_OLMOE)
        json_object_set_new(o, "attention_bias", json_false());
    if (c->num_experts > 0) moe_json(o, c);
    json_object_set_new(o, "bos_token_id", json_token_id(c->bos_token_id));
    json_object_set_new(o, "eos_token_id", json_token_id(c->eos_token_id));
    json_t *rs = json_null();
    if (c->rope_scaling_factor != 0) {
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        json_object_set_new(rs, "factor", json_float(c->rope_scaling_factor));
        json_object_set_new(rs, "low_freq_factor", json_float(c->rope_low_freq_factor));
        json_object_set_new(rs, "high_freq_factor", json_float(c->rope_high_freq_factor));
        json_object_set_new(rs, "original_max_position_embeddings", json_integer(c->rope_original_max_position));
    }
    json_object_set_new(o, "rope_scaling", rs);
    return o;
}

static json_t *generation_config_json(const mt_config *c) {
    json_t *o = json_object();
    json_object_set_new(o, "_from_model_config", json_true());
    if (c->bos_token_id >= 0) json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    if (c->eos_token_id >= 0) json_object_set_new(o, "eos_token_id", json_integer(c->eos_token_id));
    return o;
}

/* Writes `doc` to dir/name and drops the reference to it. */
static mt_status dump(json_t *doc, const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = doc ? json_dump_file(doc, path, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : -1;
    json_decref(doc);
    if (rc != 0) return mt_fail(MT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return MT_OK;
}

json_t *mt_hf_config_to_json(const mt_config *cfg, const char *torch_dtype) {
    const arch_info *a = arch_of(cfg->arch);
    return a ? config_json(cfg, a, torch_dtype) : NULL;
}

mt_status mt_hf_config_from_json(const json_t *doc, const char *source, mt_config *cfg) {
    if (!json_is_object(doc))
        return mt_fail(MT_ERR_INVALID, "%s: must hold a JSON object, found %s", source, doc ? mt_json_kind(doc) : "nothing");
    field_src s = {source, doc, ""};
    return parse_root(&s, cfg);
}

mt_status mt_hf_config_write(const mt_config *cfg, const char *torch_dtype, const char *dir) {
    const arch_info *a = arch_of(cfg->arch);
    if (!a) return mt_fail(MT_ERR_INVALID, "%s/config.json: unknown architecture %d", dir, (int)cfg->arch);
    MT_TRY(dump(config_json(cfg, a, torch_dtype), dir, "config.json"));
    return dump(generation_config_json(cfg), dir, "generation_config.json");
}
