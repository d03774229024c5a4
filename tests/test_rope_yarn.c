/* YaRN RoPE against transformers' definition (tests/reference/rope_ref.py, llama_ref.py's YaRN, in
 * float64): the inverse
 * frequencies mt_rope_inv_freq gives (the linear ramp between beta_fast's and beta_slow's
 * dimensions, truncate on and off), the attention factor (0.1 ln(factor) + 1, or the config's),
 * and the scores of q and k turned by the CPU rope op and scaled as the layer's spec says (the
 * factor's square folded into its q_scale) against q.k of q and k turned by cos and sin times the
 * factor, as transformers computes them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"
#include "model/families.h"
#include "ref_ops.h"

#define SCRIPT "tests/reference/rope_ref.py"
/* fp32 against float64: cos and sin of angles up to a few hundred radians round at about 1e-5
 * relative (the angle's own rounding), a head_dim-long dot product adds little; a frequency off
 * the ramp, or a factor missing or applied once, is off by far more. */
#define REL_TOL 2e-5
#define POSITIONS 40
#define HEADS 2

static ref_ops_set set;

static void yarn_case(const char *title, mt_config c) {
    mt_model_spec m = mt_model_spec_of(&c);
    mt_layer_spec s = mt_layer_spec_of(&c, 0);
    const mt_rope_spec *r = &m.rope[s.attn.rope];
    cr_assert_eq(r->type, MT_ROPE_YARN, "%s", title);
    int D = c.head_dim;
    char params[512];
    snprintf(params, sizeof params,
             "rope_theta=%.9e\nhead_dim=%d\nrope_scaling_factor=%.9e\nrope_beta_fast=%.9e\nrope_beta_slow=%.9e\n"
             "rope_original_max_position=%d\nrope_truncate=%d\nrope_attention_factor=%.9e\npositions=%d\nheads=%d\n",
             (double)r->theta, D, (double)r->factor, (double)r->beta_fast, (double)r->beta_slow,
             r->original_max_position, r->truncate, (double)r->attention_factor, POSITIONS, HEADS);
    ref_ops_case *k = ref_ops_new_case(&set, title, "yarn", params);
    size_t n = (size_t)POSITIONS * HEADS * D;
    float *q = ref_ops_input(k, "q", n, -1, 1), *kk = ref_ops_input(k, "k", n, -1, 1);
    float *inv_freq = malloc((size_t)D / 2 * 4), *factor = malloc(4);
    float *scores = malloc((size_t)HEADS * POSITIONS * POSITIONS * 4);
    mt_rope_inv_freq(r, D, inv_freq);
    factor[0] = mt_rope_attention_factor(r);
    mt_cpu_rope(q, inv_freq, POSITIONS, POSITIONS, 0, NULL, HEADS, D, D, 0);
    mt_cpu_rope(kk, inv_freq, POSITIONS, POSITIONS, 0, NULL, HEADS, D, D, 0);
    float scale = s.attn.q_scale > 0 ? s.attn.q_scale : 1.0f / sqrtf((float)D);
    for (int h = 0; h < HEADS; h++)
        for (int p = 0; p < POSITIONS; p++)
            for (int t = 0; t < POSITIONS; t++) {
                double dot = 0;
                for (int i = 0; i < D; i++)
                    dot += (double)q[((size_t)p * HEADS + h) * D + i] * kk[((size_t)t * HEADS + h) * D + i];
                scores[((size_t)h * POSITIONS + p) * POSITIONS + t] = (float)(dot * scale);
            }
    ref_ops_expect_f(k, "inv_freq", inv_freq, (size_t)D / 2);
    ref_ops_expect_f(k, "factor", factor, 1);
    ref_ops_expect_f(k, "scores", scores, (size_t)HEADS * POSITIONS * POSITIONS);
    free(q);
    free(kk);
}

/* A Llama of head_dim 16 with YaRN over an original context of 64. */
static mt_config small_yarn(int truncate, float attention_factor) {
    mt_config c = {.arch = MT_ARCH_LLAMA, .hidden_size = 32, .intermediate_size = 40, .num_layers = 1,
                   .num_heads = 2, .num_kv_heads = 2, .head_dim = 16, .vocab_size = 53, .max_position = 256,
                   .rms_norm_eps = 1e-5f, .rope_theta = 10000.0f, .rope_scaling_factor = 4.0f,
                   .rope_scaling_yarn = 1, .rope_original_max_position = 64, .rope_beta_fast = 32.0f,
                   .rope_beta_slow = 1.0f, .rope_truncate = truncate, .rope_attention_factor = attention_factor,
                   .bos_token_id = -1, .eos_token_id = -1};
    cr_assert_eq(mt_config_validate(&c), MT_OK, "%s", mt_error());
    return c;
}

Test(rope_yarn, matches_transformers) {
    mt_config oss;
    cr_assert_eq(mt_config_preset("gpt-oss-20b", &oss), MT_OK);
    yarn_case("gpt-oss's: factor 32, betas 32 and 1, original 4096, not truncated", oss);
    yarn_case("factor 4 over 64, truncated", small_yarn(1, 0));
    yarn_case("factor 4 over 64, not truncated", small_yarn(0, 0));
    yarn_case("factor 4 over 64, attention_factor 1.5 given", small_yarn(1, 1.5f));
    ref_ops_run(&set, SCRIPT, REL_TOL);
}

/* The factor reaches the attention only through the spec's scale: a YaRN layer's is the default
 * 1/sqrt(head_dim) times its square, another table's stays unset. */
Test(rope_yarn, the_factor_scales_the_scores_through_the_spec) {
    mt_config c = small_yarn(1, 0);
    float f = 0.1f * logf(4.0f) + 1.0f;
    cr_expect_float_eq(mt_layer_spec_of(&c, 0).attn.q_scale, f * f / 4.0f, 1e-6f);
    c.rope_scaling_yarn = 0, c.rope_scaling_linear = 1;
    cr_expect_eq(mt_layer_spec_of(&c, 0).attn.q_scale, 0.0f);
}
