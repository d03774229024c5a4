/* Both attention paths of the CUDA backend -- cuDNN's fused SDPA (attention_cudnn.c) and the
 * CUDA-core flash kernels (attention.cu) -- called directly, each against the CPU reference on
 * the same bf16-rounded inputs, plain and with segments (packed examples: cuDNN's ragged layout,
 * the kernels' segment masks), and with sinks through the backend's choice; then both timed at the
 * benchmark shape.
 *
 * Tolerances (relative error ||out - ref|| / ||ref||): 1e-2 for bf16 outputs (8 mantissa bits,
 * a rounding of up to 2^-9 per element, plus cuDNN's bf16 probabilities in P.V and, for GQA, dK
 * and dV summed over the group from bf16 per-head terms); 1e-4 for lse, fp32 softmax statistics
 * of the same inputs. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/cuda_kernels.h"
#include "gpu_harness.h"
#include "util/bf16.h"

#define BF16_TOL 1e-2
#define LSE_TOL 1e-4

typedef enum { PATH_CUDNN, PATH_KERNELS } path;

static const char *path_name(path p) { return p == PATH_CUDNN ? "cuDNN" : "CUDA-core kernels"; }

/* Device buffers of one attention problem. */
typedef struct {
    void *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv, *ws;
} buffers;

static float *host(size_t count) {
    float *p = calloc(count ? count : 1, sizeof *p);
    cr_assert(p);
    return p;
}

static size_t q_count(mt_attn_dims d) { return (size_t)d.batch * d.seq * d.heads * d.head_dim; }
static size_t kv_count(mt_attn_dims d) { return (size_t)d.batch * d.seq * d.kv_heads * d.head_dim; }
static size_t lse_count(mt_attn_dims d) { return (size_t)d.batch * d.heads * d.seq; }

static int32_t *host_ids(size_t count) {
    int32_t *p = calloc(count ? count : 1, sizeof *p);
    cr_assert(p);
    return p;
}

static int32_t *gpu_put_ids(gpu *g, const int32_t *host, size_t count) {
    int32_t *dev = gpu_alloc(g, count * sizeof *dev);
    mt_copy_async(g->be, dev, host, count * sizeof *dev, g->s);
    gpu_sync(g);
    return dev;
}

/* The workspace a path needs for dims, and with segments (seg non-NULL) for seg->count of them:
 * cuDNN's ragged plans only where they fit what was sized for the dims. */
static size_t workspace_bytes(mt_cudnn_attention *ca, mt_attn_dims d, path p, const mt_segments *seg) {
    size_t bytes = mt_cuda_attention_workspace(d);
    if (p != PATH_CUDNN) return bytes;
    if (seg) {
        size_t sized = mt_cudnn_attention_ragged_workspace(ca, d, bytes);
        cr_assert(mt_cudnn_attention_supports(ca, d, seg->count, 0, &bytes), "cuDNN refused %d segments", seg->count);
        cr_assert_leq(bytes, sized);
        return sized;
    }
    cr_assert(mt_cudnn_attention_supports(ca, d, 0, 0, &bytes), "cuDNN refused the dims");
    return bytes;
}

static void run_forward(gpu *g, mt_cudnn_attention *ca, path p, const buffers *b, mt_attn_dims d,
                        const mt_segments *seg) {
    cudaStream_t s = (cudaStream_t)g->s;
    mt_status status = p == PATH_CUDNN
                           ? mt_cudnn_attention_forward(ca, s, b->out, b->lse, b->q, b->k, b->v, d, mt_attn_scale(NULL, d.head_dim), seg,
                                                         0, b->ws)
                           : mt_cuda_attention(s, b->out, b->lse, b->q, b->k, b->v, d, NULL, seg ? seg->pos : NULL);
    cr_assert_eq(status, MT_OK, "%s forward: %s", path_name(p), mt_error());
}

static void run_backward(gpu *g, mt_cudnn_attention *ca, path p, const buffers *b, mt_attn_dims d,
                         const mt_segments *seg) {
    cudaStream_t s = (cudaStream_t)g->s;
    mt_status status =
        p == PATH_CUDNN
            ? mt_cudnn_attention_backward(ca, s, b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q,
                                          b->k, b->v, d, mt_attn_scale(NULL, d.head_dim), seg, 0, b->ws)
            : mt_cuda_attention_dx(s, b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q, b->k, b->v,
                                   d, NULL, seg ? seg->pos : NULL, b->ws);
    cr_assert_eq(status, MT_OK, "%s backward: %s", path_name(p), mt_error());
}

