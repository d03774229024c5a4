/* The Gated DeltaNet reference kernels (backend/cpu/ops/gdn_*.c) against PyTorch
 * (tests/reference/gdn_ops_ref.py, float64 with autograd for every backward): the convolution with
 * SiLU over packed segments, the q/k L2 norm with repeated heads, the decay and beta (softplus on
 * both sides of its threshold), the gated delta rule over segments longer and shorter than the
 * backward's chunk of states, and the gated RMSNorm. And the packing promise at op level: an
 * example's outputs and gradients through every op are the same alone and packed between others. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "ops_check.h"
#include "ref_ops.h"

#define SCRIPT "tests/reference/gdn_ops_ref.py"
/* fp32 kernels against float64: the rule's sums run over at most ~80 tokens of O(1) terms, each
 * rounded at 6e-8 relative (measured: the worst tensor here is 1.8e-7 off); a wrong or missing term
 * (a state leaking across a segment, a missed gradient path) is off by O(0.1). */
#define REL_TOL 1e-5

/* Segments of the given lengths: positions and starts, host arrays (the cpu backend's). */
typedef struct {
    int32_t pos[512], starts[17];
    mt_segments seg;
} packing;

static const mt_segments *pack(packing *p, const int *lengths, int count) {
    int r = 0;
    for (int i = 0; i < count; i++) {
        p->starts[i] = r;
        for (int j = 0; j < lengths[i]; j++) p->pos[r++] = j;
    }
    p->starts[count] = r;
    p->seg = (mt_segments){.pos = p->pos, .starts = p->starts, .count = count, .row0 = 0};
    return &p->seg;
}

/* case.txt's sizes, with the segments' starts written for the script. */
/* The cases of one run of the script. */
static ref_ops_set set;

static ref_ops_case *gdn_case(const char *title, const char *op, mt_gdn_dims d, int C, float eps) {
    char params[256];
    int segs = d.seg ? d.seg->count : (d.n + d.seq - 1) / d.seq;
    snprintf(params, sizeof params, "n=%d\nC=%d\nk_heads=%d\nv_heads=%d\nd_k=%d\nd_v=%d\nsegments=%d\neps=%g\n", d.n,
             C, d.k_heads, d.v_heads, d.d_k, d.d_v, segs, eps);
    ref_ops_case *c = ref_ops_new_case(&set, title, op, params);
    int32_t starts[64];
    for (int i = 0; i <= segs; i++)
        starts[i] = d.seg ? d.seg->starts[i] : i * d.seq < d.n ? i * d.seq : d.n;
    ref_ops_write(c, "starts", starts, (size_t)segs + 1, 1);
    return c;
}

static void conv_case(const char *title, mt_gdn_dims d, int C) {
    ref_ops_case *c = gdn_case(title, "conv", d, C, 0);
    size_t nc = (size_t)d.n * C;
    float *x = ref_ops_input(c, "x", nc, -2, 2), *w = ref_ops_input(c, "w", (size_t)C * 4, -0.8f, 0.8f);
    float *dy = ref_ops_input(c, "dy", nc, -1, 1), *dw = ref_ops_input(c, "dw", (size_t)C * 4, -1, 1);
    float *y = malloc(nc * 4), *dx = malloc(nc * 4);
    mt_cpu_gdn_conv(y, x, w, C, d);
    mt_cpu_gdn_conv_dx(dx, dw, dy, x, w, C, d);
    ref_ops_expect_f(c, "y", y, nc);
    ref_ops_expect_f(c, "dx", dx, nc);
    ref_ops_expect_f(c, "dw", dw, (size_t)C * 4);
    free(x);
    free(w);
    free(dy);
}

