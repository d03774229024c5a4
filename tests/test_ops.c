/* The CPU reference kernels: every forward against a naive double-precision reference, every
 * backward against central finite differences of a probe loss, and the determinism properties
 * the engine relies on. Sizes are odd so that no blocking or vector width hides an off-by-one.
 * Then the op table (ops_table.h), which every backend runs, on the cpu backend. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "ops_check.h"
#include "ops_reference.h"
#include "ops_table.h"

/* Float kernel against double reference: each output is a sum of at most a few dozen O(1)
 * products, so float rounding (6e-8 relative per operation) stays far below 1e-5. */
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-5

/* Finite differences on O(1) inputs with step 1e-2: truncation error ~ step^2 = 1e-4 times a
 * third derivative, plus the float rounding of a probe loss of a few hundred O(1) terms (~1e-6)
 * divided by 2 * step (~1e-4). A wrong gradient term is off by O(0.1) or more. */
#define FD_STEP 1e-2f
#define FD_ATOL 2e-3
#define FD_RTOL 1e-2

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Rows and columns for the split-rows tests: columns span several of the kernels' 64-wide
 * column blocks, and values of very different sizes make float sums depend on their order. */
enum { SPLIT_N = 9, SPLIT_HALF = 4, SPLIT_D = 131 };

/* ---- matmul ---- */

enum { MM_N = 7, MM_IN = 13, MM_OUT = 5 };

Test(ops, matmul_matches_reference) {
    float x[MM_N * MM_IN], w[MM_OUT * MM_IN], bias[MM_OUT], y[MM_N * MM_OUT];
    double want[MM_N * MM_OUT];
    ops_fill(x, COUNT(x), 1, -1, 1);
    ops_fill(w, COUNT(w), 2, -1, 1);
    ops_fill(bias, COUNT(bias), 3, -1, 1);

    mt_cpu_matmul(y, x, w, bias, MM_N, MM_IN, MM_OUT);
    ops_ref_matmul(want, x, w, bias, MM_N, MM_IN, MM_OUT);
    ops_assert_close("y with bias", y, want, COUNT(y), FWD_ATOL, FWD_RTOL);

    mt_cpu_matmul(y, x, w, NULL, MM_N, MM_IN, MM_OUT);
    ops_ref_matmul(want, x, w, NULL, MM_N, MM_IN, MM_OUT);
    ops_assert_close("y without bias", y, want, COUNT(y), FWD_ATOL, FWD_RTOL);
}

typedef struct {
    const float *x, *w, *bias, *probe;
    float *y;
} matmul_case;

static double matmul_loss(void *ctx) {
    matmul_case *c = ctx;
    mt_cpu_matmul(c->y, c->x, c->w, c->bias, MM_N, MM_IN, MM_OUT);
    return ops_probe(c->y, c->probe, MM_N * MM_OUT);
}

Test(ops, matmul_gradients) {
    float x[MM_N * MM_IN], w[MM_OUT * MM_IN], bias[MM_OUT], probe[MM_N * MM_OUT], y[MM_N * MM_OUT];
    float dx[MM_N * MM_IN], dw[MM_OUT * MM_IN] = {0}, dbias[MM_OUT] = {0};
    ops_fill(x, COUNT(x), 4, -1, 1);
    ops_fill(w, COUNT(w), 5, -1, 1);
    ops_fill(bias, COUNT(bias), 6, -1, 1);
    ops_fill(probe, COUNT(probe), 7, -1, 1);

    mt_cpu_matmul_dx(dx, probe, w, MM_N, MM_IN, MM_OUT, 0);
    mt_cpu_matmul_dw(dw, dbias, probe, x, MM_N, MM_IN, MM_OUT);

    matmul_case c = {x, w, bias, probe, y};
    ops_check_grad("dx", x, dx, COUNT(x), FD_STEP, matmul_loss, &c, FD_ATOL, FD_RTOL);
    ops_check_grad("dw", w, dw, COUNT(w), FD_STEP, matmul_loss, &c, FD_ATOL, FD_RTOL);
    ops_check_grad("dbias", bias, dbias, COUNT(bias), FD_STEP, matmul_loss, &c, FD_ATOL, FD_RTOL);
}

/* Accumulating GEMMs (beta = 1) may round the final add differently from a separate float
 * add: allow a few ulps of values up to ~10. */
