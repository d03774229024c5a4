/* The backend interface: everything the engine asks of a compute device (docs/backends.md).
 *
 * A backend is a table of function pointers behind an opaque handle, in three groups as in
 * ggml-backend: memory (device and host buffers), streams and events (ordering, copies, running
 * host code in a stream's order) and ops (the layers' kernels). Two backends implement it: cpu
 * (the reference; each stream is a worker thread with a queue, events are counters with condition
 * variables) and cuda (pinned host memory, CUDA streams and events, cuBLASLt and hand-written
 * kernels). The table also states the device's kind: a GPU has memory of its own behind a bus, a
 * CPU's device memory is host memory.
 *
 * Callers reach memory, streams and events through the mt_* functions below (backend.c), never
 * the table: entries marked OPTIONAL may be NULL, and those functions hold their synchronous
 * fallbacks in one place. Ops are called through the table (be->ops->op.X); the optional ones have
 * no fallback and a query says whether the backend has them.
 *
 * Ordering. Work is issued to a stream and runs in issue order on it. Streams are ordered
 * against each other only by events, with CUDA's meaning: mt_event_record(e, s) marks
 * "everything issued to s so far"; mt_stream_wait(s, e) makes later work on s wait for the most
 * recent record of e (none yet: no wait); mt_event_sync(e) blocks the calling host thread until
 * then.
 *
 * Ops. Every op is issued on a stream. On cuda an op call enqueues kernels and returns; on cpu
 * an op computes right away on the calling thread, so the cpu engine calls ops only from inside
 * mt_launch()ed functions, which run on the stream's worker. The engine therefore always calls ops
 * inside mt_launch(); on cuda (no launch entry) the function runs at once on the calling thread.
 *
 * Types. "act" buffers hold the backend's activation type and "w" buffers its weight type
 * (cpu: float and float; cuda: bf16 and bf16); gradient accumulators for weights ("dw"), norm
 * statistics and losses are always float; token ids are int32. Shapes are row-major; n is the
 * number of token rows, d the hidden size. Weight matrices are [out, in] as in Hugging Face.
 * Weight gradients always accumulate (+=); other outputs are overwritten unless an op says so. */
#ifndef MT_BACKEND_BACKEND_H
#define MT_BACKEND_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "util/dtype.h"
#include "util/glu.h"
#include "util/status.h"

typedef struct mt_backend mt_backend;
typedef struct mt_stream mt_stream;
typedef struct mt_event mt_event;
struct mt_adamw_params; /* optim/adamw.h */
struct mt_device_info;  /* backend/device_info.h */
struct mt_world;        /* util/world.h */

/* What the device is. It decides where memory is counted (a GPU's own, or the host's) and
 * which defaults apply (pinned optimizer cores, the ends on the device). */
typedef enum {
    MT_DEVICE_CPU, /* its "device" memory is host memory; nothing crosses a bus */
    MT_DEVICE_GPU, /* memory of its own, reached by copies over a bus */
} mt_device_kind;

/* Causal attention dimensions for one micro-batch: batch sequences of seq tokens, n = batch*seq
 * rows; q rows hold heads x head_dim, k and v rows kv_heads x head_dim.
 *
 * A window of queries (q_len > 0; tiled attention, engine/mixer_attention.c): the queries are
 * positions [q0, q0 + q_len) of each sequence and see the keys at positions [0, q0 + q_len), each
 * query the keys up to its own position (the causal mask aligned to the bottom right of the
 * q_len x (q0 + q_len) scores). q, out, dq, dout then hold [batch, q_len] rows and lse is [batch,
 * heads, q_len]; k, v, dk, dv keep their [batch, seq] rows, of which each sequence's first q0 +
 * q_len are read (dk, dv: overwritten) and the rest untouched. q_len 0: every position. */
typedef struct {
    int batch, seq, heads, kv_heads, head_dim;
    int q0, q_len;
} mt_attn_dims;

/* The variants of attention (Gemma 2/3, Mistral, Qwen2, gpt-oss), beside its dims; NULL, or a
 * zeroed struct, is plain causal attention. Scores are s = scale q.k, then capped to
 * softcap tanh(s / softcap), then masked and softmaxed.
 *   window:  a query at position p sees the keys at positions (p - window, p] of its own sequence
 *            (or segment): Hugging Face's sliding_window_overlay; 0: every key up to p.
 *   scale:   0: 1/sqrt(head_dim).
 *   softcap: 0: no cap.
 *   sinks:   device fp32 [heads], or NULL: a learned logit per head, an extra softmax column with
 *            no value (out and lse count it; gpt-oss). dsinks (the backward's, fp32 [heads]):
 *            dsinks[h] += d(loss)/d(sinks[h]); NULL with sinks only in a forward. */
typedef struct {
    int window;
    float scale, softcap;
    const float *sinks;
    float *dsinks;
} mt_attn_params;

/* The scale a params gives for head_dim (params may be NULL). */
static inline float mt_attn_scale(const mt_attn_params *p, int head_dim) {
    return p && p->scale > 0.0f ? p->scale : 1.0f / sqrtf((float)head_dim);
}

/* The query rows of one sequence, and the keys they see. */
static inline int mt_attn_q_rows(mt_attn_dims d) { return d.q_len > 0 ? d.q_len : d.seq; }
static inline int mt_attn_kv_rows(mt_attn_dims d) { return d.q_len > 0 ? d.q0 + d.q_len : d.seq; }

/* The segments of a micro-batch (packed examples; documents under --doc-mask): runs of
 * consecutive rows that attend only among themselves, causally, and whose positions (RoPE)
 * restart at 0 on each run's first row. A segment never crosses from one sequence of the
 * micro-batch into the next: each sequence's first row starts one. Where an op takes a NULL
 * mt_segments, each sequence is one segment (plain causal attention, positions r % seq). */
