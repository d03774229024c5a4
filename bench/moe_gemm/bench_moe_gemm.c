/* The mixture-of-experts grouped GEMMs, the ways a CUDA backend can run them, at model shapes: which
 * is fastest decides the backend's default (docs/backends.md). For each shape, the six GEMMs of a layer
 * (gate_up and down, forward, dx and dw) over tokens * k rows sorted by expert, each way timed, and
 * each way's results compared with the first way's (relative L2):
 *
 *   cublaslt        moe_gemm_cublaslt.c (the default): the offsets copied home, then a cuBLASLt GEMM an
 *                   expert, fanned out over N streams: one run a count of --streams, named cublaslt_sN
 *   kernel          moe_gemm.cu (MT_MOE_GEMM=kernel): one kernel a GEMM that reads the offsets on the
 *                   device
 *   dense           one cuBLASLt GEMM of the same rows against one expert (the same FLOPs without
 *                   grouping: the ceiling)
 *
 *   bench_moe_gemm [--tokens 16384] [--shapes olmoe,qwen3] [--ways cublaslt,kernel,dense]
 *                  [--streams 1,4] [--iters 5] [--seg TOKENS] [--load uniform|skewed]
 *
 * Shapes: olmoe (OLMoE-1B-7B: 64 experts, top 8, hidden 2048, expert width 1024), qwen3 (Qwen3-30B-A3B:
 * 128, top 8, 2048, 768), mixtral (Mixtral-8x7B: 8, top 2, 4096, 14336). Each token's k experts are
 * drawn at random (uniform, or skewed: expert e about as likely as 1 / (e + 1)); --seg splits the rows
 * into segments of that many tokens (dw adds segment by segment, as the engine's sequences ask: its
 * default piece of 8192 tokens at 4096 a sequence is --tokens 8192 --seg 4096). Inputs are made and
 * results compared on the GPU (bench_device.cu). One line per (shape, way, GEMM), key=value fields;
 * times are the mean of --iters calls after one warm-up, from CUDA events, so a way that waits for
 * the offsets pays for the wait. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_backend.h"
#include "bench_device.h"

typedef struct {
    const char *name;
    int E, k, d, f;
} shape;

static const shape shapes[] = {
    {"olmoe", 64, 8, 2048, 1024},
    {"qwen3", 128, 8, 2048, 768},
    {"mixtral", 8, 2, 4096, 14336},
};

typedef enum { CUBLASLT, KERNEL, DENSE, WAYS } way;
static const char *const way_names[WAYS] = {"cublaslt", "kernel", "dense"};

typedef struct {
    int tokens, iters, seg, skewed;
    int shape_on[3], way_on[WAYS];
    int streams[MT_MOE_LT_MAX_STREAMS], stream_counts;
} options;

/* One timed way: a way, and for cublaslt its streams. */
typedef struct {
    way way;
    int streams;
    char name[32];
} run_kind;

static void usage(void) {
    fprintf(stderr, "usage: bench_moe_gemm [--tokens N] [--shapes olmoe,qwen3,mixtral] [--ways cublaslt,kernel,dense] "
                    "[--streams 1,4] [--iters K] [--seg TOKENS] [--load uniform|skewed]\n");
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

static void pick_streams(const char *list, options *o) {
    char *copy = strdup(list);
    o->stream_counts = 0;
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ",")) {
        int n = positive(t);
        if (n > MT_MOE_LT_MAX_STREAMS || o->stream_counts == MT_MOE_LT_MAX_STREAMS) usage();
        o->streams[o->stream_counts++] = n;
    }
    free(copy);
    if (!o->stream_counts) usage();
}

static options parse(int argc, char **argv) {
    options o = {.tokens = 16384, .iters = 5, .shape_on = {1, 1, 0}, .way_on = {1, 1, 1}, .streams = {1, 4},
                 .stream_counts = 2};
    const char *shape_names[3] = {"olmoe", "qwen3", "mixtral"};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        const char *flag = argv[i], *v = argv[++i];
        if (!strcmp(flag, "--tokens")) o.tokens = positive(v);
        else if (!strcmp(flag, "--iters")) o.iters = positive(v);
        else if (!strcmp(flag, "--seg")) o.seg = positive(v);
        else if (!strcmp(flag, "--shapes")) pick(v, shape_names, 3, o.shape_on);
        else if (!strcmp(flag, "--ways")) pick(v, way_names, WAYS, o.way_on);
        else if (!strcmp(flag, "--streams")) pick_streams(v, &o);
        else if (!strcmp(flag, "--load") && (!strcmp(v, "uniform") || !strcmp(v, "skewed"))) o.skewed = !strcmp(v, "skewed");
        else usage();
    }
    return o;
}