/* A micro-batch's segments of the given lengths: host positions and starts in *host, their device
 * copies in *dev. */
static void make_segments(gpu *g, mt_attn_dims d, const int *lengths, int count, mt_segments *host,
                          mt_segments *dev) {
    size_t rows = (size_t)d.batch * d.seq;
    int32_t *pos = host_ids(rows), *starts = host_ids((size_t)count + 1);
    size_t row = 0;
    for (int k = 0; k < count; k++) {
        starts[k] = (int32_t)row;
        for (int i = 0; i < lengths[k]; i++) pos[row++] = i;
    }
    starts[count] = (int32_t)row;
    cr_assert_eq(row, rows, "the segments hold %zu rows, not %zu", row, rows);
    *host = (mt_segments){pos, starts, count, 0};
    *dev = (mt_segments){gpu_put_ids(g, pos, rows), gpu_put_ids(g, starts, (size_t)count + 1), count, 0};
}

static void check_path(path p, mt_attn_dims d, unsigned seed, const int *lengths, int count) {
    gpu g;
    gpu_open(&g);
    mt_cudnn_attention *ca;
    cr_assert_eq(mt_cudnn_attention_create(&ca), MT_OK);
    mt_segments host_seg, dev_seg;
    if (lengths) make_segments(&g, d, lengths, count, &host_seg, &dev_seg);
    const mt_segments *hseg = lengths ? &host_seg : NULL, *dseg = lengths ? &dev_seg : NULL;
    size_t qc = q_count(d), kc = kv_count(d), lc = lse_count(d);
    float *q = host(qc), *k = host(kc), *v = host(kc), *dout = host(qc);
    fill_random(q, qc, 1.5f, &seed), fill_random(k, kc, 1.5f, &seed);
    fill_random(v, kc, 1.0f, &seed), fill_random(dout, qc, 1.0f, &seed);
    buffers b = {
        .q = gpu_put_bf16(&g, q, qc), .k = gpu_put_bf16(&g, k, kc), .v = gpu_put_bf16(&g, v, kc),
        .dout = gpu_put_bf16(&g, dout, qc), .out = gpu_alloc(&g, qc * 2), .lse = gpu_alloc(&g, lc * 4),
        .dq = gpu_alloc(&g, qc * 2), .dk = gpu_alloc(&g, kc * 2), .dv = gpu_alloc(&g, kc * 2),
        .ws = gpu_alloc(&g, workspace_bytes(ca, d, p, dseg)),
    };
    run_forward(&g, ca, p, &b, d, dseg);
    run_backward(&g, ca, p, &b, d, dseg);

    float *out = host(qc), *lse = host(lc), *ref_out = host(qc), *ref_lse = host(lc);
    float *dq = host(qc), *dk = host(kc), *dv = host(kc);
    float *ref_dq = host(qc), *ref_dk = host(kc), *ref_dv = host(kc);
    gpu_get_bf16(&g, out, b.out, qc);
    gpu_get_f32(&g, lse, b.lse, lc);
    gpu_get_bf16(&g, dq, b.dq, qc), gpu_get_bf16(&g, dk, b.dk, kc), gpu_get_bf16(&g, dv, b.dv, kc);

    mt_cpu_attention(ref_out, ref_lse, q, k, v, d, NULL, hseg);
    /* the reference backward starts from this path's own out and lse */
    void *cpu_ws = malloc(mt_cpu_attention_workspace(d) + 1);
    mt_cpu_attention_dx(ref_dq, ref_dk, ref_dv, dout, out, lse, q, k, v, d, NULL, hseg, cpu_ws);
    free(cpu_ws);
    double errors[5] = {ops_rel_err(out, ref_out, qc), ops_rel_err(lse, ref_lse, lc), ops_rel_err(dq, ref_dq, qc),
                        ops_rel_err(dk, ref_dk, kc), ops_rel_err(dv, ref_dv, kc)};
    cr_log_info("%s b%d s%d h%d/%d d%d, %d segments: rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e",
                path_name(p), d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, lengths ? count : d.batch, errors[0],
                errors[1], errors[2], errors[3], errors[4]);
    cr_assert_lt(errors[0], BF16_TOL, "%s out", path_name(p));
    cr_assert_lt(errors[1], LSE_TOL, "%s lse", path_name(p));
    cr_assert_lt(errors[2], BF16_TOL, "%s dq", path_name(p));
    cr_assert_lt(errors[3], BF16_TOL, "%s dk", path_name(p));
    cr_assert_lt(errors[4], BF16_TOL, "%s dv", path_name(p));

    mt_cudnn_attention_destroy(ca);
    gpu_close(&g);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(ref_out), free(ref_lse);
    free(dq), free(dk), free(dv), free(ref_dq), free(ref_dk), free(ref_dv);
    if (lengths) free((void *)host_seg.pos), free((void *)host_seg.starts);
}

