/* The family registry and the per-layer spec: every family is found by its architecture and its
 * model_type, owns its presets (each name once), and plans the spec its config implies; the spec
 * is what the layout declares (q/k/v biases, q/k norms, a shared expert) and a spec value no op
 * computes yet is refused naming the field and the layer. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/store.h"
#include "model/block_kinds.h"
#include "model/families.h"
#include "tiny_model.h"

Test(families, every_family_is_found_by_its_names_and_complete) {
    int n = 0;
    for (const mt_family *const *f = mt_families; *f; f++, n++) {
        cr_assert_eq(mt_family_find((*f)->architecture, NULL), *f, "%s", (*f)->architecture);
        cr_assert_eq(mt_family_find(NULL, (*f)->model_type), *f, "%s", (*f)->model_type);
        cr_assert_eq(mt_family_of((*f)->arch), *f, "%s", (*f)->architecture);
        cr_assert((*f)->read && (*f)->write && (*f)->validate && (*f)->plan && (*f)->plan_model && (*f)->fields,
                  "%s lacks an entry", (*f)->architecture);
        cr_assert(strstr(mt_family_architectures(), (*f)->architecture));
    }
    cr_assert_eq(n, 14);
    cr_assert_null(mt_family_find("GPT2LMHeadModel", NULL));
    cr_assert_null(mt_family_find(NULL, "gpt2"));
}

Test(families, each_preset_belongs_to_its_family_and_is_named_once) {
    for (const mt_family *const *f = mt_families; *f; f++) {
        cr_assert_gt((*f)->num_presets, 0, "%s has no preset", (*f)->architecture);
        for (int i = 0; i < (*f)->num_presets; i++) {
            const mt_preset *p = &(*f)->presets[i];
            mt_config c;
            cr_assert_eq(mt_config_preset(p->name, &c), MT_OK, "%s", p->name);
            cr_assert_eq(c.arch, (*f)->arch, "%s is not a %s", p->name, (*f)->architecture);
            cr_assert_eq(mt_config_validate(&c), MT_OK, "%s: %s", p->name, mt_error());
            const char *names = mt_config_preset_names(), *at = strstr(names, p->name);
            cr_assert(at, "%s is not listed", p->name);
            size_t len = strlen(p->name);
            int whole = (at == names || at[-1] == ' ') && (at[len] == ',' || at[len] == '\0');
            cr_assert(whole, "%s", p->name);
            for (const mt_family *const *g = mt_families; *g; g++)
                for (int j = 0; j < (*g)->num_presets; j++)
                    cr_assert(&(*g)->presets[j] == p || strcmp((*g)->presets[j].name, p->name), "%s twice",
                              p->name);
        }
    }
}

/* The spec each family plans from its config's fields. */
Test(families, plans_the_spec_the_config_implies) {
    mt_config qwen2 = mt_tiny_config_tied_bias(), qwen3 = mt_tiny_config_qwen3(0);
    mt_layer_spec s = mt_layer_spec_of(&qwen2, 0);
    cr_expect_eq(s.attn.flags, MT_ATTN_BIAS_QKV);
    cr_expect(s.mixer == MT_MIXER_ATTENTION && s.ffn == MT_FFN_DENSE && s.ffn_spec.act == MT_GLU_SILU);
    cr_expect(s.norm_eps == qwen2.rms_norm_eps && !s.norm_unit_offset && s.attn.window == 0 && s.attn.rope == 0);
    cr_expect_eq(mt_layer_spec_of(&qwen3, 1).attn.flags, MT_ATTN_QK_NORM_HEAD);

    mt_config olmoe = mt_tiny_config_moe(MT_ARCH_OLMOE, 0);
    s = mt_layer_spec_of(&olmoe, 0);
    cr_expect(s.attn.flags == MT_ATTN_QK_NORM_FULL && s.ffn == MT_FFN_MOE && s.ffn_spec.flags == 0);

    mt_config qwen2_moe = mt_tiny_config_moe(MT_ARCH_QWEN2_MOE, 1); /* dense, sparse, dense blocks */
    cr_expect_eq(mt_layer_spec_of(&qwen2_moe, 0).ffn, MT_FFN_DENSE);
    s = mt_layer_spec_of(&qwen2_moe, 1);
    cr_expect(s.ffn == MT_FFN_MOE && s.ffn_spec.flags == MT_FFN_SHARED_EXPERT);
    cr_expect_eq(mt_block_kinds_of(&qwen2_moe, 2).ffn, MT_FFN_DENSE);

    mt_config mixtral = mt_tiny_config_moe(MT_ARCH_MIXTRAL, 0);
    cr_expect_eq(mt_layer_spec_of(&mixtral, 1).ffn_spec.flags, MT_FFN_RENORM);

    mt_config mha = mt_tiny_config_mha(); /* llama3 RoPE scaling */
    mt_model_spec m = mt_model_spec_of(&mha);
    cr_expect(m.num_ropes == 1 && m.rope[0].type == MT_ROPE_LLAMA3 && m.rope[0].factor == mha.rope_scaling_factor);
    cr_expect(m.embed_scale == 1.0f && m.logit_softcap == 0);
    m = mt_model_spec_of(&qwen3);
    cr_expect(m.rope[0].type == MT_ROPE_DEFAULT && m.rope[0].theta == qwen3.rope_theta);
}