/* The runs in order: cublaslt on each stream count, the kernels, the dense ceiling. */
static int runs_of(const options *o, run_kind *runs) {
    int n = 0;
    if (o->way_on[CUBLASLT])
        for (int i = 0; i < o->stream_counts; i++) {
            runs[n] = (run_kind){CUBLASLT, o->streams[i], ""};
            snprintf(runs[n].name, sizeof runs[n].name, "cublaslt_s%d", o->streams[i]);
            n++;
        }
    if (o->way_on[KERNEL]) runs[n++] = (run_kind){KERNEL, 0, "kernel"};
    if (o->way_on[DENSE]) runs[n++] = (run_kind){DENSE, 0, "dense"};
    return n;
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
    void *d;
    CUDA_OR_DIE(cudaMalloc(&d, count * 2));
    CUDA_OR_DIE((cudaError_t)bench_fill_bf16(d, count, scale, next(s)));
    return d;
}

static void *device_zeros(size_t bytes) {
    void *d;
    CUDA_OR_DIE(cudaMalloc(&d, bytes));
    CUDA_OR_DIE(cudaMemset(d, 0, bytes));
    return d;
}

/* One layer's buffers: rows sorted by expert. */
typedef struct {
    int E, S, rows, d, f;
    int32_t *offsets;
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

/* ---- one call of GEMM g the given way ---- */

static mt_status call(mt_cuda_backend *cb, cudaStream_t s, way wy, const layer *l, int g) {
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

/* Each token's k distinct experts (uniform, or expert e about as likely as 1 / (e + 1)). */
static void route(int32_t *experts, int tokens, const shape *sh, int skewed, uint64_t *state) {
    double total = 0;
    for (int e = 0; e < sh->E; e++) total += 1.0 / (e + 1);
    for (int t = 0; t < tokens; t++)
        for (int j = 0; j < sh->k; j++) {
            int e, again;
            do {
                double u = uniform(state), acc = 0;
                if (skewed)
                    for (e = 0; e < sh->E - 1 && (acc += 1.0 / (e + 1) / total) <= u; e++) {}
                else
                    e = (int)(u * sh->E);
                again = 0;
                for (int i = 0; i < j; i++) again |= experts[(size_t)t * sh->k + i] == e;
            } while (again);
            experts[(size_t)t * sh->k + j] = e;
        }
}

/* Times run r's six GEMMs on layer l, comparing each result with ref's (kept there when ref[g] is
 * NULL: the first run). */
static void time_run(mt_backend *be, cudaStream_t s, const options *o, const shape *sh, const run_kind *r,
                     const layer *l, void *ref[GEMMS], const char *ref_name) {
    mt_cuda_backend *cb = (mt_cuda_backend *)be;
    if (r->way == CUBLASLT) { /* a fresh loop on r's streams: its algorithm cache starts empty */
        mt_cuda_moe_lt_destroy(cb->moe_lt);
        cb->moe_lt = NULL;
        if (mt_cuda_moe_lt_create(&cb->moe_lt, r->streams) != MT_OK) die("the cuBLASLt loop's streams");
    }
    cudaEvent_t start, end;
    CUDA_OR_DIE(cudaEventCreate(&start));
    CUDA_OR_DIE(cudaEventCreate(&end));
    double run_seconds = 0, run_flops = 0;
    int failed = 0;
    for (int g = 0; g < GEMMS && !failed; g++) {
        int in, out;
        gemm_dims(l, g, &in, &out);
        size_t count;
        int f32;
        void *result = output_of(l, g, &count, &f32);
        size_t bytes = count * (f32 ? 4 : 2);
        /* dw adds to zeros; y and dx start as NaNs, so a way that skips rows cannot pass the comparison */
        CUDA_OR_DIE(cudaMemsetAsync(result, f32 ? 0 : 0xff, bytes, s));
        mt_status st = call(cb, s, r->way, l, g); /* warm-up, and the result compared */
        if (st == MT_OK) st = mt_backend_check(be);
        CUDA_OR_DIE(cudaStreamSynchronize(s));
        if (st != MT_OK) {
            printf("shape=%s way=%s gemm=%s error=\"%s\"\n", sh->name, r->name, gemm_names[g], mt_error());
            failed = 1;
            break;
        }
        double err = -1;
        if (!ref[g]) {
            CUDA_OR_DIE(cudaMalloc(&ref[g], bytes));
            CUDA_OR_DIE(cudaMemcpy(ref[g], result, bytes, cudaMemcpyDeviceToDevice));
        } else if (r->way != DENSE) {
            CUDA_OR_DIE((cudaError_t)bench_rel_err(result, ref[g], count, f32, &err));
        }
        CUDA_OR_DIE(cudaEventRecord(start, s));
        for (int it = 0; it < o->iters && st == MT_OK; it++) st = call(cb, s, r->way, l, g);
        CUDA_OR_DIE(cudaEventRecord(end, s));
        CUDA_OR_DIE(cudaEventSynchronize(end));
        if (st == MT_OK) st = mt_backend_check(be);
        if (st != MT_OK) {
            printf("shape=%s way=%s gemm=%s error=\"%s\"\n", sh->name, r->name, gemm_names[g], mt_error());
            failed = 1;
            break;
        }
        float ms = 0;
        CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, end));
        double seconds = ms * 1e-3 / o->iters, flops = 2.0 * l->rows * in * out;
        run_seconds += seconds, run_flops += flops;
        printf("shape=%s way=%s gemm=%s ms=%.3f tflops=%.1f", sh->name, r->name, gemm_names[g], seconds * 1e3,
               flops / seconds * 1e-12);
        if (err >= 0) printf(" rel_err=%.2e vs=%s", err, ref_name);
        printf("\n");
    }
    if (!failed)
        printf("shape=%s way=%s gemm=all ms=%.3f tflops=%.1f\n", sh->name, r->name, run_seconds * 1e3,
               run_flops / run_seconds * 1e-12);
    fflush(stdout);
    cudaEventDestroy(start);
    cudaEventDestroy(end);
}