Test(ops, matmul_backward_accumulates) {
    float x[MM_N * MM_IN], w[MM_OUT * MM_IN], dy[MM_N * MM_OUT];
    float fresh_dx[MM_N * MM_IN], dx[MM_N * MM_IN], fresh_dw[MM_OUT * MM_IN] = {0}, dw[MM_OUT * MM_IN];
    float fresh_dbias[MM_OUT] = {0}, dbias[MM_OUT];
    float want_dx[MM_N * MM_IN], want_dw[MM_OUT * MM_IN], want_dbias[MM_OUT];
    ops_fill(x, COUNT(x), 8, -1, 1);
    ops_fill(w, COUNT(w), 9, -1, 1);
    ops_fill(dy, COUNT(dy), 10, -1, 1);
    ops_fill(dx, COUNT(dx), 11, -1, 1);
    ops_fill(dw, COUNT(dw), 12, -1, 1);
    ops_fill(dbias, COUNT(dbias), 13, -1, 1);

    mt_cpu_matmul_dx(fresh_dx, dy, w, MM_N, MM_IN, MM_OUT, 0);
    mt_cpu_matmul_dw(fresh_dw, fresh_dbias, dy, x, MM_N, MM_IN, MM_OUT);
    for (size_t i = 0; i < COUNT(dx); i++) want_dx[i] = dx[i] + fresh_dx[i];
    for (size_t i = 0; i < COUNT(dw); i++) want_dw[i] = dw[i] + fresh_dw[i];
    for (size_t i = 0; i < COUNT(dbias); i++) want_dbias[i] = dbias[i] + fresh_dbias[i];

    mt_cpu_matmul_dx(dx, dy, w, MM_N, MM_IN, MM_OUT, 1);
    mt_cpu_matmul_dw(dw, dbias, dy, x, MM_N, MM_IN, MM_OUT);
    ops_assert_close_f("dx += ", dx, want_dx, COUNT(dx), 1e-6, 1e-6);
    ops_assert_close_f("dw += ", dw, want_dw, COUNT(dw), 1e-6, 1e-6);
    ops_assert_close_f("dbias += ", dbias, want_dbias, COUNT(dbias), 1e-6, 1e-6);
}

Test(ops, matmul_dbias_sums_rows_in_order) {
    float dy[SPLIT_N * SPLIT_D], x[SPLIT_N * 3], dw[SPLIT_D * 3] = {0};
    float once[SPLIT_D], split[SPLIT_D];
    ops_fill(dy, COUNT(dy), 14, -1000, 1000);
    ops_fill(x, COUNT(x), 15, -1, 1);
    ops_fill(once, COUNT(once), 16, -1, 1);
    memcpy(split, once, sizeof once);

    mt_cpu_matmul_dw(dw, once, dy, x, SPLIT_N, 3, SPLIT_D);
    mt_cpu_matmul_dw(dw, split, dy, x, SPLIT_HALF, 3, SPLIT_D);
    mt_cpu_matmul_dw(dw, split, dy + SPLIT_HALF * SPLIT_D, x + SPLIT_HALF * 3, SPLIT_N - SPLIT_HALF, 3, SPLIT_D);
    cr_assert(memcmp(once, split, sizeof once) == 0, "dbias differs between one call and two");
}

/* ---- rmsnorm ---- */

enum { RN_N = 7, RN_D = 13 };
#define RN_EPS 1e-5f
#define RN_PLAIN ((mt_rmsnorm_params){.eps = RN_EPS})

Test(ops, rmsnorm_matches_reference) {
    float x[RN_N * RN_D], w[RN_D], y[RN_N * RN_D], rstd[RN_N];
    double want_y[RN_N * RN_D], want_rstd[RN_N];
    ops_fill(x, COUNT(x), 20, -2, 2);
    ops_fill(w, COUNT(w), 21, 0.5f, 1.5f);

    mt_cpu_rmsnorm(y, rstd, x, w, RN_N, RN_D, RN_PLAIN);
    ops_ref_rmsnorm(want_y, want_rstd, x, w, RN_N, RN_D, RN_EPS);
    ops_assert_close("y", y, want_y, COUNT(y), FWD_ATOL, FWD_RTOL);
    ops_assert_close("rstd", rstd, want_rstd, COUNT(rstd), FWD_ATOL, FWD_RTOL);
}

typedef struct {
    const float *x, *w, *probe;
    float *y, *rstd;
} rmsnorm_case;

static double rmsnorm_loss(void *ctx) {
    rmsnorm_case *c = ctx;
    mt_cpu_rmsnorm(c->y, c->rstd, c->x, c->w, RN_N, RN_D, RN_PLAIN);
    return ops_probe(c->y, c->probe, RN_N * RN_D);
}

Test(ops, rmsnorm_gradients) {
    float x[RN_N * RN_D], w[RN_D], probe[RN_N * RN_D], y[RN_N * RN_D], rstd[RN_N];
    float dx[RN_N * RN_D], dw[RN_D] = {0};
    ops_fill(x, COUNT(x), 22, -2, 2);
    ops_fill(w, COUNT(w), 23, 0.5f, 1.5f);
    ops_fill(probe, COUNT(probe), 24, -1, 1);

    mt_cpu_rmsnorm(y, rstd, x, w, RN_N, RN_D, RN_PLAIN);
    mt_cpu_rmsnorm_dx(dx, dw, probe, x, w, rstd, RN_N, RN_D, RN_PLAIN, 0);

    rmsnorm_case c = {x, w, probe, y, rstd};
    ops_check_grad("dx", x, dx, COUNT(x), FD_STEP, rmsnorm_loss, &c, FD_ATOL, FD_RTOL);
    ops_check_grad("dw", w, dw, COUNT(w), FD_STEP, rmsnorm_loss, &c, FD_ATOL, FD_RTOL);
}

