/* Qwen3 dense (Qwen3ForCausalLM): RMSNorm of q and k over each head, no biases, head_dim 128
 * whatever the width. */
#include "model/families.h"

/* Qwen3Config's sliding_window when use_sliding_window is set and the file does not say. */
#define DEFAULT_SLIDING_WINDOW 4096

/* Qwen3 dense models share all but their width, depth, heads and tying (Qwen/Qwen3-*'s config.json). */
#define QWEN3(D, F, L, H, TIE)                                                                  \
    {.arch = MT_ARCH_QWEN3, .hidden_size = D, .intermediate_size = F, .num_layers = L,        \
     .num_heads = H, .num_kv_heads = 8, .head_dim = 128, .vocab_size = 151936,                \
     .max_position = 40960, .rms_norm_eps = 1e-6f, .rope_theta = 1000000.0f,                  \
     .tie_embeddings = TIE, .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = 151643, .eos_token_id = 151645}

static const mt_preset presets[] = {
    {"qwen3-0.6b", QWEN3(1024, 3072, 28, 16, 1)},
    {"qwen3-1.7b", QWEN3(2048, 6144, 28, 16, 1)},
    {"qwen3-4b", QWEN3(2560, 9728, 36, 32, 1)},
    {"qwen3-8b", QWEN3(4096, 12288, 36, 32, 0)},
};

static const char *const fields[] = {"attention_bias", "sliding_window", "use_sliding_window", NULL};

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(mt_family_read_full_attention(s));
    MT_TRY(mt_family_refuse_attention_bias(s, "Qwen3ForCausalLM"));
    c->qk_norm = MT_QK_NORM_HEAD;
    return mt_family_read_window(s, c, DEFAULT_SLIDING_WINDOW, 1);
}

static void write(const mt_config *c, json_t *o) {
    json_object_set_new(o, "use_sliding_window", json_false());
    json_object_set_new(o, "attention_bias", json_false());
}

/* config.json carries no flag for the q/k norms: the architecture implies them. Its attention_bias
 * would put a bias on o_proj as well, which the block does not have. */
static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_HEAD));
    return mt_family_no_o_bias(c);
}

const mt_family mt_family_qwen3 = {
    .arch = MT_ARCH_QWEN3, .architecture = "Qwen3ForCausalLM", .model_type = "qwen3",
    .hidden_act = "silu",
    .default_max_position = 32768, .default_head_dim = 128, .default_eps = 1e-6f, .default_theta = 10000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_common, .plan_model = mt_family_plan_model_common};
