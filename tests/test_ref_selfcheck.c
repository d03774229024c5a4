/* Self-checks of the PyTorch reference (tests/reference/llama_ref.py), independent of the
 * engine: its float64 gradients against finite differences of its own loss, the tied head
 * against an untied copy, grouped-query attention against full attention with repeated key and
 * value heads, and its AdamW step against the closed form of a first Adam step. Each test
 * starts Python once (about two seconds of importing torch), so fixtures share a run. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/layout.h"
#include "ref_fixture.h"

#define BATCH 2
#define SEQ 8
#define TOKENS (BATCH * (SEQ + 1))

#define ASSERT_OK(expr) cr_assert_eq((expr), MT_OK, "%s", mt_error())

typedef struct {
    mt_layout layout;
    float *master;
} tiny_model;

static mt_config tiny_config(int tie, int kv_heads, int bias) {
    return (mt_config){
        .arch = MT_ARCH_LLAMA, .hidden_size = 16, .intermediate_size = 24, .num_layers = 2,
        .num_heads = 4, .num_kv_heads = kv_heads, .head_dim = 8, .vocab_size = 32,
        .max_position = 64, .rms_norm_eps = 1e-5f, .rope_theta = 10000.0f,
        .tie_embeddings = tie, .attention_bias = bias, .bos_token_id = -1, .eos_token_id = -1};
}

/* Deterministic uniform numbers in [-1, 1) (splitmix64). */
static double uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

/* Where the tensor named `name` starts in the model's flat arrays. */
static int64_t tensor_at(const tiny_model *m, const char *name) {
    int unit;
    const mt_tensor *t = mt_layout_find(&m->layout, name, &unit);
    cr_assert_not_null(t, "no tensor %s", name);
    return m->layout.units[unit].offset + t->offset;
}

/* Random weights: norms near 1, biases near 0, matrices of unit-ish output scale. */
static void tiny_model_init(tiny_model *m, mt_config cfg, uint64_t seed) {
    cr_assert_eq(mt_layout_init(&m->layout, &cfg), MT_OK, "%s", mt_error());
    m->master = calloc((size_t)m->layout.total_numel, sizeof *m->master);
    cr_assert_not_null(m->master);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const mt_tensor *t = &m->layout.tensors[i];
        float *w = m->master + mt_ref_tensor_position(&m->layout, i);
        int is_norm = mt_tensor_is_norm(t->kind);
        double scale = t->cols == 1 ? 0.2 : 1.5 / sqrt(t->cols);
        for (int64_t j = 0; j < (int64_t)t->rows * t->cols; j++)
            w[j] = (float)((is_norm ? 1.0 : 0.0) + scale * uniform(&seed));
    }
}

static void tiny_model_free(tiny_model *m) {
    free(m->master);
    mt_layout_free(&m->layout);
}

static void random_tokens(int32_t *tokens, int count, int vocab, uint64_t seed) {
    for (int i = 0; i < count; i++)
        tokens[i] = (int32_t)((uniform(&seed) + 1.0) * 0.5 * vocab) % vocab;
}

static double *grads_alloc(const tiny_model *m) {
    double *g = calloc((size_t)m->layout.total_numel, sizeof *g);
    cr_assert_not_null(g);
    return g;
}

#define PROBES_PER_TENSOR 2
#define FD_STEP 1e-5

/* Central differences need two probes, +h and -h, per checked element. For the embedding, the
 * elements are taken from rows of tokens the batch uses (other rows have zero gradient). */
static int make_probes(const tiny_model *m, const int32_t *tokens, int kind_only,
                       mt_ref_probe *probes, uint64_t seed) {
    int count = 0;
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const mt_tensor *t = &m->layout.tensors[i];
        if (kind_only >= 0 && (int)t->kind != kind_only) continue;
        for (int k = 0; k < PROBES_PER_TENSOR; k++) {
            int64_t row = (int64_t)((uniform(&seed) + 1.0) * 0.5 * t->rows) % t->rows;
            int64_t col = (int64_t)((uniform(&seed) + 1.0) * 0.5 * t->cols) % t->cols;
            if (t->kind == MT_T_WTE) row = tokens[(k * 5) % TOKENS];
            probes[count++] = (mt_ref_probe){i, row * t->cols + col, FD_STEP};
            probes[count++] = (mt_ref_probe){i, row * t->cols + col, -FD_STEP};
        }
    }
    return count;
}

