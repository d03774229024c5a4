/* The grouped expert GEMMs through cuBLASLt, the default (MT_MOE_GEMM=kernel picks moe_gemm.cu's kernels
 * instead; docs/backends.md has the measurements): the offsets copied home (the stream waits for
 * permute), then one cuBLASLt GEMM an expert (an expert and segment for dw, beta = 1, the segments in
 * order: backend.h's bits of S calls), each gemm.c's mapping of the dense op. Two things make the loop
 * fast:
 *
 * - Streams. One expert's GEMM fills few of the GPU's SMs (Qwen3-30B-A3B's down at 1024 rows an
 *   expert: 2048 x 1024 outputs, 64 tiles of 128 x 256 for 132 SMs) and leaves a tail at its end, so
 *   the experts fan out over `streams` streams that fork from the caller's stream and join it again
 *   (events), each with its own cuBLASLt workspace: the largest expert first, each to the stream with
 *   the fewest rows so far. An expert's GEMMs stay on one stream, so its dw segments add in order;
 *   which stream runs an expert changes no bit.
 * - Algorithms chosen once. cuBLASLt's heuristic is asked once per GEMM shape and size bucket (the
 *   rows of an expert or segment, which differ from expert to expert and call to call, rounded up to
 *   a quarter octave, and the bucket's top is the size asked about; everything else exact, the
 *   pointers' alignments too), and the answer kept. The algorithm is a function of the bucket alone,
 *   not of which size came first, so a run's bits do not depend on its history (a resumed run gives
 *   the same bits). Where cuBLASLt refuses the kept algorithm at an exact size, that size is asked
 *   about itself. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

#define LANE_WORKSPACE ((size_t)8 << 20) /* cuBLASLt's scratch, one for each stream */
enum { CACHE_SLOTS = 1024 };

/* What an algorithm is chosen for: the GEMM with its rows rounded to the bucket's top. */
typedef struct {
    int32_t m, n, k, lda, ldb, ldd;
    uint8_t trans_a, trans_b, d_f32, accumulate;
    uint8_t align_a, align_b, align_d, used; /* log2 of the bytes; used: the slot holds an entry */
} algo_key;

typedef struct {
    algo_key key;
    cublasLtMatmulAlgo_t algo;
} algo_slot;

struct mt_cuda_moe_lt {
    int streams;
    cudaStream_t lane[MT_MOE_LT_MAX_STREAMS];
    cudaEvent_t fork, join[MT_MOE_LT_MAX_STREAMS];
    cudaEvent_t offsets_copied; /* blocking: the issuing thread sleeps while it waits, leaving its core
                                 * to the host optimizer's team (a stream sync would spin on it) */
    void *workspace;      /* streams * LANE_WORKSPACE bytes of device memory */
    pthread_mutex_t lock; /* a call at a time: guards the streams, workspaces and what follows */
    int32_t *offsets;     /* the offsets' home, pinned, offsets_count of them */
    size_t offsets_count;
    algo_slot cache[CACHE_SLOTS];
};

static mt_status lt_init(mt_cuda_moe_lt *lt) {
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&lt->fork, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&lt->offsets_copied, cudaEventDisableTiming | cudaEventBlockingSync));
    for (int i = 0; i < lt->streams; i++) {
        MT_CUDA_CHECK(cudaStreamCreateWithFlags(&lt->lane[i], cudaStreamNonBlocking));
        MT_CUDA_CHECK(cudaEventCreateWithFlags(&lt->join[i], cudaEventDisableTiming));
    }
    MT_CUDA_CHECK(cudaMalloc(&lt->workspace, (size_t)lt->streams * LANE_WORKSPACE));
    return MT_OK;
}

mt_status mt_cuda_moe_lt_create(mt_cuda_moe_lt **out, int streams) {
    if (streams < 1 || streams > MT_MOE_LT_MAX_STREAMS)
        return mt_fail(MT_ERR_INVALID, "the expert GEMMs' streams: %d (1 to %d)", streams, MT_MOE_LT_MAX_STREAMS);
    mt_cuda_moe_lt *lt = mt_calloc(1, sizeof *lt, "the expert GEMMs' cuBLASLt state");
    if (!lt) return MT_ERR_NOMEM;
    pthread_mutex_init(&lt->lock, NULL);
    lt->streams = streams;
    mt_status status = lt_init(lt);
    if (status != MT_OK) {
        mt_cuda_moe_lt_destroy(lt);
        return status;
    }
    *out = lt;
    return MT_OK;
}

