/* Profile spans on CUDA (backend.h's prof group): a pair of timing events a span, recorded on its
 * stream at begin and end, from a pool that grows to a step's spans and is reused after each
 * collect; collect waits for each span, reads its pair's elapsed time, takes from each span the
 * time of the spans inside it, and adds the rest to its (phase, op) row. The events cost the
 * issuing thread a few microseconds a span and the device nothing measurable; the rows are looked
 * up at collect, not at begin. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

enum { MAX_DEPTH = 16 };

typedef struct {
    const char *phase, *op;
    double flops;
    int parent;                /* the span this one is inside, or -1 */
    cudaEvent_t begin, end;    /* the pool's */
} span;

struct mt_cuda_profile {
    pthread_mutex_t lock;
    span *spans;
    size_t count, capacity;
    cudaEvent_t *pool; /* 2 a span, created as the spans first need them */
    size_t pool_count;
    int open[MAX_DEPTH]; /* the spans begun and not yet ended, innermost last */
    int depth;
    mt_prof_row *rows;
    int row_count, row_capacity;
};

mt_status mt_cuda_profile_create(mt_cuda_profile **out) {
    mt_cuda_profile *p = mt_calloc(1, sizeof *p, "the profile");
    if (!p) return MT_ERR_NOMEM;
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return MT_OK;
}