/* The kernel adds the same float it would have written, so accumulation is exact. */
Test(ops, rmsnorm_dx_accumulates) {
    float x[RN_N * RN_D], w[RN_D], dy[RN_N * RN_D], y[RN_N * RN_D], rstd[RN_N], dw[RN_D] = {0};
    float fresh[RN_N * RN_D], dx[RN_N * RN_D], want[RN_N * RN_D];
    ops_fill(x, COUNT(x), 25, -2, 2);
    ops_fill(w, COUNT(w), 26, 0.5f, 1.5f);
    ops_fill(dy, COUNT(dy), 27, -1, 1);
    ops_fill(dx, COUNT(dx), 28, -1, 1);
    mt_cpu_rmsnorm(y, rstd, x, w, RN_N, RN_D, RN_PLAIN);

    mt_cpu_rmsnorm_dx(fresh, dw, dy, x, w, rstd, RN_N, RN_D, RN_PLAIN, 0);
    for (size_t i = 0; i < COUNT(dx); i++) want[i] = dx[i] + fresh[i];
    mt_cpu_rmsnorm_dx(dx, dw, dy, x, w, rstd, RN_N, RN_D, RN_PLAIN, 1);
    cr_assert(memcmp(dx, want, sizeof dx) == 0, "dx += differs from dx + fresh dx");
}

Test(ops, rmsnorm_dw_sums_rows_in_order) {
    float x[SPLIT_N * SPLIT_D], w[SPLIT_D], dy[SPLIT_N * SPLIT_D], y[SPLIT_N * SPLIT_D], rstd[SPLIT_N];
    float dx[SPLIT_N * SPLIT_D], once[SPLIT_D], split[SPLIT_D];
    ops_fill(x, COUNT(x), 29, -2, 2);
    ops_fill(w, COUNT(w), 30, 0.5f, 1.5f);
    ops_fill(dy, COUNT(dy), 31, -1000, 1000);
    ops_fill(once, COUNT(once), 32, -1, 1);
    memcpy(split, once, sizeof once);
    mt_cpu_rmsnorm(y, rstd, x, w, SPLIT_N, SPLIT_D, RN_PLAIN);

    mt_cpu_rmsnorm_dx(dx, once, dy, x, w, rstd, SPLIT_N, SPLIT_D, RN_PLAIN, 0);
    mt_cpu_rmsnorm_dx(dx, split, dy, x, w, rstd, SPLIT_HALF, SPLIT_D, RN_PLAIN, 0);
    mt_cpu_rmsnorm_dx(dx + SPLIT_HALF * SPLIT_D, split, dy + SPLIT_HALF * SPLIT_D, x + SPLIT_HALF * SPLIT_D,
                      w, rstd + SPLIT_HALF, SPLIT_N - SPLIT_HALF, SPLIT_D, RN_PLAIN, 0);
    cr_assert(memcmp(once, split, sizeof once) == 0, "dw differs between one call and two");
}

/* ---- rope ---- */

enum { RP_SEQ = 7, RP_N = 2 * RP_SEQ, RP_HEADS = 3, RP_HD = 6 };

static void rope_inv_freq(float *inv_freq) {
    for (int i = 0; i < RP_HD / 2; i++) inv_freq[i] = (float)pow(10000.0, -2.0 * i / RP_HD);
}

Test(ops, rope_matches_reference) {
    float x[RP_N * RP_HEADS * RP_HD], y[RP_N * RP_HEADS * RP_HD], inv_freq[RP_HD / 2];
    double want[RP_N * RP_HEADS * RP_HD];
    ops_fill(x, COUNT(x), 40, -1, 1);
    rope_inv_freq(inv_freq);
    memcpy(y, x, sizeof x);

    mt_cpu_rope(y, inv_freq, RP_N, RP_SEQ, 0, NULL, RP_HEADS, RP_HD, RP_HD, 0);
    ops_ref_rope(want, x, inv_freq, RP_N, RP_SEQ, RP_HEADS, RP_HD);
    ops_assert_close("rope(x)", y, want, COUNT(y), FWD_ATOL, FWD_RTOL);
}

