/* Qwen2 and Qwen2.5 (Qwen2ForCausalLM): Llama's block with q/k/v biases, always. */
#include "model/families.h"

/* Qwen2Config's sliding_window when use_sliding_window is set and the file does not say. */
#define DEFAULT_SLIDING_WINDOW 4096

static const mt_preset presets[] = {
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
};

static const char *const fields[] = {"sliding_window", "use_sliding_window", NULL};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_full_attention(s));
    c->attention_bias = 1;
    return mt_family_read_window(s, c, DEFAULT_SLIDING_WINDOW, 1);
}

static void write(const mt_config *c, json_t *o) { json_object_set_new(o, "use_sliding_window", json_false()); }

static mt_status validate(const mt_config *c) { return mt_family_require_qk_norm(c, MT_QK_NORM_NONE); }

const mt_family mt_family_qwen2 = {
    .arch = MT_ARCH_QWEN2, .architecture = "Qwen2ForCausalLM", .model_type = "qwen2",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common};
