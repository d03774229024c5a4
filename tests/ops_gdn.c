/* The op table's Gated DeltaNet kinds (ops_table.h; backend.h's gdn group): each op with its
 * backward, over sequences whose length is no multiple of the CUDA kernels' chunk of 64 and over
 * packed segments that start inside a chunk, and end there. A case's sizes: dims.batch sequences
 * of dims.seq rows, dims.heads value heads, dims.kv_heads q/k heads of dims.head_dim, d = d_v (the
 * convolution: d its channels). The cases are in ops_table.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"
#include "ops_table.h"

#define BF16_TOL 1e-2
/* fp32 outputs of bf16 inputs: the same fp32 arithmetic in another order (the chunked form of the
 * rule against the recurrence) */
#define F32_TOL 1e-3
#define NORM_EPS 1e-6f

#define T(name, type, role, count, lo, hi, tol) ((ops_tensor){name, OPS_##type, OPS_##role, (size_t)(count), lo, hi, tol})

static size_t rows(const ops_case *c) { return (size_t)c->dims.batch * c->dims.seq; }
static size_t heads_rows(const ops_case *c) { return rows(c) * c->dims.heads; }
/* q, k and v's columns of the convolution's output: the row stride of q, k and v. */
static int conv_width(const ops_case *c) {
    return 2 * c->dims.kv_heads * c->dims.head_dim + c->dims.heads * c->d;
}

/* Positions [rows] and starts [count + 1] of the case's segments (when it has any). */
static void fill_segments(const ops_case *c, int32_t *pos, int32_t *starts) {
    int row = 0;
    for (int k = 0; k < c->segment_count; k++) {
        starts[k] = row;
        for (int i = 0; i < c->segments[k]; i++, row++) pos[row] = i;
    }
    starts[c->segment_count] = row;
    cr_assert_eq((size_t)row, rows(c), "%s: the segments hold %d rows, not batch x seq", c->name, row);
}

static mt_gdn_dims dims_of(const ops_case *c, mt_segments *store, const void *pos, const void *starts) {
    mt_gdn_dims d = {.n = (int)rows(c), .seq = c->dims.seq, .k_heads = c->dims.kv_heads, .v_heads = c->dims.heads,
                     .d_k = c->dims.head_dim, .d_v = c->d, .qk_ld = conv_width(c), .v_ld = conv_width(c)};
    if (c->segments) {
        *store = (mt_segments){pos, starts, c->segment_count, 0};
        d.seg = store;
    }
    return d;
}
#define SEGMENT_TENSORS(pos_i, starts_i)                                                        \
    t[pos_i] = T("positions", I32, IN, c->segments ? rows(c) : 0, 0, 0, 0);                     \
    t[starts_i] = T("starts", I32, IN, c->segments ? c->segment_count + 1 : 0, 0, 0, 0)

/* ---- conv1d + SiLU over d channels ---- */

enum { CV_X, CV_W, CV_DY, CV_Y, CV_DX, CV_DW, CV_POS, CV_STARTS };

static int conv_declare(const ops_case *c, ops_tensor *t) {
    size_t nc = rows(c) * c->d;
    t[CV_X] = T("x", ACT, IN, nc, -2, 2, 0);
    t[CV_W] = T("w", W, IN, (size_t)c->d * MT_GDN_CONV, -0.8f, 0.8f, 0);
    t[CV_DY] = T("dy", ACT, IN, nc, -1, 1, 0);
    t[CV_Y] = T("y", ACT, OUT, nc, 0, 0, BF16_TOL);
    t[CV_DX] = T("dx", ACT, OUT, nc, 0, 0, BF16_TOL);
    t[CV_DW] = T("dw", F32, INOUT, (size_t)c->d * MT_GDN_CONV, -1, 1, F32_TOL);
    SEGMENT_TENSORS(CV_POS, CV_STARTS);
    return 8;
}
static void conv_prepare(const ops_case *c, ops_host *h) {
    if (c->segments) fill_segments(c, h->ids[CV_POS], h->ids[CV_STARTS]);
}
static void conv_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    mt_segments store;
    mt_gdn_dims g = dims_of(c, &store, d[CV_POS], d[CV_STARTS]);
    be->ops->gdn.conv(be, s, d[CV_Y], d[CV_X], d[CV_W], c->d, g);
    be->ops->gdn.conv_dx(be, s, d[CV_DX], d[CV_DW], d[CV_DY], d[CV_X], d[CV_W], c->d, g);
}
static void conv_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_segments store;
    mt_gdn_dims g = dims_of(c, &store, h->ids[CV_POS], h->ids[CV_STARTS]);
    mt_cpu_gdn_conv(h->x[CV_Y], h->x[CV_X], h->x[CV_W], c->d, g);
    mt_cpu_gdn_conv_dx(h->x[CV_DX], h->x[CV_DW], h->x[CV_DY], h->x[CV_X], h->x[CV_W], c->d, g);
}
const ops_kind OPS_GDN_CONV = {.declare = conv_declare, .prepare = conv_prepare, .call = conv_call,
                               .reference = conv_reference, .needs_gdn = 1};

