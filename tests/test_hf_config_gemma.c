/* config.json -> mt_config for Gemma 3 and Gemma 2: the hub's files give the presets,
 * transformers 5's form (rope_parameters by layer type, layer_types) reads the same, the round
 * trip through config.json changes nothing, and Gemma 3n's and Gemma 4's fields, which change the
 * maths, are refused naming the field (the command exits 2); and bench's FLOPs of a windowed model,
 * counted over the windows and as if whole. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "config_cases.h"
#include "cli_run.h"
#include "hf_test_files.h"
#include "io/hf_config.h"
#include "test_limits.h"

/* google/gemma-3-1b-pt's and google/gemma-2-2b's config.json. */
static const char *gemma3_1b =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\","
    " \"eos_token_id\": 1, \"final_logit_softcapping\": null, \"head_dim\": 256,"
    " \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 6912, \"max_position_embeddings\": 32768, \"model_type\": \"gemma3_text\","
    " \"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1, \"pad_token_id\": 0,"
    " \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_local_base_freq\": 10000,"
    " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.50.0.dev0\", \"use_cache\": true,"
    " \"vocab_size\": 262144}";
static const char *gemma2_2b =
    "{\"architectures\": [\"Gemma2ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"attn_logit_softcapping\": 50.0, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\","
    " \"eos_token_id\": 1, \"final_logit_softcapping\": 30.0, \"head_dim\": 256,"
    " \"hidden_act\": \"gelu_pytorch_tanh\", \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 2304,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 9216, \"max_position_embeddings\": 8192,"
    " \"model_type\": \"gemma2\", \"num_attention_heads\": 8, \"num_hidden_layers\": 26, \"num_key_value_heads\": 4,"
    " \"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0,"
    " \"sliding_window\": 4096, \"torch_dtype\": \"float32\", \"transformers_version\": \"4.42.4\","
    " \"use_cache\": true, \"vocab_size\": 256000}";

/* google/gemma-2-27b's config.json. */
static const char *gemma2_27b =
    "{\"architectures\": [\"Gemma2ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"attn_logit_softcapping\": 50.0, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\","
    " \"eos_token_id\": 1, \"final_logit_softcapping\": 30.0, \"head_dim\": 128,"
    " \"hidden_act\": \"gelu_pytorch_tanh\", \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 4608,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 36864, \"max_position_embeddings\": 8192,"
    " \"model_type\": \"gemma2\", \"num_attention_heads\": 32, \"num_hidden_layers\": 46,"
    " \"num_key_value_heads\": 16, \"pad_token_id\": 0, \"query_pre_attn_scalar\": 144, \"rms_norm_eps\": 1e-06,"
    " \"rope_theta\": 10000.0, \"sliding_window\": 4096, \"sliding_window_size\": 4096,"
    " \"torch_dtype\": \"float32\", \"transformers_version\": \"4.42.0.dev0\", \"use_cache\": true,"
    " \"vocab_size\": 256000}";

Test(hfconfig_gemma, the_hubs_configs_give_the_presets) {
    cfg_case_expect_preset(gemma3_1b, "gemma-3-1b");
    cfg_case_expect_preset(gemma2_2b, "gemma-2-2b");
    cfg_case_expect_preset(gemma2_27b, "gemma-2-27b");
}

/* gemma-3-4b's text model as transformers 5 saves it: rope_parameters by layer type and
 * layer_types, no rope_theta or rope_local_base_freq at the top. */
Test(hfconfig_gemma, transformers_5s_form_reads_the_same) {
    char types[34 * 24] = "[";
    for (int l = 0; l < 34; l++)
        strcat(types, (l + 1) % 6 ? "\"sliding_attention\"," : "\"full_attention\",");
    types[strlen(types) - 1] = ']';
    const char *edits[][2] = {
        {"hidden_size", "2560"}, {"intermediate_size", "10240"}, {"num_hidden_layers", "34"},
        {"num_attention_heads", "8"}, {"num_key_value_heads", "4"}, {"vocab_size", "262208"},
        {"max_position_embeddings", "131072"}, {"sliding_window", "1024"}, {"sliding_window_pattern", NULL},
        {"rope_theta", NULL}, {"rope_local_base_freq", NULL}, {"rope_scaling", NULL}, {"layer_types", types},
        {"rope_parameters", "{\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": "
                            "1000000.0}, \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": "
                            "10000.0}}"}};
    char *text = strdup(gemma3_1b);
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char *next = cfg_case_with_field(text, edits[i][0], edits[i][1]);
        free(text);
        text = next;
    }
    cfg_case_expect_preset(text, "gemma-3-4b");
    free(text);
}

/* Gemma 3n's AltUp, LAuReL and per-layer inputs, Gemma 4's per-layer embeddings, and other maths
 * Gemma's block does not compute: refused naming the field. */
