/* The cpu backend: the reference implementation of backend.h.
 *
 * Each stream is a worker thread draining a FIFO of tasks; an event is a pair of counters
 * (records issued, records completed) under a mutex, so stream_wait and event_sync really block
 * until the recorded work has run. The engine's asynchronous schedule therefore runs
 * concurrently here exactly as it does on a GPU, and ThreadSanitizer can see its races. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/alloc_fault.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/host_comm.h"
#include "util/world.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "util/status.h"
#include "util/clock.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    mt_backend base;
    int threads;
    pthread_mutex_t mem_lock;
    size_t in_use, peak;
    size_t host_in_use, host_peak; /* host_alloc's, counted the same way */
    /* A data-parallel group's member: its communicator and rank, and the first collective that
     * failed (kept for check), under mem_lock. */
    mt_host_comm *comm;        /* ranks that are threads of this process */
    int summed;                /* those threads sum in rank order, as processes do (test hook) */
    mt_star *star;             /* or ranks that are processes (util/world.h) */
    int rank;
    mt_status coll_failed;
    char coll_message[1024];
} cpu_backend;

struct mt_event {
    pthread_mutex_t lock;
    pthread_cond_t done;
    unsigned long recorded, completed;
    double completed_at; /* seconds (CLOCK_MONOTONIC) of the latest completed record */
};

typedef enum { TASK_RUN, TASK_COPY, TASK_ZERO, TASK_RECORD, TASK_WAIT, TASK_STOP } task_kind;

typedef struct task {
    task_kind kind;
    struct task *next;
    void (*fn)(void *);
    void *arg, *dst;
    const void *src;
    size_t bytes;
    mt_event *event;
    unsigned long generation;
} task;

struct mt_stream {
    cpu_backend *be;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    task *head, *tail;
};

static void event_wait_for(mt_event *e, unsigned long generation) {
    pthread_mutex_lock(&e->lock);
    while (e->completed < generation) pthread_cond_wait(&e->done, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

static void event_complete(mt_event *e, unsigned long generation) {
    pthread_mutex_lock(&e->lock);
    if (generation > e->completed) {
        e->completed = generation;
        e->completed_at = mt_now();
    }
    pthread_cond_broadcast(&e->done);
    pthread_mutex_unlock(&e->lock);
}

static void *stream_main(void *arg) {
    mt_stream *s = arg;
#ifdef _OPENMP
    omp_set_num_threads(s->be->threads);
#endif
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->head) pthread_cond_wait(&s->nonempty, &s->lock);
        task *t = s->head;
        s->head = t->next;
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&s->lock);

        task_kind kind = t->kind;
        switch (kind) {
        case TASK_RUN: t->fn(t->arg); break;
        case TASK_COPY: memmove(t->dst, t->src, t->bytes); break;
        case TASK_ZERO: memset(t->dst, 0, t->bytes); break;
        case TASK_RECORD: event_complete(t->event, t->generation); break;
        case TASK_WAIT: event_wait_for(t->event, t->generation); break;
        case TASK_STOP: break;
        }
        free(t);
        if (kind == TASK_STOP) return NULL;
    }
}

/* Allocation failure of a 64-byte task is not recoverable mid-schedule. */
static void enqueue(mt_stream *s, task proto) {
    task *t = malloc(sizeof *t);
    if (!t) abort();
    *t = proto;
    t->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail) s->tail->next = t;
    else s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->nonempty);
    pthread_mutex_unlock(&s->lock);
}

/* ---- memory: 64-byte aligned, with the size kept in front for the peak count ---- */

#define HEADER 64

/* bytes (and `tail` spare bytes past them) counted in *in_use and its *peak; `kind` names the memory
 * in the failure. */
static void *counted_alloc(cpu_backend *be, size_t bytes, size_t tail, const char *what, mt_alloc_kind fault,
                           const char *kind, size_t *in_use, size_t *peak) {
    int hooked = mt_alloc_fault_hit(fault);
    char *p = hooked ? NULL : aligned_alloc(HEADER, HEADER + (bytes + HEADER - 1) / HEADER * HEADER + tail);
    if (!p) {
        mt_fail(MT_ERR_NOMEM, "cannot allocate %zu bytes of %s for %s%s", bytes, kind, what,
                mt_alloc_fault_note(hooked));
        return NULL;
    }
    memcpy(p, &bytes, sizeof bytes);
    pthread_mutex_lock(&be->mem_lock);
    *in_use += bytes;
    if (*in_use > *peak) *peak = *in_use;
    pthread_mutex_unlock(&be->mem_lock);
    return p + HEADER;
}