typedef struct {
    const int32_t *pos;    /* device [n]: each row's position in its segment */
    const int32_t *starts; /* device [count + 1]: each segment's first row, ascending, then n */
    int count;             /* segments (a host number: the ops size their launches by it) */
    int row0;              /* the row of the micro-batch an op's first key row is (a window's
                            * sequence's first row; 0 for a call over the micro-batch) */
} mt_segments;

/* The GLU ops' variant: limit and alpha are SILU_CLAMPED's (gpt-oss: 7 and 1.702), unused else. */
typedef struct {
    mt_glu act;
    float limit, alpha;
} mt_glu_params;

#define MT_GLU_SWIGLU ((mt_glu_params){.act = MT_GLU_SILU})


/* RMSNorm's variant: y = x * rstd * w, or with unit_offset x * rstd * (1 + w) (Gemma's norms,
 * 1 + w formed in fp32); rstd = 1 / sqrt(mean(x^2) + eps). */
typedef struct {
    float eps;
    int unit_offset;
} mt_rmsnorm_params;

/* Memory. dev_* is device memory; host_* is host memory the device copies from and to at full
 * speed (pinned on cuda). Allocators return NULL and set the error on failure. */
typedef struct {
    void *(*dev_alloc)(mt_backend *be, size_t bytes, const char *what);
    void (*dev_free)(mt_backend *be, void *ptr);
    void *(*host_alloc)(mt_backend *be, size_t bytes, const char *what);
    void (*host_free)(mt_backend *be, void *ptr);
    /* Bytes of device memory free now (meaningful on MT_DEVICE_GPU only), and the most ever in
     * use through dev_alloc; either pointer may be NULL. */
    void (*dev_mem_info)(mt_backend *be, size_t *free_bytes, size_t *peak_bytes);
    /* OPTIONAL: bytes of the device in use by the driver's count (total less free: the context,
     * the libraries' workspaces and any other process included). NULL: no such figure. */
    size_t (*dev_in_use)(mt_backend *be);
    /* OPTIONAL: the most host memory ever in use through host_alloc (the tests hold the engine's
     * host buffers to what the plan counts). NULL: no such figure. */
    size_t (*host_peak)(mt_backend *be);
} mt_memory_iface;

/* Streams, events and copies (the ordering rules are in the header comment). */
typedef struct {
    mt_stream *(*stream_create)(mt_backend *be);
    void (*stream_destroy)(mt_backend *be, mt_stream *s);
    mt_event *(*event_create)(mt_backend *be);
    void (*event_destroy)(mt_backend *be, mt_event *e);
    void (*event_record)(mt_backend *be, mt_event *e, mt_stream *s);
    void (*stream_wait)(mt_backend *be, mt_stream *s, mt_event *e);
    void (*event_sync)(mt_backend *be, mt_event *e);
    /* Asynchronous copy of bytes between any two of host_alloc, dev_alloc and ordinary host
     * memory; memset of device memory to zero bytes. */
    void (*copy)(mt_backend *be, void *dst, const void *src, size_t bytes, mt_stream *s);
    void (*zero)(mt_backend *be, void *dst, size_t bytes, mt_stream *s);

    /* OPTIONAL: 1 when the most recent record of e has completed (or none was issued), without
     * waiting. Fallback: event_sync, then 1. */
    int (*event_done)(mt_backend *be, mt_event *e);
    /* OPTIONAL: seconds between two completed records (cuda: cudaEventElapsedTime). Fallback: 0,
     * a backend that cannot time its work reports none. */
    double (*event_elapsed)(mt_backend *be, mt_event *start, mt_event *end);
    /* OPTIONAL: runs fn(arg) in the stream's order. Fallback: fn(arg) at once, which keeps the
     * order on a backend whose ops only enqueue (cuda); one whose ops compute on the calling
     * thread (cpu) must run fn on the stream. */
    void (*launch)(mt_backend *be, mt_stream *s, void (*fn)(void *arg), void *arg);
    /* OPTIONAL: the first device error seen since the last call, or MT_OK (errors are sticky).
     * Fallback: MT_OK, for a backend whose work cannot fail after it was issued. */
    mt_status (*check)(mt_backend *be);
} mt_stream_iface;

