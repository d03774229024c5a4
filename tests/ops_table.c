/* The op table (ops_table.h): each op's kind (its tensors, its call, its reference) and the cases
 * every backend runs. Sizes are odd where a kernel has a vector width or a tile to get wrong.
 *
 * Tolerances off the reference backend (relative error ||out - ref|| / ||ref||): BF16_TOL for
 * outputs in bf16 (8 mantissa bits, a rounding of up to 2^-9 per element, plus fp32 summation
 * order); tighter for fp32 outputs computed in fp32 from the same inputs, as stated at each; 0
 * (bitwise) where the arithmetic is the reference's own (a lookup, the AdamW update, the clip). */
#include "ops_table.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "optim/adamw.h"
#include "util/split_f32.h"
#include "optim/clip.h"

#define BF16_TOL 1e-2
/* fp32 sums of the same products, in another order */
#define SUM_TOL 1e-5

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A tensor: name, type, role, count, fill range, tolerance. */
#define T(name, type, role, count, lo, hi, tol) ((ops_tensor){name, OPS_##type, OPS_##role, (size_t)(count), lo, hi, tol})

static double gemm_flops(const ops_case *c) { return 2.0 * c->n * c->in * c->out; }

/* ---- matmul: y[n,out] = x . w^T (+ bias when flag) ---- */

enum { MM_X, MM_W, MM_BIAS, MM_Y };

static int matmul_declare(const ops_case *c, ops_tensor *t) {
    t[MM_X] = T("x", ACT, IN, (size_t)c->n * c->in, -1, 1, 0);
    t[MM_W] = T("w", W, IN, (size_t)c->out * c->in, -0.2f, 0.2f, 0);
    t[MM_BIAS] = T("bias", W, IN, c->flag ? c->out : 0, -0.5f, 0.5f, 0);
    t[MM_Y] = T("y", ACT, OUT, (size_t)c->n * c->out, 0, 0, BF16_TOL);
    return 4;
}
static void matmul_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.matmul(be, s, d[MM_Y], d[MM_X], d[MM_W], d[MM_BIAS], c->n, c->in, c->out);
}
static void matmul_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_matmul(h->x[MM_Y], h->x[MM_X], h->x[MM_W], h->x[MM_BIAS], c->n, c->in, c->out);
}
static const ops_kind MATMUL = {.declare = matmul_declare, .call = matmul_call, .reference = matmul_reference,
                                .flops = gemm_flops};

/* ---- matmul_dx: dx[n,in] = (flag: +=) dy . w ---- */

enum { DX_DY, DX_W, DX_DX };

static int matmul_dx_declare(const ops_case *c, ops_tensor *t) {
    t[DX_DY] = T("dy", ACT, IN, (size_t)c->n * c->out, -1, 1, 0);
    t[DX_W] = T("w", W, IN, (size_t)c->out * c->in, -0.2f, 0.2f, 0);
    t[DX_DX] = T("dx", ACT, INOUT, (size_t)c->n * c->in, -1, 1, BF16_TOL); /* garbage unless accumulating */
    return 3;
}
static void matmul_dx_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.matmul_dx(be, s, d[DX_DX], d[DX_DY], d[DX_W], c->n, c->in, c->out, c->flag);
}
static void matmul_dx_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_matmul_dx(h->x[DX_DX], h->x[DX_DY], h->x[DX_W], c->n, c->in, c->out, c->flag);
}
static const ops_kind MATMUL_DX = {.declare = matmul_dx_declare, .call = matmul_dx_call,
                                   .reference = matmul_dx_reference, .flops = gemm_flops};

/* ---- matmul_dw: dw += dy^T . x, dbias += the rows of dy, in fp32 ---- */

enum { DW_DY, DW_X, DW_DW, DW_DBIAS };

static int matmul_dw_declare(const ops_case *c, ops_tensor *t) {
    t[DW_DY] = T("dy", ACT, IN, (size_t)c->n * c->out, -1, 1, 0);
    t[DW_X] = T("x", ACT, IN, (size_t)c->n * c->in, -1, 1, 0);
    t[DW_DW] = T("dw", F32, INOUT, (size_t)c->out * c->in, -1, 1, SUM_TOL);
    t[DW_DBIAS] = T("dbias", F32, INOUT, c->out, -1, 1, SUM_TOL);
    return 4;
}
static void matmul_dw_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.matmul_dw(be, s, d[DW_DW], d[DW_DBIAS], d[DW_DY], d[DW_X], c->n, c->in, c->out);
}
static void matmul_dw_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_matmul_dw(h->x[DW_DW], h->x[DW_DBIAS], h->x[DW_DY], h->x[DW_X], c->n, c->in, c->out);
}
static const ops_kind MATMUL_DW = {.declare = matmul_dw_declare, .call = matmul_dw_call,
                                   .reference = matmul_dw_reference, .flops = gemm_flops};

/* ---- rmsnorm and its backward (dx accumulates); flag: the unit offset (1 + w, Gemma's) ---- */

enum { RN_X, RN_W, RN_DY, RN_Y, RN_RSTD, RN_DX, RN_DW };
#define RN_EPS 1e-5f

static mt_rmsnorm_params rmsnorm_params(const ops_case *c) {
    return (mt_rmsnorm_params){.eps = RN_EPS, .unit_offset = c->flag};
}

static int rmsnorm_declare(const ops_case *c, ops_tensor *t) {
    size_t nd = (size_t)c->n * c->d;
    t[RN_X] = T("x", ACT, IN, nd, -2, 2, 0);
    t[RN_W] = T("w", W, IN, c->d, -1, 1, 0);
    t[RN_DY] = T("dy", ACT, IN, nd, -1, 1, 0);
    t[RN_Y] = T("y", ACT, OUT, nd, 0, 0, BF16_TOL);
    t[RN_RSTD] = T("rstd", F32, OUT, c->n, 0, 0, SUM_TOL); /* fp32 statistics of the same inputs */
    t[RN_DX] = T("dx", ACT, INOUT, nd, -1, 1, BF16_TOL);
    t[RN_DW] = T("dw", F32, INOUT, c->d, -1, 1, SUM_TOL);
    return 7;
}
static void rmsnorm_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.rmsnorm(be, s, d[RN_Y], d[RN_RSTD], d[RN_X], d[RN_W], c->n, c->d, rmsnorm_params(c));
    be->ops->op.rmsnorm_dx(be, s, d[RN_DX], d[RN_DW], d[RN_DY], d[RN_X], d[RN_W], d[RN_RSTD], c->n, c->d,
                           rmsnorm_params(c), 1);
}
/* exact: dw summed in float64, since over many rows a float running sum strays further than 1e-5. */
static void rmsnorm_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_rmsnorm(h->x[RN_Y], h->x[RN_RSTD], h->x[RN_X], h->x[RN_W], c->n, c->d, rmsnorm_params(c));
    float *dw = h->x[RN_DW];
    double *sums = exact ? malloc((size_t)c->d * sizeof *sums) : NULL;
    for (int j = 0; sums && j < c->d; j++) {
        sums[j] = dw[j];
        for (int r = 0; r < c->n; r++) {
            size_t at = (size_t)r * c->d + j;
            sums[j] += (double)h->x[RN_DY][at] * h->x[RN_X][at] * h->x[RN_RSTD][r];
        }
    }
    mt_cpu_rmsnorm_dx(h->x[RN_DX], dw, h->x[RN_DY], h->x[RN_X], h->x[RN_W], h->x[RN_RSTD], c->n, c->d,
                      rmsnorm_params(c), 1);
    for (int j = 0; sums && j < c->d; j++) dw[j] = (float)sums[j];
    free(sums);
}
static const ops_kind RMSNORM = {.declare = rmsnorm_declare, .call = rmsnorm_call, .reference = rmsnorm_reference};

/* ---- segments (packed examples) for rope and attention ---- */

/* A micro-batch's rows (the segments' and the keys'), and rope's: a window's where dims has one
 * (row r at position q0 + r). */
static int batch_rows(const ops_case *c) { return c->dims.batch * c->dims.seq; }
static int rope_rows(const ops_case *c) { return c->dims.batch * mt_attn_q_rows(c->dims); }
static int rope_pos0(const ops_case *c) { return c->dims.q_len > 0 ? c->dims.q0 : 0; }
static int rope_dim(const ops_case *c) { return c->d ? c->d : c->dims.head_dim; }

/* A case's segments as positions [rows] and starts [count + 1]: either may be NULL. */
static void fill_segments(const ops_case *c, int32_t *pos, int32_t *starts) {
    int row = 0;
    for (int k = 0; k < c->segment_count; k++) {
        if (starts) starts[k] = row;
        for (int i = 0; i < c->segments[k]; i++, row++)
            if (pos) pos[row] = i;
    }
    if (starts) starts[c->segment_count] = row;
    cr_assert_eq(row, batch_rows(c), "%s: the segments hold %d rows, not batch x seq", c->name, row);
}