static void counted_free(cpu_backend *be, void *ptr, size_t *in_use) {
    if (!ptr) return;
    char *p = (char *)ptr - HEADER;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    pthread_mutex_lock(&be->mem_lock);
    *in_use -= bytes;
    pthread_mutex_unlock(&be->mem_lock);
    free(p);
}

static void *cpu_dev_alloc(mt_backend *b, size_t bytes, const char *what) {
    cpu_backend *be = (cpu_backend *)b;
    return counted_alloc(be, bytes, 0, what, MT_ALLOC_DEVICE, "(cpu) device memory", &be->in_use, &be->peak);
}

static void cpu_dev_free(mt_backend *b, void *ptr) {
    cpu_backend *be = (cpu_backend *)b;
    counted_free(be, ptr, &be->in_use);
}

static void *cpu_host_alloc(mt_backend *b, size_t bytes, const char *what) {
    cpu_backend *be = (cpu_backend *)b;
    return counted_alloc(be, bytes, HEADER, what, MT_ALLOC_PINNED, "host memory", &be->host_in_use, &be->host_peak);
}

static void cpu_host_free(mt_backend *b, void *ptr) {
    cpu_backend *be = (cpu_backend *)b;
    counted_free(be, ptr, &be->host_in_use);
}

static size_t cpu_host_peak(mt_backend *b) {
    cpu_backend *be = (cpu_backend *)b;
    pthread_mutex_lock(&be->mem_lock);
    size_t peak = be->host_peak;
    pthread_mutex_unlock(&be->mem_lock);
    return peak;
}

static void cpu_dev_mem_info(mt_backend *b, size_t *free_bytes, size_t *peak_bytes) {
    cpu_backend *be = (cpu_backend *)b;
    pthread_mutex_lock(&be->mem_lock);
    if (free_bytes) *free_bytes = SIZE_MAX; /* not a figure: its device memory is the host's */
    if (peak_bytes) *peak_bytes = be->peak;
    pthread_mutex_unlock(&be->mem_lock);
}

/* ---- streams and events ---- */

static mt_stream *cpu_stream_create(mt_backend *b) {
    mt_stream *s = calloc(1, sizeof *s);
    if (!s) {
        mt_fail(MT_ERR_NOMEM, "cannot allocate a cpu stream");
        return NULL;
    }
    s->be = (cpu_backend *)b;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->nonempty, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        mt_fail(MT_ERR_NOMEM, "cannot start a cpu stream thread");
        free(s);
        return NULL;
    }
    return s;
}

static void cpu_stream_destroy(mt_backend *b, mt_stream *s) {
    if (!s) return;
    enqueue(s, (task){.kind = TASK_STOP});
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->nonempty);
    free(s);
}

static mt_event *cpu_event_create(mt_backend *b) {
    mt_event *e = calloc(1, sizeof *e);
    if (!e) {
        mt_fail(MT_ERR_NOMEM, "cannot allocate a cpu event");
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->done, NULL);
    return e;
}

static void cpu_event_destroy(mt_backend *b, mt_event *e) {
    if (!e) return;
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->done);
    free(e);
}

static void cpu_event_record(mt_backend *b, mt_event *e, mt_stream *s) {
    pthread_mutex_lock(&e->lock);
    unsigned long generation = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    enqueue(s, (task){.kind = TASK_RECORD, .event = e, .generation = generation});
}

static unsigned long recorded_now(mt_event *e) {
    pthread_mutex_lock(&e->lock);
    unsigned long generation = e->recorded;
    pthread_mutex_unlock(&e->lock);
    return generation;
}

static void cpu_stream_wait(mt_backend *b, mt_stream *s, mt_event *e) {
    enqueue(s, (task){.kind = TASK_WAIT, .event = e, .generation = recorded_now(e)});
}

static void cpu_event_sync(mt_backend *b, mt_event *e) { event_wait_for(e, recorded_now(e)); }

static int cpu_event_done(mt_backend *b, mt_event *e) {
    pthread_mutex_lock(&e->lock);
    int done = e->completed >= e->recorded;
    pthread_mutex_unlock(&e->lock);
    return done;
}

