/* Llama 2 and 3 (LlamaForCausalLM): the family the others vary, with q/k/v and o_proj biases where
 * attention_bias says and llama3 RoPE scaling. */
#include "model/families.h"

#define LLAMA(D, F, L, H, KV, V, MAXPOS, THETA, TIE)                                          \
    {.arch = MT_ARCH_LLAMA, .hidden_size = D, .intermediate_size = F, .num_layers = L,      \
     .num_heads = H, .num_kv_heads = KV, .head_dim = (D) / (H), .vocab_size = V,            \
     .max_position = MAXPOS, .rms_norm_eps = 1e-5f, .rope_theta = THETA,                    \
     .tie_embeddings = TIE, .bos_token_id = -1, .eos_token_id = -1}

static const mt_preset presets[] = {
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
    /* Meta-Llama-3-70B: 64 query heads of 128, 8 key/value heads, Llama 3's vocabulary. */
    {"llama-3-70b", {.arch = MT_ARCH_LLAMA, .hidden_size = 8192, .intermediate_size = 28672,
                     .num_layers = 80, .num_heads = 64, .num_kv_heads = 8, .head_dim = 128,
                     .vocab_size = 128256, .max_position = 8192, .rms_norm_eps = 1e-5f,
                     .rope_theta = 500000.0f, .tie_embeddings = 0, .bos_token_id = 128000,
                     .eos_token_id = 128001}},
};

static const char *const fields[] = {"attention_bias", NULL};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_full_attention(s));
    return mt_json_get_bool(s, "attention_bias", &c->attention_bias);
}

static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
    json_object_set_new(o, "mlp_bias", json_false());
}

static mt_status validate(const mt_config *c) { return mt_family_require_qk_norm(c, MT_QK_NORM_NONE); }

/* LlamaAttention's attention_bias is on o_proj too. */
static void plan(const mt_config *c, int l, mt_layer_spec *s) {
    mt_family_plan_common(c, l, s);
    if (c->attention_bias) s->attn.flags |= MT_ATTN_BIAS_O;
}

const mt_family mt_family_llama = {
    .arch = MT_ARCH_LLAMA, .architecture = "LlamaForCausalLM", .model_type = "llama",
    .hidden_act = "silu",
    .default_max_position = 2048, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = plan, .plan_model = mt_family_plan_model_common};