/* Float64 loss: rounding is ~1e-16 * loss / h ~ 1e-10 and truncation ~h^2 ~ 1e-10 in the
 * difference quotient, so 1e-8 absolute (plus 1e-6 relative) leaves a wide margin while any real
 * gradient error (a wrong factor, a missed path) is of the gradient's own size, 1e-3 and up. */
static void check_probes(const tiny_model *m, const mt_ref_probe *probes, int count,
                         const double *probe_losses, const double *grads) {
    for (int p = 0; p < count; p += 2) {
        const mt_tensor *t = &m->layout.tensors[probes[p].tensor];
        double fd = (probe_losses[p] - probe_losses[p + 1]) / (2 * FD_STEP);
        double g = grads[mt_ref_tensor_position(&m->layout, probes[p].tensor) + probes[p].element];
        cr_expect(fabs(fd - g) <= 1e-8 + 1e-6 * fabs(fd),
                  "%s[%lld]: gradient %.10g, finite difference %.10g", t->name,
                  (long long)probes[p].element, g, fd);
    }
}

/* Every tensor must receive gradient, or the finite-difference check could pass vacuously. */
static void check_all_tensors_have_gradient(const tiny_model *m, const double *grads) {
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const mt_tensor *t = &m->layout.tensors[i];
        double norm = 0;
        for (int64_t j = 0; j < (int64_t)t->rows * t->cols; j++)
            norm += fabs(grads[mt_ref_tensor_position(&m->layout, i) + j]);
        cr_expect(norm > 1e-6, "%s has no gradient", t->name);
    }
}

Test(refcheck, grads_match_finite_differences) {
    /* Untied head, GQA, q/k/v and o_proj biases, attention sinks and llama3 RoPE scaling: with
     * head_dim 8 and theta 1e4 the wavelengths are 6.3, 63, 628, 6283; an original context of 16
     * with factors 1 and 4 puts the first in the smoothed band and the rest in the scaled one. */
    mt_config cfg = tiny_config(0, 2, 1);
    cfg.attention_sinks = 1;
    cfg.rope_scaling_factor = 4.0f;
    cfg.rope_low_freq_factor = 1.0f;
    cfg.rope_high_freq_factor = 4.0f;
    cfg.rope_original_max_position = 16;
    tiny_model m;
    tiny_model_init(&m, cfg, 1);
    int32_t tokens[TOKENS];
    random_tokens(tokens, TOKENS, cfg.vocab_size, 2);
    mt_ref_probe probes[2 * PROBES_PER_TENSOR * 64];
    int count = make_probes(&m, tokens, -1, probes, 3);

    mt_ref_fixture fx;
    ASSERT_OK(mt_ref_fixture_create(&fx));
    ASSERT_OK(mt_ref_fixture_write(&fx, &m.layout, m.master, tokens, BATCH, SEQ, NULL));
    ASSERT_OK(mt_ref_fixture_write_probes(&fx, &m.layout, probes, count));
    ASSERT_OK(mt_ref_run_jobs(&(mt_ref_job){"grads", &fx}, 1));
    double loss, probe_losses[2 * PROBES_PER_TENSOR * 64], *grads = grads_alloc(&m);
    ASSERT_OK(mt_ref_read_grads(&fx, &m.layout, &loss, grads));
    ASSERT_OK(mt_ref_read_probe_losses(&fx, count, probe_losses));

    /* Random weights of this scale give near-uniform predictions: loss near ln(vocab). */
    cr_expect(loss > 0.5 * log(cfg.vocab_size) && loss < 2 * log(cfg.vocab_size), "loss %g", loss);
    check_all_tensors_have_gradient(&m, grads);
    check_probes(&m, probes, count, probe_losses, grads);

    free(grads);
    mt_ref_fixture_remove(&fx);
    tiny_model_free(&m);
}

/* Scales each head's rows of the q and k projections by its own factor, which per-head norms
 * undo: 2^h for query head h, 2^(h+1) for key head h (powers of two: exact in float32). */