/* The layout declares what the spec says: biases, q/k norms of a head's or the projection's size. */
Test(families, the_layout_declares_what_the_spec_says) {
    mt_config olmoe = mt_tiny_config_moe(MT_ARCH_OLMOE, 0), qwen2 = mt_tiny_config_tied_bias();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &olmoe), MT_OK, "%s", mt_error());
    const mt_tensor *q_norm = mt_layout_tensor(&lay, mt_unit_block(0), MT_T_Q_NORM);
    cr_assert(q_norm && q_norm->rows == olmoe.num_heads * olmoe.head_dim);
    cr_expect_null(mt_layout_tensor(&lay, mt_unit_block(0), MT_T_BQ));
    cr_expect(!q_norm->decay && mt_tensor_is_norm(q_norm->kind));
    mt_layout_free(&lay);
    cr_assert_eq(mt_layout_init(&lay, &qwen2), MT_OK, "%s", mt_error());
    const mt_tensor *bq = mt_layout_tensor(&lay, mt_unit_block(1), MT_T_BQ);
    cr_assert(bq && !bq->decay && !strcmp(bq->name, "model.layers.1.self_attn.q_proj.bias"));
    cr_expect_null(mt_layout_tensor(&lay, mt_unit_block(1), MT_T_Q_NORM));
    mt_layout_free(&lay);
}

static void expect_refused(const mt_layer_spec *s, const mt_model_spec *m, const char *what) {
    cr_assert_eq(mt_layer_spec_check(s, m, 3), MT_ERR_INVALID, "%s passed", what);
    cr_expect(strstr(mt_error(), what) && strstr(mt_error(), "layer 3"), "%s", mt_error());
}

/* What no op computes yet is refused by name, until the backend has the op. */
/* What the ops compute since ISSUE 40 (windows, scales, soft-caps, GELU-tanh, (1 + w) norms, the
 * sandwich norms, an embedding scale, linear RoPE, a second RoPE table) and since ISSUE 41 (an o_proj
 * bias, attention sinks, YaRN, the experts' clamped SwiGLU and biases, the router's bias) passes; what
 * none computes yet, and values out of range, are refused naming the field. */
