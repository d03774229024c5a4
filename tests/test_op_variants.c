/* The op variants Gemma and gpt-oss need, the CPU reference kernels against PyTorch
 * (tests/reference/op_variants_ref.py, float64 with autograd for every backward, from
 * transformers' definitions): the GLUs (Gemma's GELU-tanh, gpt-oss's clamped SiLU with its clamps
 * binding) dense and on the experts' fused rows, RMSNorm with the unit offset (1 + w), the
 * embedding times a scale, the experts' GEMMs with biases (gpt-oss), and the LM head's loss,
 * gradients, vocabulary-slice gradient and sampling logits with the final soft-cap. One Python
 * start runs every case. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"
#include "ref_ops.h"

#define SCRIPT "tests/reference/op_variants_ref.py"
/* fp32 kernels against float64: elementwise ops round at 6e-8 relative, the sums (norms, LM
 * head) add at most a few thousand O(1) terms; a wrong term or a missing factor is off by O(0.01)
 * or more. */
#define REL_TOL 1e-5

static ref_ops_set set;

static const char *const GLU_NAMES[] = {"silu", "gelu_tanh", "silu_clamped"};

/* gpt-oss's constants; the inputs reach past the limit so that the clamps bind. */
static mt_glu_params glu_params(mt_glu act) { return (mt_glu_params){.act = act, .limit = 7.0f, .alpha = 1.702f}; }
static float glu_range(mt_glu act) { return act == MT_GLU_SILU_CLAMPED ? 12.0f : 6.0f; }

static void glu_params_text(char *params, size_t size, const char *sizes, mt_glu act) {
    mt_glu_params p = glu_params(act);
    /* %e: a point, so the script reads a float */
    snprintf(params, size, "%sact=%d\nlimit=%.9e\nalpha=%.9e\n", sizes, (int)act, (double)p.limit, (double)p.alpha);
}

static void glu_case(mt_glu act, size_t count) {
    char sizes[32], params[128];
    snprintf(sizes, sizeof sizes, "count=%zu\n", count);
    glu_params_text(params, sizeof params, sizes, act);
    ref_ops_case *c = ref_ops_new_case(&set, GLU_NAMES[act], "glu", params);
    float r = glu_range(act);
    float *g = ref_ops_input(c, "g", count, -r, r), *u = ref_ops_input(c, "u", count, -r, r);
    float *da = ref_ops_input(c, "da", count, -1, 1);
    float *a = malloc(count * 4), *dg = malloc(count * 4), *du = malloc(count * 4);
    mt_cpu_swiglu(a, g, u, count, glu_params(act));
    mt_cpu_swiglu_dx(dg, du, da, g, u, count, glu_params(act));
    ref_ops_expect_f(c, "a", a, count);
    ref_ops_expect_f(c, "dg", dg, count);
    ref_ops_expect_f(c, "du", du, count);
    free(g);
    free(u);
    free(da);
}

static void moe_glu_case(const char *title, mt_glu act, int rows, int F) {
    char sizes[64], params[160];
    snprintf(sizes, sizeof sizes, "rows=%d\nF=%d\n", rows, F);
    glu_params_text(params, sizeof params, sizes, act);
    ref_ops_case *c = ref_ops_new_case(&set, title, "moe_glu", params);
    float r = glu_range(act);
    float *gu = ref_ops_input(c, "gu", (size_t)rows * 2 * F, -r, r);
    float *da = ref_ops_input(c, "da", (size_t)rows * F, -1, 1);
    float *a = malloc((size_t)rows * F * 4), *dgu = malloc((size_t)rows * 2 * F * 4);
    mt_cpu_moe_swiglu(a, gu, rows, F, glu_params(act));
    mt_cpu_moe_swiglu_dx(dgu, da, gu, rows, F, glu_params(act));
    ref_ops_expect_f(c, "a", a, (size_t)rows * F);
    ref_ops_expect_f(c, "dgu", dgu, (size_t)rows * 2 * F);
    free(gu);
    free(da);
}