static void scale_qk_heads(tiny_model *m) {
    const mt_config *c = &m->layout.cfg;
    for (int l = 0; l < c->num_layers; l++) {
        for (int part = 0; part < 2; part++) {
            char name[64];
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s_proj.weight", l, part ? "k" : "q");
            float *w = m->master + tensor_at(m, name);
            int heads = part ? c->num_kv_heads : c->num_heads;
            for (int h = 0; h < heads; h++)
                for (int j = 0; j < c->head_dim * c->hidden_size; j++)
                    w[(size_t)h * c->head_dim * c->hidden_size + j] *= (float)(1 << (part + h));
        }
    }
}

Test(refcheck, qwen3_grads_match_finite_differences_and_norms_are_per_head) {
    /* Tied Qwen3 with head_dim 6 where hidden / heads is 4; an eps too small to matter below. */
    mt_config cfg = tiny_config(1, 2, 0);
    cfg.arch = MT_ARCH_QWEN3;
    cfg.qk_norm = 1;
    cfg.head_dim = 6;
    cfg.rms_norm_eps = 1e-12f;
    tiny_model m, scaled;
    tiny_model_init(&m, cfg, 14);
    tiny_model_init(&scaled, cfg, 14);
    scale_qk_heads(&scaled);
    int32_t tokens[TOKENS];
    random_tokens(tokens, TOKENS, cfg.vocab_size, 15);
    mt_ref_probe probes[2 * PROBES_PER_TENSOR * 64];
    int count = make_probes(&m, tokens, -1, probes, 16);

    mt_ref_fixture fx, fx_scaled;
    ASSERT_OK(mt_ref_fixture_create(&fx));
    ASSERT_OK(mt_ref_fixture_create(&fx_scaled));
    ASSERT_OK(mt_ref_fixture_write(&fx, &m.layout, m.master, tokens, BATCH, SEQ, NULL));
    ASSERT_OK(mt_ref_fixture_write_probes(&fx, &m.layout, probes, count));
    ASSERT_OK(mt_ref_fixture_write(&fx_scaled, &scaled.layout, scaled.master, tokens, BATCH, SEQ, NULL));
    ASSERT_OK(mt_ref_run_jobs((mt_ref_job[]){{"grads", &fx}, {"grads", &fx_scaled}}, 2));
    double loss, loss_scaled, probe_losses[2 * PROBES_PER_TENSOR * 64];
    double *grads = grads_alloc(&m), *grads_scaled = grads_alloc(&scaled);
    ASSERT_OK(mt_ref_read_grads(&fx, &m.layout, &loss, grads));
    ASSERT_OK(mt_ref_read_grads(&fx_scaled, &scaled.layout, &loss_scaled, grads_scaled));
    ASSERT_OK(mt_ref_read_probe_losses(&fx, count, probe_losses));

    check_all_tensors_have_gradient(&m, grads);
    check_probes(&m, probes, count, probe_losses, grads);
    /* Each head normalized on its own forgets its scale (up to eps): the loss and the gradients
     * beyond q and k stay, to float64 rounding. A norm over all heads at once, or over the wrong
     * axis, would see the heads' relative scales change by up to 8x. */
    cr_expect(fabs(loss - loss_scaled) <= 1e-10 * loss, "loss %.12g, with heads scaled %.12g", loss, loss_scaled);
    const char *o_proj = "model.layers.1.self_attn.o_proj.weight";
    const mt_tensor *o = mt_layout_find(&m.layout, o_proj, NULL);
    for (int64_t j = 0; j < (int64_t)o->rows * o->cols; j++) {
        double a = grads[tensor_at(&m, o_proj) + j], b = grads_scaled[tensor_at(&m, o_proj) + j];
        cr_expect(fabs(a - b) <= 1e-9 * fabs(a) + 1e-12, "%s[%lld]: %.12g, with heads scaled %.12g", o_proj,
                  (long long)j, a, b);
    }

    free(grads);
    free(grads_scaled);
    mt_ref_fixture_remove(&fx);
    mt_ref_fixture_remove(&fx_scaled);
    tiny_model_free(&m);
    tiny_model_free(&scaled);
}

