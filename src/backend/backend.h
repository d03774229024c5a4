/* The backend interface: everything the engine asks of a compute device.
 *
 * A backend is a struct of function pointers behind an opaque handle (ggml-backend's shape).
 * Two implement it: cpu (the reference; each stream is a worker thread with a queue, events are
 * counters with condition variables) and cuda (pinned host memory, CUDA streams and events,
 * cuBLASLt and hand-written kernels).
 *
 * Ordering. Work is issued to a stream and runs in issue order on it. Streams are ordered
 * against each other only by events, with CUDA's meaning: event_record(e, s) marks "everything
 * issued to s so far"; stream_wait(s, e) makes later work on s wait for the most recent record
 * of e; event_sync(e) blocks the calling host thread until then.
 *
 * Ops. Every op is issued on a stream. On cuda an op call enqueues kernels and returns; on cpu
 * an op computes right away on the calling thread, so the cpu engine calls ops only from inside
 * launch()ed functions, which run on the stream's worker. The engine therefore always calls ops
 * inside launch(); on cuda launch() runs the function at once on the calling thread.
 *
 * Types. "act" buffers hold the backend's activation type and "w" buffers its weight type
 * (cpu: float and float; cuda: bf16 and bf16); gradient accumulators for weights ("dw"), norm
 * statistics and losses are always float; token ids are int32. Shapes are row-major; n is the
 * number of token rows, d the hidden size. Weight matrices are [out, in] as in Hugging Face.
 * Weight gradients always accumulate (+=); other outputs are overwritten unless an op says so. */
#ifndef MT_BACKEND_BACKEND_H
#define MT_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct mt_backend mt_backend;
typedef struct mt_stream mt_stream;
typedef struct mt_event mt_event;
struct mt_adamw_params; /* optim/adamw.h */

typedef enum { MT_DTYPE_F32, MT_DTYPE_BF16 } mt_dtype;

static inline size_t mt_dtype_size(mt_dtype t) { return t == MT_DTYPE_F32 ? 4 : 2; }

/* Causal attention dimensions for one micro-batch: batch sequences of seq tokens, n = batch*seq
 * rows; q rows hold heads x head_dim, k and v rows kv_heads x head_dim. */
typedef struct {
    int batch, seq, heads, kv_heads, head_dim;
} mt_attn_dims;

