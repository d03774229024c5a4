/* config.json -> mt_config: real-world shapes, transformers' defaults, every refusal naming its
 * field, and mt_config -> config.json -> mt_config unchanged. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <string.h>

#include "config_cases.h"
#include "hf_test_files.h"
#include "io/hf_config.h"
#include "model/families.h"

/* Llama 3.2 1B's config.json, abridged to the fields megatrain reads plus a few it ignores. */
static const char *llama32 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 2048,"
    " \"intermediate_size\": 8192, \"num_hidden_layers\": 16, \"num_attention_heads\": 32,"
    " \"num_key_value_heads\": 8, \"head_dim\": 64, \"vocab_size\": 128256,"
    " \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
    " \"tie_word_embeddings\": true, \"attention_bias\": false, \"mlp_bias\": false, \"hidden_act\": \"silu\","
    " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"torch_dtype\": \"bfloat16\","
    " \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, \"use_cache\": true}";

Test(hfconfig, parses_llama_3_2) {
    mt_config c;
    cr_assert_eq(cfg_case_parse(llama32, &c), MT_OK, "%s", mt_error());
    mt_config want;
    cr_assert_eq(mt_config_preset("llama-3.2-1b", &want), MT_OK);
    cr_assert(!memcmp(&c, &want, sizeof c), "parsed config differs from the llama-3.2-1b preset");
}

Test(hfconfig, fills_transformers_defaults) {
    const char *minimal = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
                          " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                          " \"vocab_size\": 100, \"num_key_value_heads\": null}";
    mt_config c;
    cr_assert_eq(cfg_case_parse(minimal, &c), MT_OK, "%s", mt_error());
    cr_assert(c.arch == MT_ARCH_LLAMA && c.num_kv_heads == 4 && c.head_dim == 16 && c.max_position == 2048);
    cr_assert(c.rms_norm_eps == 1e-6f && c.rope_theta == 10000.0f && !c.tie_embeddings && !c.attention_bias);
    cr_assert(c.rope_scaling_factor == 0 && c.bos_token_id == -1 && c.eos_token_id == -1);
}

static const char *qwen2 =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"hidden_size\": 896,"
    " \"intermediate_size\": 4864, \"num_hidden_layers\": 24, \"num_attention_heads\": 14,"
    " \"num_key_value_heads\": 2, \"vocab_size\": 151936, \"max_position_embeddings\": 32768,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true,"
    " \"use_sliding_window\": false, \"sliding_window\": 32768, \"max_window_layers\": 21,"
    " \"hidden_act\": \"silu\", \"bos_token_id\": 151643, \"eos_token_id\": 151643, \"rope_scaling\": null}";

Test(hfconfig, qwen2_always_has_qkv_bias) {
    mt_config c;
    cr_assert_eq(cfg_case_parse(qwen2, &c), MT_OK, "%s", mt_error());
    cr_assert(c.arch == MT_ARCH_QWEN2 && c.attention_bias && c.head_dim == 64 && c.tie_embeddings);
}

static const char *mistral =
    "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", \"hidden_size\": 4096,"
    " \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
    " \"num_key_value_heads\": 8, \"vocab_size\": 32768, \"max_position_embeddings\": 32768,"
    " \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"sliding_window\": null}";

Test(hfconfig, mistral_without_sliding_window) {
    mt_config c;
    cr_assert_eq(cfg_case_parse(mistral, &c), MT_OK, "%s", mt_error());
    cr_assert(c.arch == MT_ARCH_MISTRAL && !c.attention_bias && c.num_kv_heads == 8);
}

/* Qwen/Qwen3-0.6B's config.json as published. */
static const char *qwen3 =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