/* Copies every tensor of `src` that `dst` also has, by Hugging Face name. */
static void copy_shared_tensors(tiny_model *dst, const tiny_model *src) {
    for (int i = 0; i < src->layout.num_tensors; i++) {
        const mt_tensor *t = &src->layout.tensors[i];
        if (!mt_layout_find(&dst->layout, t->name, NULL)) continue;
        memcpy(dst->master + tensor_at(dst, t->name),
               src->master + mt_ref_tensor_position(&src->layout, i),
               (size_t)t->rows * t->cols * sizeof(float));
    }
}

Test(refcheck, tied_head_matches_untied_copy) {
    tiny_model tied, untied;
    tiny_model_init(&tied, tiny_config(1, 2, 0), 4);
    tiny_model_init(&untied, tiny_config(0, 2, 0), 5);
    copy_shared_tensors(&untied, &tied);
    int64_t wte_numel = (int64_t)tied.layout.cfg.vocab_size * tied.layout.cfg.hidden_size;
    memcpy(untied.master + tensor_at(&untied, "lm_head.weight"),
           tied.master + tensor_at(&tied, "model.embed_tokens.weight"),
           (size_t)wte_numel * sizeof(float));
    int32_t tokens[TOKENS];
    random_tokens(tokens, TOKENS, tied.layout.cfg.vocab_size, 6);
    /* Finite differences on the tied matrix: its gradient must sum both of its uses. */
    mt_ref_probe probes[2 * PROBES_PER_TENSOR];
    int count = make_probes(&tied, tokens, MT_T_WTE, probes, 7);

    mt_ref_fixture fx_tied, fx_untied;
    ASSERT_OK(mt_ref_fixture_create(&fx_tied));
    ASSERT_OK(mt_ref_fixture_create(&fx_untied));
    ASSERT_OK(mt_ref_fixture_write(&fx_tied, &tied.layout, tied.master, tokens, BATCH, SEQ, NULL));
    ASSERT_OK(mt_ref_fixture_write_probes(&fx_tied, &tied.layout, probes, count));
    ASSERT_OK(mt_ref_fixture_write(&fx_untied, &untied.layout, untied.master, tokens, BATCH, SEQ,
                                   NULL));
    ASSERT_OK(mt_ref_run_jobs((mt_ref_job[]){{"grads", &fx_tied}, {"grads", &fx_untied}}, 2));
    double loss_tied, loss_untied, probe_losses[2 * PROBES_PER_TENSOR];
    double *g_tied = grads_alloc(&tied), *g_untied = grads_alloc(&untied);
    ASSERT_OK(mt_ref_read_grads(&fx_tied, &tied.layout, &loss_tied, g_tied));
    ASSERT_OK(mt_ref_read_grads(&fx_untied, &untied.layout, &loss_untied, g_untied));
    ASSERT_OK(mt_ref_read_probe_losses(&fx_tied, count, probe_losses));

    /* The same float64 arithmetic on the same numbers: equal to rounding. */
    cr_expect(fabs(loss_tied - loss_untied) <= 1e-12, "tied %.17g, untied %.17g", loss_tied,
              loss_untied);
    const double *gt = g_tied + tensor_at(&tied, "model.embed_tokens.weight");
    const double *gu = g_untied + tensor_at(&untied, "model.embed_tokens.weight");
    const double *gh = g_untied + tensor_at(&untied, "lm_head.weight");
    for (int64_t j = 0; j < wte_numel; j++)
        cr_expect(fabs(gt[j] - (gu[j] + gh[j])) <= 1e-12,
                  "wte[%lld]: tied %.17g, embedding + head %.17g", (long long)j, gt[j],
                  gu[j] + gh[j]);
    check_probes(&tied, probes, count, probe_losses, g_tied);

    free(g_tied);
    free(g_untied);
    mt_ref_fixture_remove(&fx_tied);
    mt_ref_fixture_remove(&fx_untied);
    tiny_model_free(&tied);
    tiny_model_free(&untied);
}

/* The kv projections (weights [kv*hd, D] and biases) of `gqa` with each kv head's rows
 * repeated for the query heads that read it: query head h reads kv head h / group. */