/* ---- rope in place, forward or (flag) inverse; at the segments' positions where it has any, over a
 * window's rows where dims has one; over the first d values of each head where d is set
 * (partial_rotary_factor) ---- */

enum { RP_X, RP_INV, RP_POS };

static int rope_declare(const ops_case *c, ops_tensor *t) {
    t[RP_X] = T("x", ACT, INOUT, (size_t)rope_rows(c) * c->dims.heads * c->dims.head_dim, -1, 1, BF16_TOL);
    t[RP_INV] = T("inv_freq", F32, IN, rope_dim(c) / 2, 0, 0, 0);
    t[RP_POS] = T("positions", I32, IN, c->segments ? rope_rows(c) : 0, 0, 0, 0);
    return 3;
}
static void rope_prepare(const ops_case *c, ops_host *h) {
    for (int i = 0; i < rope_dim(c) / 2; i++) h->x[RP_INV][i] = powf(10000.0f, -2.0f * i / rope_dim(c));
    if (c->segments) fill_segments(c, h->ids[RP_POS], NULL);
}
static void rope_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.rope(be, s, d[RP_X], d[RP_INV], rope_rows(c), c->dims.seq, rope_pos0(c), d[RP_POS], c->dims.heads,
                     c->dims.head_dim, rope_dim(c), c->flag);
}
static void rope_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_rope(h->x[RP_X], h->x[RP_INV], rope_rows(c), c->dims.seq, rope_pos0(c), h->ids[RP_POS], c->dims.heads,
                c->dims.head_dim, rope_dim(c), c->flag);
}
static const ops_kind ROPE = {.declare = rope_declare, .prepare = rope_prepare, .call = rope_call,
                              .reference = rope_reference};

/* ---- attention and its backward, from the backend's own out and lse; a window of queries where
 * dims has one (dk, dv past the window's keys must stay as they were: zero); the variants of
 * c->attn, with sinks (and dsinks added to) where flag is ATTN_SINKS ---- */

enum { AT_Q, AT_K, AT_V, AT_DOUT, AT_OUT, AT_LSE, AT_DQ, AT_DK, AT_DV, AT_WS, AT_POS, AT_STARTS, AT_SINKS, AT_DSINKS };
enum { ATTN_SINKS = 1 };

static int attention_declare(const ops_case *c, ops_tensor *t) {
    mt_attn_dims d = c->dims;
    size_t rows = (size_t)d.batch * d.seq, q_rows = (size_t)d.batch * mt_attn_q_rows(d);
    size_t q = q_rows * d.heads * d.head_dim, kv = rows * d.kv_heads * d.head_dim;
    t[AT_Q] = T("q", ACT, IN, q, -1.5f, 1.5f, 0);
    t[AT_K] = T("k", ACT, IN, kv, -1.5f, 1.5f, 0);
    t[AT_V] = T("v", ACT, IN, kv, -1, 1, 0);
    t[AT_DOUT] = T("dout", ACT, IN, q, -1, 1, 0);
    t[AT_OUT] = T("out", ACT, OUT, q, 0, 0, BF16_TOL);
    t[AT_LSE] = T("lse", F32, OUT, q_rows * d.heads, 0, 0, 1e-4); /* fp32 softmax statistics */
    t[AT_DQ] = T("dq", ACT, OUT, q, 0, 0, BF16_TOL);
    t[AT_DK] = T("dk", ACT, OUT, kv, 0, 0, BF16_TOL);
    t[AT_DV] = T("dv", ACT, OUT, kv, 0, 0, BF16_TOL);
    t[AT_WS] = T("workspace", I32, SCRATCH, 0, 0, 0, 0);
    t[AT_POS] = T("positions", I32, IN, c->segments ? rows : 0, 0, 0, 0);
    t[AT_STARTS] = T("starts", I32, IN, c->segments ? c->segment_count + 1 : 0, 0, 0, 0);
    int sinks = c->flag == ATTN_SINKS;
    t[AT_SINKS] = T("sinks", F32, IN, sinks ? d.heads : 0, -1, 3, 0);
    /* fp32 sums over the rows of the same products in another order, some cancelling */
    t[AT_DSINKS] = T("dsinks", F32, INOUT, sinks ? d.heads : 0, -1, 1, 1e-4);
    return 14;
}
static size_t attention_workspace(mt_backend *be, const ops_case *c) {
    return be->ops->op.attention_workspace(be, c->dims, c->segments != NULL);
}
static void attention_prepare(const ops_case *c, ops_host *h) {
    if (c->segments) fill_segments(c, h->ids[AT_POS], h->ids[AT_STARTS]);
}
/* The case's segments at pos and starts (device or host), or NULL without any. */
static const mt_segments *case_segments(const ops_case *c, mt_segments *seg, const void *pos, const void *starts) {
    if (!c->segments) return NULL;
    *seg = (mt_segments){pos, starts, c->segment_count, 0};
    return seg;
}
/* The case's params, with its sinks at sinks and dsinks (device or host) where it has them. */
static mt_attn_params case_params(const ops_case *c, const void *sinks, void *dsinks) {
    mt_attn_params p = c->attn;
    p.sinks = c->flag == ATTN_SINKS ? sinks : NULL;
    p.dsinks = c->flag == ATTN_SINKS ? dsinks : NULL;
    return p;
}
static void attention_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    mt_segments store;
    const mt_segments *seg = case_segments(c, &store, d[AT_POS], d[AT_STARTS]);
    mt_attn_params p = case_params(c, d[AT_SINKS], d[AT_DSINKS]);
    be->ops->op.attention(be, s, d[AT_OUT], d[AT_LSE], d[AT_Q], d[AT_K], d[AT_V], c->dims, &p, seg, d[AT_WS]);
    be->ops->op.attention_dx(be, s, d[AT_DQ], d[AT_DK], d[AT_DV], d[AT_DOUT], d[AT_OUT], d[AT_LSE], d[AT_Q], d[AT_K],
                             d[AT_V], c->dims, &p, seg, d[AT_WS]);
}
static void attention_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_segments store;
    const mt_segments *seg = case_segments(c, &store, h->ids[AT_POS], h->ids[AT_STARTS]);
    mt_attn_params p = case_params(c, h->x[AT_SINKS], h->x[AT_DSINKS]);
    mt_cpu_attention(h->x[AT_OUT], h->x[AT_LSE], h->x[AT_Q], h->x[AT_K], h->x[AT_V], c->dims, &p, seg);
    void *ws = malloc(mt_cpu_attention_workspace(c->dims) + 1);
    mt_cpu_attention_dx(h->x[AT_DQ], h->x[AT_DK], h->x[AT_DV], h->x[AT_DOUT], got->x[AT_OUT], got->x[AT_LSE],
                        h->x[AT_Q], h->x[AT_K], h->x[AT_V], c->dims, &p, seg, ws);
    free(ws);
}
/* Causal: the forward is two 2 * q rows * head_dim GEMMs per head over the keys each query sees (on
 * average q0 + (q rows + 1) / 2; seq / 2 without a window; at most a sliding window's); the backward
 * 2.5 times it. */
static double attention_flops(const ops_case *c) {
    mt_attn_dims d = c->dims;
    double rows = mt_attn_q_rows(d), seen = (d.q_len > 0 ? d.q0 : 0) + rows / 2;
    if (c->attn.window > 0 && seen > c->attn.window) seen = c->attn.window;
    return 3.5 * 4.0 * d.batch * rows * seen * d.heads * d.head_dim;
}
static const ops_kind ATTENTION = {.declare = attention_declare, .workspace = attention_workspace,
                                   .prepare = attention_prepare, .call = attention_call,
                                   .reference = attention_reference,
                                   .flops = attention_flops};

/* ---- swiglu (the GLU of flag: ops_glu) and its backward ---- */

mt_glu_params ops_glu(const ops_case *c) {
    return (mt_glu_params){.act = (mt_glu)c->flag, .limit = 7.0f, .alpha = 1.702f};
}
/* Past gpt-oss's limit of 7 where it clamps, so that the clamps bind. */
float ops_glu_range(const ops_case *c) { return c->flag == MT_GLU_SILU_CLAMPED ? 10.0f : 3.0f; }

enum { SW_G, SW_U, SW_DA, SW_A, SW_DG, SW_DU };