/* Two float rotations of O(1) values: a few ulps. */
Test(ops, rope_inverse_undoes_rope) {
    float x[RP_N * RP_HEADS * RP_HD], y[RP_N * RP_HEADS * RP_HD], inv_freq[RP_HD / 2];
    ops_fill(x, COUNT(x), 41, -1, 1);
    rope_inv_freq(inv_freq);
    memcpy(y, x, sizeof x);

    mt_cpu_rope(y, inv_freq, RP_N, RP_SEQ, 0, NULL, RP_HEADS, RP_HD, RP_HD, 0);
    mt_cpu_rope(y, inv_freq, RP_N, RP_SEQ, 0, NULL, RP_HEADS, RP_HD, RP_HD, 1);
    ops_assert_close_f("inverse(rope(x))", y, x, COUNT(x), 1e-6, 0);
}

/* A window's rows (positions 3.. of the second sequence) turned from pos0 are the whole
 * micro-batch's same rows, bitwise: the same angles. */
Test(ops, rope_from_a_position_is_the_sequences_rows) {
    enum { ROW = RP_HEADS * RP_HD, FROM = RP_SEQ + 3, ROWS = 4 };
    float x[RP_N * ROW], whole[RP_N * ROW], window[ROWS * ROW], inv_freq[RP_HD / 2];
    ops_fill(x, COUNT(x), 44, -1, 1);
    rope_inv_freq(inv_freq);
    memcpy(whole, x, sizeof x);
    memcpy(window, x + FROM * ROW, sizeof window);
    mt_cpu_rope(whole, inv_freq, RP_N, RP_SEQ, 0, NULL, RP_HEADS, RP_HD, RP_HD, 0);
    mt_cpu_rope(window, inv_freq, ROWS, RP_SEQ, FROM % RP_SEQ, NULL, RP_HEADS, RP_HD, RP_HD, 0);
    cr_assert(!memcmp(window, whole + FROM * ROW, sizeof window), "a window's rows differ from the sequence's");
}

typedef struct {
    const float *x, *inv_freq, *probe;
    float *y;
} rope_case;

static double rope_loss(void *ctx) {
    rope_case *c = ctx;
    memcpy(c->y, c->x, RP_N * RP_HEADS * RP_HD * sizeof *c->y);
    mt_cpu_rope(c->y, c->inv_freq, RP_N, RP_SEQ, 0, NULL, RP_HEADS, RP_HD, RP_HD, 0);
    return ops_probe(c->y, c->probe, RP_N * RP_HEADS * RP_HD);
}

/* The backward of rope is its inverse applied to dy. */
Test(ops, rope_gradient_is_its_inverse) {
    float x[RP_N * RP_HEADS * RP_HD], y[RP_N * RP_HEADS * RP_HD], probe[RP_N * RP_HEADS * RP_HD];
    float dx[RP_N * RP_HEADS * RP_HD], inv_freq[RP_HD / 2];
    ops_fill(x, COUNT(x), 42, -1, 1);
    ops_fill(probe, COUNT(probe), 43, -1, 1);
    rope_inv_freq(inv_freq);
    memcpy(dx, probe, sizeof probe);
    mt_cpu_rope(dx, inv_freq, RP_N, RP_SEQ, 0, NULL, RP_HEADS, RP_HD, RP_HD, 1);

    rope_case c = {x, inv_freq, probe, y};
    ops_check_grad("dx", x, dx, COUNT(x), FD_STEP, rope_loss, &c, FD_ATOL, FD_RTOL);
}

/* ---- attention ---- */

/* Sized for the largest case below: n = 14 rows of 4 heads x 6. */
enum { AT_ROWS = 14, AT_WIDTH = 4 * 6, AT_LSE = 2 * 4 * 7 };
static const mt_attn_dims AT_GQA = {.batch = 2, .seq = 7, .heads = 4, .kv_heads = 2, .head_dim = 6};

static size_t q_count(mt_attn_dims d) { return (size_t)d.batch * d.seq * d.heads * d.head_dim; }
static size_t kv_count(mt_attn_dims d) { return (size_t)d.batch * d.seq * d.kv_heads * d.head_dim; }

Test(ops, attention_matches_reference) {
    const mt_attn_dims cases[] = {
        AT_GQA,
        {.batch = 2, .seq = 7, .heads = 4, .kv_heads = 4, .head_dim = 6}, /* multi-head */
        {.batch = 1, .seq = 13, .heads = 3, .kv_heads = 1, .head_dim = 8}, /* multi-query */
    };
    for (size_t ci = 0; ci < COUNT(cases); ci++) {
        mt_attn_dims d = cases[ci];
        float q[AT_ROWS * AT_WIDTH], k[AT_ROWS * AT_WIDTH], v[AT_ROWS * AT_WIDTH];
        float out[AT_ROWS * AT_WIDTH], lse[AT_LSE];
        double want_out[AT_ROWS * AT_WIDTH], want_lse[AT_LSE];
        cr_assert(q_count(d) <= COUNT(q) && (size_t)d.batch * d.heads * d.seq <= COUNT(lse));
        ops_fill(q, q_count(d), 50 + ci, -2, 2);
        ops_fill(k, kv_count(d), 60 + ci, -2, 2);
        ops_fill(v, kv_count(d), 70 + ci, -1, 1);

        mt_cpu_attention(out, lse, q, k, v, d, NULL, NULL);
        ops_ref_attention(want_out, want_lse, q, k, v, d);
        ops_assert_close("out", out, want_out, q_count(d), FWD_ATOL, FWD_RTOL);
        ops_assert_close("lse", lse, want_lse, (size_t)d.batch * d.heads * d.seq, FWD_ATOL, FWD_RTOL);
    }
}

