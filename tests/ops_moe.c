/* The op table's mixture-of-experts kinds (ops_table.h; backend.h's moe group): each op with its
 * backward where it has one, on inputs a real layer would give it: distinct router logits (exact in
 * bf16 and 1/16 apart, so no backend's rounding can reorder the top k), each token's k distinct
 * experts, some experts with no rows, segments that end mid-way. The cases are in ops_table.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "ops_table.h"

#define BF16_TOL 1e-2
#define SUM_TOL 1e-5
/* fp32 dot products of bf16 values in another order, over up to a few hundred terms */
#define DOT_TOL 1e-4

#define T(name, type, role, count, lo, hi, tol) ((ops_tensor){name, OPS_##type, OPS_##role, (size_t)(count), lo, hi, tol})

static int segments(const ops_case *c) { return (c->n + c->seg - 1) / c->seg; }
static size_t slots(const ops_case *c) { return (size_t)c->n * c->top_k; }

/* splitmix64 for the ids the fill cannot give. */
static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Each token's k distinct experts, drawn from the first E - 2 so that the last two get no token
 * (an expert a step leaves out). */
static void random_experts(const ops_case *c, int32_t *experts) {
    uint64_t s = c->seed * 7919u;
    int E = c->experts - 2, k = c->top_k;
    for (int t = 0; t < c->n; t++)
        for (int j = 0; j < k; j++) {
            int32_t e, again;
            do {
                e = (int32_t)(next(&s) % (uint64_t)E);
                again = 0;
                for (int i = 0; i < j; i++) again |= experts[t * k + i] == e;
            } while (again);
            experts[t * k + j] = e;
        }
}

/* A permutation of a layer's slots: order, slot_row and offsets of random experts. */
static void random_permutation(const ops_case *c, int32_t *order, int32_t *slot_row, int32_t *offsets) {
    int32_t *experts = malloc(slots(c) * sizeof *experts), *off = offsets;
    int32_t *own = off ? NULL : malloc(((size_t)c->experts * segments(c) + 1) * sizeof *own);
    random_experts(c, experts);
    mt_cpu_moe_permute(order, slot_row, off ? off : own, experts, c->n, c->experts, c->top_k, c->seg);
    free(experts);
    free(own);
}

/* ---- route and route_dx; flag bits: renormalise, an auxiliary gradient, no statistics ---- */

enum { RT_LOGITS, RT_DW, RT_AUX, RT_W, RT_EXPERTS, RT_COUNTS, RT_PSUM, RT_DLOGITS };
enum { ROUTE_RENORM = 1, ROUTE_AUX = 2, ROUTE_NO_STATS = 4 };

static int route_declare(const ops_case *c, ops_tensor *t) {
    size_t nE = (size_t)c->n * c->experts, stats = c->flag & ROUTE_NO_STATS ? 0 : (size_t)c->experts;
    t[RT_LOGITS] = T("logits", ACT, IN, nE, 0, 0, 0);
    t[RT_DW] = T("dweights", F32, IN, slots(c), -1, 1, 0);
    t[RT_AUX] = T("aux_grad", F32, IN, c->flag & ROUTE_AUX ? c->experts : 0, 0.01f, 0.5f, 0);
    t[RT_W] = T("weights", F32, OUT, slots(c), 0, 0, SUM_TOL); /* fp32 softmax of the same logits */
    t[RT_EXPERTS] = T("experts", I32, OUT, slots(c), 0, 0, 0);
    t[RT_COUNTS] = T("counts", I32, INOUT, stats, 0, 0, 0);
    t[RT_PSUM] = T("prob_sum", F32, INOUT, stats, 0, 2, SUM_TOL);
    t[RT_DLOGITS] = T("dlogits", ACT, OUT, nE, 0, 0, BF16_TOL);
    return 8;
}
/* Each row a shuffle of (i - E/2) / 16: distinct, exact in bf16. Counts start at 3 (they add). */
static void route_prepare(const ops_case *c, ops_host *h) {
    uint64_t s = c->seed;
    int E = c->experts;
    for (int t = 0; t < c->n; t++) {
        float *row = h->x[RT_LOGITS] + (size_t)t * E;
        for (int e = 0; e < E; e++) row[e] = (float)(e - E / 2) / 16.0f;
        for (int e = E - 1; e > 0; e--) {
            int o = (int)(next(&s) % (uint64_t)(e + 1));
            float x = row[e];
            row[e] = row[o];
            row[o] = x;
        }
    }
    if (h->ids[RT_COUNTS])
        for (int e = 0; e < E; e++) h->ids[RT_COUNTS][e] = 3;
}
static void route_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    int renorm = c->flag & ROUTE_RENORM;
    be->ops->moe.route(be, s, d[RT_W], d[RT_EXPERTS], d[RT_COUNTS], d[RT_PSUM], d[RT_LOGITS], c->n, c->experts,
                       c->top_k, renorm);
    be->ops->moe.route_dx(be, s, d[RT_DLOGITS], d[RT_DW], d[RT_LOGITS], d[RT_EXPERTS], d[RT_AUX], c->n, c->experts,
                          c->top_k, renorm);
}
static void route_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    int renorm = c->flag & ROUTE_RENORM;
    mt_cpu_moe_route(h->x[RT_W], h->ids[RT_EXPERTS], h->ids[RT_COUNTS], h->x[RT_PSUM], h->x[RT_LOGITS], c->n,
                     c->experts, c->top_k, renorm);
    mt_cpu_moe_route_dx(h->x[RT_DLOGITS], h->x[RT_DW], h->x[RT_LOGITS], h->ids[RT_EXPERTS], h->x[RT_AUX], c->n,
                        c->experts, c->top_k, renorm);
}
const ops_kind OPS_MOE_ROUTE = {.declare = route_declare, .prepare = route_prepare, .call = route_call,
                                .reference = route_reference, .needs_moe = 1};