Test(families, spec_values_no_op_computes_are_refused_by_name) {
    mt_config c = mt_tiny_config_gqa();
    mt_model_spec m = mt_model_spec_of(&c);
    mt_layer_spec good = mt_layer_spec_of(&c, 0), s;
    cr_assert_eq(mt_layer_spec_check(&good, &m, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_model_spec_check(&m), MT_OK, "%s", mt_error());
    s = good, s.attn.window = 1024, s.attn.q_scale = 0.0625f, s.attn.logit_softcap = 50;
    s.attn.flags |= MT_ATTN_POST_NORM | MT_ATTN_BIAS_O | MT_ATTN_SINKS, s.ffn_spec.flags |= MT_FFN_POST_NORM;
    s.ffn_spec.act = MT_GLU_GELU_TANH, s.norm_unit_offset = 1;
    cr_assert_eq(mt_layer_spec_check(&s, &m, 0), MT_OK, "%s", mt_error());
    s = good, s.attn.window = -1;
    expect_refused(&s, &m, "attention window");
    s = good, s.attn.rope = 1;
    expect_refused(&s, &m, "RoPE table 1");
    s = good, s.attn.q_scale = -1;
    expect_refused(&s, &m, "attention scale");
    s = good, s.attn.logit_softcap = -50;
    expect_refused(&s, &m, "attn_logit_softcapping");
    s = good, s.ffn_spec.act = MT_GLU_SILU_CLAMPED;
    expect_refused(&s, &m, "clamped SwiGLU");
    /* gpt-oss's experts (ISSUE 41): the clamped SwiGLU with a positive limit and alpha, their
     * biases and the router's, in a mixture of experts only */
    s = good, s.ffn = MT_FFN_MOE, s.ffn_spec.act = MT_GLU_SILU_CLAMPED, s.ffn_spec.clamp = 7, s.ffn_spec.alpha = 1.702f;
    s.ffn_spec.flags |= MT_FFN_EXPERT_BIAS | MT_FFN_ROUTER_BIAS | MT_FFN_RENORM;
    cr_assert_eq(mt_layer_spec_check(&s, &m, 0), MT_OK, "%s", mt_error());
    s.ffn_spec.clamp = 0;
    expect_refused(&s, &m, "swiglu_limit and swiglu_alpha must be positive");
    s = good, s.ffn_spec.flags |= MT_FFN_ROUTER_BIAS;
    expect_refused(&s, &m, "a router bias are part of a mixture of experts");
    s = good, s.ffn = MT_FFN_MOE, s.ffn_spec.flags |= MT_FFN_POST_NORM;
    expect_refused(&s, &m, "post-feedforward norm");
    s = good, s.ffn_spec.flags |= MT_FFN_SHARED_EXPERT;
    expect_refused(&s, &m, "shared expert");
    mt_model_spec ok = m;
    ok.norm_unit_offset = 1, ok.embed_scale = 45.25f, ok.logit_softcap = 30, ok.num_ropes = 2;
    ok.rope[1] = (mt_rope_spec){.type = MT_ROPE_LINEAR, .theta = 10000.0f, .factor = 8};
    cr_assert_eq(mt_model_spec_check(&ok), MT_OK, "%s", mt_error());
    mt_model_spec bad = m;
    bad.embed_scale = 0;
    cr_expect_eq(mt_model_spec_check(&bad), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "embedding scale"), "%s", mt_error());
    bad = m, bad.logit_softcap = -30;
    cr_expect_eq(mt_model_spec_check(&bad), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "final_logit_softcapping"), "%s", mt_error());
    mt_rope_spec yarn = {.type = MT_ROPE_YARN, .theta = 150000.0f, .factor = 32, .beta_fast = 32, .beta_slow = 1,
                         .original_max_position = 4096};
    ok = m, ok.rope[0] = yarn;
    cr_assert_eq(mt_model_spec_check(&ok), MT_OK, "%s", mt_error());
    bad = ok, bad.rope[0].beta_slow = 0;
    cr_expect_eq(mt_model_spec_check(&bad), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "yarn beta_fast and beta_slow"), "%s", mt_error());
    bad = ok, bad.rope[0].original_max_position = 0;
    cr_expect_eq(mt_model_spec_check(&bad), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "original_max_position_embeddings"), "%s", mt_error());
    bad = m, bad.num_ropes = 3;
    cr_expect_eq(mt_model_spec_check(&bad), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "RoPE tables"), "%s", mt_error());
}

