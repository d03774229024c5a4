/* Qwen2 and Qwen2.5 (Qwen2ForCausalLM): Llama's block with q/k/v biases, always; with
 * use_sliding_window, a sliding window on the layers from max_window_layers on. */
#include "model/families.h"

/* Qwen2Config's sliding_window when use_sliding_window is set and the file does not say, and its
 * max_window_layers: the layers from it on slide. */
#define DEFAULT_SLIDING_WINDOW 4096
#define DEFAULT_MAX_WINDOW_LAYERS 28

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

static const char *const fields[] = {"sliding_window", "use_sliding_window", "max_window_layers", NULL};

static mt_status read(const mt_json_src *s, mt_config *c) {
    c->attention_bias = 1;
    return mt_family_read_sliding_window(s, c, DEFAULT_SLIDING_WINDOW, "use_sliding_window",
                                         DEFAULT_MAX_WINDOW_LAYERS);
}

/* use_sliding_window, and with a window its size and layer_types (which transformers 5 reads);
 * max_window_layers, which earlier versions read, where the local layers are the last ones. */
static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "use_sliding_window", json_boolean(c->sliding_window > 0));
    if (!c->sliding_window) return;
    int first_local = c->num_layers;
    while (first_local > 0 && mt_config_layer_is_local(c, first_local - 1)) first_local--;
    json_object_set_new(o, "max_window_layers", json_integer(first_local));
    mt_family_write_sliding_window(c, o);
}

static mt_status validate(const mt_config *c) { return mt_family_require_qk_norm(c, MT_QK_NORM_NONE); }

const mt_family mt_family_qwen2 = {
    .arch = MT_ARCH_QWEN2, .architecture = "Qwen2ForCausalLM", .model_type = "qwen2",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common};