/* The layer ops: see the header comment for types. */
typedef struct {
    /* y[n,out] = x[n,in] . w[out,in]^T (+ bias[out] when bias != NULL) */
    void (*matmul)(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w,
                   const void *bias, int n, int in, int out);
    /* dx[n,in] = dy[n,out] . w[out,in], or += when accumulate */
    void (*matmul_dx)(mt_backend *be, mt_stream *s, void *dx, const void *dy, const void *w,
                      int n, int in, int out, int accumulate);
    /* dw[out,in] += dy[n,out]^T . x[n,in];  dbias[out] += sum over rows of dy (when non-NULL) */
    void (*matmul_dw)(mt_backend *be, mt_stream *s, float *dw, float *dbias, const void *dy,
                      const void *x, int n, int in, int out);

    /* y = x * rstd * w (p.unit_offset: * (1 + w)) with rstd[n] = 1/sqrt(mean(x^2) + p.eps) saved
     * for the backward */
    void (*rmsnorm)(mt_backend *be, mt_stream *s, void *y, float *rstd, const void *x,
                    const void *w, int n, int d, mt_rmsnorm_params p);
    /* dx = (or += when accumulate) d(y)/dx . dy;  dw += sum over rows of dy * x * rstd (the same
     * for either form); p as the forward's (its eps unused) */
    void (*rmsnorm_dx)(mt_backend *be, mt_stream *s, void *dx, float *dw, const void *dy,
                       const void *x, const void *w, const float *rstd, int n, int d,
                       mt_rmsnorm_params p, int accumulate);

    /* In-place rotary embedding of the first rotary_dim (even, <= head_dim) values of each head of
     * x[n, heads, head_dim], Hugging Face's rotate_half pairing (i, i + rotary_dim/2), the rest of
     * the head as it is (partial_rotary_factor); the position of row r is pos[r] (device int32), or
     * (pos0 + r) % seq when pos is NULL (pos0: a window's first position). inv_freq[rotary_dim/2]
     * lives in device memory. inverse = 1 applies the transpose (the backward). */
    void (*rope)(mt_backend *be, mt_stream *s, void *x, const float *inv_freq, int n, int seq, int pos0,
                 const int32_t *pos, int heads, int head_dim, int rotary_dim, int inverse);

    /* Causal grouped-query attention within each segment (seg; NULL: within each sequence), over a
     * window of queries where dims has one, with params' variants (NULL: none). out[batch, q rows, heads*head_dim]; lse saved: [batch,
     * heads, q rows] without segments, [batch * q rows, heads] with them (the ragged layout). Each
     * segment's rows get what attention over that segment alone gives; a window's queries, what
     * they get in the whole sequence. With segments, seg->row0 is the micro-batch row of the call's
     * first key row (a window's call covers one sequence). workspace: attention_workspace(dims,
     * seg != NULL) bytes of device memory, the same buffer the backward takes (the two never run
     * at once on it). */
    void (*attention)(mt_backend *be, mt_stream *s, void *out, float *lse, const void *q,
                      const void *k, const void *v, mt_attn_dims dims, const mt_attn_params *params,
                      const mt_segments *seg, void *workspace);
    /* dq, and the rows of dk, dv the window's keys span (every row without a window), overwritten;
     * params' dsinks added to; params, seg and workspace as the forward's. */
    void (*attention_dx)(mt_backend *be, mt_stream *s, void *dq, void *dk, void *dv,
                         const void *dout, const void *out, const float *lse, const void *q,
                         const void *k, const void *v, mt_attn_dims dims, const mt_attn_params *params,
                         const mt_segments *seg, void *workspace);
    /* Bytes of workspace for dims, for calls without segments and, when `segmented`, with them. For
     * a window (q_len > 0) at the end of its sequence (q0 + q_len = seq): enough for every window of
     * that q_len in the sequence too, so that the tiles of one sequence share the workspace sized
     * for its last (engine/mixer_attention.c). */
    size_t (*attention_workspace)(mt_backend *be, mt_attn_dims dims, int segmented);

    /* acc[count] (float) = x (act), or += x with accumulate: a sum kept in fp32 across calls (the
     * tiles' shares of attention's dk and dv) */
    void (*accumulate_f32)(mt_backend *be, mt_stream *s, float *acc, const void *x, size_t count, int accumulate);
    /* y[count] (act) = x (float), rounded to the act type */
    void (*round_f32)(mt_backend *be, mt_stream *s, void *y, const float *x, size_t count);

    /* a = act(g) * u over count elements, the GLU of p (mt_glu); backward overwrites dg and du */
    void (*swiglu)(mt_backend *be, mt_stream *s, void *a, const void *g, const void *u, size_t count,
                   mt_glu_params p);
    void (*swiglu_dx)(mt_backend *be, mt_stream *s, void *dg, void *du, const void *da,
                      const void *g, const void *u, size_t count, mt_glu_params p);

    /* y = a + b over count elements (y may alias a or b) */
    void (*add)(mt_backend *be, mt_stream *s, void *y, const void *a, const void *b, size_t count);

    /* Attention's output gate (Qwen3-Next, Qwen3.5). q_proj gives qg[n, heads, 2, head_dim], each
     * head's query then its gate: gate_split copies them apart into q and gate [n, heads, head_dim],
     * gate_join is its backward (dqg from dq and dgate). out_gate: y = x * sigmoid(gate) over count
     * elements; out_gate_dx: dx = dy * sigmoid(gate), dgate = dy * x * s (1 - s) with s =
     * sigmoid(gate) (dgate may be gate: each element is read before it is written). */
    void (*gate_split)(mt_backend *be, mt_stream *s, void *q, void *gate, const void *qg, int n, int heads,
                       int head_dim);
    void (*gate_join)(mt_backend *be, mt_stream *s, void *dqg, const void *dq, const void *dgate, int n, int heads,
                      int head_dim);
    void (*out_gate)(mt_backend *be, mt_stream *s, void *y, const void *x, const void *gate, size_t count);
    void (*out_gate_dx)(mt_backend *be, mt_stream *s, void *dx, void *dgate, const void *dy, const void *x,
                        const void *gate, size_t count);

    /* Columns of n rows picked by a device map cols[out] (Qwen3-Next's fused projections, grouped by
     * q/k head, apart): gather y[r, j] = x[r, cols[j]] (x [n, in], y [n, out]); scatter, its
     * backward, dx[r, cols[j]] = dy[r, j], the other columns of dx as they were. */
    void (*gather_cols)(mt_backend *be, mt_stream *s, void *y, const void *x, const int32_t *cols, int n, int in,
                        int out);
    void (*scatter_cols)(mt_backend *be, mt_stream *s, void *dx, const void *dy, const int32_t *cols, int n, int in,
                         int out);

    /* x[n,d] = scale * wte[tokens[i], :];  dwte[tokens[i] - v0, :] += scale * dx[i, :] for the
     * tokens in [v0, v0 + rows) only: dwte holds those vocabulary rows (ids already validated).
     * scale: 1, or Gemma's sqrt(hidden) (rounded to the weights' type by the caller, as
     * transformers does); the product is rounded to the act type once. */
    void (*embedding)(mt_backend *be, mt_stream *s, void *x, const int32_t *tokens,
                      const void *wte, int n, int d, float scale);
    void (*embedding_dw)(mt_backend *be, mt_stream *s, float *dwte, const int32_t *tokens,
                         const void *dx, int n, int d, int v0, int rows, float scale);

    /* Fused LM head and cross-entropy over logits = x[n,d] . w[vocab,d]^T, soft-capped where
     * softcap > 0 (Gemma 2's final_logit_softcapping: softcap * tanh(logits / softcap), in fp32;
     * 0: none), never holding more than chunk rows of logits: *loss_sum (device float) += sum of -log softmax(logits)[target]
     * over rows; dx[n,d] = scale * dloss/dx (overwritten); dw += scale * dloss/dw. A target < 0
     * is ignored (no loss, no gradient). dx and dw may both be NULL: the loss only (evaluation).
     * lse[n] (device float, may be NULL) receives each row's log-sum-exp of its logits (rows
     * with an ignored target: unspecified). workspace: lmhead_workspace(chunk, vocab) bytes. */
    void (*lmhead_loss)(mt_backend *be, mt_stream *s, float *loss_sum, float *lse, void *dx, float *dw,
                        const void *x, const void *w, const int32_t *targets, int n, int d,
                        int vocab, float scale, float softcap, int chunk, void *workspace);
    /* The head's weight gradient for vocabulary rows [v0, v0 + rows) only, from the rows'
     * log-sum-exp that lmhead_loss gave (with the same softcap): dw[rows, d] += scale *
     * dloss/dw[v0 : v0 + rows], with
     * w pointing at row v0 of the head. chunk rows of x at a time, in the same workspace
     * (lmhead_workspace(chunk, vocab) bytes, rows <= vocab). So the head's gradient exists a
     * vocabulary chunk at a time (engine_head.c). */
    void (*lmhead_dw)(mt_backend *be, mt_stream *s, float *dw, const void *x, const void *w,
                      const int32_t *targets, const float *lse, int n, int d, int v0, int rows,
                      float scale, float softcap, int chunk, void *workspace);
    size_t (*lmhead_workspace)(mt_backend *be, int chunk, int vocab);
    /* Logits of the last row only, for sampling: logits[vocab] (device float) = x[d] . w^T,
     * soft-capped as lmhead_loss's */
    void (*logits)(mt_backend *be, mt_stream *s, float *logits, const void *x, const void *w,
                   int d, int vocab, float softcap);

    /* *out (device float) += sum of squares of x[count] (fp32 gradients), for the global norm */
    void (*sumsq)(mt_backend *be, mt_stream *s, float *out, const float *x, size_t count);

    /* OPTIONAL, both or neither (mt_backend_has_device_optimizer): the optimizer, for tensors
     * whose state the device keeps (the engine's ends_on_device). No fallback: without them the
     * host optimizer updates every tensor. */

    /* *scale (device float) = the clip coefficient of the global gradient norm, the square root
     * of the sum of norms[count] (device floats of sums of squares, added in double in index
     * order): 1 when the norm is at most max_norm, max_norm / (norm + 1e-6) above it, NaN when
     * the norm is not finite. The engine's host side forms the same numbers from the same sums. */
    void (*clip_scale)(mt_backend *be, mt_stream *s, float *scale, const float *norms, int count,
                       float max_norm);
    /* AdamW on n elements of fp32 master, m, v and grad in device memory, writing the working
     * weights w (the backend's weight type; bf16: the masters' high halves, util/split_f32.h):
     * optim/adamw.h's arithmetic, bit for bit. `scale`: NULL (no clipping: the whole update with
     * p->grad_scale), or a device float, clip_scale's coefficient c: the whole update with c, or,
     * for a c that is not finite (a skipped step), none (the weights the masters' as they are).
     * The host updates a unit alike unless it took the update ahead of the norm
     * (engine_optimizer.c). */
    void (*adamw)(mt_backend *be, mt_stream *s, const struct mt_adamw_params *p, int decay,
                  const float *scale, float *master, float *m, float *v, const float *grad, void *w,
                  size_t n);
} mt_op_iface;