typedef struct {
    const float *q, *k, *v, *probe;
    float *out, *lse;
} attention_case;

static double attention_loss(void *ctx) {
    attention_case *c = ctx;
    mt_cpu_attention(c->out, c->lse, c->q, c->k, c->v, AT_GQA, NULL, NULL);
    return ops_probe(c->out, c->probe, q_count(AT_GQA));
}

Test(ops, attention_gradients) {
    float q[AT_ROWS * AT_WIDTH], k[AT_ROWS * AT_WIDTH / 2], v[AT_ROWS * AT_WIDTH / 2];
    float probe[AT_ROWS * AT_WIDTH], out[AT_ROWS * AT_WIDTH], lse[AT_LSE];
    float dq[AT_ROWS * AT_WIDTH], dk[AT_ROWS * AT_WIDTH / 2], dv[AT_ROWS * AT_WIDTH / 2];
    float workspace[AT_LSE]; /* one delta per query row */
    cr_assert(q_count(AT_GQA) == COUNT(q) && kv_count(AT_GQA) == COUNT(k));
    cr_assert(mt_cpu_attention_workspace(AT_GQA) <= sizeof workspace);
    ops_fill(q, COUNT(q), 80, -2, 2);
    ops_fill(k, COUNT(k), 81, -2, 2);
    ops_fill(v, COUNT(v), 82, -1, 1);
    ops_fill(probe, COUNT(probe), 83, -1, 1);
    /* Garbage in the outputs: the backward must overwrite, not accumulate. */
    ops_fill(dq, COUNT(dq), 84, -9, 9);
    ops_fill(dk, COUNT(dk), 85, -9, 9);
    ops_fill(dv, COUNT(dv), 86, -9, 9);

    mt_cpu_attention(out, lse, q, k, v, AT_GQA, NULL, NULL);
    mt_cpu_attention_dx(dq, dk, dv, probe, out, lse, q, k, v, AT_GQA, NULL, NULL, workspace);

    attention_case c = {q, k, v, probe, out, lse};
    ops_check_grad("dq", q, dq, COUNT(q), FD_STEP, attention_loss, &c, FD_ATOL, FD_RTOL);
    ops_check_grad("dk", k, dk, COUNT(k), FD_STEP, attention_loss, &c, FD_ATOL, FD_RTOL);
    ops_check_grad("dv", v, dv, COUNT(v), FD_STEP, attention_loss, &c, FD_ATOL, FD_RTOL);
}

/* ---- swiglu and add ---- */

enum { SW_COUNT = 37 };

Test(ops, swiglu_matches_reference) {
    float g[SW_COUNT], u[SW_COUNT], a[SW_COUNT];
    double want[SW_COUNT];
    ops_fill(g, SW_COUNT, 90, -6, 6);
    ops_fill(u, SW_COUNT, 91, -2, 2);
    mt_cpu_swiglu(a, g, u, SW_COUNT, MT_GLU_SWIGLU);
    ops_ref_swiglu(want, g, u, SW_COUNT);
    ops_assert_close("a", a, want, SW_COUNT, FWD_ATOL, FWD_RTOL);
}

typedef struct {
    const float *g, *u, *probe;
    float *a;
} swiglu_case;

static double swiglu_loss(void *ctx) {
    swiglu_case *c = ctx;
    mt_cpu_swiglu(c->a, c->g, c->u, SW_COUNT, MT_GLU_SWIGLU);
    return ops_probe(c->a, c->probe, SW_COUNT);
}

Test(ops, swiglu_gradients) {
    float g[SW_COUNT], u[SW_COUNT], a[SW_COUNT], probe[SW_COUNT], dg[SW_COUNT], du[SW_COUNT];
    ops_fill(g, SW_COUNT, 92, -6, 6);
    ops_fill(u, SW_COUNT, 93, -2, 2);
    ops_fill(probe, SW_COUNT, 94, -1, 1);
    mt_cpu_swiglu_dx(dg, du, probe, g, u, SW_COUNT, MT_GLU_SWIGLU);

    swiglu_case c = {g, u, probe, a};
    ops_check_grad("dg", g, dg, SW_COUNT, FD_STEP, swiglu_loss, &c, FD_ATOL, FD_RTOL);
    ops_check_grad("du", u, du, SW_COUNT, FD_STEP, swiglu_loss, &c, FD_ATOL, FD_RTOL);
}

