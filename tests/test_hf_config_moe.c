/* config.json -> mt_config for the mixtures of experts: the hub's config.json of each preset gives
 * the preset, transformers 5's forms read the same, the defaults are each Config class's, dense
 * blocks among sparse ones, every refusal names its field, and the round trip through config.json
 * (which the run checkpoints keep too) changes nothing. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <jansson.h>
#include <limits.h>
#include <string.h>

#include "config_cases.h"
#include "hf_test_files.h"
#include "io/hf_config.h"
#include "model/block_kinds.h"
#include "tiny_model.h"

/* The hub's config.json files, the fields megatrain reads and a few it ignores. */
static const char *qwen3_30b =
    "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"decoder_sparse_step\": 1, \"eos_token_id\": 151645, \"head_dim\": 128,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 6144,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 48, \"mlp_only_layers\": [],"
    " \"model_type\": \"qwen3_moe\", \"moe_intermediate_size\": 768, \"norm_topk_prob\": true,"
    " \"num_attention_heads\": 32, \"num_experts\": 128, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 48,"
    " \"num_key_value_heads\": 4, \"output_router_logits\": false, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null,"
    " \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.001, \"sliding_window\": null,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";
static const char *qwen15_moe =
    "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
    " \"decoder_sparse_step\": 1, \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 5632, \"max_position_embeddings\": 8192,"
    " \"max_window_layers\": 21, \"model_type\": \"qwen2_moe\", \"moe_intermediate_size\": 1408,"
    " \"norm_topk_prob\": false, \"num_attention_heads\": 16, \"num_experts\": 60, \"num_experts_per_tok\": 4,"
    " \"num_hidden_layers\": 24, \"num_key_value_heads\": 16, \"output_router_logits\": false,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.001,"
    " \"shared_expert_intermediate_size\": 5632, \"sliding_window\": 32768, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
static const char *mixtral =
    "{\"architectures\": [\"MixtralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1,"
    " \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 14336, \"max_position_embeddings\": 32768, \"model_type\": \"mixtral\","
    " \"num_attention_heads\": 32, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"num_local_experts\": 8, \"output_router_logits\": false, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0,"
    " \"router_aux_loss_coef\": 0.02, \"sliding_window\": null, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"vocab_size\": 32000}";
/* OLMoE-1B-7B-0924's names no rms_norm_eps: OlmoeConfig's 1e-5. */
static const char *olmoe =
    "{\"architectures\": [\"OlmoeForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"clip_qkv\": null, \"eos_token_id\": 50279, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 1024, \"max_position_embeddings\": 4096,"
    " \"model_type\": \"olmoe\", \"norm_topk_prob\": false, \"num_attention_heads\": 16, \"num_experts\": 64,"
    " \"num_experts_per_tok\": 8, \"num_hidden_layers\": 16, \"num_key_value_heads\": 16,"
    " \"output_router_logits\": false, \"pad_token_id\": 1, \"rope_scaling\": null, \"rope_theta\": 10000.0,"
    " \"router_aux_loss_coef\": 0.01, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"use_cache\": true, \"vocab_size\": 50304}";

Test(hfconfig_moe, the_hubs_configs_give_the_presets) {
    cfg_case_expect_preset(qwen3_30b, "qwen3-30b-a3b");
    cfg_case_expect_preset(qwen15_moe, "qwen1.5-moe-a2.7b");
    cfg_case_expect_preset(mixtral, "mixtral-8x7b");
    cfg_case_expect_preset(olmoe, "olmoe-1b-7b");
}

/* Every field of the hub's files is read or known to change nothing: none is named as unknown. */
Test(hfconfig_moe, the_hubs_configs_name_no_field_as_unknown, .init = cr_redirect_stderr) {
    const char *files[] = {qwen3_30b, qwen15_moe, mixtral, olmoe};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        mt_config c;
        cr_assert_eq(cfg_case_parse(files[i], &c), MT_OK, "%s", mt_error());
    }
    fflush(stderr);
    char said[4096] = "";
    size_t n = fread(said, 1, sizeof said - 1, cr_get_redirected_stderr());
    said[n] = 0;
    cr_expect_null(strstr(said, "does not know"), "%s", said);
}

