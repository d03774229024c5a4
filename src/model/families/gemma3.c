/* Gemma 3, text (Gemma3ForCausalLM, model_type gemma3_text): five local layers (a sliding window
 * with their own RoPE base, rope_local_base_freq, unscaled) to one global (rope_theta with
 * rope_scaling), per-head q/k RMSNorm, four norms a block (before and after the attention and the
 * MLP), every norm (1 + w), scores scaled by 1/sqrt(query_pre_attn_scalar), GeGLU
 * (gelu_pytorch_tanh), the embedding scaled by sqrt(hidden_size), tied embeddings. Its plan and
 * Hugging Face names are Gemma 2's as well (families/gemma2.c). */
#include "model/families.h"
#include "model/wrappers.h"

/* Gemma3TextConfig's defaults where config.json does not say. */
#define DEFAULT_SLIDING_WINDOW 4096
#define DEFAULT_PATTERN 6 /* sliding_window_pattern: every sixth layer global */
#define DEFAULT_LOCAL_THETA 10000.0f
#define DEFAULT_QUERY_PRE_ATTN_SCALAR 256.0f

/* The hub's checkpoints (google/gemma-3-*-pt config.json; the text_config of 4b, 12b and 27b):
 * local layers as sliding_window_pattern 6 makes them, LOCAL(L) of L layers. */
#define LOCAL(L) {0x37df7df7df7df7dfull & ((1ull << (L)) - 1)} /* L < 64 */
#define GEMMA3(D, F, L, H, KV, HD, SCALAR, V, POS, WINDOW, LINEAR)                                         \
    {.arch = MT_ARCH_GEMMA3, .hidden_size = D, .intermediate_size = F, .num_layers = L, .num_heads = H,     \
     .num_kv_heads = KV, .head_dim = HD, .vocab_size = V, .max_position = POS, .rms_norm_eps = 1e-6f,      \
     .rope_theta = 1000000.0f, .rope_scaling_factor = LINEAR, .rope_scaling_linear = LINEAR != 0,           \
     .tie_embeddings = 1, .qk_norm = MT_QK_NORM_HEAD, .bos_token_id = 2, .eos_token_id = 1,                 \
     .sliding_window = WINDOW, .local_layers = LOCAL(L), .rope_local_theta = 10000.0f,                      \
     .query_pre_attn_scalar = SCALAR}

static const mt_preset presets[] = {
    {"gemma-3-1b", GEMMA3(1152, 6912, 26, 4, 1, 256, 256.0f, 262144, 32768, 512, 0.0f)},
    {"gemma-3-4b", GEMMA3(2560, 10240, 34, 8, 4, 256, 256.0f, 262208, 131072, 1024, 8.0f)},
    {"gemma-3-12b", GEMMA3(3840, 15360, 48, 16, 8, 256, 256.0f, 262208, 131072, 1024, 8.0f)},
    {"gemma-3-27b", GEMMA3(5376, 21504, 62, 32, 16, 128, 168.0f, 262208, 131072, 1024, 8.0f)},
};

/* Gemma 3n's and Gemma 4's fields: AltUp, LAuReL, per-layer inputs and embeddings, shared key/value
 * layers, activation sparsity. Each changes the maths; none is computed. */
static const char *const refused[] = {
    "altup_num_inputs", "altup_active_idx", "altup_coef_clip", "altup_correct_scale", "altup_lr_multiplier",
    "laurel_rank", "hidden_size_per_layer_input", "vocab_size_per_layer_input", "num_kv_shared_layers",
    "activation_sparsity_pattern", "per_layer_embedding_size", "num_global_key_value_heads",
    "global_head_dim", "attention_k_eq_v", "enable_moe_block", NULL};

static const char *const fields[] = {
    "attention_bias", "sliding_window", "sliding_window_pattern", "rope_local_base_freq",
    "query_pre_attn_scalar", "final_logit_softcapping", "attn_logit_softcapping", "hidden_activation",
    "cache_implementation", "use_bidirectional_attention", "altup_num_inputs", "altup_active_idx",
    "altup_coef_clip", "altup_correct_scale", "altup_lr_multiplier", "laurel_rank", "hidden_size_per_layer_input",
    "vocab_size_per_layer_input", "num_kv_shared_layers", "activation_sparsity_pattern", "per_layer_embedding_size",
    "num_global_key_value_heads", "global_head_dim", "attention_k_eq_v", "enable_moe_block", NULL};

static mt_status refuse_other_gemmas(const mt_json_src *s) {
    for (const char *const *f = refused; *f; f++) {
        const json_t *v = mt_json_field(s, *f);
        if (v && !json_is_null(v) && !json_is_false(v) && !(json_is_number(v) && json_number_value(v) == 0))
            return mt_fail(MT_ERR_INVALID, "%s: field '%s' (Gemma 3n's or Gemma 4's) changes the model and is not "
                           "supported", s->source, *f);
    }
    int bidirectional = 0;
    MT_TRY(mt_json_get_bool(s, "use_bidirectional_attention", &bidirectional));
    if (bidirectional)
        return mt_fail(MT_ERR_INVALID, "%s: field 'use_bidirectional_attention' = true is not supported (a "
                       "decoder's causal attention only)", s->source);
    return MT_OK;
}

