/* Packed examples through each attention path of the CUDA backend, layout by layout, against the
 * CPU reference on the same bf16 inputs: cuDNN's ragged layout (run even where the backend does not
 * run it, to show why not), the CUDA-core kernels, and the backend's own choice
 * (attention_dispatch.c).
 *
 * The layouts take apart the op-table case that failed on cuda in issue 27 (batch 3, seq 9, heads
 * 2/2, head_dim 40, segments {1, 1, 7, 9, 3, 3, 3}: dq off the reference, the rest right): the same
 * rows at head_dim 64 (and 32, 48, 80, 96, 128); the same segments in one sequence; 8 segments (a
 * power of two: no empty ragged entry) against 7; one-token segments alone; one at a sequence's
 * start, middle and end; none at all; a segment a sequence; longer GQA sequences across the
 * kernels' 64-row tiles.
 * Each path runs twice: on outputs and a workspace of zeros, then of NaNs (a path that reads
 * workspace it did not write, or leaves part of an output unwritten, shows there); NaN bytes after
 * every output show one written past.
 *
 * The measure. A one-token segment's dq and dk are exactly 0 (its softmax has one key, so
 * dp - delta is 0), so a relative error alone means nothing there. Each unit (a row and head of out,
 * lse and dq; a row and kv head of dk and dv) must be within
 *     ||got - ref|| <= tol * max(||ref||, typical),
 * `typical` the root mean square of the units' norms of the same tensor in plain causal attention
 * over the same inputs (the size a wrong unit would have; never 0), and the whole tensor within
 *     ||got - ref|| <= tol * max(||ref||, ||the same tensor, plain causal||).
 * tol for the bf16 outputs: 1e-2 the tensor (as test_cuda_attention.c) and 2e-2 a unit (one unit's
 * rounding averages over fewer terms): bf16 keeps 2^-9 of each element, cuDNN multiplies bf16
 * probabilities, and the sums run in another order. For lse (fp32 statistics): 1e-4. A failing
 * case prints each failing tensor's worst units (segment, row within it, head, values) and its
 * worst error by segment. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_backend.h"
#include "gpu_harness.h"
#include "util/bf16.h"

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

enum { SLACK = 256, SHOWN = 4, TENSORS = 5 };
enum { T_OUT, T_LSE, T_DQ, T_DK, T_DV };
static const char *const TENSOR_NAMES[TENSORS] = {"out", "lse", "dq", "dk", "dv"};

typedef enum { PATH_CUDNN, PATH_KERNELS, PATH_BACKEND } path;
static const char *const PATH_NAMES[] = {"cuDNN ragged", "CUDA-core kernels", "the backend's choice"};

typedef struct {
    const char *name;
    int batch, seq, heads, kv_heads;
    const int *lengths;
    int count;
    const int *head_dims;
    int head_dim_count;
} layout;

static const int OP_TABLE[] = {1, 1, 7, 9, 3, 3, 3};
static const int OP_TABLE_8[] = {1, 1, 7, 9, 3, 3, 2, 1};
static const int ONES_8[] = {1, 1, 1, 1, 1, 1, 1, 1};
static const int ONES_27[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const int ONE_FIRST[] = {1, 8};
static const int ONE_MIDDLE[] = {4, 1, 4};
static const int ONE_LAST[] = {8, 1};
static const int NO_ONES[] = {2, 7, 9, 3, 3, 3};
static const int WHOLE[] = {9, 9, 9};
static const int ODD_2x37[] = {5, 20, 12, 1, 36};
static const int TILES_1x150[] = {63, 2, 70, 1, 14};
static const int DIMS_ALL[] = {32, 40, 48, 64, 80, 96, 128};
static const int DIMS_40_64[] = {40, 64};

#define LAYOUT(name, b, s, h, kvh, lengths, dims) {name, b, s, h, kvh, lengths, COUNT(lengths), dims, COUNT(dims)}
static const layout LAYOUTS[] = {
    LAYOUT("the op table's case", 3, 9, 2, 2, OP_TABLE, DIMS_ALL),
    LAYOUT("its rows in 8 segments (no empty ragged entry)", 3, 9, 2, 2, OP_TABLE_8, DIMS_40_64),
    LAYOUT("its segments in one sequence", 1, 27, 2, 2, OP_TABLE, DIMS_40_64),
    LAYOUT("one-token segments alone, 8", 1, 8, 2, 2, ONES_8, DIMS_40_64),
    LAYOUT("one-token segments alone, 27 (32 ragged entries)", 3, 9, 2, 2, ONES_27, DIMS_40_64),
    LAYOUT("a one-token segment first", 1, 9, 2, 2, ONE_FIRST, DIMS_40_64),
    LAYOUT("a one-token segment in the middle", 1, 9, 2, 2, ONE_MIDDLE, DIMS_40_64),
    LAYOUT("a one-token segment last", 1, 9, 2, 2, ONE_LAST, DIMS_40_64),
    LAYOUT("no one-token segment", 3, 9, 2, 2, NO_ONES, DIMS_40_64),
    LAYOUT("a segment a sequence", 3, 9, 2, 2, WHOLE, DIMS_40_64),
    LAYOUT("GQA, odd lengths", 2, 37, 6, 2, ODD_2x37, DIMS_40_64),
    LAYOUT("across the kernels' 64-row tiles", 1, 150, 3, 1, TILES_1x150, DIMS_40_64),
};

/* One layout at one head dim: its inputs (bf16-rounded), its segments, the reference forward, and
 * the plain causal reference of every output (the floors). */
