/* Both attention paths of the CUDA backend -- cuDNN's fused SDPA (attention_cudnn.c) and the
 * CUDA-core flash kernels (attention.cu) -- called directly, each against the CPU reference on
 * the same bf16-rounded inputs; then both timed at the benchmark shape.
 *
 * Tolerances (relative error ||out - ref|| / ||ref||): 1e-2 for bf16 outputs (8 mantissa bits,
 * a rounding of up to 2^-9 per element, plus cuDNN's bf16 probabilities in P.V and, for GQA, dK
 * and dV summed over the group from bf16 per-head terms); 1e-4 for lse, fp32 softmax statistics
 * of the same inputs. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/cuda_kernels.h"
#include "gpu_harness.h"

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

static size_t workspace_bytes(mt_cudnn_attention *ca, mt_attn_dims d, path p) {
    size_t bytes = mt_cuda_attention_workspace(d);
    if (p == PATH_CUDNN) cr_assert(mt_cudnn_attention_supports(ca, d, &bytes), "cuDNN refused the dims");
    return bytes;
}

static void run_forward(gpu *g, mt_cudnn_attention *ca, path p, const buffers *b, mt_attn_dims d) {
    cudaStream_t s = (cudaStream_t)g->s;
    mt_status status = p == PATH_CUDNN
                           ? mt_cudnn_attention_forward(ca, s, b->out, b->lse, b->q, b->k, b->v, d, b->ws)
                           : mt_cuda_attention(s, b->out, b->lse, b->q, b->k, b->v, d);
    cr_assert_eq(status, MT_OK, "%s forward: %s", path_name(p), mt_error());
}

static void run_backward(gpu *g, mt_cudnn_attention *ca, path p, const buffers *b, mt_attn_dims d) {
    cudaStream_t s = (cudaStream_t)g->s;
    mt_status status =
        p == PATH_CUDNN
            ? mt_cudnn_attention_backward(ca, s, b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q,
                                          b->k, b->v, d, b->ws)
            : mt_cuda_attention_dx(s, b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q, b->k, b->v,
                                   d, b->ws);
    cr_assert_eq(status, MT_OK, "%s backward: %s", path_name(p), mt_error());
}

static void check_path(path p, mt_attn_dims d, unsigned seed) {
    gpu g;
    gpu_open(&g);
    mt_cudnn_attention *ca;
    cr_assert_eq(mt_cudnn_attention_create(&ca), MT_OK);
    size_t qc = q_count(d), kc = kv_count(d), lc = lse_count(d);
    float *q = host(qc), *k = host(kc), *v = host(kc), *dout = host(qc);
    fill_random(q, qc, 1.5f, &seed), fill_random(k, kc, 1.5f, &seed);
    fill_random(v, kc, 1.0f, &seed), fill_random(dout, qc, 1.0f, &seed);
    buffers b = {
        .q = gpu_put_bf16(&g, q, qc), .k = gpu_put_bf16(&g, k, kc), .v = gpu_put_bf16(&g, v, kc),
        .dout = gpu_put_bf16(&g, dout, qc), .out = gpu_alloc(&g, qc * 2), .lse = gpu_alloc(&g, lc * 4),
        .dq = gpu_alloc(&g, qc * 2), .dk = gpu_alloc(&g, kc * 2), .dv = gpu_alloc(&g, kc * 2),
        .ws = gpu_alloc(&g, workspace_bytes(ca, d, p)),
    };
    run_forward(&g, ca, p, &b, d);
    run_backward(&g, ca, p, &b, d);

    float *out = host(qc), *lse = host(lc), *ref_out = host(qc), *ref_lse = host(lc);
    float *dq = host(qc), *dk = host(kc), *dv = host(kc);
    float *ref_dq = host(qc), *ref_dk = host(kc), *ref_dv = host(kc);
    gpu_get_bf16(&g, out, b.out, qc);
    gpu_get_f32(&g, lse, b.lse, lc);
    gpu_get_bf16(&g, dq, b.dq, qc), gpu_get_bf16(&g, dk, b.dk, kc), gpu_get_bf16(&g, dv, b.dv, kc);

    mt_cpu_attention(ref_out, ref_lse, q, k, v, d, NULL);
    /* the reference backward starts from this path's own out and lse */
    void *cpu_ws = malloc(mt_cpu_attention_workspace(d) + 1);
    mt_cpu_attention_dx(ref_dq, ref_dk, ref_dv, dout, out, lse, q, k, v, d, NULL, cpu_ws);
    free(cpu_ws);
    double errors[5] = {ops_rel_err(out, ref_out, qc), ops_rel_err(lse, ref_lse, lc), ops_rel_err(dq, ref_dq, qc),
                        ops_rel_err(dk, ref_dk, kc), ops_rel_err(dv, ref_dv, kc)};
    cr_log_info("%s b%d s%d h%d/%d d%d: rel err out %.2e lse %.2e dq %.2e dk %.2e dv %.2e",
                path_name(p), d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, errors[0], errors[1],
                errors[2], errors[3], errors[4]);
    cr_assert_lt(errors[0], BF16_TOL, "%s out", path_name(p));
    cr_assert_lt(errors[1], LSE_TOL, "%s lse", path_name(p));
    cr_assert_lt(errors[2], BF16_TOL, "%s dq", path_name(p));
    cr_assert_lt(errors[3], BF16_TOL, "%s dk", path_name(p));
    cr_assert_lt(errors[4], BF16_TOL, "%s dv", path_name(p));

    mt_cudnn_attention_destroy(ca);
    gpu_close(&g);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(ref_out), free(ref_lse);
    free(dq), free(dk), free(dv), free(ref_dq), free(ref_dk), free(ref_dv);
}

static void check_both(mt_attn_dims d, unsigned seed) {
    check_path(PATH_CUDNN, d, seed);
    check_path(PATH_KERNELS, d, seed);
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

/* Mean seconds of forward and backward over `reps` runs after one warm-up. */
static void time_path(gpu *g, mt_cudnn_attention *ca, path p, const buffers *b, mt_attn_dims d,
                      double *fwd, double *bwd) {
    mt_event *t0 = mt_event_create(g->be), *t1 = mt_event_create(g->be);
    mt_event *t2 = mt_event_create(g->be);
    const int reps = 5;
    *fwd = *bwd = 0.0;
    for (int rep = 0; rep <= reps; rep++) {
        mt_event_record(g->be, t0, g->s);
        run_forward(g, ca, p, b, d);
        mt_event_record(g->be, t1, g->s);
        run_backward(g, ca, p, b, d);
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
    size_t ws = workspace_bytes(ca, d, PATH_CUDNN), kernel_ws = workspace_bytes(ca, d, PATH_KERNELS);
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