static void repeat_kv_heads(tiny_model *mha, const tiny_model *gqa) {
    const mt_config *c = &gqa->layout.cfg;
    int group = c->num_heads / c->num_kv_heads, hd = c->head_dim;
    static const char *const parts[] = {"k_proj.weight", "v_proj.weight", "k_proj.bias",
                                        "v_proj.bias"};
    for (int l = 0; l < c->num_layers; l++) {
        for (int p = 0; p < 4; p++) {
            char name[64];
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l, parts[p]);
            int cols = p < 2 ? c->hidden_size : 1;
            const float *src = gqa->master + tensor_at(gqa, name);
            float *dst = mha->master + tensor_at(mha, name);
            for (int h = 0; h < c->num_heads; h++)
                memcpy(dst + (size_t)h * hd * cols, src + (size_t)(h / group) * hd * cols,
                       (size_t)hd * cols * sizeof(float));
        }
    }
}

Test(refcheck, gqa_matches_attention_with_repeated_kv_heads) {
    tiny_model gqa, mha;
    tiny_model_init(&gqa, tiny_config(0, 2, 1), 8);
    tiny_model_init(&mha, tiny_config(0, 4, 1), 9);
    copy_shared_tensors(&mha, &gqa);
    repeat_kv_heads(&mha, &gqa);
    int32_t tokens[TOKENS];
    random_tokens(tokens, TOKENS, gqa.layout.cfg.vocab_size, 10);

    mt_ref_fixture fx_gqa, fx_mha;
    ASSERT_OK(mt_ref_fixture_create(&fx_gqa));
    ASSERT_OK(mt_ref_fixture_create(&fx_mha));
    ASSERT_OK(mt_ref_fixture_write(&fx_gqa, &gqa.layout, gqa.master, tokens, BATCH, SEQ, NULL));
    ASSERT_OK(mt_ref_fixture_write(&fx_mha, &mha.layout, mha.master, tokens, BATCH, SEQ, NULL));
    ASSERT_OK(mt_ref_run_jobs((mt_ref_job[]){{"grads", &fx_gqa}, {"grads", &fx_mha}}, 2));
    double loss_gqa, loss_mha, *g_gqa = grads_alloc(&gqa), *g_mha = grads_alloc(&mha);
    ASSERT_OK(mt_ref_read_grads(&fx_gqa, &gqa.layout, &loss_gqa, g_gqa));
    ASSERT_OK(mt_ref_read_grads(&fx_mha, &mha.layout, &loss_mha, g_mha));

    /* Same arithmetic up to summation order: equal to float64 rounding. */
    cr_expect(fabs(loss_gqa - loss_mha) <= 1e-12, "gqa %.17g, mha %.17g", loss_gqa, loss_mha);
    /* A kv head's gradient is the sum over the query heads that read it; other tensors match. */
    const mt_config *c = &gqa.layout.cfg;
    int group = c->num_heads / c->num_kv_heads;
    for (int i = 0; i < gqa.layout.num_tensors; i++) {
        const mt_tensor *t = &gqa.layout.tensors[i];
        int is_kv = t->kind == MT_T_WK || t->kind == MT_T_WV || t->kind == MT_T_BK ||
                    t->kind == MT_T_BV;
        const double *gg = g_gqa + mt_ref_tensor_position(&gqa.layout, i);
        const double *gm = g_mha + tensor_at(&mha, t->name);
        int64_t head_numel = (int64_t)c->head_dim * t->cols;
        for (int64_t j = 0; j < (int64_t)t->rows * t->cols; j++) {
            double want = gm[j];
            if (is_kv) {
                int64_t kv_head = j / head_numel, within = j % head_numel;
                want = 0;
                for (int r = 0; r < group; r++)
                    want += gm[(kv_head * group + r) * head_numel + within];
            }
            cr_expect(fabs(gg[j] - want) <= 1e-12, "%s[%lld]: gqa %.17g, from mha %.17g", t->name,
                      (long long)j, gg[j], want);
        }
    }

    free(g_gqa);
    free(g_mha);
    mt_ref_fixture_remove(&fx_gqa);
    mt_ref_fixture_remove(&fx_mha);
    tiny_model_free(&gqa);
    tiny_model_free(&mha);
}