/* A local layer's attention FLOPs are those of the keys it sees: a window of w over seq keys
 * w - w^2 / (2 seq) on average against seq / 2; a window the sequence does not reach, seq / 2. */
Test(families, a_window_counts_the_flops_it_does) {
    mt_config c = mt_tiny_config_windowed(4);
    mt_config full = mt_tiny_config_gqa();
    double per_key = 4.0 * c.num_heads * c.head_dim;
    double want = per_key * (64 / 2.0 + 2 * (4 - 16 / 128.0)); /* block 1 full, 0 and 2 local */
    cr_expect_float_eq(mt_config_blocks_extra_flops(&c, 64), want, 1e-9 * want);
    cr_expect_float_eq(mt_config_blocks_extra_flops(&full, 64), per_key * 3 * 32.0, 1e-9 * want);
    cr_expect_float_eq(mt_config_blocks_extra_flops(&c, 4), mt_config_blocks_extra_flops(&full, 4), 1e-9);
}

/* mt_rope_inv_freq is transformers' default, linear and llama3 computation (yarn's:
 * tests/test_rope_yarn.c). */
Test(families, rope_tables_follow_their_spec) {
    mt_rope_spec plain = {.type = MT_ROPE_DEFAULT, .theta = 10000.0f};
    float f[4];
    mt_rope_inv_freq(&plain, 8, f);
    for (int i = 0; i < 4; i++) cr_expect_float_eq(f[i], powf(10000.0f, -2.0f * i / 8), 1e-6f, "%d", i);
    mt_rope_spec linear = {.type = MT_ROPE_LINEAR, .theta = 10000.0f, .factor = 8}; /* Gemma 3's global layers */
    float lin[4];
    mt_rope_inv_freq(&linear, 8, lin);
    for (int i = 0; i < 4; i++) cr_expect_float_eq(lin[i], f[i] / 8, 1e-7f, "%d", i);
    mt_rope_spec llama3 = {.type = MT_ROPE_LLAMA3, .theta = 10000.0f, .factor = 8, .low_freq_factor = 1,
                           .high_freq_factor = 4, .original_max_position = 32};
    float g[4];
    mt_rope_inv_freq(&llama3, 8, g);
    cr_expect_float_eq(g[0], f[0], 1e-6f);    /* wavelength 2 pi < 32 / 4: unscaled */
    cr_expect_float_eq(g[3], f[3] / 8, 1e-9f); /* wavelength > 32: divided by the factor */
}

/* Gemma 3's plan, as transformers' Gemma3DecoderLayer computes (gemma-3-4b: five local layers to
 * one global, the local RoPE base unscaled and rope_theta with linear 8 on the global ones). */
Test(families, gemma3_plans_transformers_block) {
    mt_config c;
    cr_assert_eq(mt_config_preset("gemma-3-4b", &c), MT_OK);
    cr_assert_eq(mt_config_validate(&c), MT_OK, "%s", mt_error());
    mt_model_spec m = mt_model_spec_of(&c);
    cr_expect(m.norm_unit_offset && m.logit_softcap == 0 && m.embed_scale == sqrtf(2560.0f));
    cr_expect(m.num_ropes == 2 && m.rope[0].type == MT_ROPE_LINEAR && m.rope[0].factor == 8 &&
              m.rope[0].theta == 1000000.0f && m.rope[1].type == MT_ROPE_DEFAULT && m.rope[1].theta == 10000.0f);
    for (int l = 0; l < c.num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(&c, l);
        int global = (l + 1) % 6 == 0;
        cr_expect_eq(s.attn.window, global ? 0 : 1024, "layer %d", l);
        cr_expect_eq(s.attn.rope, global ? 0 : 1, "layer %d", l);
        cr_expect(s.attn.q_scale == 0.0625f && s.attn.logit_softcap == 0 && s.norm_unit_offset, "layer %d", l);
        cr_expect(s.attn.flags == (MT_ATTN_QK_NORM_HEAD | MT_ATTN_POST_NORM), "layer %d", l);
        cr_expect(s.ffn == MT_FFN_DENSE && s.ffn_spec.act == MT_GLU_GELU_TANH && s.ffn_spec.flags == MT_FFN_POST_NORM,
                  "layer %d", l);
    }
    cr_assert_eq(mt_config_preset("gemma-3-27b", &c), MT_OK);
    cr_expect_float_eq(mt_layer_spec_of(&c, 0).attn.q_scale, 1 / sqrtf(168), 1e-9f);
    /* google/gemma-3-1b-pt: 999,885,952 parameters. */
    cr_assert_eq(mt_config_preset("gemma-3-1b", &c), MT_OK);
    cr_expect_eq(mt_config_total_params(&c), 999885952);
}