/* q and k as the columns of a wider row (the convolution's output), qk_ld apart. */
static void qk_norm_case(const char *title, mt_gdn_dims d) {
    ref_ops_case *c = gdn_case(title, "qk_norm", d, 0, 0);
    size_t hk = (size_t)d.k_heads * d.d_k, nk = (size_t)d.n * hk, nv = (size_t)d.n * d.v_heads * d.d_k;
    float *q = ref_ops_input(c, "q", nk, -1, 1), *k = ref_ops_input(c, "k", nk, -1, 1);
    float *dqn = ref_ops_input(c, "dqn", nv, -1, 1), *dkn = ref_ops_input(c, "dkn", nv, -1, 1);
    float *rows = calloc((size_t)d.n * d.qk_ld, 4), *drows = calloc((size_t)d.n * d.qk_ld, 4);
    for (int t = 0; t < d.n; t++) {
        memcpy(rows + (size_t)t * d.qk_ld, q + t * hk, hk * 4);
        memcpy(rows + (size_t)t * d.qk_ld + hk, k + t * hk, hk * 4);
    }
    float *qn = malloc(nv * 4), *kn = malloc(nv * 4), *dq = malloc(nk * 4), *dk = malloc(nk * 4);
    mt_cpu_gdn_qk_norm(qn, kn, rows, rows + hk, d);
    mt_cpu_gdn_qk_norm_dx(drows, drows + hk, dqn, dkn, rows, rows + hk, d);
    for (int t = 0; t < d.n; t++) {
        memcpy(dq + t * hk, drows + (size_t)t * d.qk_ld, hk * 4);
        memcpy(dk + t * hk, drows + (size_t)t * d.qk_ld + hk, hk * 4);
    }
    ref_ops_expect_f(c, "qn", qn, nv);
    ref_ops_expect_f(c, "kn", kn, nv);
    ref_ops_expect_f(c, "dq", dq, nk);
    ref_ops_expect_f(c, "dk", dk, nk);
    free(q);
    free(k);
    free(dqn);
    free(dkn);
    free(rows);
    free(drows);
}

static void decay_case(const char *title, mt_gdn_dims d) {
    ref_ops_case *c = gdn_case(title, "decay", d, 0, 0);
    size_t nh = (size_t)d.n * d.v_heads, H = (size_t)d.v_heads;
    /* a + dt_bias on both sides of softplus's threshold of 20 */
    float *a = ref_ops_input(c, "a", nh, -6, 26), *b = ref_ops_input(c, "b", nh, -5, 5);
    float *A_log = ref_ops_input(c, "A_log", H, -1, 1.5f), *dt_bias = ref_ops_input(c, "dt_bias", H, -1, 1);
    float *dg = ref_ops_input(c, "dg", nh, -1, 1), *dbeta = ref_ops_input(c, "dbeta", nh, -1, 1);
    float *dA_log = ref_ops_input(c, "dA_log", H, -1, 1), *ddt_bias = ref_ops_input(c, "ddt_bias", H, -1, 1);
    float *g = malloc(nh * 4), *beta = malloc(nh * 4), *da = malloc(nh * 4), *db = malloc(nh * 4);
    mt_cpu_gdn_decay(g, beta, a, b, A_log, dt_bias, d);
    mt_cpu_gdn_decay_dx(da, db, dA_log, ddt_bias, dg, dbeta, a, b, A_log, dt_bias, d);
    ref_ops_expect_f(c, "g", g, nh);
    ref_ops_expect_f(c, "beta", beta, nh);
    ref_ops_expect_f(c, "da", da, nh);
    ref_ops_expect_f(c, "db", db, nh);
    ref_ops_expect_f(c, "dA_log", dA_log, H);
    ref_ops_expect_f(c, "ddt_bias", ddt_bias, H);
    free(a);
    free(b);
    free(A_log);
    free(dt_bias);
    free(dg);
    free(dbeta);
}