/* dx overwritten, dw from zero. */
static void rmsnorm_case(const char *title, int n, int d, mt_rmsnorm_params p) {
    char params[128];
    snprintf(params, sizeof params, "n=%d\nd=%d\neps=%.9e\nunit_offset=%d\n", n, d, (double)p.eps, p.unit_offset);
    ref_ops_case *c = ref_ops_new_case(&set, title, "rmsnorm", params);
    size_t nd = (size_t)n * d;
    /* Gemma's weights sit near 0 (the gain near 1), Llama's near 1 */
    float *x = ref_ops_input(c, "x", nd, -2, 2), *w = ref_ops_input(c, "w", d, -0.5f, 1.5f);
    float *dy = ref_ops_input(c, "dy", nd, -1, 1);
    float *y = malloc(nd * 4), *rstd = malloc((size_t)n * 4), *dx = malloc(nd * 4), *dw = calloc(d, 4);
    mt_cpu_rmsnorm(y, rstd, x, w, n, d, p);
    mt_cpu_rmsnorm_dx(dx, dw, dy, x, w, rstd, n, d, p, 0);
    ref_ops_expect_f(c, "y", y, nd);
    ref_ops_expect_f(c, "rstd", rstd, n);
    ref_ops_expect_f(c, "dx", dx, nd);
    ref_ops_expect_f(c, "dw", dw, d);
    free(x);
    free(w);
    free(dy);
}

/* Every token repeated; dwte from zero. */
static void embedding_case(const char *title, int n, int d, int vocab, float scale) {
    char params[128];
    snprintf(params, sizeof params, "n=%d\nd=%d\nvocab=%d\nscale=%.9e\n", n, d, vocab, (double)scale);
    ref_ops_case *c = ref_ops_new_case(&set, title, "embedding", params);
    int32_t *tokens = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) tokens[i] = (i * 7) % vocab;
    ref_ops_write(c, "tokens", tokens, n, 1);
    float *wte = ref_ops_input(c, "wte", (size_t)vocab * d, -1, 1), *dx = ref_ops_input(c, "dx", (size_t)n * d, -1, 1);
    float *x = malloc((size_t)n * d * 4), *dwte = calloc((size_t)vocab * d, 4);
    mt_cpu_embedding(x, tokens, wte, n, d, scale);
    mt_cpu_embedding_dw(dwte, tokens, dx, n, d, 0, vocab, scale);
    ref_ops_expect_f(c, "x", x, (size_t)n * d);
    ref_ops_expect_f(c, "dwte", dwte, (size_t)vocab * d);
    free(tokens);
    free(wte);
    free(dx);
}

/* The experts' GEMMs with their biases (gpt-oss), one segment, the experts' rows of random sizes and the
 * last expert's none; dw and dbias from zero. */
static void grouped_case(const char *title, int E, int in, int out) {
    char params[128];
    int32_t offsets[16] = {0};
    cr_assert_lt(E, 16);
    for (int e = 0; e < E; e++)
        offsets[e + 1] = offsets[e] + (e == E - 1 ? 0 : 1 + (int)((ref_ops_seed(title) >> (4 * e)) % 9));
    int rows = offsets[E];
    snprintf(params, sizeof params, "rows=%d\nE=%d\nin=%d\nout=%d\n", rows, E, in, out);
    ref_ops_case *c = ref_ops_new_case(&set, title, "grouped", params);
    ref_ops_write(c, "offsets", offsets, E + 1, 1);
    float *x = ref_ops_input(c, "x", (size_t)rows * in, -1, 1);
    float *w = ref_ops_input(c, "w", (size_t)E * out * in, -0.3f, 0.3f);
    float *bias = ref_ops_input(c, "bias", (size_t)E * out, -1, 1);
    float *dy = ref_ops_input(c, "dy", (size_t)rows * out, -1, 1);
    float *y = malloc((size_t)rows * out * 4), *dx = malloc((size_t)rows * in * 4);
    float *dw = calloc((size_t)E * out * in, 4), *dbias = calloc((size_t)E * out, 4);
    mt_cpu_moe_matmul(y, x, w, bias, offsets, rows, E, 1, in, out);
    mt_cpu_moe_matmul_dx(dx, dy, w, offsets, rows, E, 1, in, out);
    mt_cpu_moe_matmul_dw(dw, dbias, dy, x, offsets, rows, E, 1, in, out);
    ref_ops_expect_f(c, "y", y, (size_t)rows * out);
    ref_ops_expect_f(c, "dx", dx, (size_t)rows * in);
    ref_ops_expect_f(c, "dw", dw, (size_t)E * out * in);
    ref_ops_expect_f(c, "dbias", dbias, (size_t)E * out);
    free(x);
    free(w);
    free(bias);
    free(dy);
}