static double cpu_event_elapsed(mt_backend *b, mt_event *start, mt_event *end) {
    pthread_mutex_lock(&start->lock);
    double t0 = start->completed_at;
    pthread_mutex_unlock(&start->lock);
    pthread_mutex_lock(&end->lock);
    double t1 = end->completed_at;
    pthread_mutex_unlock(&end->lock);
    return t1 - t0;
}

static void cpu_copy(mt_backend *b, void *dst, const void *src, size_t bytes, mt_stream *s) {
    enqueue(s, (task){.kind = TASK_COPY, .dst = dst, .src = src, .bytes = bytes});
}

static void cpu_zero(mt_backend *b, void *dst, size_t bytes, mt_stream *s) {
    enqueue(s, (task){.kind = TASK_ZERO, .dst = dst, .bytes = bytes});
}

static void cpu_launch(mt_backend *b, mt_stream *s, void (*fn)(void *), void *arg) {
    enqueue(s, (task){.kind = TASK_RUN, .fn = fn, .arg = arg});
}

static void cpu_destroy(mt_backend *b) {
    cpu_backend *be = (cpu_backend *)b;
    pthread_mutex_destroy(&be->mem_lock);
    free(be);
}

/* ---- ops: the reference kernels, run on the stream's worker (see backend.h) ---- */