/* transformers 5's Qwen3MoeConfig writes num_local_experts for num_experts (its attribute_map). */
Test(hfconfig_moe, reads_transformers_5_num_local_experts) {
    json_t *root = json_loads(qwen3_30b, 0, NULL);
    json_object_del(root, "num_experts");
    json_object_set_new(root, "num_local_experts", json_integer(128));
    char *text = json_dumps(root, 0);
    cfg_case_expect_preset(text, "qwen3-30b-a3b");
    free(text);
    json_object_set_new(root, "num_experts", json_integer(64));
    text = json_dumps(root, 0);
    mt_config c;
    cr_expect_eq(cfg_case_parse(text, &c), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "'num_experts' (64) and 'num_local_experts' (128) disagree"), "%s", mt_error());
    free(text);
    json_decref(root);
}

/* What a file leaves out is its Config class's default. */
Test(hfconfig_moe, fills_each_config_classes_defaults) {
    const char *omit[] = {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                          "shared_expert_intermediate_size", "router_aux_loss_coef", "decoder_sparse_step",
                          "mlp_only_layers", "output_router_logits"};
    json_t *root = json_loads(qwen15_moe, 0, NULL);
    for (size_t i = 0; i < sizeof omit / sizeof omit[0]; i++) json_object_del(root, omit[i]);
    char *text = json_dumps(root, 0);
    mt_config c;
    cr_assert_eq(cfg_case_parse(text, &c), MT_OK, "%s", mt_error());
    cr_expect(c.num_experts == 60 && c.experts_per_token == 4 && c.moe_intermediate_size == 1408 &&
              c.shared_expert_intermediate_size == 5632 && !c.norm_topk_prob && c.decoder_sparse_step == 1 &&
              c.router_aux_loss_coef == 0.001f && !c.output_router_logits && c.attention_bias,
              "Qwen2MoeConfig's defaults not filled");
    free(text);
    json_decref(root);
    root = json_loads(mixtral, 0, NULL);
    json_object_del(root, "rms_norm_eps");
    json_object_del(root, "rope_theta");
    json_object_del(root, "sliding_window");
    text = json_dumps(root, 0);
    cr_assert_eq(cfg_case_parse(text, &c), MT_OK, "Mixtral has no window unless it names one: %s", mt_error());
    cr_expect(c.rms_norm_eps == 1e-5f && c.rope_theta == 1e6f && c.norm_topk_prob, "MixtralConfig's defaults");
    free(text);
    json_decref(root);
}

/* decoder_sparse_step and mlp_only_layers, as Qwen2MoeDecoderLayer reads them. */
Test(hfconfig_moe, dense_blocks_among_sparse_ones) {
    char *text = cfg_case_with_field(qwen3_30b, "mlp_only_layers", "[0, 47]");
    mt_config c;
    cr_assert_eq(cfg_case_parse(text, &c), MT_OK, "%s", mt_error());
    free(text);
    cr_expect(!mt_config_layer_is_moe(&c, 0) && mt_config_layer_is_moe(&c, 1) && !mt_config_layer_is_moe(&c, 47));
    cr_expect_eq(mt_block_kinds_of(&c, 0).ffn, MT_FFN_DENSE);
    cr_expect_eq(mt_config_moe_layers(&c), 46);
    cr_expect_eq(mt_config_dense_mlp_width(&c), 6144);
    text = cfg_case_with_field(qwen15_moe, "decoder_sparse_step", "2");
    cr_assert_eq(cfg_case_parse(text, &c), MT_OK, "%s", mt_error());
    free(text);
    cr_expect(!mt_config_layer_is_moe(&c, 0) && mt_config_layer_is_moe(&c, 1) && !mt_config_layer_is_moe(&c, 2));
    cr_expect_eq(mt_config_moe_layers(&c), 12);
    /* Every block sparse, a shared expert: its width is the workspace's dense MLP. */
    cr_assert_eq(cfg_case_parse(qwen15_moe, &c), MT_OK);
    cr_expect_eq(mt_config_dense_mlp_width(&c), 5632);
    cr_assert_eq(cfg_case_parse(qwen3_30b, &c), MT_OK);
    cr_expect_eq(mt_config_dense_mlp_width(&c), 0);
}