static int swiglu_declare(const ops_case *c, ops_tensor *t) {
    float r = ops_glu_range(c), ru = c->flag == MT_GLU_SILU_CLAMPED ? r : 1; /* up clamps too */
    t[SW_G] = T("g", ACT, IN, c->count, -r, r, 0);
    t[SW_U] = T("u", ACT, IN, c->count, -ru, ru, 0);
    t[SW_DA] = T("da", ACT, IN, c->count, -1, 1, 0);
    t[SW_A] = T("a", ACT, OUT, c->count, 0, 0, BF16_TOL);
    t[SW_DG] = T("dg", ACT, OUT, c->count, 0, 0, BF16_TOL);
    t[SW_DU] = T("du", ACT, OUT, c->count, 0, 0, BF16_TOL);
    return 6;
}
static void swiglu_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.swiglu(be, s, d[SW_A], d[SW_G], d[SW_U], c->count, ops_glu(c));
    be->ops->op.swiglu_dx(be, s, d[SW_DG], d[SW_DU], d[SW_DA], d[SW_G], d[SW_U], c->count, ops_glu(c));
}
static void swiglu_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_swiglu(h->x[SW_A], h->x[SW_G], h->x[SW_U], c->count, ops_glu(c));
    mt_cpu_swiglu_dx(h->x[SW_DG], h->x[SW_DU], h->x[SW_DA], h->x[SW_G], h->x[SW_U], c->count, ops_glu(c));
}
static const ops_kind SWIGLU = {.declare = swiglu_declare, .call = swiglu_call, .reference = swiglu_reference};

/* ---- add, in place: a += b; flag: from the second element on (no 16-byte alignment) ---- */

enum { ADD_A, ADD_B };

static int add_declare(const ops_case *c, ops_tensor *t) {
    t[ADD_A] = T("a", ACT, INOUT, c->count, -1, 1, BF16_TOL);
    t[ADD_B] = T("b", ACT, IN, c->count, -1, 1, 0);
    return 2;
}
static void add_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    size_t skip = c->flag ? mt_dtype_size(be->ops->act_dtype) : 0;
    void *a = (char *)d[ADD_A] + skip;
    be->ops->op.add(be, s, a, a, (char *)d[ADD_B] + skip, c->count - (c->flag ? 1 : 0));
}
static void add_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    size_t skip = c->flag ? 1 : 0;
    mt_cpu_add(h->x[ADD_A] + skip, h->x[ADD_A] + skip, h->x[ADD_B] + skip, c->count - skip);
}
static const ops_kind ADD = {.declare = add_declare, .call = add_call, .reference = add_reference};

/* ---- attention's output gate: q_proj's query and gate apart and back together (n rows of
 * dims.heads heads of dims.head_dim), the gate's sigmoid on the output and its backward (the gate's
 * gradient into the gate's place, as the engine takes it) ---- */

enum { GS_QG, GS_Q, GS_GATE };

static size_t gate_count(const ops_case *c) { return (size_t)c->n * c->dims.heads * c->dims.head_dim; }
static int gate_split_declare(const ops_case *c, ops_tensor *t) {
    t[GS_QG] = T("qg", ACT, IN, 2 * gate_count(c), -1, 1, 0);
    t[GS_Q] = T("q", ACT, OUT, gate_count(c), 0, 0, 0); /* copies: bitwise */
    t[GS_GATE] = T("gate", ACT, OUT, gate_count(c), 0, 0, 0);
    return 3;
}
static void gate_split_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.gate_split(be, s, d[GS_Q], d[GS_GATE], d[GS_QG], c->n, c->dims.heads, c->dims.head_dim);
}
static void gate_split_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_gate_split(h->x[GS_Q], h->x[GS_GATE], h->x[GS_QG], c->n, c->dims.heads, c->dims.head_dim);
}
static const ops_kind GATE_SPLIT = {.declare = gate_split_declare, .call = gate_split_call,
                                    .reference = gate_split_reference};

enum { GJ_DQ, GJ_DGATE, GJ_DQG };

static int gate_join_declare(const ops_case *c, ops_tensor *t) {
    t[GJ_DQ] = T("dq", ACT, IN, gate_count(c), -1, 1, 0);
    t[GJ_DGATE] = T("dgate", ACT, IN, gate_count(c), -1, 1, 0);
    t[GJ_DQG] = T("dqg", ACT, OUT, 2 * gate_count(c), 0, 0, 0);
    return 3;
}
static void gate_join_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.gate_join(be, s, d[GJ_DQG], d[GJ_DQ], d[GJ_DGATE], c->n, c->dims.heads, c->dims.head_dim);
}
static void gate_join_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_gate_join(h->x[GJ_DQG], h->x[GJ_DQ], h->x[GJ_DGATE], c->n, c->dims.heads, c->dims.head_dim);
}
static const ops_kind GATE_JOIN = {.declare = gate_join_declare, .call = gate_join_call,
                                   .reference = gate_join_reference};

enum { OG_X, OG_GATE, OG_Y, OG_DY = OG_Y };

static int out_gate_declare(const ops_case *c, ops_tensor *t) {
    t[OG_X] = T("x", ACT, IN, c->count, -2, 2, 0);
    if (c->flag) { /* backward: dx out, the gate becomes its gradient */
        t[OG_GATE] = T("gate -> dgate", ACT, INOUT, c->count, -4, 4, BF16_TOL);
        t[OG_DY] = T("dy", ACT, IN, c->count, -1, 1, 0);
        t[3] = T("dx", ACT, OUT, c->count, 0, 0, BF16_TOL);
        return 4;
    }
    t[OG_GATE] = T("gate", ACT, IN, c->count, -4, 4, 0);
    t[OG_Y] = T("y", ACT, OUT, c->count, 0, 0, BF16_TOL);
    return 3;
}
static void out_gate_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    if (c->flag) be->ops->op.out_gate_dx(be, s, d[3], d[OG_GATE], d[OG_DY], d[OG_X], d[OG_GATE], c->count);
    else be->ops->op.out_gate(be, s, d[OG_Y], d[OG_X], d[OG_GATE], c->count);
}
static void out_gate_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    if (c->flag) mt_cpu_out_gate_dx(h->x[3], h->x[OG_GATE], h->x[OG_DY], h->x[OG_X], h->x[OG_GATE], c->count);
    else mt_cpu_out_gate(h->x[OG_Y], h->x[OG_X], h->x[OG_GATE], c->count);
}
static const ops_kind OUT_GATE = {.declare = out_gate_declare, .call = out_gate_call,
                                  .reference = out_gate_reference};

/* ---- columns by a map (n rows): gather y [n, out] from x [n, in], or (flag) scatter dy [n, out]
 * into dx [n, in], its other columns kept; the map (j * 7 + 3) % in, distinct while out <= in, 7
 * prime to in ---- */

enum { GC_FROM, GC_COLS, GC_TO };

static int cols_declare(const ops_case *c, ops_tensor *t) {
    t[GC_FROM] = T("from", ACT, IN, (size_t)c->n * (c->flag ? c->out : c->in), -1, 1, 0);
    t[GC_COLS] = T("cols", I32, IN, c->out, 0, 0, 0);
    t[GC_TO] = c->flag ? T("dx", ACT, INOUT, (size_t)c->n * c->in, -1, 1, 0) /* copies: bitwise */
                       : T("y", ACT, OUT, (size_t)c->n * c->out, 0, 0, 0);
    return 3;
}
static void cols_prepare(const ops_case *c, ops_host *h) {
    for (int j = 0; j < c->out; j++) h->ids[GC_COLS][j] = (j * 7 + 3) % c->in;
}
static void cols_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    if (c->flag) be->ops->op.scatter_cols(be, s, d[GC_TO], d[GC_FROM], d[GC_COLS], c->n, c->in, c->out);
    else be->ops->op.gather_cols(be, s, d[GC_TO], d[GC_FROM], d[GC_COLS], c->n, c->in, c->out);
}
static void cols_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    if (c->flag) mt_cpu_scatter_cols(h->x[GC_TO], h->x[GC_FROM], h->ids[GC_COLS], c->n, c->in, c->out);
    else mt_cpu_gather_cols(h->x[GC_TO], h->x[GC_FROM], h->ids[GC_COLS], c->n, c->in, c->out);
}
static const ops_kind COLS = {.declare = cols_declare, .prepare = cols_prepare, .call = cols_call,
                              .reference = cols_reference};

/* ---- a sum kept in fp32 (flag: acc += x, else acc = x), and its rounding to the act type ---- */

enum { AC_X, AC_ACC };

static int accumulate_declare(const ops_case *c, ops_tensor *t) {
    t[AC_X] = T("x", ACT, IN, c->count, -1, 1, 0);
    t[AC_ACC] = T("acc", F32, INOUT, c->count, -4, 4, 0); /* one fp32 add of the same values: bitwise */
    return 2;
}
static void accumulate_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.accumulate_f32(be, s, d[AC_ACC], d[AC_X], c->count, c->flag);
}
static void accumulate_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_accumulate_f32(h->x[AC_ACC], h->x[AC_X], c->count, c->flag);
}
static const ops_kind ACCUMULATE_F32 = {.declare = accumulate_declare, .call = accumulate_call,
                                        .reference = accumulate_reference};

enum { RF_X, RF_Y };