static void op_matmul(mt_backend *b, mt_stream *s, void *y, const void *x, const void *w,
                      const void *bias, int n, int in, int out) {
    mt_cpu_matmul(y, x, w, bias, n, in, out);
}
static void op_matmul_dx(mt_backend *b, mt_stream *s, void *dx, const void *dy, const void *w,
                         int n, int in, int out, int accumulate) {
    mt_cpu_matmul_dx(dx, dy, w, n, in, out, accumulate);
}
static void op_matmul_dw(mt_backend *b, mt_stream *s, float *dw, float *dbias, const void *dy,
                         const void *x, int n, int in, int out) {
    mt_cpu_matmul_dw(dw, dbias, dy, x, n, in, out);
}
static void op_rmsnorm(mt_backend *b, mt_stream *s, void *y, float *rstd, const void *x,
                       const void *w, int n, int d, mt_rmsnorm_params p) {
    mt_cpu_rmsnorm(y, rstd, x, w, n, d, p);
}
static void op_rmsnorm_dx(mt_backend *b, mt_stream *s, void *dx, float *dw, const void *dy,
                          const void *x, const void *w, const float *rstd, int n, int d,
                          mt_rmsnorm_params p, int accumulate) {
    mt_cpu_rmsnorm_dx(dx, dw, dy, x, w, rstd, n, d, p, accumulate);
}
static void op_rope(mt_backend *b, mt_stream *s, void *x, const float *inv_freq, int n, int seq, int pos0,
                    const int32_t *pos, int heads, int head_dim, int rotary_dim, int inverse) {
    mt_cpu_rope(x, inv_freq, n, seq, pos0, pos, heads, head_dim, rotary_dim, inverse);
}
static void op_attention(mt_backend *b, mt_stream *s, void *out, float *lse, const void *q,
                         const void *k, const void *v, mt_attn_dims dims, const mt_attn_params *params,
                         const mt_segments *seg, void *workspace) {
    mt_cpu_attention(out, lse, q, k, v, dims, params, seg);
}
static void op_attention_dx(mt_backend *b, mt_stream *s, void *dq, void *dk, void *dv,
                            const void *dout, const void *out, const float *lse, const void *q,
                            const void *k, const void *v, mt_attn_dims dims, const mt_attn_params *params,
                            const mt_segments *seg, void *workspace) {
    mt_cpu_attention_dx(dq, dk, dv, dout, out, lse, q, k, v, dims, params, seg, workspace);
}
static size_t op_attention_workspace(mt_backend *b, mt_attn_dims dims, int segmented) {
    return mt_cpu_attention_workspace(dims);
}
static void op_accumulate_f32(mt_backend *b, mt_stream *s, float *acc, const void *x, size_t count,
                              int accumulate) {
    mt_cpu_accumulate_f32(acc, x, count, accumulate);
}
/* The act type is fp32: rounding to it is a copy. */
static void op_round_f32(mt_backend *b, mt_stream *s, void *y, const float *x, size_t count) {
    if (y != x) memcpy(y, x, count * sizeof *x);
}
static void op_swiglu(mt_backend *b, mt_stream *s, void *a, const void *g, const void *u, size_t count,
                      mt_glu_params p) {
    mt_cpu_swiglu(a, g, u, count, p);
}
static void op_swiglu_dx(mt_backend *b, mt_stream *s, void *dg, void *du, const void *da,
                         const void *g, const void *u, size_t count, mt_glu_params p) {
    mt_cpu_swiglu_dx(dg, du, da, g, u, count, p);
}
static void op_add(mt_backend *b, mt_stream *s, void *y, const void *a, const void *bb, size_t count) {
    mt_cpu_add(y, a, bb, count);
}
static void op_gate_split(mt_backend *b, mt_stream *s, void *q, void *gate, const void *qg, int n, int heads,
                          int head_dim) {
    mt_cpu_gate_split(q, gate, qg, n, heads, head_dim);
}
static void op_gate_join(mt_backend *b, mt_stream *s, void *dqg, const void *dq, const void *dgate, int n, int heads,
                         int head_dim) {
    mt_cpu_gate_join(dqg, dq, dgate, n, heads, head_dim);
}
static void op_out_gate(mt_backend *b, mt_stream *s, void *y, const void *x, const void *gate, size_t count) {
    mt_cpu_out_gate(y, x, gate, count);
}
static void op_out_gate_dx(mt_backend *b, mt_stream *s, void *dx, void *dgate, const void *dy, const void *x,
                           const void *gate, size_t count) {
    mt_cpu_out_gate_dx(dx, dgate, dy, x, gate, count);
}
static void op_gather_cols(mt_backend *b, mt_stream *s, void *y, const void *x, const int32_t *cols, int n, int in,
                           int out) {
    mt_cpu_gather_cols(y, x, cols, n, in, out);
}
static void op_scatter_cols(mt_backend *b, mt_stream *s, void *dx, const void *dy, const int32_t *cols, int n, int in,
                            int out) {
    mt_cpu_scatter_cols(dx, dy, cols, n, in, out);
}
static void op_embedding(mt_backend *b, mt_stream *s, void *x, const int32_t *tokens,
                         const void *wte, int n, int d, float scale) {
    mt_cpu_embedding(x, tokens, wte, n, d, scale);
}
static void op_embedding_dw(mt_backend *b, mt_stream *s, float *dwte, const int32_t *tokens,
                            const void *dx, int n, int d, int v0, int rows, float scale) {
    mt_cpu_embedding_dw(dwte, tokens, dx, n, d, v0, rows, scale);
}
static void op_lmhead_loss(mt_backend *b, mt_stream *s, float *loss_sum, float *lse, void *dx, float *dw,
                           const void *x, const void *w, const int32_t *targets, int n, int d,
                           int vocab, float scale, float softcap, int chunk, void *workspace) {
    mt_cpu_lmhead_loss(loss_sum, lse, dx, dw, x, w, targets, n, d, vocab, scale, softcap, chunk, workspace);
}
static void op_lmhead_dw(mt_backend *b, mt_stream *s, float *dw, const void *x, const void *w,
                         const int32_t *targets, const float *lse, int n, int d, int v0, int rows, float scale,
                         float softcap, int chunk, void *workspace) {
    mt_cpu_lmhead_dw(dw, x, w, targets, lse, n, d, v0, rows, scale, softcap, chunk, workspace);
}
static size_t op_lmhead_workspace(mt_backend *b, int chunk, int vocab) {
    return mt_cpu_lmhead_workspace(chunk, vocab);
}
static void op_logits(mt_backend *b, mt_stream *s, float *logits, const void *x, const void *w,
                      int d, int vocab, float softcap) {
    mt_cpu_logits(logits, x, w, d, vocab, softcap);
}
static void op_sumsq(mt_backend *b, mt_stream *s, float *out, const float *x, size_t count) {
    mt_cpu_sumsq(out, x, count);
}

static void op_clip_scale(mt_backend *b, mt_stream *s, float *scale, const float *norms, int count,
                          float max_norm) {
    *scale = mt_clip_scale(mt_global_norm(norms, count), max_norm);
}
/* The host optimizer's own update: the reference the cuda kernel is held to. With a clip
 * coefficient (backend.h) the whole update with it, or none for a coefficient that is not finite
 * (a skipped step), as the host takes a step that was not taken ahead. */