static void check_both(mt_attn_dims d, unsigned seed) {
    check_path(PATH_CUDNN, d, seed, NULL, 0);
    check_path(PATH_KERNELS, d, seed, NULL, 0);
}

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))
static void check_both_packed(mt_attn_dims d, unsigned seed, const int *lengths, int count) {
    check_path(PATH_CUDNN, d, seed, lengths, count);
    check_path(PATH_KERNELS, d, seed, lengths, count);
}

/* Packed examples: one-token segments, segments across the kernels' 64-row tiles and cuDNN's, a
 * sequence that is one segment, GQA and MHA, head_dim 64 and 128. */
static const int ODD_2x37[] = {5, 20, 12, 1, 36};
static const int TILES_2x256[] = {63, 2, 70, 1, 120, 256};
static const int MANY_1x512[] = {100, 3, 64, 64, 1, 200, 17, 63};

Test(cuda, attention_paths_packed_gqa_odd_seq_head_dim_64) {
    check_both_packed((mt_attn_dims){.batch = 2, .seq = 37, .heads = 6, .kv_heads = 2, .head_dim = 64}, 31, ODD_2x37,
                      COUNT(ODD_2x37));
}

Test(cuda, attention_paths_packed_mha_head_dim_128) {
    check_both_packed((mt_attn_dims){.batch = 2, .seq = 256, .heads = 4, .kv_heads = 4, .head_dim = 128}, 32,
                      TILES_2x256, COUNT(TILES_2x256));
}

Test(cuda, attention_paths_packed_gqa_seq_512_head_dim_128) {
    check_both_packed((mt_attn_dims){.batch = 1, .seq = 512, .heads = 8, .kv_heads = 2, .head_dim = 128}, 33,
                      MANY_1x512, COUNT(MANY_1x512));
}

Test(cuda, attention_paths_gqa_odd_seq_head_dim_64) {
    check_both((mt_attn_dims){.batch = 2, .seq = 37, .heads = 6, .kv_heads = 2, .head_dim = 64}, 21);
}

Test(cuda, attention_paths_mha_odd_seq_head_dim_128) {
    check_both((mt_attn_dims){.batch = 2, .seq = 37, .heads = 3, .kv_heads = 3, .head_dim = 128}, 22);
}

Test(cuda, attention_paths_gqa_seq_256_head_dim_128) {
    check_both((mt_attn_dims){.batch = 1, .seq = 256, .heads = 8, .kv_heads = 2, .head_dim = 128}, 23);
}

Test(cuda, attention_paths_mha_seq_256_head_dim_64) {
    check_both((mt_attn_dims){.batch = 2, .seq = 256, .heads = 4, .kv_heads = 4, .head_dim = 64}, 24);
}

/* ---- sinks (gpt-oss), through the backend's op: where cuDNN takes the dims, folded into its
 * output and statistics after it (attention_dispatch.c), and with a sliding window, on the kernels;
 * against the CPU reference: out, lse, dq, dk, dv and the sinks' gradient (fp32 sums of the same
 * products from the same out and lse, in another order: 1e-4) ---- */

static float *gpu_put_f32(gpu *g, const float *host, size_t count) {
    float *dev = gpu_alloc(g, count * sizeof *dev);
    mt_copy_async(g->be, dev, host, count * sizeof *dev, g->s);
    gpu_sync(g);
    return dev;
}