/* Mixture-of-experts ops, OPTIONAL: all or none (mt_backend_has_moe; a MoE model is refused on a
 * backend without them). A MoE feed-forward over n tokens of width d sends each token to k of E
 * experts, each a SwiGLU MLP of width F whose weights are stacked expert by expert
 * (gate_up[E][2F, d]: gate's F rows then up's, as transformers 5 fuses them; down[E][d, F]):
 *
 *   logits[n, E]  = h . router^T                         (op.matmul)
 *   route         -> experts[n, k], weights[n, k]        (softmax, top-k, renormalisation)
 *   permute       -> order, slot_row, offsets            (the n*k slots sorted by expert)
 *   gather        xs[n*k, d]  = h[the token of each sorted row]
 *   grouped_matmul gu[n*k, 2F] = xs . gate_up[e]^T        (each expert's rows, its own matrix)
 *   swiglu        a[n*k, F]   = act(gu[:, :F]) * gu[:, F:]  (the GLU of mt_glu_params)
 *   grouped_matmul ys[n*k, d] = a . down[e]^T
 *   combine       y[n, d]     = sum over j of weights[t, j] * ys[the row of slot (t, j)]
 *
 * and each backward. Slot t*k + j is token t's j-th choice (k distinct experts a token). Rows are
 * sorted by expert so that each expert's rows are contiguous and the expert GEMMs are one grouped
 * GEMM over experts with variable row counts; those counts and offsets are device int32 that
 * permute computes and the grouped GEMMs read (the caller knows only their total, n*k), so a layer
 * need not wait for the host, though a backend's grouped GEMMs may copy them home (CUDA's cuBLASLt
 * loop does). Types as above: act, w, fp32 ("float"), int32.
 *
 * Segments. The tokens come in segments of `seg` rows (the engine's sequences, or a part of one),
 * S = ceil(n / seg) of them. offsets[E*S + 1] counts rows by (expert, segment), expert-major:
 * expert e's rows are [offsets[e*S], offsets[(e+1)*S]), of which segment s's are
 * [offsets[e*S + s], offsets[e*S + s + 1]); offsets[0] = 0 and offsets[E*S] = n*k. Weight gradients
 * add segment by segment (s = 0, 1, ... for each expert), so that one call over S segments gives the
 * bits of S calls over one segment each, the engine's promise that micro-batching never changes the
 * bits (gemm_by_sequence). grouped_matmul and grouped_matmul_dx may take an expert's rows of all
 * segments as one GEMM, except on a backend that sets gemm_by_sequence, which takes them segment by
 * segment. */