static void op_adamw(mt_backend *b, mt_stream *s, const mt_adamw_params *p, int decay, const float *scale,
                     float *master, float *m, float *v, const float *grad, void *w, size_t n) {
    int threads = ((cpu_backend *)b)->threads;
    mt_adamw_params q = *p;
    if (scale) q.grad_scale = *scale;
    if (isfinite(q.grad_scale))
        mt_adamw_update_parallel(MT_ADAMW_FULL, &q, decay, (mt_master){.f32 = master}, m, v, grad, n, threads);
    memcpy(w, master, n * sizeof *master); /* the working weights: fp32, the masters themselves */
}

/* ---- mixture of experts ---- */

static void moe_route(mt_backend *b, mt_stream *s, float *weights, int32_t *experts, int32_t *counts, float *prob_sum,
                      const void *logits, int n, int E, int k, int renorm) {
    mt_cpu_moe_route(weights, experts, counts, prob_sum, logits, n, E, k, renorm);
}
static void moe_route_dx(mt_backend *b, mt_stream *s, void *dlogits, const float *dweights, const void *logits,
                         const int32_t *experts, const float *aux_grad, int n, int E, int k, int renorm) {
    mt_cpu_moe_route_dx(dlogits, dweights, logits, experts, aux_grad, n, E, k, renorm);
}
static void moe_permute(mt_backend *b, mt_stream *s, int32_t *order, int32_t *slot_row, int32_t *offsets,
                        const int32_t *experts, int n, int E, int k, int seg) {
    mt_cpu_moe_permute(order, slot_row, offsets, experts, n, E, k, seg);
}
static void moe_gather(mt_backend *b, mt_stream *s, void *xs, const void *x, const int32_t *order, int n, int k,
                       int d) {
    mt_cpu_moe_gather(xs, x, order, n, k, d);
}
static void moe_gather_dx(mt_backend *b, mt_stream *s, void *dx, const void *dxs, const int32_t *slot_row, int n,
                          int k, int d, int accumulate) {
    mt_cpu_moe_gather_dx(dx, dxs, slot_row, n, k, d, accumulate);
}
static void moe_matmul(mt_backend *b, mt_stream *s, void *y, const void *x, const void *w, const void *bias,
                       const int32_t *offsets, int rows, int E, int S, int in, int out) {
    mt_cpu_moe_matmul(y, x, w, bias, offsets, rows, E, S, in, out);
}
static void moe_matmul_dx(mt_backend *b, mt_stream *s, void *dx, const void *dy, const void *w,
                          const int32_t *offsets, int rows, int E, int S, int in, int out) {
    mt_cpu_moe_matmul_dx(dx, dy, w, offsets, rows, E, S, in, out);
}
static void moe_matmul_dw(mt_backend *b, mt_stream *s, float *dw, float *dbias, const void *dy, const void *x,
                          const int32_t *offsets, int rows, int E, int S, int in, int out) {
    mt_cpu_moe_matmul_dw(dw, dbias, dy, x, offsets, rows, E, S, in, out);
}
static void moe_swiglu(mt_backend *b, mt_stream *s, void *a, const void *gu, int rows, int F, mt_glu_params p) {
    mt_cpu_moe_swiglu(a, gu, rows, F, p);
}
static void moe_swiglu_dx(mt_backend *b, mt_stream *s, void *dgu, const void *da, const void *gu, int rows, int F,
                          mt_glu_params p) {
    mt_cpu_moe_swiglu_dx(dgu, da, gu, rows, F, p);
}
static void moe_combine(mt_backend *b, mt_stream *s, void *y, const void *ys, const float *weights,
                        const int32_t *slot_row, int n, int k, int d) {
    mt_cpu_moe_combine(y, ys, weights, slot_row, n, k, d);
}
static void moe_combine_dx(mt_backend *b, mt_stream *s, void *dys, float *dweights, const void *dy, const void *ys,
                           const float *weights, const int32_t *slot_row, int n, int k, int d) {
    mt_cpu_moe_combine_dx(dys, dweights, dy, ys, weights, slot_row, n, k, d);
}
static void moe_gate_add(mt_backend *b, mt_stream *s, void *y, const void *a, const void *x, const void *g, int n,
                         int d) {
    mt_cpu_moe_gate_add(y, a, x, g, n, d);
}
static void moe_gate_add_dx(mt_backend *b, mt_stream *s, void *dx, void *dg, const void *dy, const void *x,
                            const void *g, int n, int d) {
    mt_cpu_moe_gate_add_dx(dx, dg, dy, x, g, n, d);
}
static void moe_aux_loss(mt_backend *b, mt_stream *s, float *loss_sum, float *grad, const int32_t *counts,
                         const float *prob_sum, int layers, int n, int E, float loss_scale, float grad_scale) {
    mt_cpu_moe_aux_loss(loss_sum, grad, counts, prob_sum, layers, n, E, loss_scale, grad_scale);
}