void mt_cuda_moe_lt_destroy(mt_cuda_moe_lt *lt) {
    if (!lt) return;
    for (int i = 0; i < lt->streams; i++) {
        if (lt->lane[i]) cudaStreamDestroy(lt->lane[i]);
        if (lt->join[i]) cudaEventDestroy(lt->join[i]);
    }
    if (lt->fork) cudaEventDestroy(lt->fork);
    if (lt->offsets_copied) cudaEventDestroy(lt->offsets_copied);
    if (lt->workspace) cudaFree(lt->workspace);
    if (lt->offsets) cudaFreeHost(lt->offsets);
    pthread_mutex_destroy(&lt->lock);
    free(lt);
}

/* ---- the algorithm cache ---- */

/* v rounded up to a quarter octave (to 16, 32, 48 or 64 below that): 1950 -> 2048, 2148 -> 2560. */
static int32_t bucket_top(int32_t v) {
    if (v <= 64) return (v + 15) / 16 * 16;
    int32_t step = (int32_t)1 << (29 - __builtin_clz((unsigned)v)); /* a quarter of v's highest power of 2 */
    return (v + step - 1) / step * step;
}

static uint8_t align_log2(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint8_t l = 0;
    while (l < 8 && a % ((uintptr_t)2 << l) == 0) l++;
    return l;
}