static int round_declare(const ops_case *c, ops_tensor *t) {
    t[RF_X] = T("x", F32, IN, c->count, -4, 4, 0);
    t[RF_Y] = T("y", ACT, OUT, c->count, 0, 0, BF16_TOL);
    return 2;
}
static void round_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.round_f32(be, s, d[RF_Y], d[RF_X], c->count);
}
static void round_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    memcpy(h->x[RF_Y], h->x[RF_X], c->count * sizeof(float));
}
static const ops_kind ROUND_F32 = {.declare = round_declare, .call = round_call, .reference = round_reference};

/* ---- embedding (times c->scale, 0: 1) and its gradient, every id repeated ---- */

static float embedding_scale(const ops_case *c) { return c->scale != 0.0f ? c->scale : 1.0f; }

enum { EM_TOKENS, EM_WTE, EM_DX, EM_DWTE, EM_X };

static int embedding_declare(const ops_case *c, ops_tensor *t) {
    t[EM_TOKENS] = T("tokens", I32, IN, c->n, 0, 0, 0);
    t[EM_WTE] = T("wte", W, IN, (size_t)c->vocab * c->d, -1, 1, 0);
    t[EM_DX] = T("dx", ACT, IN, (size_t)c->n * c->d, -1, 1, 0);
    t[EM_DWTE] = T("dwte", F32, INOUT, (size_t)c->vocab * c->d, -1, 1, 1e-6); /* fp32 sums of the same values */
    /* a lookup is an exact copy; a scaled one a single product, rounded once */
    t[EM_X] = T("x", ACT, OUT, (size_t)c->n * c->d, 0, 0, c->scale != 0.0f ? BF16_TOL : 0);
    return 5;
}
static void embedding_prepare(const ops_case *c, ops_host *h) {
    for (int i = 0; i < c->n; i++) h->ids[EM_TOKENS][i] = (i * 7) % c->vocab;
}
static void embedding_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.embedding(be, s, d[EM_X], d[EM_TOKENS], d[EM_WTE], c->n, c->d, embedding_scale(c));
    be->ops->op.embedding_dw(be, s, d[EM_DWTE], d[EM_TOKENS], d[EM_DX], c->n, c->d, 0, c->vocab, embedding_scale(c));
}
static void embedding_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_embedding(h->x[EM_X], h->ids[EM_TOKENS], h->x[EM_WTE], c->n, c->d, embedding_scale(c));
    mt_cpu_embedding_dw(h->x[EM_DWTE], h->ids[EM_TOKENS], h->x[EM_DX], c->n, c->d, 0, c->vocab, embedding_scale(c));
}
static const ops_kind EMBEDDING = {.declare = embedding_declare, .prepare = embedding_prepare,
                                   .call = embedding_call, .reference = embedding_reference};

/* ---- the LM head's loss, soft-capped where the case has a cap; flag: the loss only (evaluation: no
 * dx, no dw) ---- */

enum { LM_X, LM_W, LM_TARGETS, LM_LOSS, LM_DX, LM_DW, LM_WS };

static int lmhead_declare(const ops_case *c, ops_tensor *t) {
    size_t grads = c->flag ? 0 : 1;
    t[LM_X] = T("x", ACT, IN, (size_t)c->n * c->d, -1, 1, 0);
    t[LM_W] = T("w", W, IN, (size_t)c->vocab * c->d, -0.3f, 0.3f, 0);
    t[LM_TARGETS] = T("targets", I32, IN, c->n, 0, 0, 0);
    t[LM_LOSS] = T("loss_sum", F32, INOUT, 1, 1, 1, 1e-4); /* fp32 logits and softmax from the same inputs */
    t[LM_DX] = T("dx", ACT, OUT, grads * c->n * c->d, 0, 0, BF16_TOL);
    /* dlogits pass through bf16 before the dw GEMM: bf16 tolerance */
    t[LM_DW] = T("dw", F32, INOUT, grads * c->vocab * c->d, -0.1f, 0.1f, BF16_TOL);
    t[LM_WS] = T("workspace", I32, SCRATCH, 0, 0, 0, 0);
    return 7;
}
static size_t lmhead_workspace(mt_backend *be, const ops_case *c) {
    return be->ops->op.lmhead_workspace(be, c->chunk, c->vocab);
}
/* Every fifth target ignored (negative). */
static void lmhead_prepare(const ops_case *c, ops_host *h) {
    for (int i = 0; i < c->n; i++) h->ids[LM_TARGETS][i] = i % 5 == 3 ? -1 : (i * 31) % c->vocab;
}
static void lmhead_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.lmhead_loss(be, s, d[LM_LOSS], NULL, d[LM_DX], d[LM_DW], d[LM_X], d[LM_W], d[LM_TARGETS], c->n, c->d,
                            c->vocab, c->scale, c->softcap, c->chunk, d[LM_WS]);
}
static void lmhead_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    void *ws = malloc(mt_cpu_lmhead_workspace(c->chunk, c->vocab));
    mt_cpu_lmhead_loss(h->x[LM_LOSS], NULL, h->x[LM_DX], h->x[LM_DW], h->x[LM_X], h->x[LM_W], h->ids[LM_TARGETS], c->n,
                       c->d, c->vocab, c->scale, c->softcap, c->chunk, ws);
    free(ws);
}
static double lmhead_flops(const ops_case *c) { return (c->flag ? 2.0 : 6.0) * c->n * c->d * (double)c->vocab; }
static const ops_kind LMHEAD_LOSS = {.declare = lmhead_declare, .workspace = lmhead_workspace,
                                     .prepare = lmhead_prepare, .call = lmhead_call,
                                     .reference = lmhead_reference, .flops = lmhead_flops};

/* ---- the head's weight gradient for a slice of the vocabulary (lmhead_dw), from the log-sum-exp
 * lmhead_loss gives: vocabulary rows [c->in, c->in + c->out) ---- */

enum { LD_X, LD_W, LD_TARGETS, LD_LOSS, LD_LSE, LD_DW, LD_WS };

static int lmhead_dw_declare(const ops_case *c, ops_tensor *t) {
    t[LD_X] = T("x", ACT, IN, (size_t)c->n * c->d, -1, 1, 0);
    t[LD_W] = T("w", W, IN, (size_t)c->vocab * c->d, -0.3f, 0.3f, 0);
    t[LD_TARGETS] = T("targets", I32, IN, c->n, 0, 0, 0);
    t[LD_LOSS] = T("loss_sum", F32, INOUT, 1, 0, 0, 1e-4);
    t[LD_LSE] = T("lse", F32, OUT, c->n, 0, 0, 1e-4); /* fp32 softmax statistics of the same inputs */
    t[LD_DW] = T("dw", F32, INOUT, (size_t)c->out * c->d, -0.1f, 0.1f, BF16_TOL); /* via bf16 dlogits */
    t[LD_WS] = T("workspace", I32, SCRATCH, 0, 0, 0, 0);
    return 7;
}
static void lmhead_dw_prepare(const ops_case *c, ops_host *h) {
    for (int i = 0; i < c->n; i++) h->ids[LD_TARGETS][i] = i % 5 == 3 ? -1 : (i * 31) % c->vocab;
}
static void lmhead_dw_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.lmhead_loss(be, s, d[LD_LOSS], d[LD_LSE], NULL, NULL, d[LD_X], d[LD_W], d[LD_TARGETS], c->n, c->d,
                            c->vocab, c->scale, c->softcap, c->chunk, d[LD_WS]);
    size_t wsize = mt_dtype_size(be->ops->weight_dtype);
    be->ops->op.lmhead_dw(be, s, d[LD_DW], d[LD_X], (const char *)d[LD_W] + (size_t)c->in * c->d * wsize,
                          d[LD_TARGETS], d[LD_LSE], c->n, c->d, c->in, c->out, c->scale, c->softcap, c->chunk,
                          d[LD_WS]);
}
/* The ignored rows' lse is unspecified: both sides' set to 0 before comparing. */
static void lmhead_dw_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    void *ws = malloc(mt_cpu_lmhead_workspace(c->chunk, c->vocab));
    mt_cpu_lmhead_loss(h->x[LD_LOSS], h->x[LD_LSE], NULL, NULL, h->x[LD_X], h->x[LD_W], h->ids[LD_TARGETS], c->n,
                       c->d, c->vocab, c->scale, c->softcap, c->chunk, ws);
    mt_cpu_lmhead_dw(h->x[LD_DW], h->x[LD_X], h->x[LD_W] + (size_t)c->in * c->d, h->ids[LD_TARGETS], h->x[LD_LSE],
                     c->n, c->d, c->in, c->out, c->scale, c->softcap, c->chunk, ws);
    for (int i = 0; i < c->n; i++)
        if (h->ids[LD_TARGETS][i] < 0) h->x[LD_LSE][i] = got->x[LD_LSE][i];
    free(ws);
}
static const ops_kind LMHEAD_DW = {.declare = lmhead_dw_declare, .workspace = lmhead_workspace,
                                   .prepare = lmhead_dw_prepare, .call = lmhead_dw_call,
                                   .reference = lmhead_dw_reference};