int main(int argc, char **argv) {
    options o = parse(argc, argv);
    run_kind runs[MT_MOE_LT_MAX_STREAMS + 2];
    int run_count = runs_of(&o, runs);
    if (!run_count) usage();
    mt_backend *be;
    if (mt_backend_cuda_create(&be, 0) != MT_OK) die("cuda backend");
    cudaStream_t s;
    CUDA_OR_DIE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int si = 0; si < 3; si++) {
        if (!o.shape_on[si]) continue;
        const shape *sh = &shapes[si];
        int seg = o.seg ? o.seg : o.tokens, S = (o.tokens + seg - 1) / seg;
        layer l = {.E = sh->E, .S = S, .rows = o.tokens * sh->k, .d = sh->d, .f = sh->f};
        uint64_t state = 1234 + si;
        int32_t *experts = malloc((size_t)l.rows * 4), *order = malloc((size_t)l.rows * 4);
        int32_t *slot_row = malloc((size_t)l.rows * 4), *offsets = malloc(((size_t)sh->E * S + 1) * 4);
        route(experts, o.tokens, sh, o.skewed, &state);
        mt_cpu_moe_permute(order, slot_row, offsets, experts, o.tokens, sh->E, sh->k, seg);
        int most = 0, fewest = l.rows;
        for (int e = 0; e < sh->E; e++) {
            int c = offsets[(e + 1) * S] - offsets[e * S];
            most = c > most ? c : most, fewest = c < fewest ? c : fewest;
        }
        size_t groups = (size_t)sh->E * S + 1;
        l.offsets = device_zeros(groups * 4);
        CUDA_OR_DIE(cudaMemcpy(l.offsets, offsets, groups * 4, cudaMemcpyHostToDevice));
        size_t R = l.rows, D = sh->d, F = sh->f, E = sh->E;
        l.x = random_bf16(R * D, 1, &state), l.a = random_bf16(R * F, 1, &state);
        l.w_gu = random_bf16(E * 2 * F * D, 0.02f, &state), l.w_down = random_bf16(E * D * F, 0.02f, &state);
        l.dgu = random_bf16(R * 2 * F, 1, &state), l.dy = random_bf16(R * D, 1, &state);
        l.gu = device_zeros(R * 2 * F * 2), l.y = device_zeros(R * D * 2);
        l.dx = device_zeros(R * D * 2), l.da = device_zeros(R * F * 2);
        l.dw_gu = device_zeros(E * 2 * F * D * 4), l.dw_down = device_zeros(E * D * F * 4);
        printf("shape=%s experts=%d top_k=%d hidden=%d expert_width=%d tokens=%d rows=%d segments=%d load=%s "
               "rows_per_expert_most=%d fewest=%d\n", sh->name, sh->E, sh->k, sh->d, sh->f, o.tokens, l.rows, S,
               o.skewed ? "skewed" : "uniform", most, fewest);
        void *ref[GEMMS] = {0}; /* the first run's results, to compare the others with */
        for (int r = 0; r < run_count; r++) time_run(be, s, &o, sh, &runs[r], &l, ref, runs[0].name);
        for (int g = 0; g < GEMMS; g++) cudaFree(ref[g]);
        void *bufs[] = {l.offsets, l.x, l.a, l.w_gu, l.w_down, l.dgu, l.dy, l.gu, l.y, l.dx, l.da, l.dw_gu, l.dw_down};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cudaFree(bufs[i]);
        free(experts), free(order), free(slot_row), free(offsets);
    }
    mt_backend_destroy(be);
    return 0;
}