static void check_sinks(mt_attn_dims d, int window, unsigned seed) {
    gpu g;
    gpu_open(&g);
    if (!window) {
        mt_cudnn_attention *ca;
        cr_assert_eq(mt_cudnn_attention_create(&ca), MT_OK);
        cr_assert(mt_cudnn_attention_supports(ca, d, 0, 0, NULL), "cuDNN refused the dims");
        mt_cudnn_attention_destroy(ca);
    }
    size_t qc = q_count(d), kc = kv_count(d), lc = lse_count(d);
    float *q = host(qc), *k = host(kc), *v = host(kc), *dout = host(qc), *sinks = host(d.heads);
    fill_random(q, qc, 1.5f, &seed), fill_random(k, kc, 1.5f, &seed);
    fill_random(v, kc, 1.0f, &seed), fill_random(dout, qc, 1.0f, &seed), fill_random(sinks, d.heads, 2.0f, &seed);
    float *ref_dsinks = host(d.heads), *dsinks = host(d.heads);
    buffers b = {
        .q = gpu_put_bf16(&g, q, qc), .k = gpu_put_bf16(&g, k, kc), .v = gpu_put_bf16(&g, v, kc),
        .dout = gpu_put_bf16(&g, dout, qc), .out = gpu_alloc(&g, qc * 2), .lse = gpu_alloc(&g, lc * 4),
        .dq = gpu_alloc(&g, qc * 2), .dk = gpu_alloc(&g, kc * 2), .dv = gpu_alloc(&g, kc * 2),
        .ws = gpu_alloc(&g, g.be->ops->op.attention_workspace(g.be, d, 0)),
    };
    mt_attn_params p = {.window = window, .sinks = gpu_put_f32(&g, sinks, d.heads),
                        .dsinks = gpu_put_f32(&g, ref_dsinks, d.heads)}; /* zeros */
    g.be->ops->op.attention(g.be, g.s, b.out, b.lse, b.q, b.k, b.v, d, &p, NULL, b.ws);
    g.be->ops->op.attention_dx(g.be, g.s, b.dq, b.dk, b.dv, b.dout, b.out, b.lse, b.q, b.k, b.v, d, &p, NULL, b.ws);
    gpu_sync(&g);

    float *out = host(qc), *lse = host(lc), *ref_out = host(qc), *ref_lse = host(lc);
    float *dq = host(qc), *dk = host(kc), *dv = host(kc), *ref_dq = host(qc), *ref_dk = host(kc), *ref_dv = host(kc);
    gpu_get_bf16(&g, out, b.out, qc);
    gpu_get_f32(&g, lse, b.lse, lc);
    gpu_get_bf16(&g, dq, b.dq, qc), gpu_get_bf16(&g, dk, b.dk, kc), gpu_get_bf16(&g, dv, b.dv, kc);
    gpu_get_f32(&g, dsinks, p.dsinks, d.heads);
    mt_attn_params hp = {.window = window, .sinks = sinks, .dsinks = ref_dsinks};
    mt_cpu_attention(ref_out, ref_lse, q, k, v, d, &hp, NULL);
    void *cpu_ws = malloc(mt_cpu_attention_workspace(d) + 1);
    mt_cpu_attention_dx(ref_dq, ref_dk, ref_dv, dout, out, lse, q, k, v, d, &hp, NULL, cpu_ws);
    free(cpu_ws);
    double errors[6] = {ops_rel_err(out, ref_out, qc), ops_rel_err(lse, ref_lse, lc), ops_rel_err(dq, ref_dq, qc),
                        ops_rel_err(dk, ref_dk, kc), ops_rel_err(dv, ref_dv, kc),
                        ops_rel_err(dsinks, ref_dsinks, d.heads)};
    cr_log_info("sinks, window %d, b%d s%d h%d/%d d%d: rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e dsinks %.2e",
                window, d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, errors[0], errors[1], errors[2], errors[3],
                errors[4], errors[5]);
    cr_assert_lt(errors[0], BF16_TOL, "out");
    cr_assert_lt(errors[1], LSE_TOL, "lse");
    cr_assert_lt(errors[2], BF16_TOL, "dq");
    cr_assert_lt(errors[3], BF16_TOL, "dk");
    cr_assert_lt(errors[4], BF16_TOL, "dv");
    cr_assert_lt(errors[5], 1e-4, "dsinks");
    gpu_close(&g);
    free(q), free(k), free(v), free(dout), free(sinks), free(ref_dsinks), free(dsinks);
    free(out), free(lse), free(ref_out), free(ref_lse);
    free(dq), free(dk), free(dv), free(ref_dq), free(ref_dk), free(ref_dv);
}

Test(cuda, attention_sinks_on_cudnn_gqa_odd_seq_head_dim_64) {
    check_sinks((mt_attn_dims){.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 64}, 0, 41);
}