/* ---- q/k L2 norm: q and k the first columns of the convolution's rows ---- */

enum { QK_X, QK_DQN, QK_DKN, QK_QN, QK_KN, QK_DX };

static int qk_declare(const ops_case *c, ops_tensor *t) {
    size_t nk = heads_rows(c) * c->dims.head_dim, nx = rows(c) * conv_width(c);
    t[QK_X] = T("conv rows", ACT, IN, nx, -1, 1, 0);
    t[QK_DQN] = T("dqn", ACT, IN, nk, -1, 1, 0);
    t[QK_DKN] = T("dkn", ACT, IN, nk, -1, 1, 0);
    t[QK_QN] = T("qn", ACT, OUT, nk, 0, 0, BF16_TOL);
    t[QK_KN] = T("kn", ACT, OUT, nk, 0, 0, BF16_TOL);
    t[QK_DX] = T("dq, dk", ACT, OUT, nx, 0, 0, BF16_TOL); /* the v columns stay zero */
    return 6;
}
static void qk_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    mt_gdn_dims g = dims_of(c, NULL, NULL, NULL);
    size_t hk = (size_t)c->dims.kv_heads * c->dims.head_dim, el = mt_dtype_size(be->ops->act_dtype);
    char *x = d[QK_X], *dx = d[QK_DX];
    be->ops->gdn.qk_norm(be, s, d[QK_QN], d[QK_KN], x, x + hk * el, g);
    be->ops->gdn.qk_norm_dx(be, s, dx, dx + hk * el, d[QK_DQN], d[QK_DKN], x, x + hk * el, g);
}
static void qk_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_gdn_dims g = dims_of(c, NULL, NULL, NULL);
    size_t hk = (size_t)c->dims.kv_heads * c->dims.head_dim;
    mt_cpu_gdn_qk_norm(h->x[QK_QN], h->x[QK_KN], h->x[QK_X], h->x[QK_X] + hk, g);
    mt_cpu_gdn_qk_norm_dx(h->x[QK_DX], h->x[QK_DX] + hk, h->x[QK_DQN], h->x[QK_DKN], h->x[QK_X], h->x[QK_X] + hk, g);
}
const ops_kind OPS_GDN_QK_NORM = {.declare = qk_declare, .call = qk_call, .reference = qk_reference,
                                  .needs_gdn = 1};

/* ---- decay and beta ---- */

enum { DC_A, DC_B, DC_ALOG, DC_DT, DC_DG, DC_DBETA, DC_G, DC_BETA, DC_DA, DC_DB, DC_DALOG, DC_DDT };