/* ---- logits of one row, soft-capped where the case has a cap ---- */

enum { LG_X, LG_W, LG_LOGITS };

static int logits_declare(const ops_case *c, ops_tensor *t) {
    t[LG_X] = T("x", ACT, IN, c->d, -1, 1, 0);
    t[LG_W] = T("w", W, IN, (size_t)c->vocab * c->d, -0.3f, 0.3f, 0);
    t[LG_LOGITS] = T("logits", F32, OUT, c->vocab, 0, 0, SUM_TOL); /* fp32 dot products of the same inputs */
    return 3;
}
static void logits_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.logits(be, s, d[LG_LOGITS], d[LG_X], d[LG_W], c->d, c->vocab, c->softcap);
}
static void logits_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_logits(h->x[LG_LOGITS], h->x[LG_X], h->x[LG_W], c->d, c->vocab, c->softcap);
}
static double logits_flops(const ops_case *c) { return 2.0 * c->d * (double)c->vocab; }
static const ops_kind LOGITS = {.declare = logits_declare, .call = logits_call, .reference = logits_reference,
                                .flops = logits_flops};

/* ---- sumsq: out += the sum of squares ---- */

enum { SQ_X, SQ_OUT };

static int sumsq_declare(const ops_case *c, ops_tensor *t) {
    t[SQ_X] = T("x", F32, IN, c->count, -1, 1, 0);
    t[SQ_OUT] = T("out", F32, INOUT, 1, 2.5f, 2.5f, SUM_TOL);
    return 2;
}
static void sumsq_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.sumsq(be, s, d[SQ_OUT], d[SQ_X], c->count);
}
static void sumsq_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_sumsq(h->x[SQ_OUT], h->x[SQ_X], c->count);
}
static const ops_kind SUMSQ = {.declare = sumsq_declare, .call = sumsq_call, .reference = sumsq_reference};

/* ---- AdamW on the device: the host optimizer's bits ---- */

enum { AD_MASTER, AD_M, AD_V, AD_GRAD, AD_SCALE, AD_W };
/* flag bits: weight decay; a device scale (c->scale) replaces the params' grad_scale; special values */
enum { ADAMW_DECAY = 1, ADAMW_SCALED = 2, ADAMW_SPECIAL = 4 };

static const mt_adamw_params ADAMW_PARAMS = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                             .weight_decay = 0.1f, .step = 5, .grad_scale = 1.0f};

static int adamw_declare(const ops_case *c, ops_tensor *t) {
    t[AD_MASTER] = T("master", F32, INOUT, c->count, -1, 1, 0);
    t[AD_M] = T("m", F32, INOUT, c->count, -0.1f, 0.1f, 0);
    t[AD_V] = T("v", F32, INOUT, c->count, 0, 0.01f, 0);
    t[AD_GRAD] = T("grad", F32, IN, c->count, -2, 2, 0);
    t[AD_SCALE] = T("scale", F32, IN, c->flag & ADAMW_SCALED ? 1 : 0, c->scale, c->scale, 0);
    t[AD_W] = T("w", W, OUT, c->count, 0, 0, 0);
    return 6;
}
/* A zero gradient, a denormal master (it stays one in bf16), a NaN gradient (the host's quiet NaN). */
static void adamw_prepare(const ops_case *c, ops_host *h) {
    if (!(c->flag & ADAMW_SPECIAL)) return;
    h->x[AD_GRAD][0] = 0.0f;
    h->x[AD_MASTER][1] = 1e-39f;
    h->x[AD_GRAD][1] = h->x[AD_M][1] = h->x[AD_V][1] = 0.0f;
    h->x[AD_GRAD][2] = NAN;
}
static void adamw_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.adamw(be, s, &ADAMW_PARAMS, c->flag & ADAMW_DECAY, d[AD_SCALE], d[AD_MASTER], d[AD_M], d[AD_V],
                      d[AD_GRAD], d[AD_W], c->count);
}
/* The host optimizer's arithmetic: the whole update with the params' grad_scale, or with a device
 * scale c the whole update with c, none for a c that is not finite (a skipped step: masters and
 * moments unchanged; backend.h). The weights: the masters on the reference (cpu) backend, whose
 * weights are fp32; off it (bf16 weights) the masters' high halves as the host store keeps them
 * (util/split_f32.h), which the runner's rounding to bf16 leaves as they are. */
static void adamw_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_adamw_params p = ADAMW_PARAMS;
    float *master = h->x[AD_MASTER];
    if (c->flag & ADAMW_SCALED) p.grad_scale = c->scale;
    if (isfinite(p.grad_scale))
        mt_adamw_update(MT_ADAMW_FULL, &p, c->flag & ADAMW_DECAY, (mt_master){.f32 = master}, h->x[AD_M], h->x[AD_V],
                        h->x[AD_GRAD], c->count);
    for (size_t k = 0; k < c->count; k++)
        h->x[AD_W][k] = exact ? mt_f32_of_bits((uint32_t)mt_split_hi_bits(mt_f32_bits(master[k])) << 16) : master[k];
}
static void adamw_check(const ops_case *c, const ops_host *got) {
    if (c->flag & ADAMW_SPECIAL)
        cr_expect(isnan(got->x[AD_W][2]) && got->x[AD_W][1] != 0.0f, "%s: the NaN and the denormal came through",
                  c->name);
}
static const ops_kind ADAMW = {.declare = adamw_declare, .prepare = adamw_prepare, .call = adamw_call,
                               .reference = adamw_reference, .check = adamw_check};

/* ---- the clip coefficient of the global norm ---- */

enum { CL_SUMS, CL_SCALE };
/* flag: what the coefficient must be besides the reference's: c->expect (NaN: NaN), or below 1 */
enum { CLIP_EXPECT = 1, CLIP_CLIPS = 2 };

static int clip_declare(const ops_case *c, ops_tensor *t) {
    t[CL_SUMS] = T("norms", F32, IN, c->n, -3, 3, 0);
    t[CL_SCALE] = T("scale", F32, OUT, 1, 0, 0, 0);
    return 2;
}
/* The given sums of squares, or the squares of the random fill. */
static void clip_prepare(const ops_case *c, ops_host *h) {
    for (int i = 0; i < c->n; i++) {
        float x = h->x[CL_SUMS][i];
        h->x[CL_SUMS][i] = c->values ? c->values[i] : x * x;
    }
}
static void clip_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->op.clip_scale(be, s, d[CL_SCALE], d[CL_SUMS], c->n, c->scale);
}
static void clip_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    h->x[CL_SCALE][0] = mt_clip_scale(mt_global_norm(h->x[CL_SUMS], c->n), c->scale);
}
static void clip_check(const ops_case *c, const ops_host *got) {
    float scale = got->x[CL_SCALE][0];
    if (c->flag == CLIP_EXPECT)
        cr_expect(isnan(c->expect) ? isnan(scale) : scale == c->expect, "%s: the coefficient is %.9g, not %.9g",
                  c->name, (double)scale, (double)c->expect);
    if (c->flag == CLIP_CLIPS) cr_expect_lt(scale, 1.0f, "%s: the case does not clip", c->name);
}
static const ops_kind CLIP_SCALE = {.declare = clip_declare, .prepare = clip_prepare, .call = clip_call,
                                    .reference = clip_reference, .check = clip_check};

/* ---- the cases ---- */

static const float NORM_5[] = {9, 16, 0};
/* Packed examples: segments of one token, segments across a 64-row tile, a sequence that is one. */
static const int SEGMENTS_2x37[] = {5, 20, 12, 1, 36};
static const int SEGMENTS_3x9[] = {1, 1, 7, 9, 3, 3, 3};
static const int SEGMENTS_1x150[] = {63, 2, 70, 1, 14};
static const int SEGMENTS_2x77[] = {77, 30, 34, 13};
#define SEGMENTS(s) .segments = s, .segment_count = (int)COUNT(s)
static const float NORM_INF[] = {9, 16, INFINITY, 1, 2, 3, 4};
static const float NORM_NAN[] = {9, 16, NAN};