/* ---- Gated DeltaNet ---- */

static void gdn_conv(mt_backend *b, mt_stream *s, void *y, const void *x, const void *w, int C, mt_gdn_dims d) {
    mt_cpu_gdn_conv(y, x, w, C, d);
}
static void gdn_conv_dx(mt_backend *b, mt_stream *s, void *dx, float *dw, const void *dy, const void *x, const void *w,
                        int C, mt_gdn_dims d) {
    mt_cpu_gdn_conv_dx(dx, dw, dy, x, w, C, d);
}
static void gdn_qk_norm(mt_backend *b, mt_stream *s, void *qn, void *kn, const void *q, const void *k, mt_gdn_dims d) {
    mt_cpu_gdn_qk_norm(qn, kn, q, k, d);
}
static void gdn_qk_norm_dx(mt_backend *b, mt_stream *s, void *dq, void *dk, const void *dqn, const void *dkn,
                           const void *q, const void *k, mt_gdn_dims d) {
    mt_cpu_gdn_qk_norm_dx(dq, dk, dqn, dkn, q, k, d);
}
static void gdn_decay(mt_backend *b, mt_stream *s, float *g, float *beta, const void *a, const void *bb,
                      const void *A_log, const void *dt_bias, mt_gdn_dims d) {
    mt_cpu_gdn_decay(g, beta, a, bb, A_log, dt_bias, d);
}
static void gdn_decay_dx(mt_backend *b, mt_stream *s, void *da, void *db, float *dA_log, float *ddt_bias,
                         const float *dg, const float *dbeta, const void *a, const void *bb, const void *A_log,
                         const void *dt_bias, mt_gdn_dims d) {
    mt_cpu_gdn_decay_dx(da, db, dA_log, ddt_bias, dg, dbeta, a, bb, A_log, dt_bias, d);
}
static void gdn_rule(mt_backend *b, mt_stream *s, void *o, const void *q, const void *k, const void *v, const float *g,
                     const float *beta, mt_gdn_dims d, void *workspace) {
    mt_cpu_gdn_rule(o, q, k, v, g, beta, d, workspace);
}
static void gdn_rule_dx(mt_backend *b, mt_stream *s, void *dq, void *dk, void *dv, float *dg, float *dbeta,
                        const void *dout, const void *q, const void *k, const void *v, const float *g,
                        const float *beta, mt_gdn_dims d, void *workspace) {
    mt_cpu_gdn_rule_dx(dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, d, workspace);
}
static size_t gdn_rule_workspace(mt_backend *b, mt_gdn_dims d) { return mt_cpu_gdn_rule_workspace(d); }
static void gdn_norm(mt_backend *b, mt_stream *s, void *y, const void *x, const void *z, const void *w, float eps,
                     mt_gdn_dims d) {
    mt_cpu_gdn_norm(y, x, z, w, eps, d);
}
static void gdn_norm_dx(mt_backend *b, mt_stream *s, void *dx, void *dz, float *dw, const void *dy, const void *x,
                        const void *z, const void *w, float eps, mt_gdn_dims d) {
    mt_cpu_gdn_norm_dx(dx, dz, dw, dy, x, z, w, eps, d);
}

/* ---- collectives: the ranks are threads of this process (host_comm.h) or processes (world.h) ---- */

static mt_status coll_comm_init(mt_backend **ranks, int n) {
    mt_host_comm *c;
    MT_TRY(mt_host_comm_create(&c, n));
    int summed = getenv("MT_TEST_RANKS_SUMMED") != NULL;
    for (int r = 0; r < n; r++) {
        cpu_backend *be = (cpu_backend *)ranks[r];
        be->comm = c;
        be->summed = summed;
        be->rank = r;
        be->coll_failed = MT_OK;
    }
    return MT_OK;
}