static int decay_declare(const ops_case *c, ops_tensor *t) {
    size_t nh = heads_rows(c), H = (size_t)c->dims.heads;
    t[DC_A] = T("a", ACT, IN, nh, -6, 26, 0); /* a + dt_bias on both sides of softplus's threshold */
    t[DC_B] = T("b", ACT, IN, nh, -5, 5, 0);
    t[DC_ALOG] = T("A_log", W, IN, H, -1, 1.5f, 0);
    t[DC_DT] = T("dt_bias", W, IN, H, -1, 1, 0);
    t[DC_DG] = T("dg", F32, IN, nh, -1, 1, 0);
    t[DC_DBETA] = T("dbeta", F32, IN, nh, -1, 1, 0);
    t[DC_G] = T("g", F32, OUT, nh, 0, 0, F32_TOL);
    t[DC_BETA] = T("beta", F32, OUT, nh, 0, 0, F32_TOL);
    t[DC_DA] = T("da", ACT, OUT, nh, 0, 0, BF16_TOL);
    t[DC_DB] = T("db", ACT, OUT, nh, 0, 0, BF16_TOL);
    t[DC_DALOG] = T("dA_log", F32, INOUT, H, -1, 1, F32_TOL);
    t[DC_DDT] = T("ddt_bias", F32, INOUT, H, -1, 1, F32_TOL);
    return 12;
}
static void decay_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    mt_gdn_dims g = dims_of(c, NULL, NULL, NULL);
    be->ops->gdn.decay(be, s, d[DC_G], d[DC_BETA], d[DC_A], d[DC_B], d[DC_ALOG], d[DC_DT], g);
    be->ops->gdn.decay_dx(be, s, d[DC_DA], d[DC_DB], d[DC_DALOG], d[DC_DDT], d[DC_DG], d[DC_DBETA], d[DC_A], d[DC_B],
                          d[DC_ALOG], d[DC_DT], g);
}
static void decay_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_gdn_dims g = dims_of(c, NULL, NULL, NULL);
    mt_cpu_gdn_decay(h->x[DC_G], h->x[DC_BETA], h->x[DC_A], h->x[DC_B], h->x[DC_ALOG], h->x[DC_DT], g);
    mt_cpu_gdn_decay_dx(h->x[DC_DA], h->x[DC_DB], h->x[DC_DALOG], h->x[DC_DDT], h->x[DC_DG], h->x[DC_DBETA],
                        h->x[DC_A], h->x[DC_B], h->x[DC_ALOG], h->x[DC_DT], g);
}
const ops_kind OPS_GDN_DECAY = {.declare = decay_declare, .call = decay_call, .reference = decay_reference,
                                .needs_gdn = 1};

/* ---- the gated delta rule: q, k as qk_norm gives them, v the last columns of a conv row ---- */

enum { RL_Q, RL_K, RL_V, RL_G, RL_BETA, RL_DOUT, RL_O, RL_DQ, RL_DK, RL_DV, RL_DG, RL_DBETA, RL_WS, RL_POS, RL_STARTS };

static int rule_declare(const ops_case *c, ops_tensor *t) {
    size_t nh = heads_rows(c), nk = nh * c->dims.head_dim, nv = nh * c->d, nx = rows(c) * conv_width(c);
    t[RL_Q] = T("q", ACT, IN, nk, -1, 1, 0);
    t[RL_K] = T("k", ACT, IN, nk, -1, 1, 0);
    t[RL_V] = T("v", ACT, IN, nx, -1, 1, 0);
    t[RL_G] = T("g", F32, IN, nh, -1.5f, 0, 0);
    t[RL_BETA] = T("beta", F32, IN, nh, 0, 1, 0);
    t[RL_DOUT] = T("dout", ACT, IN, nv, -1, 1, 0);
    t[RL_O] = T("o", ACT, OUT, nv, 0, 0, BF16_TOL);
    t[RL_DQ] = T("dq", ACT, OUT, nk, 0, 0, BF16_TOL);
    t[RL_DK] = T("dk", ACT, OUT, nk, 0, 0, BF16_TOL);
    t[RL_DV] = T("dv", ACT, OUT, nx, 0, 0, BF16_TOL);
    t[RL_DG] = T("dg", F32, OUT, nh, 0, 0, F32_TOL);
    t[RL_DBETA] = T("dbeta", F32, OUT, nh, 0, 0, F32_TOL);
    t[RL_WS] = T("workspace", I32, SCRATCH, 0, 0, 0, 0);
    SEGMENT_TENSORS(RL_POS, RL_STARTS);
    return 15;
}
static size_t rule_workspace(mt_backend *be, const ops_case *c) {
    mt_segments store;
    return be->ops->gdn.rule_workspace(be, dims_of(c, &store, NULL, NULL));
}
/* q and k rows as the L2 norm leaves them (|k| = 1, |q| = d_k^-0.5): the rule's own range. */
static void unit_rows(float *x, size_t count, int n, float scale) {
    for (size_t r = 0; r < count / (size_t)n; r++) {
        float *row = x + r * n, ss = 0.0f;
        for (int i = 0; i < n; i++) ss += row[i] * row[i];
        for (int i = 0; i < n; i++) row[i] *= scale / sqrtf(ss);
    }
}
static void rule_prepare(const ops_case *c, ops_host *h) {
    size_t nk = heads_rows(c) * c->dims.head_dim;
    unit_rows(h->x[RL_Q], nk, c->dims.head_dim, 1.0f / sqrtf((float)c->dims.head_dim));
    unit_rows(h->x[RL_K], nk, c->dims.head_dim, 1.0f);
    if (c->segments) fill_segments(c, h->ids[RL_POS], h->ids[RL_STARTS]);
}
static void rule_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    mt_segments store;
    mt_gdn_dims g = dims_of(c, &store, d[RL_POS], d[RL_STARTS]);
    be->ops->gdn.rule(be, s, d[RL_O], d[RL_Q], d[RL_K], d[RL_V], d[RL_G], d[RL_BETA], g, d[RL_WS]);
    be->ops->gdn.rule_dx(be, s, d[RL_DQ], d[RL_DK], d[RL_DV], d[RL_DG], d[RL_DBETA], d[RL_DOUT], d[RL_Q], d[RL_K],
                         d[RL_V], d[RL_G], d[RL_BETA], g, d[RL_WS]);
}
static void rule_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_segments store;
    mt_gdn_dims g = dims_of(c, &store, h->ids[RL_POS], h->ids[RL_STARTS]);
    void *ws = malloc(mt_cpu_gdn_rule_workspace(g));
    mt_cpu_gdn_rule(h->x[RL_O], h->x[RL_Q], h->x[RL_K], h->x[RL_V], h->x[RL_G], h->x[RL_BETA], g, ws);
    mt_cpu_gdn_rule_dx(h->x[RL_DQ], h->x[RL_DK], h->x[RL_DV], h->x[RL_DG], h->x[RL_DBETA], h->x[RL_DOUT], h->x[RL_Q],
                       h->x[RL_K], h->x[RL_V], h->x[RL_G], h->x[RL_BETA], g, ws);
    free(ws);
}
const ops_kind OPS_GDN_RULE = {.declare = rule_declare, .workspace = rule_workspace, .prepare = rule_prepare,
                               .call = rule_call, .reference = rule_reference, .needs_gdn = 1};