/* Adam's first step has a closed form: m/(1-b1) = g and sqrt(v/(1-b2)) = |g|, so
 *   w1 = w0 * (1 - lr * wd [matrices only]) - lr * g / (|g| + eps)
 * with g the (clipped) gradient. The float64 gradient from grads mode stands in for the float32
 * one that train mode computes. */
static double first_adam_step(double w, double g, int decay, const mt_ref_train_settings *s) {
    return w * (1 - (decay ? s->lr * s->weight_decay : 0)) - s->lr * g / (fabs(g) + s->eps);
}

static void check_first_step(const tiny_model *m, const float *after, const double *grads,
                             double clip_scale, const mt_ref_train_settings *s) {
    /* Where |g| is far above eps, lr*g/(|g|+eps) is lr*sign(g) and float32 rounding of w (~1e-8)
     * dominates; without clipping, the sign of a gradient within float32 noise of 0 may differ,
     * so such elements may move by up to 2 lr. A missed or misapplied weight decay moves w by
     * lr*wd*w ~ 1e-3 and a missed clip by ~lr: both far outside 1e-6. */
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const mt_tensor *t = &m->layout.tensors[i];
        int64_t at = mt_ref_tensor_position(&m->layout, i);
        for (int64_t j = 0; j < (int64_t)t->rows * t->cols; j++) {
            double g = grads[at + j] * clip_scale;
            double want = first_adam_step(m->master[at + j], g, t->decay, s);
            double tol = clip_scale == 1 && fabs(g) < 1e-5 ? 2.0 * s->lr + 1e-6 : 1e-6;
            cr_expect(fabs(after[at + j] - want) <= tol, "%s[%lld]: after %.9g, closed form %.9g",
                      t->name, (long long)j, after[at + j], want);
        }
    }
}

Test(refcheck, adamw_first_step_matches_closed_form) {
    tiny_model m;
    tiny_model_init(&m, tiny_config(0, 2, 1), 11);
    enum { STEPS = 3 };
    int32_t tokens[STEPS][TOKENS];
    random_tokens(tokens[0], TOKENS, m.layout.cfg.vocab_size, 12);
    for (int s = 1; s < STEPS; s++) memcpy(tokens[s], tokens[0], sizeof tokens[0]);
    mt_ref_train_settings plain = {.steps = 1, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f,
                                   .eps = 1e-8f, .weight_decay = 0.1f};
    /* A clip far below the gradient norm scales every gradient under eps: the update becomes
     * proportional to the clipped gradient, so the clip shows plainly. */
    mt_ref_train_settings clipped = plain;
    clipped.max_grad_norm = 1e-9f;
    mt_ref_train_settings longer = plain;
    longer.steps = STEPS;

    mt_ref_fixture fx[4];
    for (int i = 0; i < 4; i++) ASSERT_OK(mt_ref_fixture_create(&fx[i]));
    const mt_ref_train_settings *settings[4] = {NULL, &plain, &clipped, &longer};
    for (int i = 0; i < 4; i++)
        ASSERT_OK(mt_ref_fixture_write(&fx[i], &m.layout, m.master, tokens[0], BATCH, SEQ,
                                       settings[i]));
    mt_ref_job jobs[4] = {{"grads", &fx[0]}, {"train", &fx[1]}, {"train", &fx[2]},
                          {"train", &fx[3]}};
    ASSERT_OK(mt_ref_run_jobs(jobs, 4));

    size_t bytes = (size_t)m.layout.total_numel * sizeof(float);
    double loss64, *grads = grads_alloc(&m);
    float loss_plain, loss_clipped, losses[STEPS];
    float *after_plain = malloc(bytes), *after_clipped = malloc(bytes);
    float *after_longer = malloc(bytes);
    cr_assert(after_plain && after_clipped && after_longer);
    ASSERT_OK(mt_ref_read_grads(&fx[0], &m.layout, &loss64, grads));
    ASSERT_OK(mt_ref_read_train(&fx[1], &m.layout, 1, &loss_plain, after_plain));
    ASSERT_OK(mt_ref_read_train(&fx[2], &m.layout, 1, &loss_clipped, after_clipped));
    ASSERT_OK(mt_ref_read_train(&fx[3], &m.layout, STEPS, losses, after_longer));

    /* The float32 forward of train mode against the float64 one: a few float32 ulps of the
     * sums involved. */
    cr_expect(fabs(loss_plain - loss64) <= 1e-5 * loss64, "train %.9g, grads %.17g", loss_plain,
              loss64);
    cr_expect_eq(loss_clipped, loss_plain, "the loss before any update cannot depend on clipping");
    check_first_step(&m, after_plain, grads, 1.0, &plain);
    double norm = 0;
    for (int64_t j = 0; j < m.layout.total_numel; j++) norm += grads[j] * grads[j];
    /* torch's clip_grad_norm_: scale = max_norm / (norm + 1e-6). */
    double clip_scale = clipped.max_grad_norm / (sqrt(norm) + 1e-6);
    check_first_step(&m, after_clipped, grads, clip_scale, &clipped);
    /* The same batch three times: the loss must fall at every step. */
    cr_expect_eq(losses[0], loss_plain);
    cr_expect(losses[1] < losses[0] && losses[2] < losses[1], "losses %g %g %g", losses[0],
              losses[1], losses[2]);

    free(after_plain);
    free(after_clipped);
    free(after_longer);
    free(grads);
    for (int i = 0; i < 4; i++) mt_ref_fixture_remove(&fx[i]);
    tiny_model_free(&m);
}