Test(hfconfig_gemma, refuses_what_changes_the_maths_by_name) {
    cfg_case_expect_refusal(gemma3_1b, "altup_num_inputs", "4", "'altup_num_inputs'");
    cfg_case_expect_refusal(gemma3_1b, "laurel_rank", "64", "'laurel_rank'");
    cfg_case_expect_refusal(gemma3_1b, "hidden_size_per_layer_input", "256", "'hidden_size_per_layer_input'");
    cfg_case_expect_refusal(gemma3_1b, "use_bidirectional_attention", "true", "'use_bidirectional_attention'");
    cfg_case_expect_refusal(gemma3_1b, "hidden_activation", "\"gelu\"", "'hidden_activation' = 'gelu'");
    cfg_case_expect_refusal(gemma3_1b, "attention_bias", "true", "'attention_bias'");
    cfg_case_expect_refusal(gemma3_1b, "rope_scaling", "{\"rope_type\": \"longrope\", \"factor\": 8.0}", "'longrope'");
    cfg_case_expect_refusal(gemma3_1b, "query_pre_attn_scalar", "0", "'query_pre_attn_scalar'");
    cfg_case_expect_refusal(gemma2_2b, "attn_logit_softcapping", "-50", "'attn_logit_softcapping'");
    cfg_case_expect_refusal(gemma2_2b, "layer_types", "[\"sliding_attention\"]", "'layer_types'");
    /* null and absent fields of the other Gemmas change nothing */
    mt_config c;
    cr_expect_eq(cfg_case_parse_variant(gemma3_1b, "altup_num_inputs", "null", &c), MT_OK, "%s", mt_error());
    /* Gemma 2's caps: none when null, 50 and 30 when absent */
    cr_assert_eq(cfg_case_parse_variant(gemma2_2b, "final_logit_softcapping", "null", &c), MT_OK, "%s", mt_error());
    cr_expect(c.final_logit_softcap == 0 && c.attn_logit_softcap == 50);
    cr_assert_eq(cfg_case_parse_variant(gemma2_2b, "final_logit_softcapping", NULL, &c), MT_OK, "%s", mt_error());
    cr_expect(c.final_logit_softcap == 30);
}

/* A Gemma config silent on num_key_value_heads has transformers' default for its class, 4, not as
 * many as the query heads (Llama's). */
Test(hfconfig_gemma, key_value_heads_default_to_gemmas_four) {
    mt_config c;
    cr_assert_eq(cfg_case_parse_variant(gemma2_2b, "num_key_value_heads", NULL, &c), MT_OK, "%s", mt_error());
    cr_expect_eq(c.num_kv_heads, 4);
    cr_assert_eq(cfg_case_parse_variant(gemma2_2b, "num_key_value_heads", "8", &c), MT_OK, "%s", mt_error());
    cr_expect_eq(c.num_kv_heads, 8);
}

Test(hfconfig_gemma, a_gemma_3n_field_exits_2_naming_it, .timeout = MT_TEST_LIMIT(60)) {
    char dir[256], path[512];
    hf_test_mkdtemp(dir);
    char *text = cfg_case_with_field(gemma3_1b, "altup_num_inputs", "4");
    hf_test_write_text(hf_test_path(path, dir, "config.json"), text);
    free(text);
    mt_cli_result r;
    mt_cli_run(&r, MT_TEST_LIMIT(30), "plan", "--config", path, NULL);
    cr_expect_eq(r.exit_code, 2, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "config.json") && strstr(r.err, "'altup_num_inputs'"), "%s", r.err);
    mt_cli_result_free(&r);
    hf_test_rmtree(dir);
}

/* bench counts a local layer's attention over the keys it sees, and reports beside it the figure
 * as if every layer attended to the whole sequence: their ratio is the FLOPs' (a window of 8 in
 * sequences of 64 on both layers of a Mistral v0.1 shape). */
Test(hfconfig_gemma, bench_counts_the_windows_flops_both_ways, .timeout = MT_TEST_LIMIT(120)) {
    static const char *windowed =
        "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256,"
        " \"max_position_embeddings\": 256, \"sliding_window\": 8}";
    char dir[256], config[512], json[512];
    hf_test_mkdtemp(dir);
    hf_test_write_text(hf_test_path(config, dir, "config.json"), windowed);
    hf_test_path(json, dir, "bench.json");
    mt_cli_result r;
    mt_cli_run(&r, MT_TEST_LIMIT(100), "bench", "--config", config, "--backend", "cpu", "--seq", "64", "--batch", "2",
               "--steps", "2", "--json", json, NULL);
    cr_assert_eq(r.exit_code, 0, "bench failed:\n%s", r.err);
    cr_expect(strstr(r.out, "local layers: TFLOP/s counts the keys their windows let a query see"), "%s", r.out);
    mt_cli_result_free(&r);
    json_t *j = json_load_file(json, 0, NULL);
    cr_assert_not_null(j);
    double counted = json_real_value(json_object_get(j, "tflops")),
           full = json_real_value(json_object_get(j, "tflops_full_attention"));
    json_decref(j);
    mt_config c;
    cr_assert_eq(cfg_case_parse(windowed, &c), MT_OK, "%s", mt_error());
    double linear = 6.0 * ((double)mt_config_blocks_active_params(&c) + (double)c.vocab_size * c.hidden_size);
    double keys = 8 - 64.0 / (2 * 64), per_key = 4.0 * c.num_heads * c.head_dim; /* w - w^2 / (2 seq) */
    double want = (linear + 3 * 2 * per_key * 32) / (linear + 3 * 2 * per_key * keys);
    cr_assert_gt(counted, 0);
    cr_expect_float_eq(full / counted, want, 1e-6 * want, "full %g, counted %g, want a ratio of %g", full, counted, want);
    hf_test_rmtree(dir);
}