Test(hfconfig, parses_qwen3_with_its_own_head_dim) {
    mt_config c, want;
    cr_assert_eq(cfg_case_parse(qwen3, &c), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_config_preset("qwen3-0.6b", &want), MT_OK);
    cr_assert(!memcmp(&c, &want, sizeof c), "parsed config differs from the qwen3-0.6b preset");
    cr_assert(c.qk_norm && !c.attention_bias && c.head_dim * c.num_heads == 2 * c.hidden_size);
    /* Qwen3-8B: wider, deeper, untied. */
    char *wide = cfg_case_with_field(qwen3, "hidden_size", "4096");
    char *deep = cfg_case_with_field(wide, "num_hidden_layers", "36");
    char *heads = cfg_case_with_field(deep, "num_attention_heads", "32");
    char *mlp = cfg_case_with_field(heads, "intermediate_size", "12288");
    cr_assert_eq(cfg_case_parse_variant(mlp, "tie_word_embeddings", "false", &c), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_config_preset("qwen3-8b", &want), MT_OK);
    cr_assert(!memcmp(&c, &want, sizeof c), "Qwen3-8B's config differs from the qwen3-8b preset");
    free(wide), free(deep), free(heads), free(mlp);
}

/* Qwen3Config's defaults differ from Llama's: head_dim 128 whatever the width, 32768 positions. */
Test(hfconfig, fills_qwen3_defaults) {
    const char *minimal = "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 64,"
                          " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                          " \"vocab_size\": 100}";
    mt_config c;
    cr_assert_eq(cfg_case_parse(minimal, &c), MT_OK, "%s", mt_error());
    cr_assert(c.arch == MT_ARCH_QWEN3 && c.qk_norm && !c.attention_bias && !c.tie_embeddings);
    cr_assert(c.head_dim == 128 && c.num_kv_heads == 4 && c.max_position == 32768, "head_dim %d, max_position %d",
              c.head_dim, c.max_position);
}

/* config.json has no field for the q/k norms: a config in memory must agree with its
 * architecture, or its export would describe another model. */
Test(hfconfig, qk_norm_goes_with_qwen3_only) {
    mt_config c;
    cr_assert_eq(mt_config_preset("qwen3-0.6b", &c), MT_OK);
    cr_assert_eq(mt_config_validate(&c), MT_OK, "%s", mt_error());
    c.qk_norm = 0;
    cr_assert_eq(mt_config_validate(&c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "every Qwen3"), "%s", mt_error());
    c.qk_norm = 1;
    c.attention_bias = 1;
    cr_assert_eq(mt_config_validate(&c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "attention_bias"), "%s", mt_error());
    cr_assert_eq(mt_config_preset("tiny", &c), MT_OK);
    c.qk_norm = 1;
    cr_assert_eq(mt_config_validate(&c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "Qwen3 only"), "%s", mt_error());
}