Test(refcheck, missing_script_is_reported) {
    /* Away from the repository root the script cannot be found; the message must say so
     * (Criterion runs each test in its own process, so the chdir stays here). */
    cr_assert_eq(chdir("/"), 0);
    mt_ref_fixture fx = {.dir = "/nonexistent"};
    cr_assert_neq(mt_ref_run_jobs(&(mt_ref_job){"grads", &fx}, 1), MT_OK);
    cr_expect(strstr(mt_error(), "repository root") != NULL, "message: %s", mt_error());
}

Test(refcheck, compare_names_the_worst_tensor) {
    tiny_model m;
    tiny_model_init(&m, tiny_config(0, 2, 1), 13);
    size_t bytes = (size_t)m.layout.total_numel * sizeof(float);
    float *got = malloc(bytes);
    cr_assert_not_null(got);
    memcpy(got, m.master, bytes);
    const char *name = "model.layers.1.self_attn.k_proj.weight";
    float *k = got + tensor_at(&m, name);
    /* One large error in k_proj, a small one everywhere in the final norm. */
    k[5] += 0.5f;
    float *norm = got + tensor_at(&m, "model.norm.weight");
    for (int j = 0; j < m.layout.cfg.hidden_size; j++) norm[j] += 1e-3f;

    mt_ref_diff diff;
    mt_ref_compare(&m.layout, got, m.master, &diff);
    const mt_tensor *k_tensor = mt_layout_find(&m.layout, name, NULL);
    const float *k_want = m.master + tensor_at(&m, name);
    double k_norm = 0;
    for (int j = 0; j < k_tensor->rows * k_tensor->cols; j++)
        k_norm += (double)k_want[j] * k_want[j];
    cr_expect_str_eq(diff.worst_tensor, name);
    /* float32 rounding of k[5] + 0.5 is below 1e-7. */
    cr_expect(fabs(diff.worst_max_abs - 0.5) < 1e-6, "worst max abs %g", diff.worst_max_abs);
    cr_expect(fabs(diff.max_abs - 0.5) < 1e-6, "max abs %g", diff.max_abs);
    cr_expect(fabs(diff.worst_rel - 0.5 / sqrt(k_norm)) < 1e-6, "worst rel %g", diff.worst_rel);

    norm[0] = NAN;
    mt_ref_compare(&m.layout, got, m.master, &diff);
    cr_expect_str_eq(diff.worst_tensor, "model.norm.weight", "a NaN must count as the worst error");
    cr_expect(isinf(diff.worst_rel) && isinf(diff.max_abs));

    free(got);
    tiny_model_free(&m);
}