/* Gemma 2's: alternating local (first) and global layers of one RoPE table, the soft caps. */
Test(families, gemma2_plans_transformers_block) {
    mt_config c;
    cr_assert_eq(mt_config_preset("gemma-2-27b", &c), MT_OK);
    cr_assert_eq(mt_config_validate(&c), MT_OK, "%s", mt_error());
    mt_model_spec m = mt_model_spec_of(&c);
    cr_expect(m.norm_unit_offset && m.logit_softcap == 30 && m.num_ropes == 1 && m.rope[0].theta == 10000.0f);
    for (int l = 0; l < c.num_layers; l++) {
        mt_layer_spec s = mt_layer_spec_of(&c, l);
        cr_expect_eq(s.attn.window, l % 2 ? 0 : 4096, "layer %d", l);
        cr_expect(s.attn.rope == 0 && s.attn.logit_softcap == 50 && s.attn.q_scale == 1 / sqrtf(144), "layer %d", l);
        cr_expect(s.attn.flags == MT_ATTN_POST_NORM && s.ffn_spec.act == MT_GLU_GELU_TANH, "layer %d", l);
    }
    /* google/gemma-2-2b: 2,614,341,888 parameters. */
    cr_assert_eq(mt_config_preset("gemma-2-2b", &c), MT_OK);
    cr_expect_eq(mt_config_total_params(&c), 2614341888);
}

/* A fresh run's norms start at 1 whatever their form: Gemma's (1 + w) weights at 0, the others' w
 * at 1 (the final norm and the q/k norms included). */
static void expect_fresh_norms(const mt_config *c, float want) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK, "%s", mt_error());
    mt_layout lay;
    mt_store store;
    cr_assert_eq(mt_layout_init(&lay, c), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_store_create(&store, &lay, be), MT_OK, "%s", mt_error());
    mt_store_init_random(&store, 7);
    int norms = 0;
    for (int i = 0; i < lay.num_tensors; i++) {
        const mt_tensor *t = &lay.tensors[i];
        if (!mt_tensor_is_norm(t->kind)) continue;
        const float *w = mt_store_f32(&store) + lay.units[t->unit].offset + t->offset;
        for (int64_t k = 0; k < (int64_t)t->rows * t->cols; k++)
            cr_assert_eq(w[k], want, "%s[%lld] = %g", t->name, (long long)k, (double)w[k]);
        norms++;
    }
    cr_expect_gt(norms, 3 * c->num_layers, "the norms of %d blocks and the final one", c->num_layers);
    mt_store_free(&store);
    mt_layout_free(&lay);
    mt_backend_destroy(be);
}

Test(families, a_fresh_runs_norms_start_at_one) {
    mt_config gemma3 = mt_tiny_config_gemma3(), qwen3 = mt_tiny_config_qwen3(0);
    expect_fresh_norms(&gemma3, 0.0f);
    expect_fresh_norms(&qwen3, 1.0f);
}