Test(hfconfig_moe, refuses_what_it_does_not_implement_naming_the_field) {
    cfg_case_expect_refusal(mixtral, "router_jitter_noise", "0.1", "'router_jitter_noise' = 0.1");
    cfg_case_expect_refusal(olmoe, "clip_qkv", "8.0", "'clip_qkv'");
    cfg_case_expect_refusal(olmoe, "attention_bias", "true", "'attention_bias'");
    cfg_case_expect_refusal(qwen3_30b, "attention_bias", "true", "'attention_bias'");
    cfg_case_expect_refusal(qwen3_30b, "mlp_only_layers", "[48]", "'mlp_only_layers' names layer 48 of a model of 48");
    cfg_case_expect_refusal(qwen3_30b, "mlp_only_layers", "[\"1\"]", "'mlp_only_layers' must be a list of integers");
    cfg_case_expect_refusal(qwen3_30b, "num_experts_per_tok", "129", "num_experts_per_tok must be from 1 to 64");
    cfg_case_expect_refusal(qwen3_30b, "num_experts", "0", "num_experts must be positive");
    cfg_case_expect_refusal(qwen3_30b, "num_experts", "2048", "num_experts must be from 1 to 1024");
    cfg_case_expect_refusal(qwen3_30b, "decoder_sparse_step", "0", "decoder_sparse_step must be positive");
    cfg_case_expect_refusal(qwen3_30b, "router_aux_loss_coef", "-1", "router_aux_loss_coef");
    cfg_case_expect_refusal(qwen15_moe, "shared_expert_intermediate_size", "0", "shared_expert_intermediate_size");
    /* Qwen1.5-MoE's window (32768) is past its context (8192): on, it changes nothing; shorter, it does. */
    mt_config c;
    cr_expect_eq(cfg_case_parse_variant(qwen15_moe, "use_sliding_window", "true", &c), MT_OK, "%s", mt_error());
    char *windowed = cfg_case_with_field(qwen15_moe, "sliding_window", "4096");
    cfg_case_expect_refusal(windowed, "use_sliding_window", "true", "'use_sliding_window' enables a sliding attention window");
    free(windowed);
    cfg_case_expect_refusal(mixtral, "sliding_window", "4096", "'sliding_window'");
    cfg_case_expect_refusal(mixtral, "model_type", "\"mistral\"", "'model_type'");
    /* Every block dense: not a mixture of experts this code runs. */
    char *dense = cfg_case_with_field(qwen3_30b, "num_hidden_layers", "2");
    cfg_case_expect_refusal(dense, "mlp_only_layers", "[0, 1]", "leave no layer sparse");
    free(dense);
}

/* Through config.json and back: the presets, and the tiny models with what the presets lack. */
Test(hfconfig_moe, write_then_read_round_trips) {
    const char *presets[] = {"qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "mixtral-8x7b", "olmoe-1b-7b"};
    mt_config cfgs[8];
    int n = 0;
    for (size_t i = 0; i < 4; i++) cr_assert_eq(mt_config_preset(presets[i], &cfgs[n++]), MT_OK);
    mt_arch archs[] = {MT_ARCH_QWEN3_MOE, MT_ARCH_QWEN2_MOE, MT_ARCH_MIXTRAL, MT_ARCH_OLMOE};
    for (size_t i = 0; i < 4; i++) cfgs[n++] = mt_tiny_config_moe(archs[i], 1);
    for (int i = 0; i < n; i++) {
        char dir[PATH_MAX], path[PATH_MAX];
        mt_config back;
        cr_assert_eq(mt_config_validate(&cfgs[i]), MT_OK, "%d: %s", i, mt_error());
        hf_test_mkdtemp(dir);
        cr_assert_eq(mt_hf_config_write(&cfgs[i], "bfloat16", dir), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_hf_config_read(hf_test_path(path, dir, "config.json"), &back), MT_OK, "%s", mt_error());
        cr_expect(!memcmp(&cfgs[i], &back, sizeof back), "config %d did not round-trip", i);
        hf_test_rmtree(dir);
    }
}