const ops_case ops_cases[] = {
    {"matmul with bias, odd rows", &MATMUL, 1, .n = 37, .in = 72, .out = 44, .flag = 1},
    {"matmul without bias", &MATMUL, 31, .n = 29, .in = 40, .out = 24},
    {"matmul_dx accumulates", &MATMUL_DX, 2, .n = 33, .in = 48, .out = 80, .flag = 1},
    {"matmul_dx overwrites", &MATMUL_DX, 32, .n = 13, .in = 64, .out = 24},
    {"matmul_dw and dbias accumulate in fp32", &MATMUL_DW, 3, .n = 29, .in = 40, .out = 24},
    {"rmsnorm and its backward, vector width", &RMSNORM, 4, .n = 70, .d = 256},
    {"rmsnorm and its backward, odd width", &RMSNORM, 5, .n = 13, .d = 101},
    /* rows up to 1024 wide take a warp each on cuda, 8 to a block (row counts that leave a block
     * part empty); wider ones a block each; widths not a multiple of 8 go element by element */
    {"rmsnorm, head_dim 64 rows (q/k norms)", &RMSNORM, 16, .n = 8 * 37 + 3, .d = 64},
    {"rmsnorm, head_dim 128 rows", &RMSNORM, 17, .n = 4 * 128 + 5, .d = 128},
    {"rmsnorm, narrow odd width", &RMSNORM, 18, .n = 45, .d = 6},
    {"rmsnorm with the unit offset (1 + w), vector width", &RMSNORM, 77, .n = 70, .d = 256, .flag = 1},
    {"rmsnorm with the unit offset, head_dim rows", &RMSNORM, 78, .n = 8 * 37 + 3, .d = 64, .flag = 1},
    {"rmsnorm with the unit offset, wide odd width", &RMSNORM, 79, .n = 5, .d = 1031, .flag = 1},
    {"rmsnorm, wide rows", &RMSNORM, 19, .n = 9, .d = 4096},
    {"rmsnorm, wide odd width", &RMSNORM, 20, .n = 5, .d = 1031},
    /* more rows than cuda's weight-gradient grid is high (4096 bands of 64 rows): the q/k norms of
     * a long sequence are tokens x heads rows */
    {"rmsnorm, rows past the band grid", &RMSNORM, 27, .n = 4096 * 64 + 77, .d = 8},
    {"rope", &ROPE, 6, .dims = {.batch = 2, .seq = 7, .heads = 3, .head_dim = 64}},
    {"rope over a quarter of each head", &ROPE, 7, .dims = {.batch = 2, .seq = 7, .heads = 3, .head_dim = 64}, .d = 16},
    {"rope inverse over a quarter of each head at packed examples' positions", &ROPE, 8,
     .dims = {.batch = 2, .seq = 37, .heads = 3, .head_dim = 64}, .d = 16, .flag = 1, SEGMENTS(SEGMENTS_2x37)},
    {"attention's gate split from q_proj", &GATE_SPLIT, 9, .n = 13, .dims = {.heads = 3, .head_dim = 40}},
    {"attention's gate joined into q_proj's gradient", &GATE_JOIN, 10, .n = 13, .dims = {.heads = 3, .head_dim = 40}},
    {"attention's output gate", &OUT_GATE, 11, .count = 1037},
    {"columns gathered by a map", &COLS, 13, .n = 11, .in = 37, .out = 37},
    {"some columns gathered by a map", &COLS, 14, .n = 11, .in = 37, .out = 20},
    {"columns scattered by a map, the others kept", &COLS, 15, .n = 11, .in = 37, .out = 20, .flag = 1},
    {"attention's output gate backward, in the gate's place", &OUT_GATE, 12, .count = 1037, .flag = 1},
    {"rope inverse", &ROPE, 36, .dims = {.batch = 2, .seq = 7, .heads = 3, .head_dim = 64}, .flag = 1},
    {"rope at packed examples' positions", &ROPE, 42, .dims = {.batch = 2, .seq = 37, .heads = 3, .head_dim = 64},
     SEGMENTS(SEGMENTS_2x37)},
    {"rope inverse at packed examples' positions", &ROPE, 43,
     .dims = {.batch = 2, .seq = 37, .heads = 3, .head_dim = 64}, .flag = 1, SEGMENTS(SEGMENTS_2x37)},
    {"rope over a window's rows (positions from 17)", &ROPE, 39,
     .dims = {.batch = 1, .seq = 50, .heads = 3, .head_dim = 64, .q0 = 17, .q_len = 20}},
    {"fp32 sum of act values, first", &ACCUMULATE_F32, 53, .count = 1003},
    {"fp32 sum of act values, added", &ACCUMULATE_F32, 54, .count = 1003, .flag = 1},
    {"rounding fp32 to the act type", &ROUND_F32, 55, .count = 1003},
    {"swiglu and its backward, a tail of 3", &SWIGLU, 7, .count = 1003}, /* 125 vectors of 8 and 3 */
    {"geglu (gelu tanh) and its backward, a tail of 3", &SWIGLU, 75, .count = 1003, .flag = MT_GLU_GELU_TANH},
    {"gpt-oss's clamped swiglu and its backward, clamps binding", &SWIGLU, 76, .count = 1003,
     .flag = MT_GLU_SILU_CLAMPED},
    {"add in place (y aliases a)", &ADD, 8, .count = 517},
    {"add from the second element (unaligned)", &ADD, 38, .count = 517, .flag = 1},
    {"embedding and a repeated token's gradient", &EMBEDDING, 9, .n = 19, .d = 40, .vocab = 11},
    /* Gemma's sqrt(40) in bf16 */
    {"embedding scaled by 6.3125, and its gradient", &EMBEDDING, 80, .n = 19, .d = 40, .vocab = 11,
     .scale = 6.3125f},
    {"sumsq adds to out", &SUMSQ, 10, .count = 100003},
    {"lmhead_loss in chunks, ignored targets", &LMHEAD_LOSS, 11, .n = 37, .d = 64, .vocab = 301, .chunk = 16,
     .scale = 1.0f / 30.0f},
    {"lmhead_loss, the loss only", &LMHEAD_LOSS, 41, .n = 37, .d = 64, .vocab = 301, .chunk = 40, .scale = 1.0f,
     .flag = 1},
    {"logits of one row", &LOGITS, 12, .d = 72, .vocab = 301},
    /* a cap of 2 binds: the raw logits reach about 3 */
    {"lmhead_loss soft-capped at 2, in chunks, ignored targets", &LMHEAD_LOSS, 81, .n = 37, .d = 64, .vocab = 301,
     .chunk = 16, .scale = 1.0f / 30.0f, .softcap = 2.0f},
    {"lmhead_dw of a vocabulary slice", &LMHEAD_DW, 82, .n = 37, .d = 64, .vocab = 301, .chunk = 16, .in = 100,
     .out = 77, .scale = 1.0f / 30.0f},
    {"lmhead_dw of a vocabulary slice, soft-capped at 2", &LMHEAD_DW, 83, .n = 37, .d = 64, .vocab = 301, .chunk = 16,
     .in = 100, .out = 77, .scale = 1.0f / 30.0f, .softcap = 2.0f},
    {"logits of one row, soft-capped at 2", &LOGITS, 84, .d = 72, .vocab = 301, .softcap = 2.0f},
    {"attention, GQA, odd seq, head_dim 64", &ATTENTION, 13,
     .dims = {.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}},
    {"attention, head_dim 128, several tiles", &ATTENTION, 14,
     .dims = {.batch = 1, .seq = 150, .heads = 3, .kv_heads = 1, .head_dim = 128}},
    {"attention, head_dim 40, no GQA", &ATTENTION, 15,
     .dims = {.batch = 3, .seq = 9, .heads = 2, .kv_heads = 2, .head_dim = 40}},
    {"attention of packed examples, GQA, odd lengths", &ATTENTION, 44,
     .dims = {.batch = 2, .seq = 37, .heads = 6, .kv_heads = 2, .head_dim = 64}, SEGMENTS(SEGMENTS_2x37)},
    /* head_dim 40 runs on cuda's kernels, 64 on cuDNN's ragged layout (attention_cudnn.c) */
    {"attention of packed examples, one-token segments", &ATTENTION, 45,
     .dims = {.batch = 3, .seq = 9, .heads = 2, .kv_heads = 2, .head_dim = 40}, SEGMENTS(SEGMENTS_3x9)},
    {"attention of packed examples, one-token segments, head_dim 64", &ATTENTION, 48,
     .dims = {.batch = 3, .seq = 9, .heads = 2, .kv_heads = 2, .head_dim = 64}, SEGMENTS(SEGMENTS_3x9)},
    {"attention of packed examples across tiles, head_dim 128", &ATTENTION, 46,
     .dims = {.batch = 1, .seq = 150, .heads = 3, .kv_heads = 1, .head_dim = 128}, SEGMENTS(SEGMENTS_1x150)},
    {"attention of packed examples, a whole sequence and three", &ATTENTION, 47,
     .dims = {.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}, SEGMENTS(SEGMENTS_2x77)},
    /* windows of queries (tiled attention): inside the sequence from a position no tile size
     * divides, at its end, one query; and one over packed examples, a segment starting before it,
     * one inside it, one ending after it */
    {"attention, a window of 53 queries from position 70", &ATTENTION, 56,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64, .q0 = 70, .q_len = 53}},
    {"attention, the last window, head_dim 128", &ATTENTION, 57,
     .dims = {.batch = 1, .seq = 200, .heads = 3, .kv_heads = 1, .head_dim = 128, .q0 = 136, .q_len = 64}},
    {"attention, a window of one query", &ATTENTION, 58,
     .dims = {.batch = 2, .seq = 37, .heads = 2, .kv_heads = 2, .head_dim = 40, .q0 = 36, .q_len = 1}},
    {"attention of packed examples in a window of 53 from position 60", &ATTENTION, 59,
     .dims = {.batch = 1, .seq = 150, .heads = 3, .kv_heads = 1, .head_dim = 128, .q0 = 60, .q_len = 53},
     SEGMENTS(SEGMENTS_1x150)},
    /* the variants (mt_attn_params): sliding windows that cut key tiles, alone, over packed
     * examples and in windows of queries; scales (on cuda, cuDNN's whole and split-window graphs
     * take them); soft caps and sinks (cuda's kernels), and all together */
    {"attention, a sliding window of 40, GQA", &ATTENTION, 80,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64}, .attn = {.window = 40}},
    {"attention, a sliding window of 2", &ATTENTION, 81,
     .dims = {.batch = 2, .seq = 37, .heads = 2, .kv_heads = 1, .head_dim = 40}, .attn = {.window = 2}},
    {"attention, a sliding window as long as the sequence", &ATTENTION, 82,
     .dims = {.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}, .attn = {.window = 77}},
    {"attention of packed examples, a sliding window of 30", &ATTENTION, 83,
     .dims = {.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}, SEGMENTS(SEGMENTS_2x77),
     .attn = {.window = 30}},
    {"attention, a sliding window of 40 in a window of 53 queries from 70", &ATTENTION, 84,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64, .q0 = 70, .q_len = 53},
     .attn = {.window = 40}},
    {"attention of packed examples in a window of 53 from 60, a sliding window of 25", &ATTENTION, 85,
     .dims = {.batch = 1, .seq = 150, .heads = 3, .kv_heads = 1, .head_dim = 128, .q0 = 60, .q_len = 53},
     SEGMENTS(SEGMENTS_1x150), .attn = {.window = 25}},
    {"attention, scale 0.2", &ATTENTION, 86,
     .dims = {.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}, .attn = {.scale = 0.2f}},
    {"attention, scale 0.05 in the last window of queries", &ATTENTION, 87,
     .dims = {.batch = 1, .seq = 200, .heads = 3, .kv_heads = 1, .head_dim = 128, .q0 = 136, .q_len = 64},
     .attn = {.scale = 0.05f}},
    {"attention, a soft cap of 2 at scale 0.4", &ATTENTION, 88,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64}, .attn = {.scale = 0.4f, .softcap = 2.0f}},
    {"attention, sinks, GQA", &ATTENTION, 89,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64}, .flag = ATTN_SINKS},
    {"attention, sinks, head_dim 40, no GQA", &ATTENTION, 90,
     .dims = {.batch = 3, .seq = 9, .heads = 2, .kv_heads = 2, .head_dim = 40}, .flag = ATTN_SINKS},
    /* sinks without a cap (on cuda: folded into cuDNN's output and statistics) over a window of
     * queries and over packed examples (the kernels); with a sliding window over whole sequences
     * (cuDNN's band mask) */
    {"attention, sinks in a window of 53 queries from 70", &ATTENTION, 93,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64, .q0 = 70, .q_len = 53},
     .flag = ATTN_SINKS},
    {"attention of packed examples, sinks", &ATTENTION, 94,
     .dims = {.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}, SEGMENTS(SEGMENTS_2x77),
     .flag = ATTN_SINKS},
    {"attention, a sliding window of 40 and sinks, GQA", &ATTENTION, 95,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64}, .attn = {.window = 40},
     .flag = ATTN_SINKS},
    /* Gemma 3's heads: head_dim 256, GQA, a sliding window of 128 over whole sequences (on cuda:
     * cuDNN's band mask), at its scale, 1 / sqrt(query_pre_attn_scalar 168) */
    {"attention, head_dim 256, a sliding window of 128, scale 1/sqrt(168)", &ATTENTION, 119,
     .dims = {.batch = 2, .seq = 300, .heads = 4, .kv_heads = 2, .head_dim = 256},
     .attn = {.window = 128, .scale = 0.0771517f}},
    {"attention of packed examples, every variant", &ATTENTION, 91,
     .dims = {.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}, SEGMENTS(SEGMENTS_2x77),
     .attn = {.window = 20, .scale = 0.3f, .softcap = 3.0f}, .flag = ATTN_SINKS},
    {"attention in a window of 53 queries from 70, every variant", &ATTENTION, 92,
     .dims = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 128, .q0 = 70, .q_len = 53},
     .attn = {.window = 100, .scale = 0.1f, .softcap = 1.5f}, .flag = ATTN_SINKS},
    {"adamw, a device scale, decay, special values", &ADAMW, 21, .count = 100003, .scale = 0.37f,
     .flag = ADAMW_DECAY | ADAMW_SCALED | ADAMW_SPECIAL},
    {"adamw, no scale (the params'), no decay", &ADAMW, 51, .count = 1000},
    {"adamw, a NaN scale skips the step", &ADAMW, 52, .count = 1000, .scale = NAN, .flag = ADAMW_DECAY | ADAMW_SCALED},
    {"clip_scale, random norms clipped at 0.5", &CLIP_SCALE, 22, .n = 7, .scale = 0.5f, .flag = CLIP_CLIPS},
    {"clip_scale, an infinite norm gives NaN", &CLIP_SCALE, 23, .n = 7, .scale = 0.5f, .values = NORM_INF,
     .flag = CLIP_EXPECT, .expect = NAN},
    {"clip_scale, a NaN norm gives NaN", &CLIP_SCALE, 24, .n = 3, .scale = 1.0f, .values = NORM_NAN,
     .flag = CLIP_EXPECT, .expect = NAN},
    {"clip_scale, norm 5 clipped at 1", &CLIP_SCALE, 25, .n = 3, .scale = 1.0f, .values = NORM_5,
     .flag = CLIP_EXPECT, .expect = (float)(1.0 / (5.0 + 1e-6))},
    {"clip_scale, a norm at the limit is left alone", &CLIP_SCALE, 26, .n = 3, .scale = 5.0f, .values = NORM_5,
     .flag = CLIP_EXPECT, .expect = 1.0f},
    /* Mixture of experts (ops_moe.c; skipped on a backend without the moe group). The router's
     * shapes: Qwen1.5-MoE's 60 experts top 4, Qwen3-MoE's 128 top 8 renormalised, Mixtral's 8 top 2,
     * OLMoE's 64 top 8. flag: 1 renormalise, 2 with the auxiliary loss's gradient, 4 no statistics. */
    {"moe route, 60 experts top 4, statistics", &OPS_MOE_ROUTE, 61, .n = 37, .experts = 60, .top_k = 4},
    {"moe route, 128 experts top 8, renormalised, aux", &OPS_MOE_ROUTE, 62, .n = 29, .experts = 128, .top_k = 8,
     .flag = 1 | 2},
    {"moe route, 8 experts top 2, renormalised, no statistics", &OPS_MOE_ROUTE, 63, .n = 13, .experts = 8,
     .top_k = 2, .flag = 1 | 4},
    {"moe route, 64 experts top 8, aux", &OPS_MOE_ROUTE, 64, .n = 31, .experts = 64, .top_k = 8, .flag = 2},
    {"moe permute, one segment", &OPS_MOE_PERMUTE, 65, .n = 37, .experts = 16, .top_k = 4, .seg = 37},
    {"moe permute, segments, the last a part", &OPS_MOE_PERMUTE, 66, .n = 50, .experts = 9, .top_k = 3, .seg = 16},
    {"moe gather and gather_dx accumulating", &OPS_MOE_GATHER, 67, .n = 23, .experts = 12, .top_k = 3, .d = 40,
     .seg = 23, .flag = 1},
    {"moe gather and gather_dx, odd width", &OPS_MOE_GATHER, 68, .n = 17, .experts = 7, .top_k = 2, .d = 37, .seg = 17},
    {"moe grouped GEMMs, empty experts", &OPS_MOE_GROUPED, 69, .n = 29, .experts = 10, .top_k = 3, .in = 72, .out = 44,
     .seg = 29},
    {"moe grouped GEMMs by segment", &OPS_MOE_GROUPED, 70, .n = 40, .experts = 6, .top_k = 2, .in = 48, .out = 30,
     .seg = 16},
    {"moe grouped GEMMs with biases, by segment, empty experts", &OPS_MOE_GROUPED, 87, .n = 40, .experts = 10,
     .top_k = 2, .in = 48, .out = 300, .seg = 16, .flag = 1},
    {"moe swiglu of fused rows and its backward", &OPS_MOE_SWIGLU, 71, .n = 37, .d = 67},
    {"moe geglu (gelu tanh) of fused rows and its backward", &OPS_MOE_SWIGLU, 85, .n = 37, .d = 67,
     .flag = MT_GLU_GELU_TANH},
    {"moe clamped swiglu (gpt-oss) of fused rows and its backward", &OPS_MOE_SWIGLU, 86, .n = 37, .d = 67,
     .flag = MT_GLU_SILU_CLAMPED},
    {"moe combine and combine_dx", &OPS_MOE_COMBINE, 72, .n = 21, .experts = 10, .top_k = 4, .d = 40, .seg = 21},
    {"moe shared expert's gate, in place", &OPS_MOE_GATE_ADD, 73, .n = 19, .d = 72},
    {"moe load-balancing loss over 3 layers", &OPS_MOE_AUX, 74, .n = 41, .experts = 16, .top_k = 4, .layers = 3,
     .scale = 0.5f},
    /* Gated DeltaNet: dims holds the batch, the sequence, the value heads (heads), the q/k heads
     * (kv_heads) and d_k (head_dim); d is d_v, or the convolution's channels. Sequences of no
     * multiple of 64 rows; segments starting and ending inside the CUDA kernels' chunks of 64. */
    {"gdn conv1d + silu, two sequences", &OPS_GDN_CONV, 81, .dims = {.batch = 2, .seq = 37}, .d = 72},
    {"gdn conv1d + silu, packed examples, one-row segments", &OPS_GDN_CONV, 82, .dims = {.batch = 2, .seq = 37},
     .d = 40, SEGMENTS(SEGMENTS_2x37)},
    {"gdn q/k norm, 2 q/k heads to 6 value heads", &OPS_GDN_QK_NORM, 83,
     .dims = {.batch = 1, .seq = 29, .heads = 6, .kv_heads = 2, .head_dim = 32}, .d = 16},
    {"gdn q/k norm, d_k 128", &OPS_GDN_QK_NORM, 84, .dims = {.batch = 1, .seq = 13, .heads = 4, .kv_heads = 4,
     .head_dim = 128}, .d = 128},
    {"gdn decay and beta", &OPS_GDN_DECAY, 85, .dims = {.batch = 1, .seq = 41, .heads = 6}},
    {"gdn delta rule, two sequences of 150", &OPS_GDN_RULE, 86,
     .dims = {.batch = 2, .seq = 150, .heads = 3, .kv_heads = 3, .head_dim = 32}, .d = 48},
    {"gdn delta rule, packed examples across chunks", &OPS_GDN_RULE, 87,
     .dims = {.batch = 1, .seq = 150, .heads = 2, .kv_heads = 1, .head_dim = 64}, .d = 64, SEGMENTS(SEGMENTS_1x150)},
    {"gdn delta rule, d_k = d_v = 128, packed", &OPS_GDN_RULE, 88,
     .dims = {.batch = 2, .seq = 77, .heads = 2, .kv_heads = 2, .head_dim = 128}, .d = 128, SEGMENTS(SEGMENTS_2x77)},
    {"gdn delta rule, one-row segments", &OPS_GDN_RULE, 89,
     .dims = {.batch = 3, .seq = 9, .heads = 2, .kv_heads = 2, .head_dim = 16}, .d = 32, SEGMENTS(SEGMENTS_3x9)},
    {"gdn gated rmsnorm, d_v 128", &OPS_GDN_NORM, 90, .dims = {.batch = 1, .seq = 19, .heads = 4}, .d = 128},
    {"gdn gated rmsnorm, d_v 64", &OPS_GDN_NORM, 91, .dims = {.batch = 2, .seq = 7, .heads = 3}, .d = 64},
};
const size_t ops_case_count = COUNT(ops_cases);