/* ---- permute ---- */

enum { PM_EXPERTS, PM_ORDER, PM_SLOT_ROW, PM_OFFSETS };

static int permute_declare(const ops_case *c, ops_tensor *t) {
    t[PM_EXPERTS] = T("experts", I32, IN, slots(c), 0, 0, 0);
    t[PM_ORDER] = T("order", I32, OUT, slots(c), 0, 0, 0);
    t[PM_SLOT_ROW] = T("slot_row", I32, OUT, slots(c), 0, 0, 0);
    t[PM_OFFSETS] = T("offsets", I32, OUT, (size_t)c->experts * segments(c) + 1, 0, 0, 0);
    return 4;
}
static void permute_prepare(const ops_case *c, ops_host *h) { random_experts(c, h->ids[PM_EXPERTS]); }
static void permute_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->moe.permute(be, s, d[PM_ORDER], d[PM_SLOT_ROW], d[PM_OFFSETS], d[PM_EXPERTS], c->n, c->experts,
                         c->top_k, c->seg);
}
static void permute_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_moe_permute(h->ids[PM_ORDER], h->ids[PM_SLOT_ROW], h->ids[PM_OFFSETS], h->ids[PM_EXPERTS], c->n,
                       c->experts, c->top_k, c->seg);
}
const ops_kind OPS_MOE_PERMUTE = {.declare = permute_declare, .prepare = permute_prepare, .call = permute_call,
                                  .reference = permute_reference, .needs_moe = 1};

/* ---- gather and gather_dx (flag: accumulate) ---- */

enum { GA_X, GA_DXS, GA_ORDER, GA_SLOT_ROW, GA_XS, GA_DX };

static int gather_declare(const ops_case *c, ops_tensor *t) {
    t[GA_X] = T("x", ACT, IN, (size_t)c->n * c->d, -1, 1, 0);
    t[GA_DXS] = T("dxs", ACT, IN, slots(c) * c->d, -1, 1, 0);
    t[GA_ORDER] = T("order", I32, IN, slots(c), 0, 0, 0);
    t[GA_SLOT_ROW] = T("slot_row", I32, IN, slots(c), 0, 0, 0);
    t[GA_XS] = T("xs", ACT, OUT, slots(c) * c->d, 0, 0, 0); /* copies: exact */
    t[GA_DX] = T("dx", ACT, INOUT, (size_t)c->n * c->d, -1, 1, BF16_TOL);
    return 6;
}
static void gather_prepare(const ops_case *c, ops_host *h) {
    random_permutation(c, h->ids[GA_ORDER], h->ids[GA_SLOT_ROW], NULL);
}
static void gather_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->moe.gather(be, s, d[GA_XS], d[GA_X], d[GA_ORDER], c->n, c->top_k, c->d);
    be->ops->moe.gather_dx(be, s, d[GA_DX], d[GA_DXS], d[GA_SLOT_ROW], c->n, c->top_k, c->d, c->flag);
}
static void gather_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_moe_gather(h->x[GA_XS], h->x[GA_X], h->ids[GA_ORDER], c->n, c->top_k, c->d);
    mt_cpu_moe_gather_dx(h->x[GA_DX], h->x[GA_DXS], h->ids[GA_SLOT_ROW], c->n, c->top_k, c->d, c->flag);
}
const ops_kind OPS_MOE_GATHER = {.declare = gather_declare, .prepare = gather_prepare, .call = gather_call,
                                 .reference = gather_reference, .needs_moe = 1};

