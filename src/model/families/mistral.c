/* Mistral (MistralForCausalLM): Llama's block without biases; v0.1's sliding window (4096) on
 * every layer. */
#include "model/families.h"

/* MistralConfig's sliding_window when the file does not say. */
#define DEFAULT_SLIDING_WINDOW 4096

static const mt_preset presets[] = {
    /* Mistral-Small-24B-Base-2501: 32 query heads of 128 over a 5120 width (head_dim is not
     * hidden / heads), the Tekken vocabulary, 32k positions. */
    {"mistral-small-24b", {.arch = MT_ARCH_MISTRAL, .hidden_size = 5120, .intermediate_size = 32768,
                           .num_layers = 40, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                           .vocab_size = 131072, .max_position = 32768, .rms_norm_eps = 1e-5f,
                           .rope_theta = 100000000.0f, .tie_embeddings = 0, .bos_token_id = 1,
                           .eos_token_id = 2}},
    /* Mistral-Large-Instruct-2407 (Mistral Large 2, 123 B): 88 blocks of a 12288 width, 96 query heads
     * of 128 and 8 key/value heads, the 32768-token vocabulary, 131072 positions. */
    {"mistral-large-2", {.arch = MT_ARCH_MISTRAL, .hidden_size = 12288, .intermediate_size = 28672,
                         .num_layers = 88, .num_heads = 96, .num_kv_heads = 8, .head_dim = 128,
                         .vocab_size = 32768, .max_position = 131072, .rms_norm_eps = 1e-5f,
                         .rope_theta = 1000000.0f, .tie_embeddings = 0, .bos_token_id = 1,
                         .eos_token_id = 2}},
};

static const char *const fields[] = {"sliding_window", NULL};

static mt_status read(const mt_json_src *s, mt_config *c) {
    return mt_family_read_sliding_window(s, c, DEFAULT_SLIDING_WINDOW, NULL, 0);
}

static mt_status validate(const mt_config *c) { return mt_family_require_qk_norm(c, MT_QK_NORM_NONE); }

const mt_family mt_family_mistral = {
    .arch = MT_ARCH_MISTRAL, .architecture = "MistralForCausalLM", .model_type = "mistral",
    .hidden_act = "silu",
    .default_max_position = 131072, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = mt_family_write_sliding_window, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common};