Test(hfconfig, refuses_what_qwen3_models_may_carry_that_it_does_not_do) {
    /* Qwen3-VL is another architecture; a model_type that is not the architecture's is refused (Qwen3-Next's
     * architecture among them). */
    cfg_case_expect_refusal(qwen3, "architectures", "[\"Qwen3VLForConditionalGeneration\"]",
                            "'Qwen3VLForConditionalGeneration' is not supported");
    cfg_case_expect_refusal(qwen3, "architectures", "[\"Qwen3NextForCausalLM\"]", "'model_type'");
    cfg_case_expect_refusal(qwen3, "model_type", "\"qwen3_moe\"", "'model_type'");
    /* Its attention_bias puts biases on q/k/v and o_proj. */
    cfg_case_expect_refusal(qwen3, "attention_bias", "true", "'attention_bias'");
    /* Long-context YaRN, as the Qwen3 model cards suggest: transformers' defaults where absent. */
    mt_config yarn;
    cr_assert_eq(cfg_case_parse_variant(qwen3, "rope_scaling",
                                        "{\"rope_type\": \"yarn\", \"factor\": 4.0, "
                                        "\"original_max_position_embeddings\": 32768}", &yarn),
                 MT_OK, "%s", mt_error());
    cr_expect(yarn.rope_scaling_yarn && yarn.rope_scaling_factor == 4.0f && yarn.rope_original_max_position == 32768 &&
              yarn.rope_beta_fast == 32.0f && yarn.rope_beta_slow == 1.0f && yarn.rope_truncate &&
              yarn.rope_attention_factor == 0.0f);
    /* Long-context LongRoPE scaling (Phi-3's). */
    cfg_case_expect_refusal(qwen3, "rope_scaling",
                   "{\"rope_type\": \"longrope\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}",
                   "'rope_scaling.rope_type' = 'longrope'");
    /* A sliding window: Qwen3Config's default of 4096 when the file names none. */
    char *windowed = cfg_case_with_field(qwen3, "use_sliding_window", "true");
    cfg_case_expect_refusal(windowed, "sliding_window", NULL, "'use_sliding_window' enables a sliding attention window of 4096");
    cfg_case_expect_refusal(windowed, "sliding_window", "1024", "window of 1024 tokens");
    free(windowed);
    /* transformers 5's per-layer kinds. */
    cfg_case_expect_refusal(qwen3, "layer_types", "[\"full_attention\", \"sliding_attention\"]",
                   "'layer_types' gives layer 1 'sliding_attention'");
    cfg_case_expect_refusal(qwen3, "layer_types", "\"full_attention\"", "'layer_types' must be a list of strings");
    mt_config c;
    cr_assert_eq(cfg_case_parse_variant(qwen3, "layer_types", "[\"full_attention\", \"full_attention\"]", &c), MT_OK, "%s",
                 mt_error());
}

/* The layers a config makes local, as a string of 'L' (local) and 'F' (full) a layer. */
static void expect_local(const mt_config *c, int window, const char *layers) {
    cr_assert_eq(c->sliding_window, window, "sliding_window %d, want %d", c->sliding_window, window);
    cr_assert_eq((int)strlen(layers), c->num_layers);
    for (int l = 0; l < c->num_layers; l++) {
        int local = layers[l] == 'L';
        cr_assert_eq(mt_config_layer_is_local(c, l), local, "layer %d", l);
        cr_assert_eq(mt_layer_spec_of(c, l).attn.window, local ? window : 0, "layer %d's spec", l);
    }
}

/* The config written back reads as the same config. */
static void expect_round_trip(const mt_config *c) {
    json_t *doc = mt_hf_config_to_json(c, "bfloat16");
    mt_config back;
    cr_assert_eq(mt_hf_config_from_json(doc, "written", &back), MT_OK, "%s", mt_error());
    cr_assert(!memcmp(c, &back, sizeof back), "the written config reads back otherwise");
    json_decref(doc);
}

/* Sliding windows were refused before megatrain computed them (ISSUE 40): Mistral v0.1's window
 * slides on every layer, Qwen2's use_sliding_window on the layers from max_window_layers on
 * (transformers' Qwen2Config rule), and transformers 5's layer_types decides where present. */