Test(cuda, attention_sinks_on_cudnn_gqa_head_dim_128) {
    check_sinks((mt_attn_dims){.batch = 1, .seq = 256, .heads = 8, .kv_heads = 2, .head_dim = 128}, 0, 42);
}

Test(cuda, attention_sinks_in_a_sliding_window_on_the_kernels) {
    check_sinks((mt_attn_dims){.batch = 2, .seq = 150, .heads = 8, .kv_heads = 1, .head_dim = 64}, 40, 43);
}

/* ---- windows of queries (tiled attention, backend.h) ----
 *
 * A sequence cut from its end into windows of T queries, as the engine cuts it (engine/block.c),
 * each on one path: the windows against the CPU reference of each window on the same bf16 inputs
 * (its backward from this path's own out and lse; one L2 error over all the windows), at the
 * tolerances above; the windows assembled (out, lse and dq row by row, dk and dv summed over the
 * windows in fp32 and rounded once, as engine/kinds/attention_run.c does) against the CPU reference of
 * the whole sequence and against this path's own untiled attention. Logged beside: dk and dv summed
 * in bf16 instead (a rounding after every window), against the same reference, the measurement the
 * fp32 sums were chosen by. */

static float bf16_round(float x) { return mt_bf16_to_f32(mt_f32_to_bf16(x)); }

static double rel_err_bf16(const float *got, const float *want, size_t count) {
    float *rounded = host(count);
    for (size_t i = 0; i < count; i++) rounded[i] = bf16_round(got[i]);
    double err = ops_rel_err(rounded, want, count);
    free(rounded);
    return err;
}

/* The squared error and norm of one window's output, summed over the windows: an L2 error over all
 * of them, so that a window whose reference cancels to rounding (a one-token sequence's dq: p = 1,
 * dout.v = delta) weighs by its size, not as a ratio of two roundings. */
static void add_sq_err(double *diff, double *norm, const float *got, const float *want, size_t count) {
    for (size_t i = 0; i < count; i++) {
        double e = (double)got[i] - want[i];
        *diff += e * e;
        *norm += (double)want[i] * want[i];
    }
}