static mt_status coll_comm_init_world(mt_backend *b, const mt_world *w) {
    cpu_backend *be = (cpu_backend *)b;
    MT_TRY(mt_star_open(&be->star, w));
    be->rank = w->rank;
    return MT_OK;
}

/* A collective's failure, kept for check (the first one). */
static void coll_note(cpu_backend *be, mt_status rc) {
    if (rc == MT_OK) return;
    pthread_mutex_lock(&be->mem_lock);
    if (be->coll_failed == MT_OK) {
        be->coll_failed = rc;
        snprintf(be->coll_message, sizeof be->coll_message, "%s", mt_error());
    }
    pthread_mutex_unlock(&be->mem_lock);
}

/* The threads accumulate in turns (one rank's bits); between processes, or with MT_TEST_RANKS_SUMMED set
 * when the group is made (to compare threads with processes), each rank's own sum is added in rank order. */
static int coll_ordered(const cpu_backend *be) { return be->comm && !be->summed && be->base.ops->coll.acc_open; }

static int coll_acc_ordered(mt_backend *b) { return coll_ordered((cpu_backend *)b); }

static mt_status coll_none(void) { return mt_fail(MT_ERR_INVALID, "a collective on a cpu backend in no group"); }

static void coll_all_reduce(mt_backend *b, mt_stream *s, float *buf, size_t count) {
    cpu_backend *be = (cpu_backend *)b;
    coll_note(be, be->comm   ? mt_host_comm_all_reduce(be->comm, be->rank, buf, count, coll_ordered(be))
                  : be->star ? mt_star_all_reduce(be->star, buf, count)
                             : coll_none());
}

/* Between processes: the whole sum, of which the rank's slice is what reduce_scatter promises. */
static void coll_reduce_scatter(mt_backend *b, mt_stream *s, float *buf, size_t count) {
    cpu_backend *be = (cpu_backend *)b;
    coll_note(be, be->comm   ? mt_host_comm_reduce_scatter(be->comm, be->rank, buf, count, coll_ordered(be))
                  : be->star ? mt_star_all_reduce(be->star, buf, count)
                             : coll_none());
}

static void coll_broadcast(mt_backend *b, mt_stream *s, void *buf, size_t bytes, int root) {
    cpu_backend *be = (cpu_backend *)b;
    coll_note(be, be->comm   ? mt_host_comm_broadcast(be->comm, be->rank, buf, bytes, root)
                  : be->star ? mt_star_broadcast_from(be->star, buf, bytes, root)
                             : coll_none());
}

/* Turns are the threads' (between processes the ranks sum their own accumulators). */
static void coll_acc_open(mt_backend *b, mt_stream *s, int tag, float *buf, size_t count, int fresh) {
    cpu_backend *be = (cpu_backend *)b;
    if (coll_ordered(be)) coll_note(be, mt_host_comm_acc_open(be->comm, be->rank, tag, buf, count, fresh));
}

static void coll_acc_close(mt_backend *b, mt_stream *s, int tag, float *buf, size_t count) {
    cpu_backend *be = (cpu_backend *)b;
    if (coll_ordered(be)) coll_note(be, mt_host_comm_acc_close(be->comm, be->rank, tag, buf, count));
}

static void coll_comm_abort(mt_backend *b) {
    cpu_backend *be = (cpu_backend *)b;
    if (be->comm) mt_host_comm_abort(be->comm);
    if (be->star) mt_star_abort(be->star);
}

static void coll_comm_free(mt_backend *b) {
    cpu_backend *be = (cpu_backend *)b;
    mt_host_comm_release(be->comm);
    mt_star_close(be->star);
    be->comm = NULL;
    be->star = NULL;
}

/* The cpu's own work cannot fail after it was issued; a collective can (a rank failed). */
static mt_status cpu_check(mt_backend *b) {
    cpu_backend *be = (cpu_backend *)b;
    pthread_mutex_lock(&be->mem_lock);
    mt_status rc = be->coll_failed;
    if (rc != MT_OK) mt_fail(rc, "%s", be->coll_message);
    be->coll_failed = MT_OK;
    pthread_mutex_unlock(&be->mem_lock);
    return rc;
}