Test(hfconfig, reads_sliding_windows) {
    mt_config c;
    const char *all32 = "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL";
    cr_assert_eq(cfg_case_parse_variant(mistral, "sliding_window", "4096", &c), MT_OK, "%s", mt_error());
    expect_local(&c, 4096, all32);
    expect_round_trip(&c);
    /* MistralConfig's default window is 4096: leaving it out turns it on. */
    cr_assert_eq(cfg_case_parse_variant(mistral, "sliding_window", NULL, &c), MT_OK, "%s", mt_error());
    expect_local(&c, 4096, all32);
    /* A window as long as the context changes nothing. */
    cr_assert_eq(cfg_case_parse_variant(mistral, "sliding_window", "32768", &c), MT_OK, "%s", mt_error());
    expect_local(&c, 0, "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF");
    expect_round_trip(&c);
    char *qwen2_short_window = cfg_case_with_field(qwen2, "sliding_window", "4096");
    cr_assert_eq(cfg_case_parse_variant(qwen2_short_window, "use_sliding_window", "true", &c), MT_OK, "%s", mt_error());
    expect_local(&c, 4096, "FFFFFFFFFFFFFFFFFFFFFLLL"); /* max_window_layers 21 of 24 */
    expect_round_trip(&c);
    free(qwen2_short_window);
    /* Qwen2Config's default window is 4096 too; without use_sliding_window none slides. */
    char *qwen2_default_window = cfg_case_with_field(qwen2, "sliding_window", NULL);
    cr_assert_eq(cfg_case_parse_variant(qwen2_default_window, "use_sliding_window", "true", &c), MT_OK, "%s", mt_error());
    expect_local(&c, 4096, "FFFFFFFFFFFFFFFFFFFFFLLL");
    free(qwen2_default_window);
    cr_assert_eq(cfg_case_parse(qwen2, &c), MT_OK, "%s", mt_error());
    expect_local(&c, 0, "FFFFFFFFFFFFFFFFFFFFFFFF");
    /* layer_types decides each layer. */
    char *mistral_window = cfg_case_with_field(mistral, "sliding_window", "1024");
    char *two = cfg_case_with_field(mistral_window, "num_hidden_layers", "2");
    cr_assert_eq(cfg_case_parse_variant(two, "layer_types", "[\"sliding_attention\", \"full_attention\"]", &c), MT_OK, "%s",
                 mt_error());
    expect_local(&c, 1024, "LF");
    expect_round_trip(&c);
    cfg_case_expect_refusal(two, "layer_types", "[\"sliding_attention\"]", "'layer_types' must list num_hidden_layers (2)");
    cfg_case_expect_refusal(two, "layer_types", "[\"full_attention\", \"chunked_attention\"]",
                   "'layer_types' gives layer 1 'chunked_attention'");
    free(mistral_window);
    char *no_window = cfg_case_with_field(two, "sliding_window", "null");
    cfg_case_expect_refusal(no_window, "layer_types", "[\"full_attention\", \"sliding_attention\"]",
                   "'layer_types' makes layer 1 sliding_attention, but sliding_window gives no window");
    free(no_window), free(two);
}

/* A config in memory with a local layer and no window is refused naming the field. */
Test(hfconfig, a_local_layer_needs_a_window) {
    mt_config c;
    cr_assert_eq(mt_config_preset("tiny", &c), MT_OK);
    mt_config_set_local(&c, 1);
    cr_assert_eq(mt_config_validate(&c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "sliding_window"), "%s", mt_error());
    c.sliding_window = 8;
    cr_assert_eq(mt_config_validate(&c), MT_OK, "%s", mt_error());
    c.sliding_window = -1;
    cr_assert_eq(mt_config_validate(&c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "sliding_window"), "%s", mt_error());
}

Test(hfconfig, refuses_other_architectures) {
    cfg_case_expect_refusal(llama32, "architectures", "[\"GPT2LMHeadModel\"]", "'architectures' = 'GPT2LMHeadModel'");
    cfg_case_expect_refusal(llama32, "model_type", "\"qwen2\"", "'model_type'");
    cfg_case_expect_refusal(llama32, "architectures", "[]", "'architectures'");
}

Test(hfconfig, refuses_math_it_does_not_implement) {
    cfg_case_expect_refusal(llama32, "hidden_act", "\"gelu\"", "'hidden_act' = 'gelu'");
    cfg_case_expect_refusal(llama32, "mlp_bias", "true", "'mlp_bias'");
    cfg_case_expect_refusal(llama32, "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}",
                            "'rope_scaling.original_max_position_embeddings'");
    cfg_case_expect_refusal(llama32, "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0, "
                            "\"original_max_position_embeddings\": 8192, \"mscale\": 1.0}", "'rope_scaling.mscale'");
    cfg_case_expect_refusal(llama32, "rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2.0}", "'dynamic'");
    cfg_case_expect_refusal(llama32, "quantization_config", "{\"quant_method\": \"gptq\"}", "'quantization_config'");
    cfg_case_expect_refusal(llama32, "quantization_config", "{\"quant_method\": \"mxfp4\"}",
                            "LlamaForCausalLM checkpoints are not quantized");
    cfg_case_expect_refusal(llama32, "quantization_config", "\"mxfp4\"", "'quant_method'");
}