/* Llama-3.2-3B: hidden 3072, MLP 8192, 24 heads of 128 (8 kv heads), vocabulary 128256; one
 * sequence of 4096 tokens. */
enum { D3B = 3072, F3B = 8192, V3B = 128256, N3B = 4096 };
#define ATTN_3B {.batch = 1, .seq = N3B, .heads = 24, .kv_heads = 8, .head_dim = 128}

const ops_case ops_timing_cases[] = {
    {"matmul, q projection", &MATMUL, 101, .n = N3B, .in = D3B, .out = D3B},
    {"matmul, gate projection", &MATMUL, 102, .n = N3B, .in = D3B, .out = F3B},
    {"matmul_dx, gate", &MATMUL_DX, 103, .n = N3B, .in = D3B, .out = F3B, .flag = 1},
    {"matmul_dw, gate", &MATMUL_DW, 104, .n = N3B, .in = D3B, .out = F3B},
    {"rmsnorm and backward", &RMSNORM, 105, .n = N3B, .d = D3B},
    {"rope, q", &ROPE, 106, .dims = ATTN_3B},
    {"attention and backward", &ATTENTION, 107, .dims = ATTN_3B},
    {"attention and backward, a sliding window of 512", &ATTENTION, 115, .dims = ATTN_3B, .attn = {.window = 512}},
    {"attention and backward, sinks", &ATTENTION, 116, .dims = ATTN_3B, .flag = ATTN_SINKS},
    /* gpt-oss's heads (64 of 64, 8 kv heads) with sinks: its full layers, and its window of 128 */
    {"attention and backward, gpt-oss's heads, sinks", &ATTENTION, 117,
     .dims = {.batch = 1, .seq = N3B, .heads = 64, .kv_heads = 8, .head_dim = 64}, .flag = ATTN_SINKS},
    {"attention and backward, gpt-oss's heads, a window of 128 and sinks", &ATTENTION, 118,
     .dims = {.batch = 1, .seq = N3B, .heads = 64, .kv_heads = 8, .head_dim = 64}, .attn = {.window = 128},
     .flag = ATTN_SINKS},
    {"swiglu and backward", &SWIGLU, 108, .count = (size_t)N3B * F3B},
    {"add", &ADD, 109, .count = (size_t)N3B * D3B},
    {"embedding and gradient", &EMBEDDING, 110, .n = N3B, .d = D3B, .vocab = V3B},
    {"lmhead_loss", &LMHEAD_LOSS, 111, .n = N3B, .d = D3B, .vocab = V3B, .chunk = 512, .scale = 1.0f / N3B},
    {"logits", &LOGITS, 112, .d = D3B, .vocab = V3B},
    {"sumsq, a block's gradient", &SUMSQ, 113, .count = (size_t)3 * D3B * F3B},
    {"adamw, a block", &ADAMW, 114, .count = (size_t)3 * D3B * F3B, .scale = 1.0f, .flag = ADAMW_DECAY | ADAMW_SCALED},
};
const size_t ops_timing_case_count = COUNT(ops_timing_cases);