typedef struct {
    /* Routing: p = softmax(logits[t, :]) in fp32 for each of the n tokens; experts[t, :] the k
     * largest of p in decreasing order (of equal ones the lower expert index first); weights[t, j] =
     * p[experts[t, j]], divided by the k's sum when `renorm` (Qwen3-MoE's norm_topk_prob; Mixtral's
     * softmax over the k chosen logits is the same numbers). For the load-balancing loss and the load
     * report, each NULL to skip: counts[E] (int32) += the tokens that chose each expert; prob_sum[E]
     * (float) += p summed over the n tokens. */
    void (*route)(mt_backend *be, mt_stream *s, float *weights, int32_t *experts, int32_t *counts,
                  float *prob_sum, const void *logits, int n, int E, int k, int renorm);
    /* Its backward: dlogits[n, E] (act, overwritten) = d/dlogits of sum over (t, j) of
     * dweights[t, j] * weights[t, j], plus (aux_grad[E] non-NULL, device float) sum over t and e of
     * aux_grad[e] * p[t, e]: the load-balancing loss's part (aux_loss's grad). Recomputes p from
     * logits; experts are route's. */
    void (*route_dx)(mt_backend *be, mt_stream *s, void *dlogits, const float *dweights, const void *logits,
                     const int32_t *experts, const float *aux_grad, int n, int E, int k, int renorm);
    /* Sorts the n*k slots by expert, then segment (rows of tokens [s*seg, (s+1)*seg)), then token:
     * order[r] (int32 [n*k]) is the slot of sorted row r, slot_row[slot] its inverse, offsets[E*S + 1]
     * as above. */
    void (*permute)(mt_backend *be, mt_stream *s, int32_t *order, int32_t *slot_row, int32_t *offsets,
                    const int32_t *experts, int n, int E, int k, int seg);
    /* xs[r, :] = x[order[r] / k, :] for the n*k sorted rows (act, width d). */
    void (*gather)(mt_backend *be, mt_stream *s, void *xs, const void *x, const int32_t *order, int n, int k,
                   int d);
    /* Its backward: dx[t, :] = (accumulate: +=) the sum over j = 0..k-1, in that order, of
     * dxs[slot_row[t*k + j], :]. */
    void (*gather_dx)(mt_backend *be, mt_stream *s, void *dx, const void *dxs, const int32_t *slot_row, int n,
                      int k, int d, int accumulate);
    /* The expert GEMMs over rows = n*k sorted rows: y[r, :out] = x[r, :in] . w[e]^T (+ bias[e] when
     * bias != NULL: w [E][out], gpt-oss's expert biases, added to the act-typed product) for the rows
     * r of expert e, w[E][out, in] (w); dx[r, :in] = dy[r, :out] . w[e] (overwritten); dw[e] (float
     * [E][out, in]) += dy[rows of e]^T . x[rows of e], and dbias[e] (float [E][out], when non-NULL)
     * += the sum of those rows of dy, segment by segment. An expert with no rows adds nothing.
     * offsets as permute gives them, E*S + 1 of them in device memory. */
    void (*grouped_matmul)(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w, const void *bias,
                           const int32_t *offsets, int rows, int E, int S, int in, int out);
    void (*grouped_matmul_dx)(mt_backend *be, mt_stream *s, void *dx, const void *dy, const void *w,
                              const int32_t *offsets, int rows, int E, int S, int in, int out);
    void (*grouped_matmul_dw)(mt_backend *be, mt_stream *s, float *dw, float *dbias, const void *dy, const void *x,
                              const int32_t *offsets, int rows, int E, int S, int in, int out);
    /* The experts' GLU over fused rows (p as op.swiglu's): a[r, i] = act(g) * u with g = gu[r, i], u =
     * gu[r, F + i] for rows r, i < F; backward: dgu[r, i] = da[r, i] * da/dg, dgu[r, F + i] = da[r, i] *
     * da/du (overwritten). */
    void (*swiglu)(mt_backend *be, mt_stream *s, void *a, const void *gu, int rows, int F, mt_glu_params p);
    void (*swiglu_dx)(mt_backend *be, mt_stream *s, void *dgu, const void *da, const void *gu, int rows, int F,
                      mt_glu_params p);
    /* y[t, :] = the sum over j = 0..k-1, in that order and in fp32, of weights[t, j] *
     * ys[slot_row[t*k + j], :] (act out, overwritten). */
    void (*combine)(mt_backend *be, mt_stream *s, void *y, const void *ys, const float *weights,
                    const int32_t *slot_row, int n, int k, int d);
    /* Its backward: dys[slot_row[t*k + j], :] = weights[t, j] * dy[t, :] (act, every row written);
     * dweights[t, j] (float, overwritten) = dy[t, :] . ys[slot_row[t*k + j], :]. */
    void (*combine_dx)(mt_backend *be, mt_stream *s, void *dys, float *dweights, const void *dy, const void *ys,
                       const float *weights, const int32_t *slot_row, int n, int k, int d);
    /* A shared expert's sigmoid gate (Qwen2-MoE): y[t, :] = a[t, :] + sigmoid(g[t]) * x[t, :] (y may
     * alias a; g [n] act, the gate's logit); backward: dx[t, :] = sigmoid(g[t]) * dy[t, :] and dg[t] =
     * sigmoid'(g[t]) * (dy[t, :] . x[t, :]) (both act, overwritten). */
    void (*gate_add)(mt_backend *be, mt_stream *s, void *y, const void *a, const void *x, const void *g, int n,
                     int d);
    void (*gate_add_dx)(mt_backend *be, mt_stream *s, void *dx, void *dg, const void *dy, const void *x,
                        const void *g, int n, int d);
    /* The load-balancing loss of one forward over `layers` MoE layers of n tokens each, transformers'
     * load_balancing_loss_func over the layers' router logits together: with T = layers * n rows,
     * c[e] = the sum over layers of counts[l][e] (int32 [layers][E], route's) and P[e] = prob_sum[e] /
     * T (prob_sum [E], route's over every layer),
     *     loss = E * sum over e of (c[e] / T) * P[e];
     * *loss_sum (device float) += loss_scale * loss, and grad[e] (float [E], overwritten) = grad_scale *
     * E * c[e] / T^2, the loss's gradient with respect to any row's p[e], which route_dx takes as
     * aux_grad (the counts do not depend on the logits). */
    void (*aux_loss)(mt_backend *be, mt_stream *s, float *loss_sum, float *grad, const int32_t *counts,
                     const float *prob_sum, int layers, int n, int E, float loss_scale, float grad_scale);
} mt_moe_iface;