/* ---- the grouped GEMMs: forward, dx and dw over one layer's sorted rows; flag: with the experts'
 * biases and their gradient ---- */

enum { GM_X, GM_W, GM_DY, GM_OFFSETS, GM_Y, GM_DX, GM_DW, GM_BIAS, GM_DBIAS };

static int grouped_declare(const ops_case *c, ops_tensor *t) {
    size_t rows = slots(c), E = (size_t)c->experts;
    t[GM_X] = T("x", ACT, IN, rows * c->in, -1, 1, 0);
    t[GM_W] = T("w", W, IN, E * c->out * c->in, -0.2f, 0.2f, 0);
    t[GM_DY] = T("dy", ACT, IN, rows * c->out, -1, 1, 0);
    t[GM_OFFSETS] = T("offsets", I32, IN, E * segments(c) + 1, 0, 0, 0);
    t[GM_Y] = T("y", ACT, OUT, rows * c->out, 0, 0, BF16_TOL);
    t[GM_DX] = T("dx", ACT, OUT, rows * c->in, 0, 0, BF16_TOL);
    t[GM_DW] = T("dw", F32, INOUT, E * c->out * c->in, -1, 1, SUM_TOL);
    t[GM_BIAS] = T("bias", W, IN, c->flag ? E * c->out : 0, -0.5f, 0.5f, 0);
    t[GM_DBIAS] = T("dbias", F32, INOUT, c->flag ? E * c->out : 0, -1, 1, SUM_TOL);
    return 9;
}
static void grouped_prepare(const ops_case *c, ops_host *h) {
    int32_t *order = malloc(slots(c) * sizeof *order), *slot_row = malloc(slots(c) * sizeof *slot_row);
    random_permutation(c, order, slot_row, h->ids[GM_OFFSETS]);
    free(order);
    free(slot_row);
}
static void grouped_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    int rows = (int)slots(c), S = segments(c);
    be->ops->moe.grouped_matmul(be, s, d[GM_Y], d[GM_X], d[GM_W], d[GM_BIAS], d[GM_OFFSETS], rows, c->experts, S,
                                c->in, c->out);
    be->ops->moe.grouped_matmul_dx(be, s, d[GM_DX], d[GM_DY], d[GM_W], d[GM_OFFSETS], rows, c->experts, S, c->in,
                                   c->out);
    be->ops->moe.grouped_matmul_dw(be, s, d[GM_DW], d[GM_DBIAS], d[GM_DY], d[GM_X], d[GM_OFFSETS], rows, c->experts,
                                   S, c->in, c->out);
}
/* exact: dw summed in float64, as over many rows a float running sum strays further than SUM_TOL (dbias
 * sums in row order as a backend's may: a scratch dw takes the kernel's). */
static void grouped_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    int rows = (int)slots(c), S = segments(c), E = c->experts, in = c->in, out = c->out;
    const int32_t *off = h->ids[GM_OFFSETS];
    mt_cpu_moe_matmul(h->x[GM_Y], h->x[GM_X], h->x[GM_W], h->x[GM_BIAS], off, rows, E, S, in, out);
    mt_cpu_moe_matmul_dx(h->x[GM_DX], h->x[GM_DY], h->x[GM_W], off, rows, E, S, in, out);
    if (!exact) {
        mt_cpu_moe_matmul_dw(h->x[GM_DW], h->x[GM_DBIAS], h->x[GM_DY], h->x[GM_X], off, rows, E, S, in, out);
        return;
    }
    if (h->x[GM_DBIAS]) {
        float *scratch = calloc((size_t)E * out * in, sizeof *scratch);
        mt_cpu_moe_matmul_dw(scratch, h->x[GM_DBIAS], h->x[GM_DY], h->x[GM_X], off, rows, E, S, in, out);
        free(scratch);
    }
    for (int e = 0; e < E; e++)
        for (int o = 0; o < out; o++)
            for (int i = 0; i < in; i++) {
                float *dw = &h->x[GM_DW][((size_t)e * out + o) * in + i];
                double sum = *dw;
                for (int r = off[e * S]; r < off[(e + 1) * S]; r++)
                    sum += (double)h->x[GM_DY][(size_t)r * out + o] * h->x[GM_X][(size_t)r * in + i];
                *dw = (float)sum;
            }
}
/* forward, dx and dw: three GEMMs of rows x in x out */
static double grouped_flops(const ops_case *c) { return 6.0 * (double)slots(c) * c->in * c->out; }
const ops_kind OPS_MOE_GROUPED = {.declare = grouped_declare, .prepare = grouped_prepare, .call = grouped_call,
                                  .reference = grouped_reference, .flops = grouped_flops, .needs_moe = 1};