typedef struct {
    const layout *l;
    mt_attn_dims d;
    size_t count[TENSORS]; /* elements of each output */
    float *q, *k, *v, *dout;
    mt_segments seg; /* host positions and starts */
    float *ref_out, *ref_lse;
    float *plain[TENSORS];
} problem;

static float *host(size_t count) {
    float *p = calloc(count ? count : 1, sizeof *p);
    cr_assert(p);
    return p;
}

static void round_bf16(float *x, size_t count, float scale, unsigned *seed) {
    fill_random(x, count, scale, seed);
    for (size_t i = 0; i < count; i++) x[i] = mt_bf16_to_f32(mt_f32_to_bf16(x[i]));
}

static void problem_make(problem *pb, const layout *l, int head_dim, unsigned seed) {
    memset(pb, 0, sizeof *pb);
    pb->l = l;
    pb->d = (mt_attn_dims){.batch = l->batch, .seq = l->seq, .heads = l->heads, .kv_heads = l->kv_heads,
                           .head_dim = head_dim};
    size_t rows = (size_t)l->batch * l->seq, qc = rows * l->heads * head_dim, kc = rows * l->kv_heads * head_dim;
    const size_t counts[TENSORS] = {qc, rows * l->heads, qc, kc, kc};
    memcpy(pb->count, counts, sizeof counts);
    pb->q = host(qc), pb->k = host(kc), pb->v = host(kc), pb->dout = host(qc);
    round_bf16(pb->q, qc, 1.5f, &seed), round_bf16(pb->k, kc, 1.5f, &seed);
    round_bf16(pb->v, kc, 1.0f, &seed), round_bf16(pb->dout, qc, 1.0f, &seed);
    int32_t *pos = calloc(rows, sizeof *pos), *starts = calloc((size_t)l->count + 1, sizeof *starts);
    cr_assert(pos && starts);
    size_t row = 0;
    for (int s = 0; s < l->count; s++) {
        starts[s] = (int32_t)row;
        for (int i = 0; i < l->lengths[s]; i++) pos[row++] = i;
    }
    starts[l->count] = (int32_t)row;
    cr_assert_eq(row, rows, "%s: the segments hold %zu rows, not %zu", l->name, row, rows);
    pb->seg = (mt_segments){pos, starts, l->count, 0};
    pb->ref_out = host(qc), pb->ref_lse = host(counts[T_LSE]);
    mt_cpu_attention(pb->ref_out, pb->ref_lse, pb->q, pb->k, pb->v, pb->d, NULL, &pb->seg);
    for (int t = 0; t < TENSORS; t++) pb->plain[t] = host(counts[t]);
    void *ws = malloc(mt_cpu_attention_workspace(pb->d) + 1);
    mt_cpu_attention(pb->plain[T_OUT], pb->plain[T_LSE], pb->q, pb->k, pb->v, pb->d, NULL, NULL);
    mt_cpu_attention_dx(pb->plain[T_DQ], pb->plain[T_DK], pb->plain[T_DV], pb->dout, pb->plain[T_OUT],
                        pb->plain[T_LSE], pb->q, pb->k, pb->v, pb->d, NULL, NULL, ws);
    free(ws);
}