static const mt_backend_ops cpu_ops = {
    .name = "cpu",
    .kind = MT_DEVICE_CPU,
    .act_dtype = MT_DTYPE_F32,
    .weight_dtype = MT_DTYPE_F32,
    .gemm_by_sequence = 1,
    .destroy = cpu_destroy,
    .mem = {.dev_alloc = cpu_dev_alloc, .dev_free = cpu_dev_free, .host_alloc = cpu_host_alloc,
            .host_free = cpu_host_free, .dev_mem_info = cpu_dev_mem_info, .host_peak = cpu_host_peak},
    .stream = {.stream_create = cpu_stream_create, .stream_destroy = cpu_stream_destroy,
               .event_create = cpu_event_create, .event_destroy = cpu_event_destroy,
               .event_record = cpu_event_record, .stream_wait = cpu_stream_wait, .event_sync = cpu_event_sync,
               .copy = cpu_copy, .zero = cpu_zero, .event_done = cpu_event_done,
               .event_elapsed = cpu_event_elapsed, .launch = cpu_launch, .check = cpu_check},
    .op = {.matmul = op_matmul, .matmul_dx = op_matmul_dx, .matmul_dw = op_matmul_dw, .rmsnorm = op_rmsnorm,
           .rmsnorm_dx = op_rmsnorm_dx, .rope = op_rope, .attention = op_attention,
           .attention_dx = op_attention_dx, .attention_workspace = op_attention_workspace,
           .accumulate_f32 = op_accumulate_f32, .round_f32 = op_round_f32,
           .swiglu = op_swiglu, .swiglu_dx = op_swiglu_dx, .add = op_add, .embedding = op_embedding,
           .gate_split = op_gate_split, .gate_join = op_gate_join, .out_gate = op_out_gate,
           .out_gate_dx = op_out_gate_dx, .gather_cols = op_gather_cols, .scatter_cols = op_scatter_cols,
           .embedding_dw = op_embedding_dw, .lmhead_loss = op_lmhead_loss, .lmhead_dw = op_lmhead_dw,
           .lmhead_workspace = op_lmhead_workspace, .logits = op_logits, .sumsq = op_sumsq,
           .clip_scale = op_clip_scale, .adamw = op_adamw},
    .moe = {.route = moe_route, .route_dx = moe_route_dx, .permute = moe_permute, .gather = moe_gather,
            .gather_dx = moe_gather_dx, .grouped_matmul = moe_matmul, .grouped_matmul_dx = moe_matmul_dx,
            .grouped_matmul_dw = moe_matmul_dw, .swiglu = moe_swiglu, .swiglu_dx = moe_swiglu_dx,
            .combine = moe_combine, .combine_dx = moe_combine_dx, .gate_add = moe_gate_add,
            .gate_add_dx = moe_gate_add_dx, .aux_loss = moe_aux_loss},
    .gdn = {.conv = gdn_conv, .conv_dx = gdn_conv_dx, .qk_norm = gdn_qk_norm, .qk_norm_dx = gdn_qk_norm_dx,
            .decay = gdn_decay, .decay_dx = gdn_decay_dx, .rule = gdn_rule, .rule_dx = gdn_rule_dx,
            .rule_workspace = gdn_rule_workspace, .norm = gdn_norm, .norm_dx = gdn_norm_dx},
    .coll = {.comm_init = coll_comm_init, .comm_init_world = coll_comm_init_world, .all_reduce = coll_all_reduce,
             .reduce_scatter = coll_reduce_scatter, .broadcast = coll_broadcast, .acc_open = coll_acc_open, .acc_close = coll_acc_close,
             .acc_ordered = coll_acc_ordered,
             .comm_abort = coll_comm_abort, .comm_free = coll_comm_free},
};

mt_status mt_backend_cpu_create(mt_backend **out, int threads) {
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return mt_fail(MT_ERR_NOMEM, "cannot allocate the cpu backend");
    mt_status status = mt_backend_init(&be->base, &cpu_ops);
    if (status != MT_OK) {
        free(be);
        return status;
    }
    be->threads = threads;
#ifdef _OPENMP
    if (be->threads <= 0) be->threads = omp_get_max_threads();
#endif
    pthread_mutex_init(&be->mem_lock, NULL);
    *out = &be->base;
    return MT_OK;
}