/* Linear RoPE scaling (Gemma 3's global layers) is computed since ISSUE 40: the frequencies
 * divided by the factor; it writes back as it read. */
Test(hfconfig, reads_linear_rope_scaling) {
    mt_config c;
    cr_assert_eq(cfg_case_parse_variant(llama32, "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}", &c), MT_OK, "%s",
                 mt_error());
    cr_assert(c.rope_scaling_linear && c.rope_scaling_factor == 2.0f);
    mt_model_spec m = mt_model_spec_of(&c);
    cr_assert(m.rope[0].type == MT_ROPE_LINEAR && m.rope[0].factor == 2.0f);
    expect_round_trip(&c);
}

Test(hfconfig, refuses_missing_required_fields) {
    const char *required[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                              "vocab_size"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "'%s' is missing", required[i]);
        cfg_case_expect_refusal(llama32, required[i], NULL, needle);
    }
    cfg_case_expect_refusal(llama32, "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}",
                   "'rope_scaling.low_freq_factor' is missing");
}

Test(hfconfig, refuses_wrong_json_types) {
    cfg_case_expect_refusal(llama32, "hidden_size", "\"2048\"", "'hidden_size' must be an integer, found a string");
    cfg_case_expect_refusal(llama32, "num_hidden_layers", "16.0", "'num_hidden_layers' must be an integer");
    cfg_case_expect_refusal(llama32, "rms_norm_eps", "\"1e-5\"", "'rms_norm_eps' must be a number");
    cfg_case_expect_refusal(llama32, "tie_word_embeddings", "1", "'tie_word_embeddings' must be true or false");
    cfg_case_expect_refusal(llama32, "rope_scaling", "[1]", "'rope_scaling' must be an object or null");
    cfg_case_expect_refusal(llama32, "eos_token_id", "[\"x\"]", "'eos_token_id'");
    cfg_case_expect_refusal(llama32, "hidden_size", "99999999999", "'hidden_size' = 99999999999 is out of range");
}

Test(hfconfig, refuses_values_the_model_cannot_use) {
    cfg_case_expect_refusal(llama32, "num_key_value_heads", "5", "num_key_value_heads (5) must divide");
    cfg_case_expect_refusal(llama32, "hidden_size", "0", "hidden_size must be positive");
}

Test(hfconfig, refuses_malformed_json) {
    mt_config c;
    cr_assert_eq(cfg_case_parse("{\"hidden_size\": 1,", &c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "config.json") && strstr(mt_error(), "JSON"), "%s", mt_error());
    cr_assert_eq(cfg_case_parse("{\"hidden_size\": 1, \"hidden_size\": 2}", &c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "duplicate"), "%s", mt_error());
    cr_assert_eq(cfg_case_parse("[1, 2]", &c), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "JSON object"), "%s", mt_error());
}