static void problem_free(problem *pb) {
    free(pb->q), free(pb->k), free(pb->v), free(pb->dout), free(pb->ref_out), free(pb->ref_lse);
    free((void *)pb->seg.pos), free((void *)pb->seg.starts);
    for (int t = 0; t < TENSORS; t++) free(pb->plain[t]);
}

/* Units of a tensor's rows: a row of out, lse, dq per query head, of dk, dv per kv head. */
static int units_a_row(const problem *pb, int t) { return t == T_DK || t == T_DV ? pb->d.kv_heads : pb->d.heads; }
static int unit_width(const problem *pb, int t) { return t == T_LSE ? 1 : pb->d.head_dim; }

static double norm(const float *x, size_t count) {
    double s = 0.0;
    for (size_t i = 0; i < count; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static double distance(const float *a, const float *b, size_t count) {
    double s = 0.0;
    for (size_t i = 0; i < count; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s);
}

/* The segment holding row r, and the line naming it. */
static int segment_of(const problem *pb, int r, char *where, size_t size) {
    int s = 0;
    while (pb->seg.starts[s + 1] <= r) s++;
    int first = pb->seg.starts[s], len = pb->seg.starts[s + 1] - first, b = r / pb->d.seq;
    snprintf(where, size, "segment %d of %d (length %d, rows %d-%d of sequence %d), its row %d", s, pb->seg.count,
             len, first - b * pb->d.seq, first - b * pb->d.seq + len - 1, b, r - first);
    return s;
}

static void show_values(char *line, size_t size, const char *label, const float *x, int width) {
    size_t at = strlen(line);
    at += (size_t)snprintf(line + at, size - at, " %s", label);
    for (int i = 0; i < width && i < 6 && at < size; i++) at += (size_t)snprintf(line + at, size - at, " %.4g", x[i]);
    if (width > 6 && at < size) snprintf(line + at, size - at, " ...");
}

static double tolerance(int t, int whole) { return t == T_LSE ? 1e-4 : whole ? 1e-2 : 2e-2; }

/* err / bound, NaN counted as infinite */
static double ratio_of(double err, double bound) { return isnan(err) ? INFINITY : err / bound; }

/* Logs tensor t's failing units (the worst SHOWN of them) and its worst error by segment, at severity
 * `level` (an error fails the test: only where the case counts). */
static void report_tensor(const problem *pb, int t, const float *got, const float *ref, const double *err,
                          const double *bound, size_t units, double whole, enum criterion_severity level) {
    int per_row = units_a_row(pb, t), width = unit_width(pb, t);
    size_t failing = 0;
    for (size_t u = 0; u < units; u++) failing += !(ratio_of(err[u], bound[u]) <= 1.0);
    cr_log(level, "    %s: %zu of %zu units over their bound; the whole tensor at %.3g of its bound", TENSOR_NAMES[t],
           failing, units, whole);
    char *shown = calloc(units, 1);
    cr_assert(shown);
    for (int n = 0; n < SHOWN; n++) {
        size_t worst = units;
        for (size_t u = 0; u < units; u++)
            if (!shown[u] && ratio_of(err[u], bound[u]) > 1.0 &&
                (worst == units || ratio_of(err[u], bound[u]) > ratio_of(err[worst], bound[worst])))
                worst = u;
        if (worst == units) break;
        shown[worst] = 1;
        char where[160], line[640];
        segment_of(pb, (int)(worst / per_row), where, sizeof where);
        snprintf(line, sizeof line, "      %s, head %d: error %.3g, bound %.3g, |ref| %.3g;", where,
                 (int)(worst % per_row), err[worst], bound[worst], norm(ref + worst * width, (size_t)width));
        show_values(line, sizeof line, "got", got + worst * width, width);
        show_values(line, sizeof line, "; ref", ref + worst * width, width);
        cr_log(level, "%s", line);
    }
    free(shown);
    char line[1024] = "      worst error / bound by segment:";
    for (int s = 0; s < pb->seg.count; s++) {
        double w = 0.0;
        for (size_t u = (size_t)pb->seg.starts[s] * per_row; u < (size_t)pb->seg.starts[s + 1] * per_row; u++)
            w = fmax(w, ratio_of(err[u], bound[u]));
        size_t at = strlen(line);
        if (at < sizeof line) snprintf(line + at, sizeof line - at, " %d:%.2g", s, w);
    }
    cr_log(level, "%s", line);
}

/* The worst error / bound of tensor t over its units and as a whole (above 1, or NaN counted as
 * infinite: it fails); when it fails and `report` is a severity (not -1), the detail at it. */
static double check_tensor(const problem *pb, int t, const float *got, const float *ref, int report) {
    int width = unit_width(pb, t);
    size_t count = pb->count[t], units = count / (size_t)width;
    double typical = norm(pb->plain[t], count) / sqrt((double)units);
    double whole_bound = fmax(tolerance(t, 1) * fmax(norm(ref, count), norm(pb->plain[t], count)), DBL_MIN);
    double whole = ratio_of(distance(got, ref, count), whole_bound), worst = whole;
    double *err = malloc(units * sizeof *err), *bound = malloc(units * sizeof *bound);
    cr_assert(err && bound);
    for (size_t u = 0; u < units; u++) {
        err[u] = distance(got + u * width, ref + u * width, (size_t)width);
        bound[u] = fmax(tolerance(t, 0) * fmax(norm(ref + u * width, (size_t)width), typical), DBL_MIN);
        worst = fmax(worst, ratio_of(err[u], bound[u]));
    }
    if (report >= 0 && worst > 1.0) report_tensor(pb, t, got, ref, err, bound, units, whole, report);
    free(err), free(bound);
    return worst;
}

/* ---- the paths ---- */

static size_t element_bytes(int t) { return t == T_LSE ? 4 : 2; }

/* A case's device buffers: the outputs with SLACK bytes after each. */
typedef struct {
    void *q, *k, *v, *dout, *ws, *o[TENSORS];
    size_t bytes[TENSORS], ws_bytes;
    mt_segments seg;
} device;

static void device_make(gpu *g, device *dv, problem *pb, size_t ws_bytes) {
    size_t rows = (size_t)pb->d.batch * pb->d.seq;
    dv->q = gpu_put_bf16(g, pb->q, pb->count[T_DQ]), dv->dout = gpu_put_bf16(g, pb->dout, pb->count[T_DQ]);
    dv->k = gpu_put_bf16(g, pb->k, pb->count[T_DK]), dv->v = gpu_put_bf16(g, pb->v, pb->count[T_DK]);
    for (int t = 0; t < TENSORS; t++) {
        dv->bytes[t] = pb->count[t] * element_bytes(t);
        dv->o[t] = gpu_alloc(g, dv->bytes[t] + SLACK);
    }
    dv->ws_bytes = ws_bytes;
    dv->ws = gpu_alloc(g, ws_bytes ? ws_bytes : 1);
    int32_t *pos = gpu_alloc(g, rows * 4), *starts = gpu_alloc(g, ((size_t)pb->seg.count + 1) * 4);
    mt_copy_async(g->be, pos, pb->seg.pos, rows * 4, g->s);
    mt_copy_async(g->be, starts, pb->seg.starts, ((size_t)pb->seg.count + 1) * 4, g->s);
    dv->seg = (mt_segments){pos, starts, pb->seg.count, 0};
    gpu_sync(g);
}

/* Outputs and workspace all zeros or all NaNs (0xff bytes); the slack after each output NaNs. */
static void device_fill(gpu *g, device *dv, int nans) {
    cudaStream_t s = (cudaStream_t)g->s;
    for (int t = 0; t < TENSORS; t++) {
        cr_assert_eq(cudaMemsetAsync(dv->o[t], nans ? 0xff : 0, dv->bytes[t], s), cudaSuccess);
        cr_assert_eq(cudaMemsetAsync((char *)dv->o[t] + dv->bytes[t], 0xff, SLACK, s), cudaSuccess);
    }
    cr_assert_eq(cudaMemsetAsync(dv->ws, nans ? 0xff : 0, dv->ws_bytes, s), cudaSuccess);
    gpu_sync(g);
}

/* The forward then the backward on path p; the status of both (the backend's through its check). */
static mt_status device_run(path p, gpu *g, mt_cudnn_attention *ca, const device *dv, mt_attn_dims d) {
    cudaStream_t s = (cudaStream_t)g->s;
    void *const *o = dv->o;
    mt_status status = MT_OK;
    if (p == PATH_CUDNN) {
        status = mt_cudnn_attention_forward(ca, s, o[T_OUT], o[T_LSE], dv->q, dv->k, dv->v, d,
                                            mt_attn_scale(NULL, d.head_dim), &dv->seg, 0, dv->ws);
        if (status == MT_OK)
            status = mt_cudnn_attention_backward(ca, s, o[T_DQ], o[T_DK], o[T_DV], dv->dout, o[T_OUT], o[T_LSE], dv->q,
                                                 dv->k, dv->v, d, mt_attn_scale(NULL, d.head_dim), &dv->seg, 0, dv->ws);
    } else if (p == PATH_KERNELS) {
        status = mt_cuda_attention(s, o[T_OUT], o[T_LSE], dv->q, dv->k, dv->v, d, NULL, dv->seg.pos);
        if (status == MT_OK)
            status = mt_cuda_attention_dx(s, o[T_DQ], o[T_DK], o[T_DV], dv->dout, o[T_OUT], o[T_LSE], dv->q, dv->k,
                                          dv->v, d, NULL, dv->seg.pos, dv->ws);
    } else {
        g->be->ops->op.attention(g->be, g->s, o[T_OUT], o[T_LSE], dv->q, dv->k, dv->v, d, NULL, &dv->seg, dv->ws);
        g->be->ops->op.attention_dx(g->be, g->s, o[T_DQ], o[T_DK], o[T_DV], dv->dout, o[T_OUT], o[T_LSE], dv->q,
                                    dv->k, dv->v, d, NULL, &dv->seg, dv->ws);
    }
    mt_event_record(g->be, g->done, g->s);
    mt_event_sync(g->be, g->done);
    mt_status checked = mt_backend_check(g->be);
    return status != MT_OK ? status : checked;
}

/* Whether the backend runs cuDNN for the case: what attention_dispatch.c asks, once the workspace is
 * sized as the engine sizes it. */
static int backend_runs_cudnn(gpu *g, const problem *pb) {
    g->be->ops->op.attention_workspace(g->be, pb->d, 1);
    return mt_cudnn_attention_supports(((mt_cuda_backend *)g->be)->cudnn, pb->d, pb->seg.count, 0, NULL);
}

/* One run read back and checked: the worst error / bound of each output (the detail of those that
 * fail at severity `report`, none at -1), and the outputs written past (a bit each). */
static int device_check(gpu *g, const device *dv, const problem *pb, double worst[TENSORS], int report) {
    float *got[TENSORS], *ref[TENSORS];
    int past = 0;
    for (int t = 0; t < TENSORS; t++) {
        got[t] = host(pb->count[t]);
        if (t == T_LSE) gpu_get_f32(g, got[t], dv->o[t], pb->count[t]);
        else gpu_get_bf16(g, got[t], dv->o[t], pb->count[t]);
        unsigned char slack[SLACK];
        mt_copy_async(g->be, slack, (const char *)dv->o[t] + dv->bytes[t], SLACK, g->s);
        gpu_sync(g);
        for (int i = 0; i < SLACK; i++)
            if (slack[i] != 0xff) past |= 1 << t;
    }
    ref[T_OUT] = pb->ref_out, ref[T_LSE] = pb->ref_lse;
    ref[T_DQ] = host(pb->count[T_DQ]), ref[T_DK] = host(pb->count[T_DK]), ref[T_DV] = host(pb->count[T_DV]);
    void *ws = malloc(mt_cpu_attention_workspace(pb->d) + 1);
    /* the reference backward starts from this path's own out and lse */
    mt_cpu_attention_dx(ref[T_DQ], ref[T_DK], ref[T_DV], pb->dout, got[T_OUT], got[T_LSE], pb->q, pb->k, pb->v, pb->d, NULL,
                        &pb->seg, ws);
    free(ws);
    for (int t = 0; t < TENSORS; t++) worst[t] = check_tensor(pb, t, got[t], ref[t], report);
    for (int t = 0; t < TENSORS; t++) free(got[t]);
    free(ref[T_DQ]), free(ref[T_DK]), free(ref[T_DV]);
    return past;
}

static void segments_text(const layout *l, char *text, size_t size) {
    size_t at = (size_t)snprintf(text, size, "{");
    for (int s = 0; s < l->count && at < size; s++)
        at += (size_t)snprintf(text + at, size - at, s ? ", %d" : "%d", l->lengths[s]);
    if (at < size) snprintf(text + at, size - at, "}");
}

/* Runs a layout at one head dim on path p, on zeros then on NaNs, logging a line for each; returns 1
 * when a run that counts fails (on cuDNN only where the backend runs cuDNN). */
static int run_case(path p, const layout *l, int head_dim, unsigned seed) {
    problem pb;
    problem_make(&pb, l, head_dim, seed);
    gpu g;
    gpu_open(&g);
    int runs_cudnn = backend_runs_cudnn(&g, &pb), counts = p != PATH_CUDNN || runs_cudnn;
    enum criterion_severity level = counts ? CR_LOG_ERROR : CR_LOG_INFO; /* an error fails the test */
    char name[512], segs[160];
    segments_text(l, segs, sizeof segs);
    snprintf(name, sizeof name, "%s b%d s%d h%d/%d d%d, %d segments %s (%s; the backend runs %s)", PATH_NAMES[p],
             l->batch, l->seq, l->heads, l->kv_heads, head_dim, l->count, segs, l->name,
             runs_cudnn ? "cuDNN" : "the kernels");
    mt_cudnn_attention *ca = NULL;
    size_t ws_bytes = mt_cuda_attention_workspace(pb.d);
    if (p == PATH_CUDNN) {
        cr_assert_eq(mt_cudnn_attention_create(&ca), MT_OK);
        if (!mt_cudnn_attention_plan_workspace(ca, pb.d, l->count, 0, &ws_bytes)) {
            cr_log(level, "%s: cuDNN builds no plan%s", name, runs_cudnn ? " here, yet the backend runs it" : "");
            mt_cudnn_attention_destroy(ca);
            gpu_close(&g);
            problem_free(&pb);
            return runs_cudnn;
        }
    } else if (p == PATH_BACKEND) {
        ws_bytes = g.be->ops->op.attention_workspace(g.be, pb.d, 1);
    }
    device dv;
    device_make(&g, &dv, &pb, ws_bytes);
    int failed = 0;
    for (int nans = 0; nans <= 1; nans++) {
        device_fill(&g, &dv, nans);
        mt_status status = device_run(p, &g, ca, &dv, pb.d);
        if (status != MT_OK) {
            cr_log(level, "%s, on %s: FAILED to run: %s", name, nans ? "NaNs" : "zeros", mt_error());
            failed = 1;
            break; /* the backend keeps its error: nothing after it is meaningful */
        }
        double worst[TENSORS];
        int past = device_check(&g, &dv, &pb, worst, -1), bad = past != 0;
        for (int t = 0; t < TENSORS; t++) bad |= !(worst[t] <= 1.0);
        char line[1024];
        snprintf(line, sizeof line, "%s, on %s: error / bound out %.2g lse %.2g dq %.2g dk %.2g dv %.2g%s%s", name,
                 nans ? "NaNs" : "zeros", worst[T_OUT], worst[T_LSE], worst[T_DQ], worst[T_DK], worst[T_DV],
                 bad ? " FAIL" : "", bad && !counts ? " (not asserted: the backend runs the kernels here)" : "");
        for (int t = 0; t < TENSORS; t++)
            if (past & (1 << t)) {
                size_t at = strlen(line);
                snprintf(line + at, sizeof line - at, "; wrote past %s", TENSOR_NAMES[t]);
            }
        cr_log(bad ? level : CR_LOG_INFO, "%s", line);
        if (bad) device_check(&g, &dv, &pb, worst, level);
        failed |= bad;
    }
    if (ca) mt_cudnn_attention_destroy(ca);
    gpu_close(&g);
    problem_free(&pb);
    return failed && counts;
}

/* Every layout at each of its head dims on path p; fails naming the cases that fail. */
static void run_layouts(path p) {
    char failures[2048] = "";
    int failed = 0, cases = 0;
    for (int i = 0; i < COUNT(LAYOUTS); i++)
        for (int j = 0; j < LAYOUTS[i].head_dim_count; j++, cases++)
            if (run_case(p, &LAYOUTS[i], LAYOUTS[i].head_dims[j], 2700u + (unsigned)i)) {
                size_t at = strlen(failures);
                if (at < sizeof failures)
                    snprintf(failures + at, sizeof failures - at, "%s%s at head_dim %d", failed ? "; " : "",
                             LAYOUTS[i].name, LAYOUTS[i].head_dims[j]);
                failed++;
            }
    cr_assert_eq(failed, 0, "%s: %d of %d cases fail: %s", PATH_NAMES[p], failed, cases, failures);
}

Test(cuda, attention_layouts_cudnn_ragged) { run_layouts(PATH_CUDNN); }

Test(cuda, attention_layouts_kernels) { run_layouts(PATH_KERNELS); }

Test(cuda, attention_layouts_backend) { run_layouts(PATH_BACKEND); }
