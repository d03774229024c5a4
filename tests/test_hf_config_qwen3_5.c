/* config.json -> mt_config for Qwen3.5 and Qwen3.5-MoE's text models: the hub's text_configs give
 * the presets (Qwen3.5-MoE's without intermediate_size, its rope_parameters with the mrope fields
 * text alone ignores), the round trip through config.json changes nothing, and what the model
 * code does not compute is refused naming the field. */
#include <criterion/criterion.h>
#include <string.h>

#include "cli_run.h"
#include "config_cases.h"
#include "test_limits.h"

/* Qwen/Qwen3.5-27B's and Qwen/Qwen3.5-35B-A3B's text_config as a text model's config.json. */
#define ROPE "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, " \
             "\"partial_rotary_factor\": 0.25, \"mrope_interleaved\": true, \"mrope_section\": [11, 11, 10]}"
static const char *dense_27b =
    "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\", \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"attn_output_gate\": true, \"eos_token_id\": 248044, \"full_attention_interval\": 4,"
    " \"head_dim\": 256, \"hidden_act\": \"silu\", \"hidden_size\": 5120, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 17408, \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128,"
    " \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 48, \"linear_value_head_dim\": 128,"
    " \"mamba_ssm_dtype\": \"float32\", \"max_position_embeddings\": 262144, \"mtp_num_hidden_layers\": 1,"
    " \"mtp_use_dedicated_embeddings\": false, \"num_attention_heads\": 24, \"num_hidden_layers\": 64,"
    " \"num_key_value_heads\": 4, \"rms_norm_eps\": 1e-06, " ROPE ", \"tie_word_embeddings\": false,"
    " \"vocab_size\": 248320}";
static const char *moe_35b =
    "{\"architectures\": [\"Qwen3_5MoeForCausalLM\"], \"model_type\": \"qwen3_5_moe_text\", \"attention_bias\": false,"
    " \"attn_output_gate\": true, \"eos_token_id\": 248044, \"full_attention_interval\": 4, \"head_dim\": 256,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128,"
    " \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 32, \"linear_value_head_dim\": 128,"
    " \"max_position_embeddings\": 262144, \"moe_intermediate_size\": 512, \"num_attention_heads\": 16,"
    " \"num_experts\": 256, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 40, \"num_key_value_heads\": 2,"
    " \"output_router_logits\": false, \"rms_norm_eps\": 1e-06, " ROPE ", \"router_aux_loss_coef\": 0.001,"
    " \"shared_expert_intermediate_size\": 512, \"tie_word_embeddings\": false, \"vocab_size\": 248320}";

/* Qwen/Qwen3.5-122B-A10B's text_config. No verbatim copy of its config.json was within reach; its
 * sizes are those that public code and notes quoting it agree on (48 layers, hidden 3072, 32 heads
 * over 2 key-value heads, 256 experts of 1024, top 8, a shared expert of 1024, 64 value heads over
 * 16 q/k heads: 122.1 B parameters, 9.8 B a token, as its name says), the rest the 35B's fields. */
static const char *moe_122b =
    "{\"architectures\": [\"Qwen3_5MoeForCausalLM\"], \"model_type\": \"qwen3_5_moe_text\", \"attention_bias\": false,"
    " \"attn_output_gate\": true, \"eos_token_id\": 248044, \"full_attention_interval\": 4, \"head_dim\": 256,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 3072, \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128,"
    " \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 64, \"linear_value_head_dim\": 128,"
    " \"max_position_embeddings\": 262144, \"moe_intermediate_size\": 1024, \"num_attention_heads\": 32,"
    " \"num_experts\": 256, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 48, \"num_key_value_heads\": 2,"
    " \"output_router_logits\": false, \"rms_norm_eps\": 1e-06, " ROPE ", \"router_aux_loss_coef\": 0.001,"
    " \"shared_expert_intermediate_size\": 1024, \"tie_word_embeddings\": false, \"vocab_size\": 248320}";
/* Qwen/Qwen3.5-397B-A17B's text_config as ai-dynamo/aiconfigurator keeps a copy of the hub's
 * config.json (src/aiconfigurator/model_configs/Qwen--Qwen3.5-397B-A17B_config.json), but its
 * layer_types (full_attention_interval says the same) and with the rope_parameters every Qwen3.5
 * text_config carries, which that copy leaves out. */
static const char *moe_397b =
    "{\"architectures\": [\"Qwen3_5MoeForCausalLM\"], \"model_type\": \"qwen3_5_moe_text\", \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"attn_output_gate\": true, \"dtype\": \"bfloat16\", \"eos_token_id\": 248044,"
    " \"full_attention_interval\": 4, \"head_dim\": 256, \"hidden_act\": \"silu\", \"hidden_size\": 4096,"
    " \"initializer_range\": 0.02, \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128,"
    " \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 64, \"linear_value_head_dim\": 128,"
    " \"max_position_embeddings\": 262144, \"mlp_only_layers\": [], \"moe_intermediate_size\": 1024,"
    " \"mtp_num_hidden_layers\": 1, \"mtp_use_dedicated_embeddings\": false, \"num_attention_heads\": 32,"
    " \"num_experts\": 512, \"num_experts_per_tok\": 10, \"num_hidden_layers\": 60, \"num_key_value_heads\": 2,"
    " \"rms_norm_eps\": 1e-06, " ROPE ", \"router_aux_loss_coef\": 0.001, \"shared_expert_intermediate_size\": 1024,"
    " \"use_cache\": true, \"vocab_size\": 248320}";

Test(hfconfig_qwen3_5, the_hubs_configs_give_the_presets) {
    cfg_case_expect_preset(dense_27b, "qwen3.5-27b");
    cfg_case_expect_preset(moe_35b, "qwen3.5-35b-a3b");
    cfg_case_expect_preset(moe_122b, "qwen3.5-122b-a10b");
    cfg_case_expect_preset(moe_397b, "qwen3.5-397b-a17b");
}