/* v as the columns of a wider row, v_ld apart; keys of norm below 1 as the l2 norm gives them. */
static void rule_case(const char *title, mt_gdn_dims d) {
    ref_ops_case *c = gdn_case(title, "rule", d, 0, 0);
    int H = d.v_heads;
    size_t nh = (size_t)d.n * H, nk = nh * d.d_k, nv = nh * d.d_v, hv = (size_t)H * d.d_v;
    float *q = ref_ops_input(c, "q", nk, -0.5f, 0.5f), *k = ref_ops_input(c, "k", nk, -0.5f, 0.5f);
    float *v = ref_ops_input(c, "v", nv, -1, 1), *g = ref_ops_input(c, "g", nh, -0.6f, 0);
    float *beta = ref_ops_input(c, "beta", nh, 0, 1), *dout = ref_ops_input(c, "dout", nv, -1, 1);
    float *vrows = calloc((size_t)d.n * d.v_ld, 4), *dvrows = calloc((size_t)d.n * d.v_ld, 4);
    for (int t = 0; t < d.n; t++) memcpy(vrows + (size_t)t * d.v_ld, v + t * hv, hv * 4);
    float *o = malloc(nv * 4), *dq = malloc(nk * 4), *dk = malloc(nk * 4), *dv = malloc(nv * 4);
    float *dg = malloc(nh * 4), *dbeta = malloc(nh * 4), *ws = malloc(mt_cpu_gdn_rule_workspace(d));
    mt_cpu_gdn_rule(o, q, k, vrows, g, beta, d, ws);
    mt_cpu_gdn_rule_dx(dq, dk, dvrows, dg, dbeta, dout, q, k, vrows, g, beta, d, ws);
    for (int t = 0; t < d.n; t++) memcpy(dv + t * hv, dvrows + (size_t)t * d.v_ld, hv * 4);
    ref_ops_expect_f(c, "o", o, nv);
    ref_ops_expect_f(c, "dq", dq, nk);
    ref_ops_expect_f(c, "dk", dk, nk);
    ref_ops_expect_f(c, "dv", dv, nv);
    ref_ops_expect_f(c, "dg", dg, nh);
    ref_ops_expect_f(c, "dbeta", dbeta, nh);
    free(q);
    free(k);
    free(v);
    free(g);
    free(beta);
    free(dout);
    free(vrows);
    free(dvrows);
    free(ws);
}

static void norm_case(const char *title, mt_gdn_dims d, float eps) {
    ref_ops_case *c = gdn_case(title, "norm", d, 0, eps);
    size_t nv = (size_t)d.n * d.v_heads * d.d_v;
    float *x = ref_ops_input(c, "x", nv, -2, 2), *z = ref_ops_input(c, "z", nv, -4, 4);
    float *w = ref_ops_input(c, "w", (size_t)d.d_v, 0.5f, 1.5f), *dy = ref_ops_input(c, "dy", nv, -1, 1);
    float *dw = ref_ops_input(c, "dw", (size_t)d.d_v, -1, 1);
    float *y = malloc(nv * 4), *dx = malloc(nv * 4), *dz = malloc(nv * 4);
    mt_cpu_gdn_norm(y, x, z, w, eps, d);
    mt_cpu_gdn_norm_dx(dx, dz, dw, dy, x, z, w, eps, d);
    ref_ops_expect_f(c, "y", y, nv);
    ref_ops_expect_f(c, "dx", dx, nv);
    ref_ops_expect_f(c, "dz", dz, nv);
    ref_ops_expect_f(c, "dw", dw, (size_t)d.d_v);
    free(x);
    free(z);
    free(w);
    free(dy);
}

Test(gdn_ops, reference_kernels_match_pytorch) {
    packing p1, p2;
    static const int conv_lengths[] = {5, 1, 2, 29}, rule_lengths[] = {70, 1, 2, 79};
    mt_gdn_dims conv = {.n = 37, .seq = 37, .seg = pack(&p1, conv_lengths, 4)};
    conv_case("conv over packed segments (one of a single row)", conv, 24);
    conv.seg = NULL;
    conv.seq = 13;
    conv_case("conv over sequences of 13 rows", conv, 9);
    mt_gdn_dims qk = {.n = 19, .seq = 19, .k_heads = 2, .v_heads = 6, .d_k = 16, .qk_ld = 2 * 2 * 16 + 7};
    qk_norm_case("q/k norm, 2 heads repeated to 6", qk);
    qk.v_heads = 2;
    qk_norm_case("q/k norm, no repeat", qk);
    mt_gdn_dims gates = {.n = 23, .seq = 23, .k_heads = 5, .v_heads = 5};
    decay_case("decay and beta", gates);
    mt_gdn_dims rule = {.n = 152, .seq = 152, .k_heads = 3, .v_heads = 3, .d_k = 8, .d_v = 6, .v_ld = 3 * 6 + 5,
                        .seg = pack(&p2, rule_lengths, 4)};
    rule_case("the delta rule over packed segments (longer than a chunk, single rows)", rule);
    rule.seg = NULL;
    rule.seq = 75;
    rule_case("the delta rule over sequences of 75 rows, a short last one", rule);
    mt_gdn_dims norm = {.n = 13, .seq = 13, .k_heads = 4, .v_heads = 4, .d_v = 32};
    norm_case("gated RMSNorm", norm, 1e-6f);
    ref_ops_run(&set, SCRIPT, REL_TOL);
}