/* One float add per element: exact against the same add in the test. */
Test(ops, add_allows_aliasing) {
    float a[SW_COUNT], b[SW_COUNT], y[SW_COUNT], want[SW_COUNT];
    ops_fill(a, SW_COUNT, 95, -5, 5);
    ops_fill(b, SW_COUNT, 96, -5, 5);
    for (int i = 0; i < SW_COUNT; i++) want[i] = a[i] + b[i];
    mt_cpu_add(y, a, b, SW_COUNT);
    cr_assert(memcmp(y, want, sizeof y) == 0);
    mt_cpu_add(a, a, b, SW_COUNT);
    cr_assert(memcmp(a, want, sizeof a) == 0);
}

/* ---- embedding ---- */

enum { EM_VOCAB = 5 };
static const int32_t EM_TOKENS[SPLIT_N] = {3, 0, 3, 4, 1, 3, 0, 4, 3}; /* repeats on purpose */

Test(ops, embedding_gathers_rows) {
    float wte[EM_VOCAB * SPLIT_D], x[SPLIT_N * SPLIT_D];
    ops_fill(wte, COUNT(wte), 100, -1, 1);
    mt_cpu_embedding(x, EM_TOKENS, wte, SPLIT_N, SPLIT_D, 1.0f);
    for (int r = 0; r < SPLIT_N; r++)
        cr_assert(memcmp(x + r * SPLIT_D, wte + EM_TOKENS[r] * SPLIT_D, SPLIT_D * sizeof *x) == 0,
                  "row %d is not wte[%d]", r, EM_TOKENS[r]);
}

/* At most four float adds into each entry here: well within 1e-5 of the double sum. */
Test(ops, embedding_dw_scatters_rows) {
    float dx[SPLIT_N * SPLIT_D], dwte[EM_VOCAB * SPLIT_D];
    double want[EM_VOCAB * SPLIT_D];
    ops_fill(dx, COUNT(dx), 101, -1, 1);
    ops_fill(dwte, COUNT(dwte), 102, -1, 1);
    for (size_t i = 0; i < COUNT(dwte); i++) want[i] = dwte[i];
    for (int r = 0; r < SPLIT_N; r++)
        for (int j = 0; j < SPLIT_D; j++) want[EM_TOKENS[r] * SPLIT_D + j] += dx[r * SPLIT_D + j];

    mt_cpu_embedding_dw(dwte, EM_TOKENS, dx, SPLIT_N, SPLIT_D, 0, EM_VOCAB, 1.0f);
    ops_assert_close("dwte", dwte, want, COUNT(dwte), FWD_ATOL, FWD_RTOL);
}

/* A vocabulary window [v0, v0 + rows): its tokens' rows land at token - v0, the others nowhere. */
Test(ops, embedding_dw_window_takes_its_rows_only) {
    float dx[SPLIT_N * SPLIT_D], whole[EM_VOCAB * SPLIT_D] = {0}, window[2 * SPLIT_D] = {0};
    ops_fill(dx, COUNT(dx), 103, -1, 1);
    mt_cpu_embedding_dw(whole, EM_TOKENS, dx, SPLIT_N, SPLIT_D, 0, EM_VOCAB, 1.0f);
    mt_cpu_embedding_dw(window, EM_TOKENS, dx, SPLIT_N, SPLIT_D, 3, 2, 1.0f);
    cr_expect(!memcmp(window, whole + 3 * SPLIT_D, sizeof window), "rows 3 and 4 differ from the whole gradient's");
}

Test(ops, embedding_dw_sums_rows_in_order) {
    float dx[SPLIT_N * SPLIT_D], once[EM_VOCAB * SPLIT_D], split[EM_VOCAB * SPLIT_D];
    ops_fill(dx, COUNT(dx), 103, -1000, 1000);
    ops_fill(once, COUNT(once), 104, -1, 1);
    memcpy(split, once, sizeof once);

    mt_cpu_embedding_dw(once, EM_TOKENS, dx, SPLIT_N, SPLIT_D, 0, EM_VOCAB, 1.0f);
    mt_cpu_embedding_dw(split, EM_TOKENS, dx, SPLIT_HALF, SPLIT_D, 0, EM_VOCAB, 1.0f);
    mt_cpu_embedding_dw(split, EM_TOKENS + SPLIT_HALF, dx + SPLIT_HALF * SPLIT_D, SPLIT_N - SPLIT_HALF, SPLIT_D, 0,
                        EM_VOCAB, 1.0f);
    cr_assert(memcmp(once, split, sizeof once) == 0, "dwte differs between one call and two");
}

/* ---- LM head + cross-entropy ---- */

enum { LM_N = 7, LM_D = 6, LM_VOCAB = 11, LM_MAX_CHUNK = 10 };
static const int32_t LM_TARGETS[LM_N] = {3, -1, 0, 10, 7, -1, 3};
#define LM_SCALE 0.37f