/* Qwen/Qwen3-Next-80B-A3B's config.json (the Thinking checkpoint's, as ai-dynamo/aiconfigurator
 * keeps it in src/aiconfigurator/model_configs/Qwen--Qwen3-Next-80B-A3B-Thinking_config.json; the
 * Instruct checkpoint's is the same model, field for field). */
static const char *next_80b =
    "{\"architectures\": [\"Qwen3NextForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
    " \"decoder_sparse_step\": 1, \"eos_token_id\": 151645, \"full_attention_interval\": 4, \"head_dim\": 256,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 5120,"
    " \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128, \"linear_num_key_heads\": 16,"
    " \"linear_num_value_heads\": 32, \"linear_value_head_dim\": 128, \"max_position_embeddings\": 262144,"
    " \"mlp_only_layers\": [], \"model_type\": \"qwen3_next\", \"moe_intermediate_size\": 512,"
    " \"norm_topk_prob\": true, \"num_attention_heads\": 16, \"num_experts\": 512, \"num_experts_per_tok\": 10,"
    " \"num_hidden_layers\": 48, \"num_key_value_heads\": 2, \"output_router_logits\": false,"
    " \"partial_rotary_factor\": 0.25, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 10000000,"
    " \"router_aux_loss_coef\": 0.001, \"shared_expert_intermediate_size\": 512, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.57.0.dev0\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

Test(hfconfig_qwen3_5, qwen3_nexts_config_gives_its_preset) {
    cfg_case_expect_preset(next_80b, "qwen3-next-80b-a3b");
}

/* plan sizes the large presets for an H100 that is not here: the GPU model has the Gated DeltaNet
 * rule's workspace (it had none, and the plan crashed). */
Test(hfconfig_qwen3_5, plan_takes_the_large_presets, .timeout = MT_TEST_LIMIT(120)) {
    const char *presets[] = {"qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "qwen3-next-80b-a3b"};
    const char *experts[] = {"256 experts of 1024, 8 a token", "512 experts of 1024, 10 a token",
                             "512 experts of 512, 10 a token"};
    for (int i = 0; i < 3; i++) {
        mt_cli_result r;
        mt_cli_run(&r, MT_TEST_LIMIT(30), "plan", "--preset", presets[i], "--backend", "cuda", "--gpu-mem", "80GiB",
                   "--host-mem", "8TB", NULL);
        cr_expect_eq(r.exit_code, 0, "%s: exit %d:\n%s", presets[i], r.exit_code, r.err);
        cr_expect(strstr(r.out, experts[i]) && strstr(r.out, "device needs"), "%s:\n%s", presets[i], r.out);
        mt_cli_result_free(&r);
    }
}

Test(hfconfig_qwen3_5, layer_types_decide_the_mixers) {
    char types[64 * 24] = "[";
    for (int l = 0; l < 64; l++)
        strcat(types, l % 2 ? "\"full_attention\"," : "\"linear_attention\",");
    types[strlen(types) - 1] = ']';
    mt_config c;
    cr_assert_eq(cfg_case_parse_variant(dense_27b, "layer_types", types, &c), MT_OK, "%s", mt_error());
    for (int l = 0; l < 64; l++) cr_expect_eq(mt_config_layer_is_linear(&c, l), l % 2 == 0, "layer %d", l);
}

Test(hfconfig_qwen3_5, what_is_not_computed_is_refused_by_name) {
    char types[64 * 24] = "[\"sliding_attention\"";
    for (int l = 1; l < 64; l++) strcat(types, ",\"linear_attention\"");
    strcat(types, "]");
    cfg_case_expect_refusal(dense_27b, "layer_types", types, "layer 0 'sliding_attention'");
    cfg_case_expect_refusal(dense_27b, "linear_conv_kernel_dim", "3", "linear_conv_kernel_dim");
    cfg_case_expect_refusal(dense_27b, "linear_num_value_heads", "40", "linear_num_value_heads");
    cfg_case_expect_refusal(dense_27b, "rope_parameters",
                            "{\"rope_type\": \"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": 0.001}",
                            "partial_rotary_factor");
    cfg_case_expect_refusal(moe_35b, "decoder_sparse_step", "2", "every layer");
    cfg_case_expect_refusal(moe_35b, "mlp_only_layers", "[3]", "every layer");
}

/* Another family's partial_rotary_factor is refused as before: its attention turns whole heads. */
Test(hfconfig_qwen3_5, a_partial_rope_elsewhere_is_refused) {
    const char *llama = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,"
                        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}";
    cfg_case_expect_refusal(llama, "rope_parameters",
                            "{\"rope_type\": \"default\", \"rope_theta\": 10000, \"partial_rotary_factor\": 0.5}",
                            "partial_rotary_factor");
}

/* A plan for a GPU that is not here sizes the Gated DeltaNet's workspace by the CUDA kernels' count
 * (it crashed on the missing entry). */
Test(hfconfig_qwen3_5, plan_for_a_gpu_elsewhere_sizes_the_linear_layers, .timeout = MT_TEST_LIMIT(60)) {
    mt_cli_result r;
    mt_cli_run(&r, MT_TEST_LIMIT(30), "plan", "--preset", "qwen3.5-35b-a3b", "--backend", "cuda", "--gpu-mem",
               "80GiB", "--host-mem", "1TB", "--seq", "4096", "--batch", "4", NULL);
    cr_expect_eq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.out, "34.661 B parameters") && strstr(r.out, "block workspace") && strstr(r.out, ": fits"),
              "%s", r.out);
    mt_cli_result_free(&r);
}