/* ---- the experts' fused GLU (the flag's: ops_glu) and its backward ---- */

enum { SG_GU, SG_DA, SG_A, SG_DGU };

static int swiglu_declare(const ops_case *c, ops_tensor *t) {
    float r = ops_glu_range(c);
    t[SG_GU] = T("gu", ACT, IN, (size_t)c->n * 2 * c->d, -r, r, 0);
    t[SG_DA] = T("da", ACT, IN, (size_t)c->n * c->d, -1, 1, 0);
    t[SG_A] = T("a", ACT, OUT, (size_t)c->n * c->d, 0, 0, BF16_TOL);
    t[SG_DGU] = T("dgu", ACT, OUT, (size_t)c->n * 2 * c->d, 0, 0, BF16_TOL);
    return 4;
}
static void swiglu_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->moe.swiglu(be, s, d[SG_A], d[SG_GU], c->n, c->d, ops_glu(c));
    be->ops->moe.swiglu_dx(be, s, d[SG_DGU], d[SG_DA], d[SG_GU], c->n, c->d, ops_glu(c));
}
static void swiglu_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_moe_swiglu(h->x[SG_A], h->x[SG_GU], c->n, c->d, ops_glu(c));
    mt_cpu_moe_swiglu_dx(h->x[SG_DGU], h->x[SG_DA], h->x[SG_GU], c->n, c->d, ops_glu(c));
}
const ops_kind OPS_MOE_SWIGLU = {.declare = swiglu_declare, .call = swiglu_call, .reference = swiglu_reference,
                                 .needs_moe = 1};

/* ---- combine and combine_dx ---- */

enum { CB_YS, CB_W, CB_SLOT_ROW, CB_DY, CB_Y, CB_DYS, CB_DW };

static int combine_declare(const ops_case *c, ops_tensor *t) {
    t[CB_YS] = T("ys", ACT, IN, slots(c) * c->d, -1, 1, 0);
    t[CB_W] = T("weights", F32, IN, slots(c), 0, 1, 0);
    t[CB_SLOT_ROW] = T("slot_row", I32, IN, slots(c), 0, 0, 0);
    t[CB_DY] = T("dy", ACT, IN, (size_t)c->n * c->d, -1, 1, 0);
    t[CB_Y] = T("y", ACT, OUT, (size_t)c->n * c->d, 0, 0, BF16_TOL);
    t[CB_DYS] = T("dys", ACT, OUT, slots(c) * c->d, 0, 0, BF16_TOL);
    t[CB_DW] = T("dweights", F32, OUT, slots(c), 0, 0, DOT_TOL);
    return 7;
}
static void combine_prepare(const ops_case *c, ops_host *h) {
    int32_t *order = malloc(slots(c) * sizeof *order);
    random_permutation(c, order, h->ids[CB_SLOT_ROW], NULL);
    free(order);
}
static void combine_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->moe.combine(be, s, d[CB_Y], d[CB_YS], d[CB_W], d[CB_SLOT_ROW], c->n, c->top_k, c->d);
    be->ops->moe.combine_dx(be, s, d[CB_DYS], d[CB_DW], d[CB_DY], d[CB_YS], d[CB_W], d[CB_SLOT_ROW], c->n, c->top_k,
                            c->d);
}
static void combine_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_moe_combine(h->x[CB_Y], h->x[CB_YS], h->x[CB_W], h->ids[CB_SLOT_ROW], c->n, c->top_k, c->d);
    mt_cpu_moe_combine_dx(h->x[CB_DYS], h->x[CB_DW], h->x[CB_DY], h->x[CB_YS], h->x[CB_W], h->ids[CB_SLOT_ROW], c->n,
                          c->top_k, c->d);
}
const ops_kind OPS_MOE_COMBINE = {.declare = combine_declare, .prepare = combine_prepare, .call = combine_call,
                                  .reference = combine_reference, .needs_moe = 1};