/* A workspace for any chunk up to LM_MAX_CHUNK. */
typedef struct {
    float floats[LM_MAX_CHUNK * LM_VOCAB + LM_MAX_CHUNK];
} lm_workspace;

static void lmhead(float *loss_sum, float *dx, float *dw, const float *x, const float *w,
                   const int32_t *targets, int chunk, lm_workspace *ws) {
    cr_assert(mt_cpu_lmhead_workspace(chunk, LM_VOCAB) <= sizeof *ws);
    mt_cpu_lmhead_loss(loss_sum, NULL, dx, dw, x, w, targets, LM_N, LM_D, LM_VOCAB, LM_SCALE, 0.0f, chunk, ws);
}

Test(ops, lmhead_loss_matches_reference) {
    float x[LM_N * LM_D], w[LM_VOCAB * LM_D], dx[LM_N * LM_D], dw[LM_VOCAB * LM_D] = {0};
    lm_workspace ws;
    ops_fill(x, COUNT(x), 110, -1, 1);
    ops_fill(w, COUNT(w), 111, -1, 1);

    float loss_sum = 1.5f; /* the op accumulates into it */
    lmhead(&loss_sum, dx, dw, x, w, LM_TARGETS, 3, &ws);
    double want = 1.5 + ops_ref_lmhead_loss(x, w, LM_TARGETS, LM_N, LM_D, LM_VOCAB);
    ops_assert_close("loss_sum", &loss_sum, &want, 1, FWD_ATOL, FWD_RTOL);
}

typedef struct {
    const float *x, *w;
    float *dx, *dw;
    lm_workspace *ws;
} lmhead_case;

/* The loss whose gradients the op returns: scale times the summed cross-entropy. */
static double lmhead_scaled_loss(void *ctx) {
    lmhead_case *c = ctx;
    float loss_sum = 0.0f;
    memset(c->dw, 0, LM_VOCAB * LM_D * sizeof *c->dw);
    lmhead(&loss_sum, c->dx, c->dw, c->x, c->w, LM_TARGETS, 3, c->ws);
    return (double)LM_SCALE * loss_sum;
}

Test(ops, lmhead_loss_gradients) {
    float x[LM_N * LM_D], w[LM_VOCAB * LM_D], dx[LM_N * LM_D], dw[LM_VOCAB * LM_D] = {0};
    float scratch_dx[LM_N * LM_D], scratch_dw[LM_VOCAB * LM_D];
    lm_workspace ws;
    ops_fill(x, COUNT(x), 112, -1, 1);
    ops_fill(w, COUNT(w), 113, -1, 1);
    float loss_sum = 0.0f;
    lmhead(&loss_sum, dx, dw, x, w, LM_TARGETS, 3, &ws);

    lmhead_case c = {x, w, scratch_dx, scratch_dw, &ws};
    ops_check_grad("dx", x, dx, COUNT(x), FD_STEP, lmhead_scaled_loss, &c, FD_ATOL, FD_RTOL);
    ops_check_grad("dw", w, dw, COUNT(w), FD_STEP, lmhead_scaled_loss, &c, FD_ATOL, FD_RTOL);
}

/* Chunking changes only which GEMM computes a logit and how dw's row sums are grouped:
 * a few float roundings of values below ~10. */
Test(ops, lmhead_loss_same_for_any_chunk) {
    float x[LM_N * LM_D], w[LM_VOCAB * LM_D];
    float dx1[LM_N * LM_D], dw1[LM_VOCAB * LM_D] = {0}, loss1 = 0.0f;
    lm_workspace ws;
    ops_fill(x, COUNT(x), 114, -1, 1);
    ops_fill(w, COUNT(w), 115, -1, 1);
    lmhead(&loss1, dx1, dw1, x, w, LM_TARGETS, 1, &ws);

    const int chunks[] = {3, LM_N, LM_MAX_CHUNK};
    for (size_t i = 0; i < COUNT(chunks); i++) {
        float dx[LM_N * LM_D], dw[LM_VOCAB * LM_D] = {0}, loss = 0.0f;
        lmhead(&loss, dx, dw, x, w, LM_TARGETS, chunks[i], &ws);
        cr_assert(fabsf(loss - loss1) <= 1e-5f * loss1, "chunk %d: loss %.9g vs %.9g", chunks[i], loss, loss1);
        ops_assert_close_f("dx", dx, dx1, COUNT(dx), 1e-6, 1e-5);
        ops_assert_close_f("dw", dw, dw1, COUNT(dw), 1e-6, 1e-5);
    }
}