/* OLMoE-1B-7B: hidden 2048, 64 experts of 1024, top 8; Qwen3-30B-A3B: hidden 2048, 128 experts of
 * 768, top 8; one sequence of 4096 tokens (32768 expert rows). */
enum { DMOE = 2048, NMOE = 4096 };
const ops_case ops_moe_timing_cases[] = {
    {"moe route, OLMoE", &OPS_MOE_ROUTE, 201, .n = NMOE, .experts = 64, .top_k = 8, .flag = 2},
    {"moe permute, OLMoE", &OPS_MOE_PERMUTE, 202, .n = NMOE, .experts = 64, .top_k = 8, .seg = NMOE},
    {"moe gather, OLMoE", &OPS_MOE_GATHER, 203, .n = NMOE, .experts = 64, .top_k = 8, .d = DMOE, .seg = NMOE},
    {"moe gate_up GEMMs, OLMoE", &OPS_MOE_GROUPED, 204, .n = NMOE, .experts = 64, .top_k = 8, .in = DMOE,
     .out = 2 * 1024, .seg = NMOE},
    {"moe down GEMMs, OLMoE", &OPS_MOE_GROUPED, 205, .n = NMOE, .experts = 64, .top_k = 8, .in = 1024, .out = DMOE,
     .seg = NMOE},
    {"moe gate_up GEMMs, Qwen3-30B-A3B", &OPS_MOE_GROUPED, 206, .n = NMOE, .experts = 128, .top_k = 8, .in = DMOE,
     .out = 2 * 768, .seg = NMOE},
    {"moe down GEMMs, Qwen3-30B-A3B", &OPS_MOE_GROUPED, 207, .n = NMOE, .experts = 128, .top_k = 8, .in = 768,
     .out = DMOE, .seg = NMOE},
    {"moe swiglu, OLMoE", &OPS_MOE_SWIGLU, 208, .n = NMOE * 8, .d = 1024},
    {"moe combine, OLMoE", &OPS_MOE_COMBINE, 209, .n = NMOE, .experts = 64, .top_k = 8, .d = DMOE, .seg = NMOE},
};
const size_t ops_moe_timing_case_count = COUNT(ops_moe_timing_cases);