/* Gated DeltaNet (Qwen3-Next, Qwen3.5): the linear-attention mixer's ops over n token rows, each
 * sequence of `seq` rows one segment, or the segments of seg (packed examples, --doc-mask; seg->row0
 * 0, seg->pos is what the ops read). The convolution and the recurrent state restart on each
 * segment's first row: nothing crosses from one example into the next. Heads: q and k have k_heads
 * heads of d_k, v and the output v_heads of d_v (v_heads a multiple of k_heads; value head j reads
 * q/k head j / (v_heads / k_heads), transformers' repeat_interleave). q, k (and dq, dk) rows lie
 * qk_ld elements apart and v (and dv) rows v_ld apart, so that they can be columns of the
 * convolution's output; every other tensor is contiguous. */
enum { MT_GDN_CONV = 4 /* the causal convolution's kernel */ };
typedef struct {
    int n, seq;
    int k_heads, v_heads, d_k, d_v;
    int qk_ld, v_ld;
    const mt_segments *seg; /* NULL: each sequence of seq rows one segment */
} mt_gdn_dims;

/* The group, OPTIONAL: all or none (mt_backend_has_gdn). A layer runs
 *
 *   conv     y[n, C] = silu(causal depthwise conv1d of x[n, C], kernel MT_GDN_CONV, no bias)
 *   qk_norm  q, k columns of y -> qn, kn [n, v_heads, d_k]: l2-normalised, q times d_k^-0.5
 *   decay    g, beta [n, v_heads] from a, b: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)
 *   rule     o[n, v_heads, d_v]: the gated delta rule over qn, kn, the v columns of y, g and beta
 *   norm     out = rmsnorm(o) * w * silu(z), per head of d_v
 *
 * and each backward. Types: act, w (weights), float. */
typedef struct {
    /* y[t, c] = silu(sum over j < 4 of w[c, j] * x[t - 3 + j, c]), a tap before its segment's first
     * row reading zero; x, y act [n, C], w [C, MT_GDN_CONV] (transformers' conv1d.weight [C, 1, 4]).
     * Backward: dx (act, overwritten), dw (float, +=: rows in row order). */
    void (*conv)(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w, int C, mt_gdn_dims d);
    void (*conv_dx)(mt_backend *be, mt_stream *s, void *dx, float *dw, const void *dy, const void *x,
                    const void *w, int C, mt_gdn_dims d);
    /* qn[t, j, :] = q[t, h, :] * rsqrt(|q[t, h, :]|^2 + 1e-6) * d_k^-0.5 and kn the same of k without
     * the scale, h = j / (v_heads / k_heads) (transformers' l2norm). Backward: dq, dk (act,
     * overwritten; a q/k head's gradient summed over the value heads that read it). */
    void (*qk_norm)(mt_backend *be, mt_stream *s, void *qn, void *kn, const void *q, const void *k,
                    mt_gdn_dims d);
    void (*qk_norm_dx)(mt_backend *be, mt_stream *s, void *dq, void *dk, const void *dqn, const void *dkn,
                       const void *q, const void *k, mt_gdn_dims d);
    /* g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]) and beta[t, h] = sigmoid(b[t, h])
     * (g, beta float; a, b act [n, v_heads]; A_log, dt_bias w [v_heads]). Backward: da, db (act,
     * overwritten); dA_log, ddt_bias (float, +=: rows in row order). */
    void (*decay)(mt_backend *be, mt_stream *s, float *g, float *beta, const void *a, const void *b,
                  const void *A_log, const void *dt_bias, mt_gdn_dims d);
    void (*decay_dx)(mt_backend *be, mt_stream *s, void *da, void *db, float *dA_log, float *ddt_bias,
                     const float *dg, const float *dbeta, const void *a, const void *b, const void *A_log,
                     const void *dt_bias, mt_gdn_dims d);
    /* The gated delta rule, transformers' torch_recurrent_gated_delta_rule: per value head an fp32
     * state S [d_k, d_v], zero on each segment's first row before that row's update,
     *     S = exp(g_t) S;  S += k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t
     * (q, k the normalised qn, kn [n, v_heads, d_k]; v act with rows v_ld apart; o act [n, v_heads,
     * d_v]). Backward: dq, dk (act [n, v_heads, d_k]), dv (act, rows v_ld apart), dg, dbeta (float),
     * all overwritten. workspace: rule_workspace(d) bytes of device memory; rule_dx reads what rule left
     * there (cuda: each chunk's state and pseudo-values), so a backward follows its forward on the same
     * workspace, untouched between. */
    void (*rule)(mt_backend *be, mt_stream *s, void *o, const void *q, const void *k, const void *v,
                 const float *g, const float *beta, mt_gdn_dims d, void *workspace);
    void (*rule_dx)(mt_backend *be, mt_stream *s, void *dq, void *dk, void *dv, float *dg, float *dbeta,
                    const void *dout, const void *q, const void *k, const void *v, const float *g,
                    const float *beta, mt_gdn_dims d, void *workspace);
    size_t (*rule_workspace)(mt_backend *be, mt_gdn_dims d);
    /* Qwen3NextRMSNormGated: y = x * rsqrt(mean(x^2) + eps) * w * silu(z) over each head's d_v
     * (x, z, y act [n, v_heads, d_v]; w [d_v], a plain weight, not 1 + w). Backward: dx, dz (act,
     * overwritten), dw (float, +=: rows in row order). */
    void (*norm)(mt_backend *be, mt_stream *s, void *y, const void *x, const void *z, const void *w, float eps,
                 mt_gdn_dims d);
    void (*norm_dx)(mt_backend *be, mt_stream *s, void *dx, void *dz, float *dw, const void *dy, const void *x,
                    const void *z, const void *w, float eps, mt_gdn_dims d);
} mt_gdn_iface;

