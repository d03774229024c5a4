/* The mixture-of-experts grouped GEMMs, the ways a CUDA backend can run them, at model shapes: which
 * is fastest decides the backend's default (docs/backends.md). For each shape, the six GEMMs of a layer
 * (gate_up and down, forward, dx and dw) over tokens * k rows sorted by expert, each way timed, and
 * each way's results compared with the kernels' (relative L2):
 *
 *   kernel          moe_gemm.cu: one kernel a GEMM that reads the offsets on the device (the default)
 *   cublaslt        moe_gemm_cublaslt.c: the offsets copied home, then a cuBLASLt GEMM an expert
 *                   (MT_MOE_GEMM=cublaslt)
 *   cublas_grouped  cublasGemmGroupedBatchedEx (cuBLAS 12.5+): one call, but its sizes on the host, so
 *                   the offsets come home too; pointer arrays uploaded each call
 *   dense           one cuBLASLt GEMM of the same rows against one expert (the same FLOPs without
 *                   grouping: the ceiling)
 *
 *   bench_moe_gemm [--tokens 16384] [--shapes olmoe,qwen3] [--ways kernel,cublaslt,cublas_grouped,dense]
 *                  [--iters 5] [--seg TOKENS] [--load uniform|skewed]
 *
 * Shapes: olmoe (OLMoE-1B-7B: 64 experts, top 8, hidden 2048, expert width 1024), qwen3 (Qwen3-30B-A3B:
 * 128, top 8, 2048, 768), mixtral (Mixtral-8x7B: 8, top 2, 4096, 14336). Each token's k experts are
 * drawn at random (uniform, or skewed: expert e about as likely as 1 / (e + 1)); --seg splits the rows
 * into segments of that many tokens (dw adds segment by segment). One line per (shape, way, GEMM),
 * key=value fields; times are the mean of --iters calls after one warm-up, from CUDA events, so a way
 * that waits for the offsets pays for the wait. */
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_backend.h"
#include "util/bf16.h"

typedef struct {
    const char *name;
    int E, k, d, f;
} shape;

static const shape shapes[] = {
    {"olmoe", 64, 8, 2048, 1024},
    {"qwen3", 128, 8, 2048, 768},
    {"mixtral", 8, 2, 4096, 14336},
};

typedef enum { KERNEL, CUBLASLT, CUBLAS_GROUPED, DENSE, WAYS } way;
static const char *const way_names[WAYS] = {"kernel", "cublaslt", "cublas_grouped", "dense"};

typedef struct {
    int tokens, iters, seg, skewed;
    int shape_on[3], way_on[WAYS];
} options;

static void usage(void) {
    fprintf(stderr, "usage: bench_moe_gemm [--tokens N] [--shapes olmoe,qwen3,mixtral] "
                    "[--ways kernel,cublaslt,cublas_grouped,dense] [--iters K] [--seg TOKENS] [--load uniform|skewed]\n");
    exit(2);
}

static int positive(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v <= 0 || v > (1 << 24)) usage();
    return (int)v;
}

/* Sets on[i] for each name of the comma list found in names[count]. */
static void pick(const char *list, const char *const *names, int count, int *on) {
    char *copy = strdup(list);
    memset(on, 0, sizeof(int) * count);
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ",")) {
        int i = 0;
        while (i < count && strcmp(t, names[i])) i++;
        if (i == count) usage();
        on[i] = 1;
    }
    free(copy);
}

static options parse(int argc, char **argv) {
    options o = {.tokens = 16384, .iters = 5, .shape_on = {1, 1, 0}, .way_on = {1, 1, 1, 1}};
    const char *shape_names[3] = {"olmoe", "qwen3", "mixtral"};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        const char *flag = argv[i], *v = argv[++i];
        if (!strcmp(flag, "--tokens")) o.tokens = positive(v);
        else if (!strcmp(flag, "--iters")) o.iters = positive(v);
        else if (!strcmp(flag, "--seg")) o.seg = positive(v);
        else if (!strcmp(flag, "--shapes")) pick(v, shape_names, 3, o.shape_on);
        else if (!strcmp(flag, "--ways")) pick(v, way_names, WAYS, o.way_on);
        else if (!strcmp(flag, "--load") && (!strcmp(v, "uniform") || !strcmp(v, "skewed"))) o.skewed = !strcmp(v, "skewed");
        else usage();
    }
    return o;
}

static void die(const char *what) {
    fprintf(stderr, "bench_moe_gemm: %s: %s\n", what, mt_error());
    exit(1);
}