static uint64_t key_hash(const algo_key *k) {
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* g's algorithm: the cache's, or cuBLASLt's best at the bucket's top (kept where a slot is free).
 * vary_k: the rows are g's k (dw), else its n. */
static mt_status algo_for(mt_cuda_moe_lt *lt, mt_cuda_backend *cb, const mt_cuda_gemm_desc *g, int vary_k,
                          cublasLtMatmulAlgo_t *algo) {
    algo_key key;
    memset(&key, 0, sizeof key); /* the padding-free key is compared bytewise */
    key.m = g->m, key.n = vary_k ? g->n : bucket_top(g->n), key.k = vary_k ? bucket_top(g->k) : g->k;
    key.lda = g->lda, key.ldb = g->ldb, key.ldd = g->ldd;
    key.trans_a = (uint8_t)g->trans_a, key.trans_b = (uint8_t)g->trans_b, key.d_f32 = (uint8_t)g->d_is_f32;
    key.accumulate = g->beta != 0.0f;
    key.align_a = align_log2(g->a), key.align_b = align_log2(g->b), key.align_d = align_log2(g->d), key.used = 1;
    size_t slot = key_hash(&key) % CACHE_SLOTS, probes = 0;
    while (probes < CACHE_SLOTS && lt->cache[slot].key.used && memcmp(&lt->cache[slot].key, &key, sizeof key)) {
        slot = (slot + 1) % CACHE_SLOTS;
        probes++;
    }
    if (probes < CACHE_SLOTS && lt->cache[slot].key.used) {
        *algo = lt->cache[slot].algo;
        return MT_OK;
    }
    mt_cuda_gemm_desc top = *g;
    top.n = key.n, top.k = key.k;
    uint32_t align[3] = {1u << key.align_a, 1u << key.align_b, 1u << key.align_d};
    mt_cuda_gemm_plan p;
    MT_TRY(mt_cuda_gemm_describe(&top, &p));
    MT_TRY(mt_cuda_gemm_heuristic(cb, &top, &p, LANE_WORKSPACE, align, algo));
    if (probes < CACHE_SLOTS) lt->cache[slot] = (algo_slot){key, *algo}; /* a full cache asks each time */
    return MT_OK;
}

/* One GEMM on stream st with workspace ws. */
static mt_status gemm_on(mt_cuda_moe_lt *lt, mt_cuda_backend *cb, cudaStream_t st, void *ws,
                         const mt_cuda_gemm_desc *g, int vary_k) {
    cublasLtMatmulAlgo_t algo;
    mt_cuda_gemm_plan p;
    MT_TRY(algo_for(lt, cb, g, vary_k, &algo));
    MT_TRY(mt_cuda_gemm_describe(g, &p));
    if (mt_cuda_gemm_run(cb, st, g, &p, &algo, ws, LANE_WORKSPACE) == CUBLAS_STATUS_SUCCESS) return MT_OK;
    uint32_t align[3] = {1u << align_log2(g->a), 1u << align_log2(g->b), 1u << align_log2(g->d)};
    MT_TRY(mt_cuda_gemm_heuristic(cb, g, &p, LANE_WORKSPACE, align, &algo));
    MT_CUBLAS_CHECK(mt_cuda_gemm_run(cb, st, g, &p, &algo, ws, LANE_WORKSPACE));
    return MT_OK;
}

/* ---- the three GEMMs ---- */

typedef enum { FORWARD, DX, DW } moe_gemm_kind;

typedef struct {
    moe_gemm_kind kind;
    const char *name;
    void *out;           /* y, dx (bf16) or dw (fp32) */
    const void *a, *b;   /* x and w, dy and w, dy and x */
    int in, out_width;
} moe_gemm_call;

static const char *bf16_rows(const void *base, int64_t row, int width) {
    return (const char *)base + (size_t)row * width * 2;
}

/* c's GEMM for expert e's rows [r0, r1). */
static mt_cuda_gemm_desc gemm_of(const moe_gemm_call *c, int e, int32_t r0, int32_t r1) {
    int in = c->in, out = c->out_width;
    switch (c->kind) {
    case FORWARD: /* y^T[out, rows] = (w[e] as [in, out])^T . x^T[in, rows] */
        return (mt_cuda_gemm_desc){.m = out, .n = r1 - r0, .k = in, .a = bf16_rows(c->b, (int64_t)e * out, in),
                                   .lda = in, .trans_a = 1,
                                   .b = bf16_rows(c->a, r0, in), .ldb = in, .d = (void *)bf16_rows(c->out, r0, out),
                                   .ldd = out};
    case DX: /* dx^T[in, rows] = (w[e] as [in, out]) . dy^T[out, rows] */
        return (mt_cuda_gemm_desc){.m = in, .n = r1 - r0, .k = out, .a = bf16_rows(c->b, (int64_t)e * out, in),
                                   .lda = in,
                                   .b = bf16_rows(c->a, r0, out), .ldb = out, .d = (void *)bf16_rows(c->out, r0, in),
                                   .ldd = in};
    default: /* dw[e]^T[in, out] += x^T[in, rows] . (dy^T[out, rows])^T, in fp32 */
        return (mt_cuda_gemm_desc){.m = in, .n = out, .k = r1 - r0, .a = bf16_rows(c->b, r0, in), .lda = in,
                                   .b = bf16_rows(c->a, r0, out), .ldb = out, .trans_b = 1,
                                   .d = (float *)c->out + (size_t)e * out * in, .ldd = in, .d_is_f32 = 1,
                                   .beta = 1.0f};
    }
}

/* Expert e's GEMMs on stream st: one over its rows, or (dw) one a segment, in segment order. */
static mt_status expert_gemms(mt_cuda_moe_lt *lt, mt_cuda_backend *cb, cudaStream_t st, void *ws,
                              const moe_gemm_call *c, const int32_t *off, int e, int S) {
    if (c->kind != DW) {
        mt_cuda_gemm_desc g = gemm_of(c, e, off[e * S], off[(e + 1) * S]);
        return gemm_on(lt, cb, st, ws, &g, 0);
    }
    for (int s = 0; s < S; s++) {
        int32_t r0 = off[e * S + s], r1 = off[e * S + s + 1];
        if (r1 == r0) continue;
        mt_cuda_gemm_desc g = gemm_of(c, e, r0, r1);
        MT_TRY(gemm_on(lt, cb, st, ws, &g, 1));
    }
    return MT_OK;
}

typedef struct {
    int expert, lane;
    int32_t rows;
} job;

static int more_rows_first(const void *pa, const void *pb) {
    const job *a = pa, *b = pb;
    if (a->rows != b->rows) return a->rows > b->rows ? -1 : 1;
    return a->expert - b->expert;
}

/* offsets[E*S + 1] on the host, after everything issued to s so far; checked to be what permute
 * gives (from 0 up to rows, never down), so a wrong one is an error, not a GEMM on wild pointers. */
static mt_status offsets_home(mt_cuda_moe_lt *lt, cudaStream_t s, const moe_gemm_call *c, const int32_t *offsets,
                              int rows, size_t count) {
    if (count > lt->offsets_count) {
        if (lt->offsets) cudaFreeHost(lt->offsets);
        lt->offsets = NULL, lt->offsets_count = 0;
        MT_CUDA_CHECK(cudaMallocHost((void **)&lt->offsets, count * sizeof *lt->offsets));
        lt->offsets_count = count;
    }
    MT_CUDA_CHECK(cudaMemcpyAsync(lt->offsets, offsets, count * sizeof *lt->offsets, cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaEventRecord(lt->offsets_copied, s));
    MT_CUDA_CHECK(cudaEventSynchronize(lt->offsets_copied));
    const int32_t *off = lt->offsets;
    for (size_t i = 0; i < count; i++) {
        int32_t prev = i ? off[i - 1] : 0;
        if (off[i] < prev || off[i] > rows || (i == 0 && off[i] != 0) || (i + 1 == count && off[i] != rows))
            return mt_fail(MT_ERR_INVALID,
                           "cuda moe %s: offsets[%zu] of %zu is %d (the one before: %d); offsets run from 0 up to the "
                           "%d rows", c->name, i, count, off[i], prev, rows);
    }
    return MT_OK;
}

static mt_status grouped_locked(mt_cuda_moe_lt *lt, mt_cuda_backend *cb, cudaStream_t s, const moe_gemm_call *c,
                                const int32_t *offsets, int rows, int E, int S) {
    /* the profile's span: the copy, and the device idle until the waiting host is back */
    mt_cuda_span_begin(cb, s, "host sync: expert offsets home");
    mt_status home = offsets_home(lt, s, c, offsets, rows, (size_t)E * S + 1);
    mt_cuda_span_end(cb, s);
    MT_TRY(home);
    const int32_t *off = lt->offsets;
    job *jobs = mt_malloc((size_t)E * sizeof *jobs, "the expert GEMMs' order");
    if (!jobs) return MT_ERR_NOMEM;
    int n = 0;
    for (int e = 0; e < E; e++)
        if (off[(e + 1) * S] > off[e * S]) jobs[n++] = (job){e, 0, off[(e + 1) * S] - off[e * S]};
    qsort(jobs, (size_t)n, sizeof *jobs, more_rows_first);
    int lanes = lt->streams < n ? lt->streams : n;
    int64_t load[MT_MOE_LT_MAX_STREAMS] = {0};
    for (int j = 0; j < n; j++) {
        int best = 0;
        for (int l = 1; l < lanes; l++)
            if (load[l] < load[best]) best = l;
        jobs[j].lane = best;
        load[best] += jobs[j].rows;
    }
    mt_status status = MT_OK;
    if (lanes <= 1) {
        for (int j = 0; j < n && status == MT_OK; j++)
            status = expert_gemms(lt, cb, s, lt->workspace, c, off, jobs[j].expert, S);
        free(jobs);
        return status;
    }
    cudaError_t err = cudaEventRecord(lt->fork, s);
    for (int l = 0; l < lanes && err == cudaSuccess; l++) err = cudaStreamWaitEvent(lt->lane[l], lt->fork, 0);
    if (err != cudaSuccess) {
        free(jobs);
        return mt_fail(MT_ERR_DEVICE, "cuda moe %s: forking the streams: %s", c->name, cudaGetErrorString(err));
    }
    for (int j = 0; j < n && status == MT_OK; j++) {
        int l = jobs[j].lane;
        status = expert_gemms(lt, cb, lt->lane[l], (char *)lt->workspace + (size_t)l * LANE_WORKSPACE, c, off,
                              jobs[j].expert, S);
    }
    free(jobs);
    /* every stream joins, after a failure too: the caller's stream comes after all that was issued */
    for (int l = 0; l < lanes; l++) {
        err = cudaEventRecord(lt->join[l], lt->lane[l]);
        if (err == cudaSuccess) err = cudaStreamWaitEvent(s, lt->join[l], 0);
        if (err != cudaSuccess && status == MT_OK)
            status = mt_fail(MT_ERR_DEVICE, "cuda moe %s: joining the streams: %s", c->name, cudaGetErrorString(err));
    }
    return status;
}

static mt_status grouped(mt_cuda_backend *cb, cudaStream_t s, const moe_gemm_call *c, const int32_t *offsets,
                         int rows, int E, int S) {
    if (E < 1 || S < 1 || rows < 0 || c->in < 1 || c->out_width < 1)
        return mt_fail(MT_ERR_INVALID, "cuda moe %s: %d rows, %d experts, %d segments, %d x %d", c->name, rows, E, S,
                       c->in, c->out_width);
    if (!cb->moe_lt) return mt_fail(MT_ERR_INVALID, "cuda moe %s: the cuBLASLt loop is not set up", c->name);
    if (rows == 0) return MT_OK;
    pthread_mutex_lock(&cb->moe_lt->lock);
    mt_status status = grouped_locked(cb->moe_lt, cb, s, c, offsets, rows, E, S);
    pthread_mutex_unlock(&cb->moe_lt->lock);
    return status;
}

mt_status mt_cuda_moe_gemm_cublaslt(mt_cuda_backend *cb, cudaStream_t s, void *y, const void *x, const void *w,
                                    const int32_t *offsets, int rows, int E, int S, int in, int out) {
    moe_gemm_call c = {FORWARD, "grouped_matmul", y, x, w, in, out};
    return grouped(cb, s, &c, offsets, rows, E, S);
}

mt_status mt_cuda_moe_gemm_dx_cublaslt(mt_cuda_backend *cb, cudaStream_t s, void *dx, const void *dy, const void *w,
                                       const int32_t *offsets, int rows, int E, int S, int in, int out) {
    moe_gemm_call c = {DX, "grouped_matmul_dx", dx, dy, w, in, out};
    return grouped(cb, s, &c, offsets, rows, E, S);
}

mt_status mt_cuda_moe_gemm_dw_cublaslt(mt_cuda_backend *cb, cudaStream_t s, float *dw, const void *dy, const void *x,
                                       const int32_t *offsets, int rows, int E, int S, int in, int out) {
    moe_gemm_call c = {DW, "grouped_matmul_dw", dw, dy, x, in, out};
    return grouped(cb, s, &c, offsets, rows, E, S);
}