typedef struct mt_backend_ops {
    const char *name;
    mt_dtype act_dtype, weight_dtype;
    /* Issue row-wise GEMMs one sequence at a time. The cpu backend sets it: BLAS picks its
     * kernels by matrix size, so one GEMM over 4 sequences and four over 1 differ in the last
     * bits, and the engine promises that micro-batching never changes the bits there. */
    int gemm_by_sequence;

    void (*destroy)(mt_backend *be);

    /* Memory. dev_* is device memory; host_* is host memory the device copies from and to at
     * full speed (pinned on cuda). Both return NULL and set the error on failure. */
    void *(*dev_alloc)(mt_backend *be, size_t bytes, const char *what);
    void (*dev_free)(mt_backend *be, void *ptr);
    void *(*host_alloc)(mt_backend *be, size_t bytes, const char *what);
    void (*host_free)(mt_backend *be, void *ptr);
    /* Bytes of device memory free now (SIZE_MAX where the device's memory is the host's: cpu),
     * and the most ever in use through dev_alloc; either pointer may be NULL. */
    void (*dev_mem_info)(mt_backend *be, size_t *free_bytes, size_t *peak_bytes);

    /* Streams and events. */
    mt_stream *(*stream_create)(mt_backend *be);
    void (*stream_destroy)(mt_backend *be, mt_stream *s);
    mt_event *(*event_create)(mt_backend *be);
    void (*event_destroy)(mt_backend *be, mt_event *e);
    void (*event_record)(mt_backend *be, mt_event *e, mt_stream *s);
    void (*stream_wait)(mt_backend *be, mt_stream *s, mt_event *e);
    void (*event_sync)(mt_backend *be, mt_event *e);
    /* 1 when the most recent record of e has completed (or none was issued), without waiting. */
    int (*event_done)(mt_backend *be, mt_event *e);
    /* Seconds between two completed records (cuda: cudaEventElapsedTime). */
    double (*event_elapsed)(mt_backend *be, mt_event *start, mt_event *end);

    /* Asynchronous copy of bytes between any two of host_alloc, dev_alloc and ordinary host
     * memory; memset of device memory to zero bytes. */
    void (*copy)(mt_backend *be, void *dst, const void *src, size_t bytes, mt_stream *s);
    void (*zero)(mt_backend *be, void *dst, size_t bytes, mt_stream *s);
    /* Runs fn(arg) in the stream's order (see above). */
    void (*launch)(mt_backend *be, mt_stream *s, void (*fn)(void *arg), void *arg);
    /* The first device error seen since the last call, or MT_OK (errors are sticky). */
    mt_status (*check)(mt_backend *be);

    /* ---- layer ops: see the header comment for types ---- */

    /* y[n,out] = x[n,in] . w[out,in]^T (+ bias[out] when bias != NULL) */
    void (*matmul)(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w,
                   const void *bias, int n, int in, int out);
    /* dx[n,in] = dy[n,out] . w[out,in], or += when accumulate */
    void (*matmul_dx)(mt_backend *be, mt_stream *s, void *dx, const void *dy, const void *w,
                      int n, int in, int out, int accumulate);
    /* dw[out,in] += dy[n,out]^T . x[n,in];  dbias[out] += sum over rows of dy (when non-NULL) */
    void (*matmul_dw)(mt_backend *be, mt_stream *s, float *dw, float *dbias, const void *dy,
                      const void *x, int n, int in, int out);

    /* y = x * rstd * w with rstd[n] = 1/sqrt(mean(x^2) + eps) saved for the backward */
    void (*rmsnorm)(mt_backend *be, mt_stream *s, void *y, float *rstd, const void *x,
                    const void *w, int n, int d, float eps);
    /* dx = (or += when accumulate) d(y)/dx . dy;  dw += sum over rows of dy * x * rstd */
    void (*rmsnorm_dx)(mt_backend *be, mt_stream *s, void *dx, float *dw, const void *dy,
                       const void *x, const void *w, const float *rstd, int n, int d,
                       int accumulate);

    /* In-place rotary embedding of x[n, heads, head_dim], Hugging Face's rotate_half pairing
     * (i, i + head_dim/2); the position of row r is r % seq. inv_freq[head_dim/2] lives in device
     * memory. inverse = 1 applies the transpose (the backward). */
    void (*rope)(mt_backend *be, mt_stream *s, void *x, const float *inv_freq, int n, int seq,
                 int heads, int head_dim, int inverse);

    /* Causal grouped-query attention. out[n, heads*head_dim]; lse[batch, heads, seq] saved. */
    void (*attention)(mt_backend *be, mt_stream *s, void *out, float *lse, const void *q,
                      const void *k, const void *v, mt_attn_dims dims);
    /* dq, dk, dv overwritten. workspace: attention_workspace(dims) bytes of device memory. */
    void (*attention_dx)(mt_backend *be, mt_stream *s, void *dq, void *dk, void *dv,
                         const void *dout, const void *out, const float *lse, const void *q,
                         const void *k, const void *v, mt_attn_dims dims, void *workspace);
    size_t (*attention_workspace)(mt_backend *be, mt_attn_dims dims);

    /* a = silu(g) * u over count elements; backward overwrites dg and du */
    void (*swiglu)(mt_backend *be, mt_stream *s, void *a, const void *g, const void *u, size_t count);
    void (*swiglu_dx)(mt_backend *be, mt_stream *s, void *dg, void *du, const void *da,
                      const void *g, const void *u, size_t count);

    /* y = a + b over count elements (y may alias a or b) */
    void (*add)(mt_backend *be, mt_stream *s, void *y, const void *a, const void *b, size_t count);

    /* x[n,d] = wte[tokens[i], :];  dwte[tokens[i], :] += dx[i, :] (ids already validated) */
    void (*embedding)(mt_backend *be, mt_stream *s, void *x, const int32_t *tokens,
                      const void *wte, int n, int d);
    void (*embedding_dw)(mt_backend *be, mt_stream *s, float *dwte, const int32_t *tokens,
                         const void *dx, int n, int d);

    /* Fused LM head and cross-entropy over logits = x[n,d] . w[vocab,d]^T, never holding more
     * than chunk rows of logits: *loss_sum (device float) += sum of -log softmax(logits)[target]
     * over rows; dx[n,d] = scale * dloss/dx (overwritten); dw += scale * dloss/dw. A target < 0
     * is ignored (no loss, no gradient). dx and dw may both be NULL: the loss only (evaluation).
     * workspace: lmhead_workspace(chunk, vocab) bytes. */
    void (*lmhead_loss)(mt_backend *be, mt_stream *s, float *loss_sum, void *dx, float *dw,
                        const void *x, const void *w, const int32_t *targets, int n, int d,
                        int vocab, float scale, int chunk, void *workspace);
    size_t (*lmhead_workspace)(mt_backend *be, int chunk, int vocab);
    /* Logits of the last row only, for sampling: logits[vocab] (device float) = x[d] . w^T */
    void (*logits)(mt_backend *be, mt_stream *s, float *logits, const void *x, const void *w,
                   int d, int vocab);

    /* *out (device float) += sum of squares of x[count] (fp32 gradients), for the global norm */
    void (*sumsq)(mt_backend *be, mt_stream *s, float *out, const float *x, size_t count);

    /* ---- the optimizer, for tensors whose state the device keeps ---- */

    /* *scale (device float) = the clip coefficient of the global gradient norm, the square root
     * of the sum of norms[count] (device floats of sums of squares, added in double in index
     * order): 1 when the norm is at most max_norm, max_norm / (norm + 1e-6) above it, NaN when
     * the norm is not finite. The engine's host side forms the same numbers from the same sums. */
    void (*clip_scale)(mt_backend *be, mt_stream *s, float *scale, const float *norms, int count,
                       float max_norm);
    /* AdamW on n elements of fp32 master, m, v and grad in device memory, writing the working
     * weights w (the backend's weight type): optim/adamw.h's arithmetic, bit for bit. `scale`:
     * NULL, or a device float (clip_scale's) that replaces p->grad_scale; a non-finite one
     * leaves everything unchanged (a skipped step). */
    void (*adamw)(mt_backend *be, mt_stream *s, const struct mt_adamw_params *p, int decay,
                  const float *scale, float *master, float *m, float *v, const float *grad, void *w,
                  size_t n);
} mt_backend_ops;

struct mt_backend {
    const mt_backend_ops *ops;
};

/* Device memory free now, SIZE_MAX on a backend without memory of its own; and whether it has
 * memory of its own (a GPU). */
static inline size_t mt_backend_device_free(mt_backend *be) {
    size_t free_bytes = 0;
    be->ops->dev_mem_info(be, &free_bytes, NULL);
    return free_bytes;
}
static inline int mt_backend_has_device_memory(mt_backend *be) { return mt_backend_device_free(be) != SIZE_MAX; }

/* Backend constructors. cuda_create fails with MT_ERR_DEVICE when no GPU is usable. */
mt_status mt_backend_cpu_create(mt_backend **out, int threads);
mt_status mt_backend_cuda_create(mt_backend **out, int device);

#endif