#define CUDA_OR_DIE(x)                                                                           \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "bench_moe_gemm: %s: %s\n", #x, cudaGetErrorString(e_));             \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { return (double)(next(s) >> 11) / 9007199254740992.0; }

/* A device buffer of count bf16 values uniform in [-scale, scale). */
static void *random_bf16(size_t count, float scale, uint64_t *s) {
    uint16_t *h = malloc(count * 2);
    for (size_t i = 0; i < count; i++) h[i] = mt_f32_to_bf16((float)(scale * (2 * uniform(s) - 1)));
    void *d;
    CUDA_OR_DIE(cudaMalloc(&d, count * 2));
    CUDA_OR_DIE(cudaMemcpy(d, h, count * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void *device_zeros(size_t bytes) {
    void *d;
    CUDA_OR_DIE(cudaMalloc(&d, bytes));
    CUDA_OR_DIE(cudaMemset(d, 0, bytes));
    return d;
}

/* ||a - b|| / ||b|| of two device buffers (bf16 or fp32). */
static double rel_err(const void *a, const void *b, size_t count, int f32) {
    size_t bytes = count * (f32 ? 4 : 2);
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
    CUDA_OR_DIE(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CUDA_OR_DIE(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    double diff = 0, norm = 0;
    for (size_t i = 0; i < count; i++) {
        float x, y;
        if (f32) memcpy(&x, ha + 4 * i, 4), memcpy(&y, hb + 4 * i, 4);
        else x = mt_bf16_to_f32(((uint16_t *)ha)[i]), y = mt_bf16_to_f32(((uint16_t *)hb)[i]);
        diff += ((double)x - y) * ((double)x - y);
        norm += (double)y * y;
    }
    free(ha);
    free(hb);
    return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

/* One layer's buffers: rows sorted by expert. */
typedef struct {
    int E, S, rows, d, f;
    int32_t *offsets_host, *offsets;
    void *x, *w_gu, *w_down, *a, *dgu, *dy; /* inputs */
    void *gu, *y, *dx, *da;                 /* outputs (bf16) */
    float *dw_gu, *dw_down;                 /* outputs (fp32, += from zero) */
} layer;

/* The six GEMMs: 0 gate_up forward, 1 down forward, 2 gate_up dx, 3 down dx, 4 gate_up dw, 5 down dw. */
enum { GEMMS = 6 };
static const char *const gemm_names[GEMMS] = {"gate_up", "down", "gate_up_dx", "down_dx", "gate_up_dw", "down_dw"};

static void gemm_dims(const layer *l, int g, int *in, int *out) {
    int gate_up = g % 2 == 0;
    *in = gate_up ? l->d : l->f;
    *out = gate_up ? 2 * l->f : l->d;
}

/* ---- cublasGemmGroupedBatchedEx: a problem per (expert[, segment]) with rows ---- */

typedef struct {
    cublasHandle_t h;
    const void **ptrs_host; /* A, B and C pointer arrays, pinned, uploaded each call */
    void **ptrs;
} grouped_ctx;

static cublasStatus_t grouped_call(grouped_ctx *c, cudaStream_t s, const layer *l, int g) {
    int in, out, E = l->E, S = l->S;
    gemm_dims(l, g, &in, &out);
    int32_t *off = l->offsets_host;
    CUDA_OR_DIE(cudaMemcpyAsync(off, l->offsets, ((size_t)E * S + 1) * 4, cudaMemcpyDeviceToHost, s));
    CUDA_OR_DIE(cudaStreamSynchronize(s));
    int problems = g >= 4 ? E * S : E, count = 0;
    cublasOperation_t *ta = malloc(problems * sizeof *ta), *tb = malloc(problems * sizeof *tb);
    int *m = malloc(problems * sizeof(int) * 7), *n = m + problems, *k = n + problems, *lda = k + problems,
        *ldb = lda + problems, *ldc = ldb + problems, *size = ldc + problems;
    float *alpha = malloc(problems * sizeof(float) * 2), *beta = alpha + problems;
    const void **A = c->ptrs_host, **B = A + problems;
    void **C = (void **)(B + problems);
    const char *w = g % 2 == 0 ? l->w_gu : l->w_down;
    const char *x = g < 2 ? (g == 0 ? l->x : l->a) : NULL;
    for (int p = 0; p < problems; p++) {
        int e = g >= 4 ? p / S : p;
        int r0 = g >= 4 ? off[p] : off[e * S], r1 = g >= 4 ? off[p + 1] : off[(e + 1) * S], rows = r1 - r0;
        if (rows == 0) continue;
        int i = count++;
        size[i] = 1, alpha[i] = 1, beta[i] = g >= 4 ? 1 : 0;
        if (g < 2) { /* y^T[out, rows] = (w[e] as [in, out])^T . x^T */
            ta[i] = CUBLAS_OP_T, tb[i] = CUBLAS_OP_N, m[i] = out, n[i] = rows, k[i] = in, lda[i] = in, ldb[i] = in,
            ldc[i] = out;
            A[i] = w + (size_t)e * out * in * 2, B[i] = x + (size_t)r0 * in * 2;
            C[i] = (char *)(g == 0 ? l->gu : l->y) + (size_t)r0 * out * 2;
        } else if (g < 4) { /* dx^T[in, rows] = (w[e] as [in, out]) . dy^T */
            const char *dy = g == 2 ? l->dgu : l->dy;
            ta[i] = CUBLAS_OP_N, tb[i] = CUBLAS_OP_N, m[i] = in, n[i] = rows, k[i] = out, lda[i] = in, ldb[i] = out,
            ldc[i] = in;
            A[i] = w + (size_t)e * out * in * 2, B[i] = dy + (size_t)r0 * out * 2;
            C[i] = (char *)(g == 2 ? l->dx : l->da) + (size_t)r0 * in * 2;
        } else { /* dw[e]^T[in, out] += x^T . dy */
            const char *xx = g == 4 ? l->x : l->a, *dy = g == 4 ? l->dgu : l->dy;
            ta[i] = CUBLAS_OP_N, tb[i] = CUBLAS_OP_T, m[i] = in, n[i] = out, k[i] = rows, lda[i] = in, ldb[i] = out,
            ldc[i] = in;
            A[i] = xx + (size_t)r0 * in * 2, B[i] = dy + (size_t)r0 * out * 2;
            C[i] = (g == 4 ? l->dw_gu : l->dw_down) + (size_t)e * out * in;
        }
    }
    /* the three pointer arrays, packed */
    memmove(A + count, B, count * sizeof *A);
    memmove(A + 2 * count, C, count * sizeof *A);
    CUDA_OR_DIE(cudaMemcpyAsync(c->ptrs, c->ptrs_host, 3 * (size_t)count * sizeof(void *), cudaMemcpyHostToDevice, s));
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (count)
        st = cublasGemmGroupedBatchedEx(c->h, ta, tb, m, n, k, alpha, (const void *const *)c->ptrs, CUDA_R_16BF, lda,
                                        (const void *const *)(c->ptrs + count), CUDA_R_16BF, ldb, beta,
                                        c->ptrs + 2 * count, g >= 4 ? CUDA_R_32F : CUDA_R_16BF, ldc, count, size,
                                        CUBLAS_COMPUTE_32F);
    /* the host arrays must outlive the call's use of them: cuBLAS reads them before returning */
    free(ta), free(tb), free(m), free(alpha);
    return st;
}

/* ---- one call of GEMM g the given way ---- */

static mt_status call(mt_cuda_backend *cb, grouped_ctx *gc, cudaStream_t s, way wy, const layer *l, int g) {
    int in, out;
    gemm_dims(l, g, &in, &out);
    int rows = l->rows, E = l->E, S = l->S;
    const void *w = g % 2 == 0 ? l->w_gu : l->w_down;
    const void *x = g == 0 || g == 4 ? l->x : l->a, *dy = g == 2 || g == 4 ? l->dgu : l->dy;
    void *y = g == 0 ? l->gu : l->y, *dx = g == 2 ? l->dx : l->da;
    float *dw = g == 4 ? l->dw_gu : l->dw_down;
    switch (wy) {
    case KERNEL:
        if (g < 2) return mt_cuda_moe_gemm(s, y, x, w, l->offsets, rows, E, S, in, out);
        if (g < 4) return mt_cuda_moe_gemm_dx(s, dx, dy, w, l->offsets, rows, E, S, in, out);
        return mt_cuda_moe_gemm_dw(s, dw, dy, x, l->offsets, rows, E, S, in, out);
    case CUBLASLT:
        if (g < 2) return mt_cuda_moe_gemm_cublaslt(cb, s, y, x, w, l->offsets, rows, E, S, in, out);
        if (g < 4) return mt_cuda_moe_gemm_dx_cublaslt(cb, s, dx, dy, w, l->offsets, rows, E, S, in, out);
        return mt_cuda_moe_gemm_dw_cublaslt(cb, s, dw, dy, x, l->offsets, rows, E, S, in, out);
    case CUBLAS_GROUPED: {
        cublasStatus_t st = grouped_call(gc, s, l, g);
        if (st != CUBLAS_STATUS_SUCCESS)
            return mt_fail(MT_ERR_DEVICE, "cublasGemmGroupedBatchedEx: %s", cublasGetStatusString(st));
        return MT_OK;
    }
    default: { /* dense: every row against expert 0's matrix */
        mt_cuda_gemm_desc d;
        if (g < 2)
            d = (mt_cuda_gemm_desc){.m = out, .n = rows, .k = in, .a = w, .lda = in, .trans_a = 1, .b = x, .ldb = in,
                                    .d = y, .ldd = out};
        else if (g < 4)
            d = (mt_cuda_gemm_desc){.m = in, .n = rows, .k = out, .a = w, .lda = in, .b = dy, .ldb = out, .d = dx,
                                    .ldd = in};
        else
            d = (mt_cuda_gemm_desc){.m = in, .n = out, .k = rows, .a = x, .lda = in, .b = dy, .ldb = out, .trans_b = 1,
                                    .d = dw, .ldd = in, .d_is_f32 = 1, .beta = 1.0f};
        return mt_cuda_gemm(cb, s, &d);
    }
    }
}

static void *output_of(const layer *l, int g, size_t *count, int *f32) {
    int in, out;
    gemm_dims(l, g, &in, &out);
    *f32 = g >= 4;
    *count = g >= 4 ? (size_t)l->E * in * out : (size_t)l->rows * (g < 2 ? out : in);
    return g == 0 ? l->gu : g == 1 ? l->y : g == 2 ? l->dx : g == 3 ? l->da : g == 4 ? (void *)l->dw_gu : l->dw_down;
}

int main(int argc, char **argv) {
    options o = parse(argc, argv);
    mt_backend *be;
    if (mt_backend_cuda_create(&be, 0) != MT_OK) die("cuda backend");
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    cudaStream_t s;
    CUDA_OR_DIE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t start, end;
    CUDA_OR_DIE(cudaEventCreate(&start));
    CUDA_OR_DIE(cudaEventCreate(&end));
    grouped_ctx gc = {0};
    if (cublasCreate(&gc.h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(gc.h, s) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench_moe_gemm: cublasCreate failed\n");
        return 1;
    }
    for (int si = 0; si < 3; si++) {
        if (!o.shape_on[si]) continue;
        const shape *sh = &shapes[si];
        int seg = o.seg ? o.seg : o.tokens, S = (o.tokens + seg - 1) / seg;
        layer l = {.E = sh->E, .S = S, .rows = o.tokens * sh->k, .d = sh->d, .f = sh->f};
        uint64_t state = 1234 + si;
        int32_t *experts = malloc((size_t)l.rows * 4), *order = malloc((size_t)l.rows * 4), *slot_row = malloc((size_t)l.rows * 4);
        double total = 0;
        for (int e = 0; e < sh->E; e++) total += 1.0 / (e + 1);
        for (int t = 0; t < o.tokens; t++)
            for (int j = 0; j < sh->k; j++) {
                int e, again;
                do {
                    double u = uniform(&state), acc = 0;
                    if (o.skewed)
                        for (e = 0; e < sh->E - 1 && (acc += 1.0 / (e + 1) / total) <= u; e++) {}
                    else
                        e = (int)(u * sh->E);
                    again = 0;
                    for (int i = 0; i < j; i++) again |= experts[(size_t)t * sh->k + i] == e;
                } while (again);
                experts[(size_t)t * sh->k + j] = e;
            }
        size_t groups = (size_t)sh->E * S + 1;
        int32_t *offsets = malloc(groups * 4);
        mt_cpu_moe_permute(order, slot_row, offsets, experts, o.tokens, sh->E, sh->k, seg);
        int most = 0, fewest = l.rows;
        for (int e = 0; e < sh->E; e++) {
            int c = offsets[(e + 1) * S] - offsets[e * S];
            most = c > most ? c : most, fewest = c < fewest ? c : fewest;
        }
        CUDA_OR_DIE(cudaMallocHost((void **)&l.offsets_host, groups * 4));
        l.offsets = device_zeros(groups * 4);
        CUDA_OR_DIE(cudaMemcpy(l.offsets, offsets, groups * 4, cudaMemcpyHostToDevice));
        size_t R = l.rows, D = sh->d, F = sh->f, E = sh->E;
        l.x = random_bf16(R * D, 1, &state), l.a = random_bf16(R * F, 1, &state);
        l.w_gu = random_bf16(E * 2 * F * D, 0.02f, &state), l.w_down = random_bf16(E * D * F, 0.02f, &state);
        l.dgu = random_bf16(R * 2 * F, 1, &state), l.dy = random_bf16(R * D, 1, &state);
        l.gu = device_zeros(R * 2 * F * 2), l.y = device_zeros(R * D * 2);
        l.dx = device_zeros(R * D * 2), l.da = device_zeros(R * F * 2);
        l.dw_gu = device_zeros(E * 2 * F * D * 4), l.dw_down = device_zeros(E * D * F * 4);
        int problems = (int)(E * S);
        CUDA_OR_DIE(cudaMallocHost((void **)&gc.ptrs_host, 3 * (size_t)problems * sizeof(void *)));
        CUDA_OR_DIE(cudaMalloc((void **)&gc.ptrs, 3 * (size_t)problems * sizeof(void *)));
        printf("shape=%s experts=%d top_k=%d hidden=%d expert_width=%d tokens=%d rows=%d segments=%d load=%s "
               "rows_per_expert_most=%d fewest=%d\n", sh->name, sh->E, sh->k, sh->d, sh->f, o.tokens, l.rows, S,
               o.skewed ? "skewed" : "uniform", most, fewest);
        /* the kernels' results, kept to compare the other ways with */
        void *ref[GEMMS] = {0};
        for (int wy = 0; wy < WAYS; wy++) {
            if (!o.way_on[wy] && wy != KERNEL) continue;
            double way_seconds = 0, way_flops = 0;
            int failed = 0;
            for (int g = 0; g < GEMMS && !failed; g++) {
                int in, out;
                gemm_dims(&l, g, &in, &out);
                size_t count;
                int f32;
                void *result = output_of(&l, g, &count, &f32);
                if (g >= 4) CUDA_OR_DIE(cudaMemsetAsync(result, 0, count * 4, s));
                mt_status st = call(cb, &gc, s, wy, &l, g); /* warm-up, and the result compared */
                if (st == MT_OK) st = mt_backend_check(be);
                CUDA_OR_DIE(cudaStreamSynchronize(s));
                if (st != MT_OK) {
                    printf("shape=%s way=%s gemm=%s error=\"%s\"\n", sh->name, way_names[wy], gemm_names[g], mt_error());
                    failed = 1;
                    break;
                }
                double err = -1;
                if (wy == KERNEL) {
                    CUDA_OR_DIE(cudaMalloc(&ref[g], count * (f32 ? 4 : 2)));
                    CUDA_OR_DIE(cudaMemcpy(ref[g], result, count * (f32 ? 4 : 2), cudaMemcpyDeviceToDevice));
                } else if (wy != DENSE) {
                    err = rel_err(result, ref[g], count, f32);
                }
                CUDA_OR_DIE(cudaEventRecord(start, s));
                for (int it = 0; it < o.iters && st == MT_OK; it++) st = call(cb, &gc, s, wy, &l, g);
                CUDA_OR_DIE(cudaEventRecord(end, s));
                CUDA_OR_DIE(cudaEventSynchronize(end));
                float ms = 0;
                CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, end));
                double seconds = ms * 1e-3 / o.iters, flops = 2.0 * l.rows * in * out;
                way_seconds += seconds, way_flops += flops;
                if (!o.way_on[wy]) continue; /* the kernels ran only as the reference */
                printf("shape=%s way=%s gemm=%s ms=%.3f tflops=%.1f", sh->name, way_names[wy], gemm_names[g],
                       seconds * 1e3, flops / seconds * 1e-12);
                if (err >= 0) printf(" rel_err_vs_kernel=%.2e", err);
                printf("\n");
            }
            if (!failed && o.way_on[wy])
                printf("shape=%s way=%s gemm=all ms=%.3f tflops=%.1f\n", sh->name, way_names[wy], way_seconds * 1e3,
                       way_flops / way_seconds * 1e-12);
            fflush(stdout);
        }
        for (int g = 0; g < GEMMS; g++) cudaFree(ref[g]);
        void *bufs[] = {l.offsets, l.x, l.a, l.w_gu, l.w_down, l.dgu, l.dy, l.gu, l.y, l.dx, l.da, l.dw_gu, l.dw_down, gc.ptrs};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cudaFree(bufs[i]);
        cudaFreeHost(l.offsets_host);
        cudaFreeHost(gc.ptrs_host);
        free(experts), free(order), free(slot_row), free(offsets);
    }
    cublasDestroy(gc.h);
    mt_backend_destroy(be);
    return 0;
}