/* sliding_window_pattern (every n-th layer global), then layer_types where given. */
static mt_status read_local_layers(const mt_json_src *s, mt_config *c) {
    int pattern = DEFAULT_PATTERN;
    MT_TRY(mt_json_get_int(s, "sliding_window_pattern", 0, &pattern));
    MT_TRY(mt_config_in_range("sliding_window_pattern", pattern, 1, MT_CONFIG_MAX_LAYERS));
    for (int l = 0; l < c->num_layers && l < MT_CONFIG_MAX_LAYERS; l++)
        if ((l + 1) % pattern) mt_config_set_local(c, l);
    return mt_family_read_layer_types(s, c);
}

static mt_status read(const mt_json_src *s, mt_config *c) {
    MT_TRY(refuse_other_gemmas(s));
    MT_TRY(mt_family_read_gemma(s, c, "gelu_pytorch_tanh", DEFAULT_QUERY_PRE_ATTN_SCALAR, 0, 0));
    MT_TRY(mt_family_refuse_attention_bias(s, "Gemma3ForCausalLM"));
    c->qk_norm = MT_QK_NORM_HEAD;
    c->sliding_window = DEFAULT_SLIDING_WINDOW;
    MT_TRY(mt_json_get_int(s, "sliding_window", 0, &c->sliding_window));
    MT_TRY(mt_config_in_range("sliding_window", c->sliding_window, 1, MT_CONFIG_MAX_POSITION));
    c->rope_local_theta = DEFAULT_LOCAL_THETA;
    MT_TRY(mt_json_get_float(s, "rope_local_base_freq", 0, &c->rope_local_theta));
    return read_local_layers(s, c);
}

/* The pattern where the local layers follow one (as transformers before layer_types reads them),
 * and layer_types. */
static void write(const mt_config *c, json_t *o) {
    mt_family_write_gemma(c, o, "gelu_pytorch_tanh");
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "rope_local_base_freq", mt_json_float(c->rope_local_theta));
    for (int pattern = 1; pattern <= c->num_layers; pattern++) {
        int fits = 1;
        for (int l = 0; l < c->num_layers; l++) fits &= mt_config_layer_is_local(c, l) == ((l + 1) % pattern != 0);
        if (fits) {
            json_object_set_new(o, "sliding_window_pattern", json_integer(pattern));
            break;
        }
    }
    mt_family_write_sliding_window(c, o);
}

static mt_status validate(const mt_config *c) {
    MT_TRY(mt_family_require_qk_norm(c, MT_QK_NORM_HEAD));
    return mt_family_no_o_bias(c);
}

const mt_family mt_family_gemma3 = {
    .arch = MT_ARCH_GEMMA3, .architecture = "Gemma3ForCausalLM", .model_type = "gemma3_text",
    .hidden_act = "gelu_pytorch_tanh",
    .default_max_position = 131072, .default_head_dim = 256, .default_eps = 1e-6f, .default_theta = 1000000.0f,
    .presets = presets, .num_presets = sizeof presets / sizeof presets[0], .fields = fields,
    .read = read, .write = write, .validate = validate,
    .plan = mt_family_plan_gemma, .plan_model = mt_family_plan_model_gemma, .names = &mt_family_gemma_names};

/* Gemma3ForConditionalGeneration: Gemma 3's text model under text_config, a SigLIP vision tower and
 * its projector, which are kept as they are. The hub's checkpoints name them as transformers 4 did
 * (language_model.model.*, vision_tower.*, multi_modal_projector.*); transformers 5 saves them
 * under model.* (its checkpoint conversion mapping). The text config's defaults are
 * Gemma3TextConfig's. */
const mt_wrapper mt_wrapper_gemma3 = {
    .architecture = "Gemma3ForConditionalGeneration", .model_type = "gemma3", .text_key = "text_config",
    .text_architecture = "Gemma3ForCausalLM",
    .text_defaults = "{\"vocab_size\": 262208, \"hidden_size\": 2304, \"intermediate_size\": 9216, "
                     "\"num_hidden_layers\": 26, \"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
                     "\"bos_token_id\": 2, \"eos_token_id\": 1}",
    .layouts = {{"language_model.model.", "language_model.lm_head.weight", {"vision_tower.", "multi_modal_projector."}},
                {"model.language_model.", "lm_head.weight", {"model.vision_tower.", "model.multi_modal_projector."}}},
    .kept_files = {"preprocessor_config.json", "processor_config.json"}};
