/* Gemma 2 (Gemma2ForCausalLM): Gemma 3's block (families/gemma3.c) without q/k norms, with the
 * attention scores soft-capped at 50 and the head's logits at 30; local (a 4096-key window) and
 * global layers alternate, the local first, one RoPE table for both. */
#include "model/families.h"

/* Gemma2Config's defaults where config.json does not say. */
#define DEFAULT_SLIDING_WINDOW 4096
#define DEFAULT_QUERY_PRE_ATTN_SCALAR 256.0f
#define DEFAULT_ATTN_SOFTCAP 50.0f
#define DEFAULT_FINAL_SOFTCAP 30.0f

/* The hub's checkpoints (google/gemma-2-*'s config.json): the even layers local. */
#define LOCAL(L) {0x5555555555555555ull & ((1ull << (L)) - 1)} /* L < 64 */
#define GEMMA2(D, F, L, H, KV, HD, SCALAR)                                                                  \
    {.arch = MT_ARCH_GEMMA2, .hidden_size = D, .intermediate_size = F, .num_layers = L, .num_heads = H,     \
     .num_kv_heads = KV, .head_dim = HD, .vocab_size = 256000, .max_position = 8192, .rms_norm_eps = 1e-6f, \
     .rope_theta = 10000.0f, .tie_embeddings = 1, .bos_token_id = 2, .eos_token_id = 1,                     \
     .sliding_window = 4096, .local_layers = LOCAL(L), .query_pre_attn_scalar = SCALAR,                    \
     .attn_logit_softcap = 50.0f, .final_logit_softcap = 30.0f}

static const mt_preset presets[] = {
    {"gemma-2-2b", GEMMA2(2304, 9216, 26, 8, 4, 256, 256.0f)},
    {"gemma-2-9b", GEMMA2(3584, 14336, 42, 16, 8, 256, 256.0f)},
    {"gemma-2-27b", GEMMA2(4608, 36864, 46, 32, 16, 128, 144.0f)},
};

static const char *const fields[] = {"attention_bias", "sliding_window", "query_pre_attn_scalar",
                                     "final_logit_softcapping", "attn_logit_softcapping", "hidden_activation",
                                     "cache_implementation", NULL};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_gemma(s, c, "gelu_pytorch_tanh", DEFAULT_QUERY_PRE_ATTN_SCALAR, DEFAULT_ATTN_SOFTCAP,
                                DEFAULT_FINAL_SOFTCAP));
    MT_TRY(mt_family_refuse_attention_bias(s, "Gemma2ForCausalLM"));
    c->sliding_window = DEFAULT_SLIDING_WINDOW;
    MT_TRY(mt_json_get_int(s, "sliding_window", 0, &c->sliding_window));
    MT_TRY(mt_config_in_range("sliding_window", c->sliding_window, 1, MT_CONFIG_MAX_POSITION));
    for (int l = 0; l < c->num_layers && l < MT_CONFIG_MAX_LAYERS; l += 2) mt_config_set_local(c, l);
    return mt_family_read_layer_types(s, c);
}

static void write(const mt_config *c, json_t *o) {
    mt_family_write_gemma(c, o, "gelu_pytorch_tanh");
    json_object_set_new(o, "attention_bias", json_false());
    mt_family_write_sliding_window(c, o);
}

static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_NONE));
    return mt_family_no_o_bias(c);
}

const mt_family mt_family_gemma2 = {
    .arch = MT_ARCH_GEMMA2, .architecture = "Gemma2ForCausalLM", .model_type = "gemma2",
    .hidden_act = "gelu_pytorch_tanh",
    .default_max_position = 8192, .default_head_dim = 256, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_gemma, .plan_model = mt_family_plan_model_gemma, .names = &mt_family_gemma_names};