/* lmhead_loss in chunks of 16 (every fifth target ignored), lmhead_dw of vocabulary rows [v0, v0 +
 * rows) from its log-sum-exp, and logits of row 0: each with the soft-cap. */
static void lmhead_case(const char *title, int n, int d, int vocab, float scale, float softcap, int v0, int rows) {
    enum { CHUNK = 16 };
    char params[192];
    snprintf(params, sizeof params, "n=%d\nd=%d\nvocab=%d\nscale=%.9e\nsoftcap=%.9e\nv0=%d\nrows=%d\n", n, d, vocab,
             (double)scale, (double)softcap, v0, rows);
    ref_ops_case *c = ref_ops_new_case(&set, title, "lmhead", params);
    int32_t *targets = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) targets[i] = i % 5 == 3 ? -1 : (i * 31) % vocab;
    ref_ops_write(c, "targets", targets, n, 1);
    /* raw logits up to about 3: a cap of 2 binds */
    float *x = ref_ops_input(c, "x", (size_t)n * d, -1, 1), *w = ref_ops_input(c, "w", (size_t)vocab * d, -0.3f, 0.3f);
    float *loss = calloc(1, 4), *lse = malloc((size_t)n * 4), *dx = malloc((size_t)n * d * 4);
    float *dw = calloc((size_t)vocab * d, 4), *dw_slice = calloc((size_t)rows * d, 4);
    float *logits = malloc((size_t)vocab * 4);
    void *ws = malloc(mt_cpu_lmhead_workspace(CHUNK, vocab));
    mt_cpu_lmhead_loss(loss, lse, dx, dw, x, w, targets, n, d, vocab, scale, softcap, CHUNK, ws);
    mt_cpu_lmhead_dw(dw_slice, x, w + (size_t)v0 * d, targets, lse, n, d, v0, rows, scale, softcap, CHUNK, ws);
    mt_cpu_logits(logits, x, w, d, vocab, softcap);
    for (int i = 0; i < n; i++)
        if (targets[i] < 0) lse[i] = 0.0f; /* unspecified on an ignored row: the script's 0 */
    ref_ops_expect_f(c, "loss", loss, 1);
    ref_ops_expect_f(c, "lse", lse, n);
    ref_ops_expect_f(c, "dx", dx, (size_t)n * d);
    ref_ops_expect_f(c, "dw", dw, (size_t)vocab * d);
    ref_ops_expect_f(c, "dw_slice", dw_slice, (size_t)rows * d);
    ref_ops_expect_f(c, "logits", logits, vocab);
    free(ws);
    free(targets);
    free(x);
    free(w);
}

Test(op_variants, reference_kernels_match_pytorch) {
    glu_case(MT_GLU_SILU, 1003);
    glu_case(MT_GLU_GELU_TANH, 1003);
    glu_case(MT_GLU_SILU_CLAMPED, 1003);
    moe_glu_case("fused rows, gelu_tanh", MT_GLU_GELU_TANH, 37, 67);
    moe_glu_case("fused rows, silu_clamped", MT_GLU_SILU_CLAMPED, 37, 67);
    rmsnorm_case("rmsnorm, plain", 13, 101, (mt_rmsnorm_params){.eps = 1e-6f});
    rmsnorm_case("rmsnorm, unit offset", 13, 101, (mt_rmsnorm_params){.eps = 1e-6f, .unit_offset = 1});
    rmsnorm_case("rmsnorm, unit offset, head_dim rows", 45, 64, (mt_rmsnorm_params){.eps = 1e-6f, .unit_offset = 1});
    /* Gemma's sqrt(40) as bf16 gives it */
    embedding_case("embedding scaled by 6.3125", 19, 40, 11, 6.3125f);
    grouped_case("expert GEMMs with biases", 6, 40, 36);
    lmhead_case("lm head, no cap", 37, 64, 301, 1.0f / 30.0f, 0.0f, 100, 77);
    lmhead_case("lm head soft-capped at 2", 37, 64, 301, 1.0f / 30.0f, 2.0f, 100, 77);
    lmhead_case("lm head soft-capped at 30 (Gemma 2's)", 37, 64, 301, 1.0f, 30.0f, 0, 301);

    ref_ops_run(&set, SCRIPT, REL_TOL);
}