void mt_cuda_profile_destroy(mt_cuda_profile *p) {
    if (!p) return;
    for (size_t i = 0; i < p->pool_count; i++) cudaEventDestroy(p->pool[i]);
    free(p->pool);
    free(p->spans);
    free(p->rows);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static mt_cuda_profile *profile_of(mt_backend *be) { return ((mt_cuda_backend *)be)->profile; }

/* Room for one more span and its two events. */
static mt_status grow(mt_cuda_profile *p) {
    if (p->count == p->capacity) {
        size_t capacity = p->capacity ? 2 * p->capacity : 1024;
        span *spans = realloc(p->spans, capacity * sizeof *spans);
        cudaEvent_t *pool = realloc(p->pool, 2 * capacity * sizeof *pool);
        if (spans) p->spans = spans;
        if (pool) p->pool = pool;
        if (!spans || !pool) return mt_fail(MT_ERR_NOMEM, "cannot grow the profile to %zu spans", capacity);
        p->capacity = capacity;
    }
    while (p->pool_count < 2 * (p->count + 1)) {
        MT_CUDA_CHECK(cudaEventCreate(&p->pool[p->pool_count]));
        p->pool_count++;
    }
    return MT_OK;
}

static mt_status begin_locked(mt_cuda_profile *p, cudaStream_t s, const char *phase, const char *op, double flops) {
    if (p->depth == MAX_DEPTH)
        return mt_fail(MT_ERR_INVALID, "profile span %s: more than %d spans open", op, MAX_DEPTH);
    MT_TRY(grow(p));
    int parent = p->depth ? p->open[p->depth - 1] : -1;
    if (!phase) phase = parent >= 0 ? p->spans[parent].phase : "";
    span *sp = &p->spans[p->count];
    *sp = (span){phase, op, flops, parent, p->pool[2 * p->count], p->pool[2 * p->count + 1]};
    MT_CUDA_CHECK(cudaEventRecord(sp->begin, s));
    p->open[p->depth++] = (int)p->count++;
    return MT_OK;
}

static mt_status end_locked(mt_cuda_profile *p, cudaStream_t s) {
    if (p->depth == 0) return mt_fail(MT_ERR_INVALID, "a profile span ended that was not begun");
    MT_CUDA_CHECK(cudaEventRecord(p->spans[p->open[--p->depth]].end, s));
    return MT_OK;
}

void mt_cuda_prof_begin(mt_backend *be, mt_stream *s, const char *phase, const char *op, double flops) {
    mt_cuda_profile *p = profile_of(be);
    pthread_mutex_lock(&p->lock);
    mt_status status = begin_locked(p, mt_cuda_stream(s), phase, op, flops);
    pthread_mutex_unlock(&p->lock);
    mt_cuda_note((mt_cuda_backend *)be, status);
}

void mt_cuda_prof_end(mt_backend *be, mt_stream *s) {
    mt_cuda_profile *p = profile_of(be);
    pthread_mutex_lock(&p->lock);
    mt_status status = end_locked(p, mt_cuda_stream(s));
    pthread_mutex_unlock(&p->lock);
    mt_cuda_note((mt_cuda_backend *)be, status);
}

void mt_cuda_span_begin(mt_cuda_backend *cb, cudaStream_t s, const char *op) {
    if (cb->base.profiling) mt_cuda_prof_begin(&cb->base, (mt_stream *)s, NULL, op, 0);
}

void mt_cuda_span_end(mt_cuda_backend *cb, cudaStream_t s) {
    if (cb->base.profiling) mt_cuda_prof_end(&cb->base, (mt_stream *)s);
}

/* The row of (phase, op), added where new. */
static mt_prof_row *row_of(mt_cuda_profile *p, const char *phase, const char *op) {
    for (int i = 0; i < p->row_count; i++) {
        mt_prof_row *r = &p->rows[i];
        if ((r->phase == phase || !strcmp(r->phase, phase)) && (r->op == op || !strcmp(r->op, op))) return r;
    }
    if (p->row_count == p->row_capacity) {
        int capacity = p->row_capacity ? 2 * p->row_capacity : 64;
        mt_prof_row *rows = realloc(p->rows, (size_t)capacity * sizeof *rows);
        if (!rows) return NULL;
        p->rows = rows, p->row_capacity = capacity;
    }
    p->rows[p->row_count] = (mt_prof_row){phase, op, 0, 0, 0};
    return &p->rows[p->row_count++];
}

/* Every span into its row, each once the device has run it; a collect comes between steps, with no
 * span open. */
static mt_status collect_locked(mt_cuda_profile *p) {
    if (p->depth) return mt_fail(MT_ERR_INVALID, "the profile was collected with %d spans open", p->depth);
    if (p->count == 0) return MT_OK;
    double *own = calloc(p->count, sizeof *own);
    if (!own) return mt_fail(MT_ERR_NOMEM, "cannot collect %zu profile spans", p->count);
    mt_status status = MT_OK;
    for (size_t i = 0; i < p->count && status == MT_OK; i++) {
        float ms = 0;
        cudaError_t err = cudaEventSynchronize(p->spans[i].end);
        if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, p->spans[i].begin, p->spans[i].end);
        if (err != cudaSuccess) {
            status = mt_fail(MT_ERR_DEVICE, "profile span %s: %s", p->spans[i].op, cudaGetErrorString(err));
            break;
        }
        own[i] += ms * 1e-3;
        if (p->spans[i].parent >= 0) own[p->spans[i].parent] -= ms * 1e-3;
    }
    for (size_t i = 0; i < p->count && status == MT_OK; i++) {
        mt_prof_row *r = row_of(p, p->spans[i].phase, p->spans[i].op);
        if (!r) status = mt_fail(MT_ERR_NOMEM, "cannot grow the profile's rows");
        else r->calls++, r->seconds += own[i], r->flops += p->spans[i].flops;
    }
    free(own);
    p->count = 0;
    return status;
}

mt_status mt_cuda_prof_collect(mt_backend *be) {
    mt_cuda_profile *p = profile_of(be);
    pthread_mutex_lock(&p->lock);
    mt_status status = collect_locked(p);
    pthread_mutex_unlock(&p->lock);
    return status;
}

const mt_prof_row *mt_cuda_prof_rows(mt_backend *be, int *count) {
    mt_cuda_profile *p = profile_of(be);
    *count = p->row_count;
    return p->rows;
}

void mt_cuda_prof_clear(mt_backend *be) {
    mt_cuda_profile *p = profile_of(be);
    pthread_mutex_lock(&p->lock);
    p->row_count = 0;
    p->count = 0;
    p->depth = 0;
    pthread_mutex_unlock(&p->lock);
}