Test(ops, lmhead_loss_ignores_negative_targets) {
    float x[LM_N * LM_D], w[LM_VOCAB * LM_D], dx[LM_N * LM_D], dw[LM_VOCAB * LM_D], dw_before[LM_VOCAB * LM_D];
    const float zero_row[LM_D] = {0};
    const int32_t none[LM_N] = {-1, -1, -1, -1, -1, -1, -1};
    lm_workspace ws;
    ops_fill(x, COUNT(x), 116, -1, 1);
    ops_fill(w, COUNT(w), 117, -1, 1);
    ops_fill(dw, COUNT(dw), 118, -1, 1);
    ops_fill(dx, COUNT(dx), 119, -1, 1);
    memcpy(dw_before, dw, sizeof dw);

    float loss_sum = 2.25f;
    lmhead(&loss_sum, dx, dw, x, w, none, 3, &ws);
    cr_assert(loss_sum == 2.25f, "all-ignored rows changed the loss to %.9g", loss_sum);
    cr_assert(memcmp(dw, dw_before, sizeof dw) == 0, "all-ignored rows changed dw");
    for (int r = 0; r < LM_N; r++) cr_assert(memcmp(dx + r * LM_D, zero_row, sizeof zero_row) == 0);

    lmhead(&loss_sum, dx, dw, x, w, LM_TARGETS, 3, &ws);
    for (int r = 0; r < LM_N; r++)
        if (LM_TARGETS[r] < 0)
            cr_assert(memcmp(dx + r * LM_D, zero_row, sizeof zero_row) == 0, "ignored row %d has a gradient", r);
}

Test(ops, logits_match_reference) {
    float x[LM_D], w[LM_VOCAB * LM_D], logits[LM_VOCAB];
    double want[LM_VOCAB];
    ops_fill(x, COUNT(x), 120, -1, 1);
    ops_fill(w, COUNT(w), 121, -1, 1);
    mt_cpu_logits(logits, x, w, LM_D, LM_VOCAB, 0.0f);
    ops_ref_matmul(want, x, w, NULL, 1, LM_D, LM_VOCAB);
    ops_assert_close("logits", logits, want, LM_VOCAB, FWD_ATOL, FWD_RTOL);
}

/* ---- sumsq ---- */

/* Summed in double: the only error is the final rounding to float (rtol 1e-6 is ~8 ulps). */
Test(ops, sumsq_accumulates_exactly) {
    const size_t counts[] = {5, 1001};
    float x[1001];
    ops_fill(x, COUNT(x), 130, -3, 3);
    for (size_t c = 0; c < COUNT(counts); c++) {
        double want = 2.5;
        for (size_t i = 0; i < counts[c]; i++) want += (double)x[i] * x[i];
        float out = 2.5f;
        mt_cpu_sumsq(&out, x, counts[c]);
        ops_assert_close("sumsq", &out, &want, 1, 0, 1e-6);
    }
}

/* ---- determinism ---- */

Test(ops, kernels_are_deterministic) {
    float q[AT_ROWS * AT_WIDTH], k[AT_ROWS * AT_WIDTH / 2], v[AT_ROWS * AT_WIDTH / 2];
    float dout[AT_ROWS * AT_WIDTH], out[AT_ROWS * AT_WIDTH], lse[AT_LSE];
    float grads[2][2 * AT_ROWS * AT_WIDTH];
    float workspace[AT_LSE]; /* one delta per query row */
    cr_assert(mt_cpu_attention_workspace(AT_GQA) <= sizeof workspace);
    ops_fill(q, COUNT(q), 140, -2, 2);
    ops_fill(k, COUNT(k), 141, -2, 2);
    ops_fill(v, COUNT(v), 142, -1, 1);
    ops_fill(dout, COUNT(dout), 143, -1, 1);
    mt_cpu_attention(out, lse, q, k, v, AT_GQA, NULL, NULL);
    for (int run = 0; run < 2; run++) {
        float *dq = grads[run], *dk = dq + COUNT(q), *dv = dk + COUNT(k);
        mt_cpu_attention_dx(dq, dk, dv, dout, out, lse, q, k, v, AT_GQA, NULL, NULL, workspace);
    }
    cr_assert(memcmp(grads[0], grads[1], sizeof grads[0]) == 0, "attention_dx differs between runs");

    float x[SPLIT_N * SPLIT_D], dy[SPLIT_N * 3], dw[2][3 * SPLIT_D] = {{0}};
    ops_fill(x, COUNT(x), 144, -1, 1);
    ops_fill(dy, COUNT(dy), 145, -1, 1);
    for (int run = 0; run < 2; run++) mt_cpu_matmul_dw(dw[run], NULL, dy, x, SPLIT_N, SPLIT_D, 3);
    cr_assert(memcmp(dw[0], dw[1], sizeof dw[0]) == 0, "matmul_dw differs between runs");
}

/* ---- the op table on the cpu backend ---- */

ParameterizedTestParameters(ops, table_on_the_cpu_backend) {
    return cr_make_param_array(size_t, ops_case_indices(ops_case_count), ops_case_count);
}

ParameterizedTest(size_t *i, ops, table_on_the_cpu_backend) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 0), MT_OK, "%s", mt_error());
    ops_run_case(be, &ops_cases[*i]);
    mt_backend_destroy(be);
}