/* ---- a shared expert's sigmoid gate, y in place (y aliases a, as the engine calls it) ---- */

enum { GT_Y, GT_X, GT_G, GT_DY, GT_DX, GT_DG };

static int gate_declare(const ops_case *c, ops_tensor *t) {
    size_t nd = (size_t)c->n * c->d;
    t[GT_Y] = T("y", ACT, INOUT, nd, -1, 1, BF16_TOL);
    t[GT_X] = T("x", ACT, IN, nd, -1, 1, 0);
    t[GT_G] = T("g", ACT, IN, c->n, -4, 4, 0);
    t[GT_DY] = T("dy", ACT, IN, nd, -1, 1, 0);
    t[GT_DX] = T("dx", ACT, OUT, nd, 0, 0, BF16_TOL);
    t[GT_DG] = T("dg", ACT, OUT, c->n, 0, 0, BF16_TOL);
    return 6;
}
static void gate_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->moe.gate_add(be, s, d[GT_Y], d[GT_Y], d[GT_X], d[GT_G], c->n, c->d);
    be->ops->moe.gate_add_dx(be, s, d[GT_DX], d[GT_DG], d[GT_DY], d[GT_X], d[GT_G], c->n, c->d);
}
static void gate_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_moe_gate_add(h->x[GT_Y], h->x[GT_Y], h->x[GT_X], h->x[GT_G], c->n, c->d);
    mt_cpu_moe_gate_add_dx(h->x[GT_DX], h->x[GT_DG], h->x[GT_DY], h->x[GT_X], h->x[GT_G], c->n, c->d);
}
const ops_kind OPS_MOE_GATE_ADD = {.declare = gate_declare, .call = gate_call, .reference = gate_reference,
                                   .needs_moe = 1};

/* ---- the load-balancing loss over `layers` layers' statistics ---- */

enum { AX_COUNTS, AX_PSUM, AX_LOSS, AX_GRAD };

static int aux_declare(const ops_case *c, ops_tensor *t) {
    t[AX_COUNTS] = T("counts", I32, IN, (size_t)c->layers * c->experts, 0, 0, 0);
    t[AX_PSUM] = T("prob_sum", F32, IN, c->experts, 0, 0, 0);
    t[AX_LOSS] = T("loss_sum", F32, INOUT, 1, 0.25f, 0.25f, SUM_TOL);
    t[AX_GRAD] = T("grad", F32, OUT, c->experts, 0, 0, SUM_TOL);
    return 4;
}
/* What route gives a layer: each token's k experts counted, every layer's probabilities summing
 * to one a token. */
static void aux_prepare(const ops_case *c, ops_host *h) {
    int32_t *experts = malloc(slots(c) * sizeof *experts);
    for (int l = 0; l < c->layers; l++) {
        ops_case layer = *c;
        layer.seed = c->seed + (unsigned)l;
        random_experts(&layer, experts);
        for (size_t i = 0; i < slots(c); i++) h->ids[AX_COUNTS][(size_t)l * c->experts + experts[i]]++;
    }
    free(experts);
    uint64_t s = c->seed;
    double sum = 0;
    for (int e = 0; e < c->experts; e++) sum += h->x[AX_PSUM][e] = (float)(next(&s) % 1000 + 1);
    for (int e = 0; e < c->experts; e++) h->x[AX_PSUM][e] = (float)(h->x[AX_PSUM][e] / sum * c->layers * c->n);
}
static void aux_call(mt_backend *be, mt_stream *s, const ops_case *c, void *const *d) {
    be->ops->moe.aux_loss(be, s, d[AX_LOSS], d[AX_GRAD], d[AX_COUNTS], d[AX_PSUM], c->layers, c->n, c->experts,
                          c->scale, 2 * c->scale);
}
static void aux_reference(const ops_case *c, ops_host *h, const ops_host *got, int exact) {
    mt_cpu_moe_aux_loss(h->x[AX_LOSS], h->x[AX_GRAD], h->ids[AX_COUNTS], h->x[AX_PSUM], c->layers, c->n, c->experts,
                        c->scale, 2 * c->scale);
}
const ops_kind OPS_MOE_AUX = {.declare = aux_declare, .prepare = aux_prepare, .call = aux_call,
                              .reference = aux_reference, .needs_moe = 1};