/* ---- the gated RMSNorm ---- */

enum { GN_X, GN_Z, GN_W, GN_DY, GN_Y, GN_DX, GN_DZ, GN_DW };

static int norm_declare(const ops_case *c, ops_tensor *t) {
    size_t nv = heads_rows(c) * c->d;
    t[GN_X] = T("x", ACT, IN, nv, -2, 2, 0);
    t[GN_Z] = T("z", ACT, IN, nv, -4, 4, 0);
    t[GN_W] = T("w", W, IN, c->d, 0.5f, 1.5f, 0);
    t[GN_DY] = T("dy", ACT, IN, nv, -1, 1, 0);
    t[GN_Y] = T("y", ACT, OUT, nv, 0, 0, BF16_TOL);
    t[GN_DX] = T("dx", ACT, OUT, nv, 0, 0, BF16_TOL);
    t[GN_DZ] = T("dz", ACT, OUT, nv, 0, 0, BF16_TOL);
    t[GN_DW] = T("dw", F32, INOUT, c->d, -1, 1, F32_TOL);
    return 8;
}
static void norm_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    mt_gdn_dims g = dims_of(c, NULL, NULL, NULL);
    be->ops->gdn.norm(be, s, d[GN_Y], d[GN_X], d[GN_Z], d[GN_W], NORM_EPS, g);
    be->ops->gdn.norm_dx(be, s, d[GN_DX], d[GN_DZ], d[GN_DW], d[GN_DY], d[GN_X], d[GN_Z], d[GN_W], NORM_EPS, g);
}
static void norm_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_gdn_dims g = dims_of(c, NULL, NULL, NULL);
    mt_cpu_gdn_norm(h->x[GN_Y], h->x[GN_X], h->x[GN_Z], h->x[GN_W], NORM_EPS, g);
    mt_cpu_gdn_norm_dx(h->x[GN_DX], h->x[GN_DZ], h->x[GN_DW], h->x[GN_DY], h->x[GN_X], h->x[GN_Z], h->x[GN_W], NORM_EPS,
                       g);
}
const ops_kind OPS_GDN_NORM = {.declare = norm_declare, .call = norm_call, .reference = norm_reference,
                               .needs_gdn = 1};

