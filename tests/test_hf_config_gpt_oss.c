/* config.json -> mt_config for gpt-oss: the hub's gpt-oss-20b file (its quantization_config aside,
 * which the checkpoint reader takes) gives the preset and writes back the same; GptOssConfig's
 * defaults where a field is absent (YaRN, the window on the even layers, the clamped SwiGLU's
 * limit and alpha); transformers 5's rope_parameters reads the same; what disagrees or is out of
 * range is refused naming the field; the presets' sizes are the model cards', and plan takes the
 * 120b at the machine. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "cli_run.h"
#include "config_cases.h"
#include "io/hf_config.h"
#include "model/families.h"
#include "test_limits.h"

#define TYPES4 "\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\""
#define TYPES24 TYPES4 ", " TYPES4 ", " TYPES4 ", " TYPES4 ", " TYPES4 ", " TYPES4

/* openai/gpt-oss-20b's config.json, its quantization_config left out. */
static const char *gpt_oss_20b =
    "{\"architectures\": [\"GptOssForCausalLM\"], \"attention_bias\": true, \"attention_dropout\": 0.0,"
    " \"eos_token_id\": 200002, \"experts_per_token\": 4, \"head_dim\": 64, \"hidden_act\": \"silu\","
    " \"hidden_size\": 2880, \"initial_context_length\": 4096, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 2880, \"layer_types\": [" TYPES24 "], \"max_position_embeddings\": 131072,"
    " \"model_type\": \"gpt_oss\", \"num_attention_heads\": 64, \"num_experts_per_tok\": 4,"
    " \"num_hidden_layers\": 24, \"num_key_value_heads\": 8, \"num_local_experts\": 32,"
    " \"output_router_logits\": false, \"pad_token_id\": 199999, \"rms_norm_eps\": 1e-05,"
    " \"rope_scaling\": {\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"factor\": 32.0,"
    " \"original_max_position_embeddings\": 4096, \"rope_type\": \"yarn\", \"truncate\": false},"
    " \"rope_theta\": 150000, \"router_aux_loss_coef\": 0.9, \"sliding_window\": 128, \"swiglu_limit\": 7.0,"
    " \"tie_word_embeddings\": false, \"transformers_version\": \"4.55.0.dev0\", \"use_cache\": true,"
    " \"vocab_size\": 201088}";

static void expect_same(const mt_config *c, const mt_config *want, const char *what) {
    cr_expect(!memcmp(c, want, sizeof *c), "%s differs from the gpt-oss-20b preset", what);
}

static void expect_preset(const char *text, const char *what) {
    mt_config c, want;
    cr_assert_eq(cfg_case_parse(text, &c), MT_OK, "%s: %s", what, mt_error());
    cr_assert_eq(mt_config_preset("gpt-oss-20b", &want), MT_OK);
    expect_same(&c, &want, what);
}

Test(hfconfig_gpt_oss, the_hubs_config_gives_the_preset_and_writes_back_the_same) {
    expect_preset(gpt_oss_20b, "the hub's config.json");
    mt_config c, back;
    cr_assert_eq(mt_config_preset("gpt-oss-20b", &c), MT_OK);
    json_t *doc = mt_hf_config_to_json(&c, "bfloat16");
    cr_assert_eq(mt_hf_config_from_json(doc, "written", &back), MT_OK, "%s", mt_error());
    expect_same(&back, &c, "the preset written and read back");
    json_decref(doc);
}

/* GptOssConfig's defaults: YaRN (factor 32, betas 32 and 1, truncate false, original 4096), the
 * window of 128 on the even layers, the clamp 7 and alpha 1.702, attention_bias true. */
Test(hfconfig_gpt_oss, absent_fields_take_gpt_oss_configs_defaults) {
    char *text = strdup(gpt_oss_20b);
    const char *absent[] = {"rope_scaling", "layer_types", "sliding_window", "swiglu_limit", "attention_bias",
                            "experts_per_token"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        char *next = cfg_case_with_field(text, absent[i], NULL);
        free(text);
        text = next;
    }
    expect_preset(text, "gpt-oss-20b without the defaulted fields");
    free(text);
}

Test(hfconfig_gpt_oss, transformers_5s_rope_parameters_read_the_same) {
    char *no_scaling = cfg_case_with_field(gpt_oss_20b, "rope_scaling", NULL);
    char *no_theta = cfg_case_with_field(no_scaling, "rope_theta", NULL);
    char *text = cfg_case_with_field(no_theta, "rope_parameters",
                                     "{\"rope_type\": \"yarn\", \"rope_theta\": 150000.0, \"factor\": 32.0, "
                                     "\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"truncate\": false, "
                                     "\"original_max_position_embeddings\": 4096}");
    expect_preset(text, "transformers 5's rope_parameters");
    free(no_scaling);
    free(no_theta);
    free(text);
}

/* The plan: every block a mixture of experts with both biases, the clamped SwiGLU, renormalised
 * top-4; sinks and every attention bias; the window on the even layers; one YaRN table. */