static void check_windows(path p, mt_attn_dims d, int T, unsigned seed) {
    cr_assert_eq(d.batch, 1, "the engine's windows lie in one sequence");
    gpu g;
    gpu_open(&g);
    mt_cudnn_attention *ca;
    cr_assert_eq(mt_cudnn_attention_create(&ca), MT_OK);
    size_t qc = q_count(d), kc = kv_count(d), lc = lse_count(d), row = (size_t)d.heads * d.head_dim;
    size_t kv = (size_t)d.kv_heads * d.head_dim;
    float *q = host(qc), *k = host(kc), *v = host(kc), *dout = host(qc);
    fill_random(q, qc, 1.5f, &seed), fill_random(k, kc, 1.5f, &seed);
    fill_random(v, kc, 1.0f, &seed), fill_random(dout, qc, 1.0f, &seed);
    int windows = (d.seq + T - 1) / T, first = d.seq - (windows - 1) * T;
    mt_attn_dims last = d;
    last.q0 = d.seq - T, last.q_len = T;
    mt_attn_dims start = {1, first, d.heads, d.kv_heads, d.head_dim, 0, 0};
    size_t ws = workspace_bytes(ca, last, p, NULL), first_ws = workspace_bytes(ca, start, p, NULL);
    size_t whole_ws = workspace_bytes(ca, d, p, NULL);
    if (first_ws > ws) ws = first_ws;
    if (whole_ws > ws) ws = whole_ws;
    buffers b = {
        .q = gpu_put_bf16(&g, q, qc), .k = gpu_put_bf16(&g, k, kc), .v = gpu_put_bf16(&g, v, kc),
        .dout = gpu_put_bf16(&g, dout, qc), .out = gpu_alloc(&g, qc * 2), .lse = gpu_alloc(&g, lc * 4),
        .dq = gpu_alloc(&g, qc * 2), .dk = gpu_alloc(&g, kc * 2), .dv = gpu_alloc(&g, kc * 2),
        .ws = gpu_alloc(&g, ws),
    };
    /* the untiled attention on this path first */
    run_forward(&g, ca, p, &b, d, NULL);
    run_backward(&g, ca, p, &b, d, NULL);
    float *whole_out = host(qc), *whole_dq = host(qc), *whole_dk = host(kc), *whole_dv = host(kc);
    gpu_get_bf16(&g, whole_out, b.out, qc), gpu_get_bf16(&g, whole_dq, b.dq, qc);
    gpu_get_bf16(&g, whole_dk, b.dk, kc), gpu_get_bf16(&g, whole_dv, b.dv, kc);

    float *out = host(qc), *lse = host(lc), *dq = host(qc), *dk = host(kc), *dv = host(kc);
    float *dk32 = host(kc), *dv32 = host(kc), *dk16 = host(kc), *dv16 = host(kc);
    float *ref_out = host(qc), *ref_lse = host(lc), *ref_dq = host(qc), *ref_dk = host(kc), *ref_dv = host(kc);
    float *window_lse = host(lc);
    void *cpu_ws = malloc(mt_cpu_attention_workspace(d) + 1);
    double diff[5] = {0}, norm[5] = {0};
    for (int i = windows - 1; i >= 0; i--) { /* the engine's backward order */
        int q0 = i == 0 ? 0 : first + (i - 1) * T, rows = i == 0 ? first : T;
        mt_attn_dims w = i == 0 ? start : d;
        if (i > 0) w.q0 = q0, w.q_len = T;
        buffers wb = b;
        wb.q = (char *)b.q + (size_t)q0 * row * 2, wb.dout = (char *)b.dout + (size_t)q0 * row * 2;
        wb.out = (char *)b.out + (size_t)q0 * row * 2, wb.dq = (char *)b.dq + (size_t)q0 * row * 2;
        wb.lse = (float *)b.lse + (size_t)d.heads * q0;
        run_forward(&g, ca, p, &wb, w, NULL);
        run_backward(&g, ca, p, &wb, w, NULL);
        size_t wq = (size_t)rows * row, wl = (size_t)rows * d.heads, keys = (size_t)(q0 + rows) * kv;
        float *o = out + (size_t)q0 * row, *l = window_lse, *gq = dq + (size_t)q0 * row;
        gpu_get_bf16(&g, o, wb.out, wq), gpu_get_f32(&g, l, wb.lse, wl), gpu_get_bf16(&g, gq, wb.dq, wq);
        for (int h = 0; h < d.heads; h++) /* a window's lse is [heads, its rows]; the whole's [heads, seq] */
            memcpy(lse + (size_t)h * d.seq + q0, l + (size_t)h * rows, (size_t)rows * sizeof *l);
        gpu_get_bf16(&g, dk, b.dk, keys), gpu_get_bf16(&g, dv, b.dv, keys);
        /* this window on the CPU, from the same rows and this path's out and lse */
        mt_cpu_attention(ref_out, ref_lse, q + (size_t)q0 * row, k, v, w, NULL, NULL);
        mt_cpu_attention_dx(ref_dq, ref_dk, ref_dv, dout + (size_t)q0 * row, o, l, q + (size_t)q0 * row, k, v, w, NULL,
                            NULL, cpu_ws);
        const float *got[5] = {o, l, gq, dk, dv}, *want[5] = {ref_out, ref_lse, ref_dq, ref_dk, ref_dv};
        size_t counts[5] = {wq, wl, wq, keys, keys};
        for (int j = 0; j < 5; j++) add_sq_err(&diff[j], &norm[j], got[j], want[j], counts[j]);
        for (size_t j = 0; j < keys; j++) { /* the engine's fp32 sums, and bf16 ones for the record */
            dk32[j] = i == windows - 1 ? dk[j] : dk32[j] + dk[j];
            dv32[j] = i == windows - 1 ? dv[j] : dv32[j] + dv[j];
            dk16[j] = i == windows - 1 ? dk[j] : bf16_round(dk16[j] + dk[j]);
            dv16[j] = i == windows - 1 ? dv[j] : bf16_round(dv16[j] + dv[j]);
        }
    }
    double err[5];
    for (int j = 0; j < 5; j++) err[j] = sqrt(diff[j] / (norm[j] > 0.0 ? norm[j] : 1e-30));
    cr_log_info("%s windows of %d over s%d h%d/%d d%d: the windows' rel err against the CPU's windows: out %.2e "
                "lse %.2e dq %.2e dk %.2e dv %.2e", path_name(p), T, d.seq, d.heads, d.kv_heads, d.head_dim, err[0],
                err[1], err[2], err[3], err[4]);
    cr_assert_lt(err[0], BF16_TOL, "%s: the windows' out", path_name(p));
    cr_assert_lt(err[1], LSE_TOL, "%s: the windows' lse", path_name(p));
    cr_assert_lt(err[2], BF16_TOL, "%s: the windows' dq", path_name(p));
    cr_assert_lt(err[3], BF16_TOL, "%s: the windows' share of dk", path_name(p));
    cr_assert_lt(err[4], BF16_TOL, "%s: the windows' share of dv", path_name(p));

    /* assembled, against the whole sequence on the CPU (its backward from the assembled out and lse) */
    mt_cpu_attention(ref_out, ref_lse, q, k, v, d, NULL, NULL);
    mt_cpu_attention_dx(ref_dq, ref_dk, ref_dv, dout, out, lse, q, k, v, d, NULL, NULL, cpu_ws);
    double whole[5] = {ops_rel_err(out, ref_out, qc), ops_rel_err(lse, ref_lse, lc), ops_rel_err(dq, ref_dq, qc),
                       rel_err_bf16(dk32, ref_dk, kc), rel_err_bf16(dv32, ref_dv, kc)};
    double untiled[5] = {ops_rel_err(out, whole_out, qc), 0, ops_rel_err(dq, whole_dq, qc),
                         rel_err_bf16(dk32, whole_dk, kc), rel_err_bf16(dv32, whole_dv, kc)};
    double untiled_ref[2] = {ops_rel_err(whole_dk, ref_dk, kc), ops_rel_err(whole_dv, ref_dv, kc)};
    cr_log_info("%s windows of %d assembled: rel err against the CPU's whole: out %.2e lse %.2e dq %.2e dk %.2e dv "
                "%.2e (this path untiled: dk %.2e dv %.2e; the windows' dk, dv summed in bf16 instead: %.2e %.2e); "
                "against this path untiled: out %.2e dq %.2e dk %.2e dv %.2e", path_name(p), T, whole[0], whole[1],
                whole[2], whole[3], whole[4], untiled_ref[0], untiled_ref[1], ops_rel_err(dk16, ref_dk, kc),
                ops_rel_err(dv16, ref_dv, kc), untiled[0], untiled[2], untiled[3], untiled[4]);
    cr_assert_lt(whole[0], BF16_TOL, "%s: assembled out", path_name(p));
    cr_assert_lt(whole[1], LSE_TOL, "%s: assembled lse", path_name(p));
    for (int j = 2; j < 5; j++) cr_assert_lt(whole[j], BF16_TOL, "%s: assembled gradient %d", path_name(p), j);
    for (int j = 0; j < 5; j++) cr_assert_lt(untiled[j], BF16_TOL, "%s: against untiled, output %d", path_name(p), j);

    mt_cudnn_attention_destroy(ca);
    gpu_close(&g);
    free(cpu_ws);
    float *bufs[] = {window_lse, q, k, v, dout, whole_out, whole_dq, whole_dk, whole_dv, out, lse, dq, dk, dv, dk32, dv32, dk16,
                     dv16, ref_out, ref_lse, ref_dq, ref_dk, ref_dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void check_windows_both(mt_attn_dims d, int T, unsigned seed) {
    check_windows(PATH_CUDNN, d, T, seed);
    check_windows(PATH_KERNELS, d, T, seed);
}

/* 300 = 44 + 2 x 128: windows from positions no 64 divides */
Test(cuda, attention_windows_gqa_head_dim_128) {
    check_windows_both((mt_attn_dims){.batch = 1, .seq = 300, .heads = 8, .kv_heads = 2, .head_dim = 128}, 128, 31);
}

/* 1000 = 40 + 10 x 96: many windows, MHA */
Test(cuda, attention_many_windows_mha_head_dim_64) {
    check_windows_both((mt_attn_dims){.batch = 1, .seq = 1000, .heads = 4, .kv_heads = 4, .head_dim = 64}, 96, 32);
}

/* one window the whole sequence; one query a window (the kernels: where cuDNN has no plan for a
 * shape, the dispatch gives it to them) */
Test(cuda, attention_windows_one_and_tiny) {
    check_windows_both((mt_attn_dims){.batch = 1, .seq = 256, .heads = 6, .kv_heads = 2, .head_dim = 64}, 256, 33);
    check_windows(PATH_KERNELS, (mt_attn_dims){.batch = 1, .seq = 12, .heads = 2, .kv_heads = 1, .head_dim = 128}, 1,
                  34);
}

/* Mean seconds of forward and backward over `reps` runs after one warm-up. */
static void time_path(gpu *g, mt_cudnn_attention *ca, path p, const buffers *b, mt_attn_dims d,
                      double *fwd, double *bwd) {
    mt_event *t0 = mt_event_create(g->be), *t1 = mt_event_create(g->be);
    mt_event *t2 = mt_event_create(g->be);
    const int reps = 5;
    *fwd = *bwd = 0.0;
    for (int rep = 0; rep <= reps; rep++) {
        mt_event_record(g->be, t0, g->s);
        run_forward(g, ca, p, b, d, NULL);
        mt_event_record(g->be, t1, g->s);
        run_backward(g, ca, p, b, d, NULL);
        mt_event_record(g->be, t2, g->s);
        gpu_sync(g);
        if (rep > 0) {
            *fwd += mt_event_elapsed(g->be, t0, t1) / reps;
            *bwd += mt_event_elapsed(g->be, t1, t2) / reps;
        }
    }
    mt_event_destroy(g->be, t0);
    mt_event_destroy(g->be, t1);
    mt_event_destroy(g->be, t2);
}

/* The benchmark's attention (seq 4096, 24 heads, 8 kv heads, head_dim 128) on both paths: both
 * must finish with finite gradients; cuDNN must not be slower than the kernels it replaces.
 * FLOPs: forward 2 * seq^2 * heads * head_dim per sequence (the causal half of the two
 * 2*seq^2*head_dim GEMMs per head); backward 2.5 times that (five GEMMs instead of two). */
Test(cuda, attention_paths_benchmark_speed) {
    gpu g;
    gpu_open(&g);
    mt_cudnn_attention *ca;
    cr_assert_eq(mt_cudnn_attention_create(&ca), MT_OK);
    const mt_attn_dims d = {.batch = 1, .seq = 4096, .heads = 24, .kv_heads = 8, .head_dim = 128};
    size_t qc = q_count(d), kc = kv_count(d);
    unsigned seed = 25;
    float *q = host(qc), *k = host(kc), *v = host(kc);
    fill_random(q, qc, 1.0f, &seed), fill_random(k, kc, 1.0f, &seed), fill_random(v, kc, 1.0f, &seed);
    size_t ws = workspace_bytes(ca, d, PATH_CUDNN, NULL), kernel_ws = workspace_bytes(ca, d, PATH_KERNELS, NULL);
    buffers b = {
        .q = gpu_put_bf16(&g, q, qc), .k = gpu_put_bf16(&g, k, kc), .v = gpu_put_bf16(&g, v, kc),
        .dout = gpu_put_bf16(&g, q, qc), /* any values do for timing */
        .out = gpu_alloc(&g, qc * 2), .lse = gpu_alloc(&g, lse_count(d) * 4),
        .dq = gpu_alloc(&g, qc * 2), .dk = gpu_alloc(&g, kc * 2), .dv = gpu_alloc(&g, kc * 2),
        .ws = gpu_alloc(&g, ws > kernel_ws ? ws : kernel_ws),
    };
    double flops = 2.0 * d.batch * d.seq * (double)d.seq * d.heads * d.head_dim;
    double fwd[2], bwd[2];
    float *dq = host(qc);
    for (path p = PATH_CUDNN; p <= PATH_KERNELS; p++) {
        time_path(&g, ca, p, &b, d, &fwd[p], &bwd[p]);
        cr_log_info("attention seq 4096 %s: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
                    "(%.1f TFLOP/s)", path_name(p), fwd[p] * 1e3, flops / fwd[p] * 1e-12,
                    bwd[p] * 1e3, 2.5 * flops / bwd[p] * 1e-12);
        gpu_get_bf16(&g, dq, b.dq, qc);
        for (size_t i = 0; i < qc; i++) cr_assert(isfinite(dq[i]), "%s dq[%zu] = %g", path_name(p), i, dq[i]);
    }
    cr_assert_leq(fwd[PATH_CUDNN] + bwd[PATH_CUDNN], fwd[PATH_KERNELS] + bwd[PATH_KERNELS],
                  "cuDNN attention is slower than the CUDA-core kernels");
    mt_cudnn_attention_destroy(ca);
    gpu_close(&g);
    free(q), free(k), free(v), free(dq);
}