/* ---- packing: one example alone and between others ---- */

/* A whole mixer's ops, forward and backward (out_proj and the projections aside): the input rows
 * x [n, C] are q, k and v's channels, z the output gate; every gradient is overwritten except the
 * weights', which add. */
typedef struct {
    float *x, *a, *b, *z, *dy;                            /* per row */
    float *conv_w, *A_log, *dt_bias, *norm_w;             /* weights */
    float *y, *dx, *da, *db, *dz;                         /* per row, out */
    float *dconv_w, *dA_log, *ddt_bias, *dnorm_w;         /* weight gradients */
} layer;

enum { HK = 2, HV = 4, DK = 8, DV = 8, C = 2 * HK * DK + HV * DV };

static void layer_alloc(layer *l, int n) {
    size_t nc = (size_t)n * C, nh = (size_t)n * HV, nv = nh * DV;
    l->x = calloc(nc, 4), l->a = calloc(nh, 4), l->b = calloc(nh, 4), l->z = calloc(nv, 4), l->dy = calloc(nv, 4);
    l->y = calloc(nv, 4), l->dx = calloc(nc, 4), l->da = calloc(nh, 4), l->db = calloc(nh, 4), l->dz = calloc(nv, 4);
    l->conv_w = calloc(C * 4, 4), l->A_log = calloc(HV, 4), l->dt_bias = calloc(HV, 4), l->norm_w = calloc(DV, 4);
    l->dconv_w = calloc(C * 4, 4), l->dA_log = calloc(HV, 4), l->ddt_bias = calloc(HV, 4), l->dnorm_w = calloc(DV, 4);
}