Test(hfconfig_gpt_oss, the_plan_is_gpt_oss_block) {
    mt_config c;
    cr_assert_eq(mt_config_preset("gpt-oss-120b", &c), MT_OK);
    cr_expect(c.num_layers == 36 && c.num_experts == 128 && c.experts_per_token == 4);
    for (int l = 0; l < c.num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(&c, l);
        cr_expect_eq(s.attn.window, l % 2 ? 0 : 128, "layer %d", l);
        cr_expect_eq(s.attn.flags, MT_ATTN_BIAS_QKV | MT_ATTN_BIAS_O | MT_ATTN_SINKS, "layer %d", l);
        cr_expect(s.ffn == MT_FFN_MOE && s.ffn_spec.act == MT_GLU_SILU_CLAMPED && s.ffn_spec.clamp == 7.0f &&
                      s.ffn_spec.alpha == 1.702f,
                  "layer %d", l);
        cr_expect_eq(s.ffn_spec.flags, MT_FFN_EXPERT_BIAS | MT_FFN_ROUTER_BIAS | MT_FFN_RENORM, "layer %d", l);
    }
    mt_model_spec m = mt_model_spec_of(&c);
    cr_expect(m.num_ropes == 1 && m.rope[0].type == MT_ROPE_YARN && m.rope[0].factor == 32 &&
              m.rope[0].beta_fast == 32 && m.rope[0].beta_slow == 1 && !m.rope[0].truncate &&
              m.rope[0].original_max_position == 4096 && m.rope[0].theta == 150000.0f);
}

/* Every GptOssAttention has sinks: a gpt-oss config without them is no gpt-oss transformers loads. */
Test(hfconfig_gpt_oss, a_config_without_sinks_is_refused) {
    mt_config c;
    cr_assert_eq(mt_config_preset("gpt-oss-20b", &c), MT_OK);
    cr_assert_eq(mt_config_validate(&c), MT_OK, "%s", mt_error());
    c.attention_sinks = 0;
    cr_expect_eq(mt_config_validate(&c), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "sinks"), "%s", mt_error());
}

Test(hfconfig_gpt_oss, refuses_what_disagrees_or_is_out_of_range_by_name) {
    cfg_case_expect_refusal(gpt_oss_20b, "experts_per_token", "2", "'experts_per_token' (2)");
    cfg_case_expect_refusal(gpt_oss_20b, "swiglu_limit", "-7", "'swiglu_limit'");
    cfg_case_expect_refusal(gpt_oss_20b, "swiglu_alpha", "0", "'swiglu_alpha'");
    cfg_case_expect_refusal(gpt_oss_20b, "layer_types", "[\"chunked_attention\"]", "'layer_types'");
    cfg_case_expect_refusal(gpt_oss_20b, "rope_scaling", "{\"rope_type\": \"default\"}", "yarn");
    cfg_case_expect_refusal(gpt_oss_20b, "hidden_act", "\"gelu\"", "'hidden_act'");
    /* a swiglu_alpha given is the one computed */
    mt_config c;
    cr_assert_eq(cfg_case_parse_variant(gpt_oss_20b, "swiglu_alpha", "1.5", &c), MT_OK, "%s", mt_error());
    cr_expect(c.swiglu_alpha == 1.5f && mt_layer_spec_of(&c, 0).ffn_spec.alpha == 1.5f);
}

/* The hub's quantization_config (MXFP4 experts, decoded as the checkpoint loads) changes nothing of
 * the config; another method is refused naming it. */
Test(hfconfig_gpt_oss, takes_mxfp4_quantization_and_refuses_another_method) {
    mt_config c, want;
    cr_assert_eq(mt_config_preset("gpt-oss-20b", &want), MT_OK);
    cr_assert_eq(cfg_case_parse_variant(gpt_oss_20b, "quantization_config", "{\"quant_method\": \"mxfp4\", "
                 "\"modules_to_not_convert\": [\"model.layers.*.self_attn\", \"model.embed_tokens\"]}", &c),
                 MT_OK, "%s", mt_error());
    expect_same(&c, &want, "the hub's config.json with its quantization_config");
    cfg_case_expect_refusal(gpt_oss_20b, "quantization_config", "{\"quant_method\": \"fp8\"}",
                            "quant_method 'fp8' is not supported (mxfp4 only");
    cfg_case_expect_refusal(gpt_oss_20b, "quantization_config", "{\"bits\": 4}", "'quantization_config'");
}

/* The model cards' 20.9 B and 116.8 B parameters. */
Test(hfconfig_gpt_oss, the_presets_are_the_model_cards_sizes) {
    const struct {
        const char *name;
        double billions;
    } cards[] = {{"gpt-oss-20b", 20.9}, {"gpt-oss-120b", 116.8}};
    for (int i = 0; i < 2; i++) {
        mt_config c;
        cr_assert_eq(mt_config_preset(cards[i].name, &c), MT_OK);
        double b = (double)mt_config_total_params(&c) / 1e9;
        cr_expect(b > cards[i].billions - 0.05 && b < cards[i].billions + 0.05, "%s: %.3f B parameters",
                  cards[i].name, b);
    }
}

/* The machine: 1.5 TB of host beside an H200's 139 GiB; bf16 moments bring the host's
 * share to 12 bytes a parameter, which fits. */
Test(hfconfig_gpt_oss, plan_takes_the_120b, .timeout = MT_TEST_LIMIT(60)) {
    mt_cli_result r;
    mt_cli_run(&r, MT_TEST_LIMIT(30), "plan", "--preset", "gpt-oss-120b", "--host-mem", "1.5TB", "--gpu-mem",
               "139GiB", "--moments", "bf16", NULL);
    cr_expect_eq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.out, "116.8") && strstr(r.out, "128 experts") && strstr(r.out, ": fits"), "%s", r.out);
    mt_cli_result_free(&r);
}