/* Collectives among the ranks of a data-parallel group (engine/ranks.h), OPTIONAL: all or none
 * (mt_backend_has_collectives). A backend instance belongs to at most one group; the group's
 * communicator lives in each member's state. */
typedef struct {
    /* Joins n backends of this process, ranks[r] being rank r (all of this table), into one
     * group. */
    mt_status (*comm_init)(mt_backend **ranks, int n);
    /* Joins this backend, as rank w->rank of w->size processes (util/world.h), into a group with
     * the backends of the other processes, meeting them at w's address. */
    mt_status (*comm_init_world)(mt_backend *be, const struct mt_world *w);
    /* buf[count] (device floats) = the sum over the ranks of their buf, in place, issued on s:
     * every rank issues the same all_reduce calls in the same order. The sum's order is fixed
     * (the same bits on every rank, the same bits run after run). A failure (a rank aborted,
     * a peer that never came) is kept for check. */
    void (*all_reduce)(mt_backend *be, mt_stream *s, float *buf, size_t count);
    /* As all_reduce, but afterwards only this rank's slice of buf (mt_coll_slice) holds the sum;
     * the rest of buf is left undefined. */
    void (*reduce_scatter)(mt_backend *be, mt_stream *s, float *buf, size_t count);
    /* buf[bytes] (device memory, any type) on every rank = rank root's, in place, issued on s; as
     * all_reduce, every rank issues the same calls in the same order. */
    void (*broadcast)(mt_backend *be, mt_stream *s, void *buf, size_t bytes, int root);
    /* OPTIONAL, all three or none: ordered accumulation, for a backend whose ranks can hand each other
     * an accumulator cheaply (the cpu's threads). The ranks take turns adding into an accumulator,
     * rank 0 first, each starting from what the rank before it left, so that the last rank's buffer
     * holds the additions in the order of one rank doing every rank's work: all_reduce and
     * reduce_scatter of an accumulator filled so give the last rank's buffer, and the sum has the
     * bits of one rank running every micro-batch. acc_open, issued where the rank is about to add
     * into buf (zeroed): it waits for its turn with accumulator `tag` and takes the values the rank
     * before it left (rank 0 keeps its zeros when `fresh`, else takes the last rank's previous
     * turn: a second round over the same accumulator). acc_close: the turn ends; buf stays as it is
     * until the next collective. Turns serialize the ranks' accumulating work. Without them the
     * ranks' own sums are added in rank order (NCCL). acc_ordered: whether this member's group
     * takes turns (a group may not: the cpu's processes sum); where it does not, acc_open and
     * acc_close do nothing. */
    void (*acc_open)(mt_backend *be, mt_stream *s, int tag, float *buf, size_t count, int fresh);
    void (*acc_close)(mt_backend *be, mt_stream *s, int tag, float *buf, size_t count);
    int (*acc_ordered)(mt_backend *be);
    /* Ends the group for everyone: a rank waiting in all_reduce, now or later, gives up with an
     * error. Called from any thread, when a rank fails. */
    void (*comm_abort)(mt_backend *be);
    /* Leaves the group (each member once, before it is destroyed). */
    void (*comm_free)(mt_backend *be);
} mt_coll_iface;

/* A profile's row: the spans of one (phase, op) added up (mt_prof_iface). */
typedef struct {
    const char *phase, *op;
    long calls;
    double seconds; /* the device's time in the spans, less that of the spans inside them */
    double flops;   /* what the spans' callers counted (0: not a GEMM) */
} mt_prof_row;

/* Profile spans (bench --profile, docs/profile.md), OPTIONAL: all or none (mt_backend_has_profile;
 * the cpu backend has none). A span is the work issued to stream s between begin and end, timed on
 * the device; phase and op name it (strings that outlive the backend: literals), flops is what its
 * caller counts for it (a GEMM's 2mnk; 0 for anything else). Spans nest, on one stream at a time:
 * a span's time leaves out the spans inside it, so that the rows add up to the outermost spans'
 * time; a span begun with phase NULL takes the phase of the one it is in (a backend's own spans:
 * the cuBLASLt loop's wait for the expert offsets). collect waits for the spans ended so far and
 * adds each to its row; rows gives them (count), clear empties them. Callers reach the group
 * through mt_profile_* and mt_span_*, which do nothing while the profile is off. */
typedef struct {
    void (*begin)(mt_backend *be, mt_stream *s, const char *phase, const char *op, double flops);
    void (*end)(mt_backend *be, mt_stream *s);
    mt_status (*collect)(mt_backend *be);
    const mt_prof_row *(*rows)(mt_backend *be, int *count);
    void (*clear)(mt_backend *be);
} mt_prof_iface;

typedef struct mt_backend_ops {
    const char *name;
    mt_device_kind kind;
    mt_dtype act_dtype, weight_dtype;
    /* Issue row-wise GEMMs one sequence at a time. The cpu backend sets it: BLAS picks its
     * kernels by matrix size, so one GEMM over 4 sequences and four over 1 differ in the last
     * bits, and the engine promises that micro-batching never changes the bits there. */
    int gemm_by_sequence;
    void (*destroy)(mt_backend *be);
    /* OPTIONAL: what a GPU backend found at start (device_info.h). Fallback: NULL, no device. */
    const struct mt_device_info *(*device_info)(mt_backend *be);
    mt_memory_iface mem;
    mt_stream_iface stream;
    mt_op_iface op;
    mt_moe_iface moe;
    mt_gdn_iface gdn;
    mt_coll_iface coll;
    mt_prof_iface prof;
} mt_backend_ops;