static void layer_free(layer *l) {
    float *all[] = {l->x,  l->a,  l->b,  l->z,  l->dy,      l->y,      l->dx,      l->da,       l->db,
                    l->dz, l->conv_w, l->A_log, l->dt_bias, l->norm_w, l->dconv_w, l->dA_log, l->ddt_bias, l->dnorm_w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void layer_run(layer *l, mt_gdn_dims d) {
    size_t n = (size_t)d.n, nh = n * HV, nk = nh * DK, nv = nh * DV, hk = HK * DK;
    float *u = malloc(n * C * 4), *qn = malloc(nk * 4), *kn = malloc(nk * 4), *g = malloc(nh * 4);
    float *beta = malloc(nh * 4), *o = malloc(nv * 4), *ws = malloc(mt_cpu_gdn_rule_workspace(d));
    float *du = calloc(n * C, 4), *dqn = malloc(nk * 4), *dkn = malloc(nk * 4), *dg = malloc(nh * 4);
    float *dbeta = malloc(nh * 4), *dout = malloc(nv * 4);
    mt_cpu_gdn_conv(u, l->x, l->conv_w, C, d);
    mt_cpu_gdn_qk_norm(qn, kn, u, u + hk, d);
    mt_cpu_gdn_decay(g, beta, l->a, l->b, l->A_log, l->dt_bias, d);
    mt_cpu_gdn_rule(o, qn, kn, u + 2 * hk, g, beta, d, ws);
    mt_cpu_gdn_norm(l->y, o, l->z, l->norm_w, 1e-6f, d);
    mt_cpu_gdn_norm_dx(dout, l->dz, l->dnorm_w, l->dy, o, l->z, l->norm_w, 1e-6f, d);
    mt_cpu_gdn_rule_dx(dqn, dkn, du + 2 * hk, dg, dbeta, dout, qn, kn, u + 2 * hk, g, beta, d, ws);
    mt_cpu_gdn_decay_dx(l->da, l->db, l->dA_log, l->ddt_bias, dg, dbeta, l->a, l->b, l->A_log, l->dt_bias, d);
    mt_cpu_gdn_qk_norm_dx(du, du + hk, dqn, dkn, u, u + hk, d);
    mt_cpu_gdn_conv_dx(l->dx, l->dconv_w, du, l->x, l->conv_w, C, d);
    float *tmp[] = {u, qn, kn, g, beta, o, ws, du, dqn, dkn, dg, dbeta, dout};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) free(tmp[i]);
}

/* Rows [r0, r0 + rows) of a [n, width] array equal another's rows, to fp32 rounding. */
static void expect_rows(const char *what, const float *packed, const float *alone, int r0, int rows, int width) {
    double rel = ops_rel_err(packed + (size_t)r0 * width, alone, (size_t)rows * width);
    cr_expect(rel <= 1e-6, "%s: the example packed is %.3g off alone", what, rel);
}

Test(gdn_ops, packed_example_matches_alone) {
    /* The example (70 rows: two chunks of the backward's states) between two others; their output
     * gradients zero, so that the weights' gradients are the example's alone too. */
    static const int lengths[] = {45, 70, 31};
    enum { N = 45 + 70 + 31, R0 = 45, L = 70 };
    packing p;
    mt_gdn_dims packed = {.n = N, .seq = N, .k_heads = HK, .v_heads = HV, .d_k = DK, .d_v = DV, .qk_ld = C,
                          .v_ld = C, .seg = pack(&p, lengths, 3)};
    mt_gdn_dims alone = packed;
    alone.n = alone.seq = L;
    alone.seg = NULL;
    layer P, A;
    layer_alloc(&P, N);
    layer_alloc(&A, L);
    ops_fill(P.x, (size_t)N * C, 1, -1.5f, 1.5f);
    ops_fill(P.a, (size_t)N * HV, 2, -3, 3);
    ops_fill(P.b, (size_t)N * HV, 3, -3, 3);
    ops_fill(P.z, (size_t)N * HV * DV, 4, -3, 3);
    ops_fill(P.dy + (size_t)R0 * HV * DV, (size_t)L * HV * DV, 5, -1, 1);
    ops_fill(P.conv_w, C * 4, 6, -0.7f, 0.7f);
    ops_fill(P.A_log, HV, 7, -1, 1);
    ops_fill(P.dt_bias, HV, 8, -1, 1);
    ops_fill(P.norm_w, DV, 9, 0.5f, 1.5f);
    memcpy(A.x, P.x + (size_t)R0 * C, (size_t)L * C * 4);
    memcpy(A.a, P.a + (size_t)R0 * HV, (size_t)L * HV * 4);
    memcpy(A.b, P.b + (size_t)R0 * HV, (size_t)L * HV * 4);
    memcpy(A.z, P.z + (size_t)R0 * HV * DV, (size_t)L * HV * DV * 4);
    memcpy(A.dy, P.dy + (size_t)R0 * HV * DV, (size_t)L * HV * DV * 4);
    memcpy(A.conv_w, P.conv_w, C * 4 * 4);
    memcpy(A.A_log, P.A_log, HV * 4);
    memcpy(A.dt_bias, P.dt_bias, HV * 4);
    memcpy(A.norm_w, P.norm_w, DV * 4);
    layer_run(&P, packed);
    layer_run(&A, alone);
    expect_rows("y", P.y, A.y, R0, L, HV * DV);
    expect_rows("dx", P.dx, A.dx, R0, L, C);
    expect_rows("da", P.da, A.da, R0, L, HV);
    expect_rows("db", P.db, A.db, R0, L, HV);
    expect_rows("dz", P.dz, A.dz, R0, L, HV * DV);
    expect_rows("conv1d.weight's gradient", P.dconv_w, A.dconv_w, 0, 1, C * 4);
    expect_rows("A_log's gradient", P.dA_log, A.dA_log, 0, 1, HV);
    expect_rows("dt_bias's gradient", P.ddt_bias, A.ddt_bias, 0, 1, HV);
    expect_rows("norm.weight's gradient", P.dnorm_w, A.dnorm_w, 0, 1, DV);
    /* And the packing matters: the same rows as one segment with the example before them differ. */
    packed.seg = NULL;
    layer_run(&P, packed);
    cr_expect_gt(ops_rel_err(P.y + (size_t)R0 * HV * DV, A.y, (size_t)L * HV * DV), 1e-3,
                 "the example's output without the segments should depend on the rows before it");
    layer_free(&P);
    layer_free(&A);
}