/* Every preset through config.json and back, and the files transformers needs beside it. */
Test(hfconfig, write_then_read_round_trips) {
    const char *presets[] = {"tiny",        "llama-3.2-1b",      "llama-3-8b", "llama-3.1-8b", "qwen2.5-14b",
                             "qwen2.5-32b", "mistral-small-24b", "qwen3-0.6b", "qwen3-8b"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        char dir[PATH_MAX], path[PATH_MAX];
        mt_config cfg, back;
        cr_assert_eq(mt_config_preset(presets[i], &cfg), MT_OK);
        hf_test_mkdtemp(dir);
        cr_assert_eq(mt_hf_config_write(&cfg, "bfloat16", dir), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_hf_config_read(hf_test_path(path, dir, "config.json"), &back), MT_OK, "%s", mt_error());
        cr_assert(!memcmp(&cfg, &back, sizeof cfg), "%s did not round-trip", presets[i]);
        json_t *doc = json_load_file(path, 0, NULL);
        cr_assert_str_eq(json_string_value(json_object_get(doc, "torch_dtype")), "bfloat16");
        /* The shortest decimal: transformers must read the very eps the model trained with. */
        json_t *eps = json_object_get(doc, "rms_norm_eps");
        cr_assert(json_real_value(eps) == (cfg.rms_norm_eps == 1e-5f ? 1e-5 : 1e-6), "eps written as %.17g",
                  json_real_value(eps));
        json_decref(doc);
        json_t *gen = json_load_file(hf_test_path(path, dir, "generation_config.json"), 0, NULL);
        cr_assert_not_null(gen, "no generation_config.json");
        if (cfg.eos_token_id >= 0)
            cr_assert_eq(json_integer_value(json_object_get(gen, "eos_token_id")), cfg.eos_token_id);
        json_decref(gen);
        hf_test_rmtree(dir);
    }
}

/* transformers 5 writes RoPE as rope_parameters (theta included) instead of rope_theta and
 * rope_scaling: the same model must come out either way. */
Test(hfconfig, reads_transformers_5_rope_parameters) {
    json_t *root = json_loads(llama32, 0, NULL);
    cr_assert_not_null(root);
    json_t *params = json_deep_copy(json_object_get(root, "rope_scaling"));
    json_object_set_new(params, "rope_theta", json_real(500000.0));
    json_object_set_new(root, "rope_parameters", params);
    json_object_del(root, "rope_scaling");
    json_object_del(root, "rope_theta");
    char *text = json_dumps(root, 0);
    mt_config c, want;
    cr_assert_eq(cfg_case_parse(text, &c), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_config_preset("llama-3.2-1b", &want), MT_OK);
    cr_expect(!memcmp(&c, &want, sizeof c), "rope_parameters read differently from rope_theta + rope_scaling");
    free(text);

    /* A theta given both ways must agree; other RoPE forms are refused by name. */
    json_object_set_new(root, "rope_theta", json_real(10000.0));
    text = json_dumps(root, 0);
    cr_expect_eq(cfg_case_parse(text, &c), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "rope_parameters.rope_theta"), "%s", mt_error());
    free(text);
    json_object_del(root, "rope_theta");
    json_object_set_new(json_object_get(root, "rope_parameters"), "partial_rotary_factor", json_real(0.5));
    text = json_dumps(root, 0);
    cr_expect_eq(cfg_case_parse(text, &c), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "partial_rotary_factor"), "%s", mt_error());
    free(text);
    json_decref(root);
    cfg_case_expect_refusal(llama32, "rope_parameters", "{\"rope_type\": \"longrope\", \"rope_theta\": 500000.0}",
                   "rope_parameters.rope_type");
}

/* Dropout changes the math, which megatrain computes without any: a config asking for it is
 * refused, not trained as if it did not. Zero or null is what megatrain does. */
Test(hfconfig, refuses_dropout_rather_than_ignoring_it) {
    cfg_case_expect_refusal(llama32, "attention_dropout", "0.1", "field 'attention_dropout' = 0.1 is not supported");
    cfg_case_expect_refusal(llama32, "hidden_dropout", "0.05", "'hidden_dropout'");
    cfg_case_expect_refusal(llama32, "attention_dropout", "\"0.1\"", "must be a number");
    mt_config cfg;
    cr_assert_eq(cfg_case_parse_variant(llama32, "attention_dropout", "0.0", &cfg), MT_OK, "%s", mt_error());
    cr_assert_eq(cfg_case_parse_variant(llama32, "attention_dropout", "null", &cfg), MT_OK, "%s", mt_error());
}