struct mt_backend {
    const mt_backend_ops *ops;
    int profiling; /* the spans are timed (mt_profile_start) */
};

/* Sets be->ops after checking that every entry not marked OPTIONAL is there: MT_ERR_INTERNAL
 * naming the first one missing. Each backend's constructor calls it. */
mt_status mt_backend_init(mt_backend *be, const mt_backend_ops *ops);
void mt_backend_destroy(mt_backend *be);

/* Memory (mt_memory_iface). */
void *mt_dev_alloc(mt_backend *be, size_t bytes, const char *what);
void mt_dev_free(mt_backend *be, void *ptr);
void *mt_host_alloc(mt_backend *be, size_t bytes, const char *what);
void mt_host_free(mt_backend *be, void *ptr);
/* The most device memory ever in use through mt_dev_alloc. */
size_t mt_dev_peak(mt_backend *be);
/* The most host memory ever in use through mt_host_alloc; SIZE_MAX where the backend does not count
 * it. */
size_t mt_host_peak(mt_backend *be);
/* Device memory free now; only a backend with memory of its own has a figure (SIZE_MAX else). */
size_t mt_dev_available(mt_backend *be);
/* Device memory in use by the driver's count (dev_in_use), or where the backend has no such
 * figure the most in use through mt_dev_alloc. */
size_t mt_dev_in_use(mt_backend *be);
/* The GPU's name, compute capability, memory and measured PCIe rates; NULL without one. */
const struct mt_device_info *mt_backend_device_info(mt_backend *be);
static inline int mt_backend_has_own_memory(const mt_backend *be) { return be->ops->kind == MT_DEVICE_GPU; }

/* Streams, events and copies (mt_stream_iface), the optional entries' fallbacks included. */
mt_stream *mt_stream_create(mt_backend *be);
void mt_stream_destroy(mt_backend *be, mt_stream *s);
mt_event *mt_event_create(mt_backend *be);
void mt_event_destroy(mt_backend *be, mt_event *e);
void mt_event_record(mt_backend *be, mt_event *e, mt_stream *s);
void mt_stream_wait(mt_backend *be, mt_stream *s, mt_event *e);
void mt_event_sync(mt_backend *be, mt_event *e);
int mt_event_done(mt_backend *be, mt_event *e);
double mt_event_elapsed(mt_backend *be, mt_event *start, mt_event *end);
void mt_copy_async(mt_backend *be, void *dst, const void *src, size_t bytes, mt_stream *s);
void mt_zero_async(mt_backend *be, void *dst, size_t bytes, mt_stream *s);
void mt_launch(mt_backend *be, mt_stream *s, void (*fn)(void *arg), void *arg);
/* The same copy and zeroing from inside a function mt_launch()ed on s, in order with the ops
 * around them: where launched functions run on the stream's worker (cpu) they happen at once, as
 * the ops do; else they are issued to s. */
void mt_copy_in_launch(mt_backend *be, void *dst, const void *src, size_t bytes, mt_stream *s);
void mt_zero_in_launch(mt_backend *be, void *dst, size_t bytes, mt_stream *s);
mt_status mt_backend_check(mt_backend *be);

/* Whether the backend has the optional optimizer ops (clip_scale and adamw). */
static inline int mt_backend_has_device_optimizer(const mt_backend *be) {
    return be->ops->op.clip_scale && be->ops->op.adamw;
}

/* Whether the backend has the optional mixture-of-experts ops (the moe group). */
static inline int mt_backend_has_moe(const mt_backend *be) { return be->ops->moe.route != NULL; }

/* Whether the backend has the optional Gated DeltaNet ops (the gdn group). */
static inline int mt_backend_has_gdn(const mt_backend *be) { return be->ops->gdn.rule != NULL; }

/* Whether the backend can time profile spans (the prof group). */
static inline int mt_backend_has_profile(const mt_backend *be) { return be->ops->prof.begin != NULL; }

/* The profile (mt_prof_iface): start times the spans from now on (MT_ERR_INVALID on a backend
 * without the group), stop no more; a span outside start and stop costs a test of a flag. collect,
 * once the device has run the spans (after the step), adds them to the rows. */
mt_status mt_profile_start(mt_backend *be);
void mt_profile_stop(mt_backend *be);
mt_status mt_profile_collect(mt_backend *be);
const mt_prof_row *mt_profile_rows(mt_backend *be, int *count);
void mt_profile_clear(mt_backend *be);
static inline void mt_span_begin(mt_backend *be, mt_stream *s, const char *phase, const char *op, double flops) {
    if (be->profiling) be->ops->prof.begin(be, s, phase, op, flops);
}
static inline void mt_span_end(mt_backend *be, mt_stream *s) {
    if (be->profiling) be->ops->prof.end(be, s);
}

/* Whether the backend has the optional collectives (the coll group). */
static inline int mt_backend_has_collectives(const mt_backend *be) { return be->ops->coll.all_reduce != NULL; }
/* Whether this member of a group accumulates in turns with the others (the coll group's acc_*). */
static inline int mt_backend_accumulates_in_turns(mt_backend *be) {
    return be->ops->coll.acc_ordered && be->ops->coll.acc_ordered(be);
}

/* Rank r's slice [*lo, *hi) of count elements in a group of n (reduce_scatter's): equal parts (NCCL's
 * reduce-scatter needs them) of count / n rounded down to a multiple of 4 floats (16 bytes: the slices
 * stay aligned for vector loads), the last rank also the remainder (a short tail). */
static inline void mt_coll_slice(size_t count, int r, int n, size_t *lo, size_t *hi) {
    size_t part = count / (size_t)n / 4 * 4;
    *lo = part * (size_t)r;
    *hi = r == n - 1 ? count : *lo + part;
}

/* Backend constructors. cuda_create fails with MT_ERR_DEVICE when no GPU is usable. */
mt_status mt_backend_cpu_create(mt_backend **out, int threads);
mt_status mt_backend_cuda_create(mt_backend **out, int device);

#endif
