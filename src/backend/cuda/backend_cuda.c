/* The CUDA backend: device and pinned host memory, streams, events, copies, the sticky error,
 * and the ops table (kernels in the .cu files beside this, GEMMs in gemm.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/alloc_fault.h"
#include "backend/pinned_pieces.h"
#include "backend/cuda/cuda_backend.h"
#include "util/log.h"

/* cuBLASLt's scratch: enough for its fastest Hopper kernels. */
enum { LT_WORKSPACE_BYTES = 32 << 20 };

static mt_cuda_backend *cuda_of(mt_backend *be) { return (mt_cuda_backend *)be; }

void mt_cuda_note(mt_cuda_backend *cb, mt_status status) {
    if (status == MT_OK) return;
    pthread_mutex_lock(&cb->lock);
    if (cb->sticky == MT_OK) {
        cb->sticky = status;
        snprintf(cb->sticky_message, sizeof cb->sticky_message, "%s", mt_error());
    }
    pthread_mutex_unlock(&cb->lock);
}

/* Keeps an op's failure for check() (asynchronous kernel faults surface at a later call). */
static void keep_error(mt_backend *be, mt_status status) { mt_cuda_note(cuda_of(be), status); }

static mt_status cuda_check(mt_backend *be) {
    mt_cuda_backend *cb = cuda_of(be);
    cudaError_t pending = cudaGetLastError();
    if (pending != cudaSuccess)
        mt_cuda_note(cb, mt_fail(MT_ERR_DEVICE, "CUDA: %s", cudaGetErrorString(pending)));
    pthread_mutex_lock(&cb->lock);
    mt_status status = cb->sticky;
    if (status != MT_OK) mt_fail(status, "%s", cb->sticky_message);
    cb->sticky = MT_OK;
    pthread_mutex_unlock(&cb->lock);
    return status;
}

/* ---- memory ---- */

static mt_status remember_allocation(mt_cuda_backend *cb, void *ptr, size_t bytes) {
    if (cb->allocation_count == cb->allocation_capacity) {
        size_t capacity = cb->allocation_capacity ? 2 * cb->allocation_capacity : 64;
        mt_cuda_allocation *grown = realloc(cb->allocations, capacity * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot grow the device allocation table");
        cb->allocations = grown;
        cb->allocation_capacity = capacity;
    }
    cb->allocations[cb->allocation_count++] = (mt_cuda_allocation){ptr, bytes};
    cb->in_use += bytes;
    if (cb->in_use > cb->peak) cb->peak = cb->in_use;
    return MT_OK;
}

static void *cuda_dev_alloc(mt_backend *be, size_t bytes, const char *what) {
    mt_cuda_backend *cb = cuda_of(be);
    void *ptr = NULL;
    int hooked = mt_alloc_fault_hit(MT_ALLOC_DEVICE);
    cudaError_t err = hooked ? cudaErrorMemoryAllocation : cudaMalloc(&ptr, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        cudaGetLastError(); /* an out-of-memory failure is reported here, not made sticky */
        mt_fail(err == cudaErrorMemoryAllocation ? MT_ERR_NOMEM : MT_ERR_DEVICE,
                "cannot allocate %zu bytes of device memory for %s: %s%s", bytes, what,
                cudaGetErrorString(err), mt_alloc_fault_note(hooked));
        return NULL;
    }
    pthread_mutex_lock(&cb->lock);
    mt_status status = remember_allocation(cb, ptr, bytes);
    pthread_mutex_unlock(&cb->lock);
    if (status != MT_OK) {
        cudaFree(ptr);
        return NULL;
    }
    return ptr;
}

static void cuda_dev_free(mt_backend *be, void *ptr) {
    mt_cuda_backend *cb = cuda_of(be);
    if (!ptr) return;
    pthread_mutex_lock(&cb->lock);
    for (size_t i = 0; i < cb->allocation_count; i++) {
        if (cb->allocations[i].ptr == ptr) {
            cb->in_use -= cb->allocations[i].bytes;
            cb->allocations[i] = cb->allocations[--cb->allocation_count];
            break;
        }
    }
    pthread_mutex_unlock(&cb->lock);
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess)
        mt_cuda_note(cb, mt_fail(MT_ERR_DEVICE, "cudaFree failed: %s", cudaGetErrorString(err)));
}

/* Portable: every GPU's context of the process sees it pinned (the ranks share one store). */
static mt_status pin_piece(void *ctx, void *p, size_t bytes) {
    cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (err == cudaSuccess) return MT_OK;
    cudaGetLastError();
    return mt_fail(MT_ERR_NOMEM, "cudaHostRegister: %s", cudaGetErrorString(err));
}

static void unpin_piece(void *ctx, void *p) {
    cudaError_t err = cudaHostUnregister(p);
    if (err == cudaSuccess) return;
    cudaGetLastError();
    mt_log_warn("cudaHostUnregister of pinned host memory at %p failed: %s", p, cudaGetErrorString(err));
}

static const mt_pin_ops pin_ops = {.pin = pin_piece, .unpin = unpin_piece};

const mt_pin_ops *mt_cuda_pin_ops(void) { return &pin_ops; }

/* Large buffers are registered in pieces (backend/pinned_pieces.h), small ones allocated whole. */
static void *cuda_host_alloc(mt_backend *be, size_t bytes, const char *what) {
    void *ptr = NULL;
    int hooked = mt_alloc_fault_hit(MT_ALLOC_PINNED);
    if (!hooked && bytes >= MT_PIN_PIECES_MIN_BYTES) return mt_pinned_alloc(bytes, MT_PIN_PIECE_BYTES, what, &pin_ops);
    cudaError_t err = hooked ? cudaErrorMemoryAllocation
                             : cudaHostAlloc(&ptr, bytes ? bytes : 1, cudaHostAllocPortable);
    if (err != cudaSuccess) {
        cudaGetLastError();
        mt_fail(MT_ERR_NOMEM, "cannot allocate %zu bytes of pinned host memory for %s: %s%s", bytes,
                what, cudaGetErrorString(err), mt_alloc_fault_note(hooked));
        return NULL;
    }
    return ptr;
}

static void cuda_host_free(mt_backend *be, void *ptr) {
    if (!ptr || mt_pinned_free(ptr, &pin_ops)) return;
    cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess)
        mt_cuda_note(cuda_of(be), mt_fail(MT_ERR_DEVICE, "cudaFreeHost failed: %s", cudaGetErrorString(err)));
}

static void cuda_dev_mem_info(mt_backend *be, size_t *free_bytes, size_t *peak_bytes) {
    mt_cuda_backend *cb = cuda_of(be);
    size_t free_now = 0, total = 0;
    if (cudaMemGetInfo(&free_now, &total) != cudaSuccess) cudaGetLastError();
    if (free_bytes) *free_bytes = free_now;
    pthread_mutex_lock(&cb->lock);
    if (peak_bytes) *peak_bytes = cb->peak;
    pthread_mutex_unlock(&cb->lock);
}

static size_t cuda_dev_in_use(mt_backend *be) {
    size_t free_now = 0, total = 0;
    if (cudaMemGetInfo(&free_now, &total) != cudaSuccess) {
        cudaGetLastError();
        return mt_dev_peak(be);
    }
    return total - free_now;
}

/* ---- streams, events, copies ---- */

static mt_status stream_create(mt_stream **out) {
    cudaStream_t s;
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = (mt_stream *)s;
    return MT_OK;
}

static mt_stream *cuda_stream_create(mt_backend *be) {
    mt_stream *s = NULL;
    keep_error(be, stream_create(&s));
    return s;
}

static void cuda_stream_destroy(mt_backend *be, mt_stream *s) {
    if (s) cudaStreamDestroy(mt_cuda_stream(s));
}

static mt_status event_create(mt_event **out) {
    cudaEvent_t e;
    MT_CUDA_CHECK(cudaEventCreate(&e)); /* with timing, for event_elapsed */
    *out = (mt_event *)e;
    return MT_OK;
}

static mt_event *cuda_event_create(mt_backend *be) {
    mt_event *e = NULL;
    keep_error(be, event_create(&e));
    return e;
}

static void cuda_event_destroy(mt_backend *be, mt_event *e) {
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static mt_status event_record(mt_event *e, mt_stream *s) {
    MT_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, mt_cuda_stream(s)));
    return MT_OK;
}

static void cuda_event_record(mt_backend *be, mt_event *e, mt_stream *s) {
    keep_error(be, event_record(e, s));
}

static mt_status stream_wait(mt_stream *s, mt_event *e) {
    MT_CUDA_CHECK(cudaStreamWaitEvent(mt_cuda_stream(s), (cudaEvent_t)e, 0));
    return MT_OK;
}

static void cuda_stream_wait(mt_backend *be, mt_stream *s, mt_event *e) {
    keep_error(be, stream_wait(s, e));
}

static mt_status event_sync(mt_event *e) {
    MT_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e));
    return MT_OK;
}

static void cuda_event_sync(mt_backend *be, mt_event *e) { keep_error(be, event_sync(e)); }

/* Not ready is the only answer that means "wait"; an error is kept and reported as done so
 * that nobody waits on a broken device. */
static int cuda_event_done(mt_backend *be, mt_event *e) {
    cudaError_t rc = cudaEventQuery((cudaEvent_t)e);
    if (rc == cudaErrorNotReady) return 0;
    if (rc != cudaSuccess) keep_error(be, mt_fail(MT_ERR_DEVICE, "cudaEventQuery failed: %s", cudaGetErrorString(rc)));
    return 1;
}

static mt_status event_elapsed(float *ms, mt_event *start, mt_event *end) {
    MT_CUDA_CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return MT_OK;
}

static double cuda_event_elapsed(mt_backend *be, mt_event *start, mt_event *end) {
    float ms = 0.0f;
    keep_error(be, event_elapsed(&ms, start, end));
    return ms * 1e-3;
}

static mt_status copy_async(void *dst, const void *src, size_t bytes, mt_stream *s) {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, mt_cuda_stream(s)));
    return MT_OK;
}

/* Cut at the pieces of registered host memory: the driver promises a copy only within one. */
static void cuda_copy(mt_backend *be, void *dst, const void *src, size_t bytes, mt_stream *s) {
    while (bytes) {
        size_t run = mt_pinned_run(dst, mt_pinned_run(src, bytes));
        mt_status rc = copy_async(dst, src, run, s);
        if (rc != MT_OK) {
            keep_error(be, rc);
            return;
        }
        dst = (char *)dst + run;
        src = (const char *)src + run;
        bytes -= run;
    }
}

static mt_status zero_async(void *dst, size_t bytes, mt_stream *s) {
    MT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, mt_cuda_stream(s)));
    return MT_OK;
}

static void cuda_zero(mt_backend *be, void *dst, size_t bytes, mt_stream *s) {
    if (bytes) keep_error(be, zero_async(dst, bytes, s));
}

/* ---- layer ops: thin wrappers over the kernel launchers ---- */

static void cuda_rmsnorm(mt_backend *be, mt_stream *s, void *y, float *rstd, const void *x,
                         const void *w, int n, int d, mt_rmsnorm_params p) {
    keep_error(be, mt_cuda_rmsnorm(mt_cuda_stream(s), y, rstd, x, w, n, d, p));
}

static void cuda_rmsnorm_dx(mt_backend *be, mt_stream *s, void *dx, float *dw, const void *dy,
                            const void *x, const void *w, const float *rstd, int n, int d,
                            mt_rmsnorm_params p, int accumulate) {
    keep_error(be, mt_cuda_rmsnorm_dx(mt_cuda_stream(s), dx, dw, dy, x, w, rstd, n, d, p, accumulate));
}

static void cuda_rope(mt_backend *be, mt_stream *s, void *x, const float *inv_freq, int n, int seq, int pos0,
                      const int32_t *pos, int heads, int head_dim, int rotary_dim, int inverse) {
    keep_error(be, mt_cuda_rope(mt_cuda_stream(s), x, inv_freq, n, seq, pos0, pos, heads, head_dim, rotary_dim,
                                inverse));
}

static void cuda_attention(mt_backend *be, mt_stream *s, void *out, float *lse, const void *q,
                           const void *k, const void *v, mt_attn_dims dims, const mt_attn_params *params,
                           const mt_segments *seg, void *workspace) {
    keep_error(be, mt_cuda_attention_dispatch(cuda_of(be), mt_cuda_stream(s), out, lse, q, k, v, dims, params, seg,
                                              workspace));
}

static void cuda_attention_dx(mt_backend *be, mt_stream *s, void *dq, void *dk, void *dv,
                              const void *dout, const void *out, const float *lse, const void *q,
                              const void *k, const void *v, mt_attn_dims dims, const mt_attn_params *params,
                              const mt_segments *seg, void *workspace) {
    keep_error(be, mt_cuda_attention_dx_dispatch(cuda_of(be), mt_cuda_stream(s), dq, dk, dv, dout,
                                                  out, lse, q, k, v, dims, params, seg, workspace));
}

static size_t cuda_attention_workspace(mt_backend *be, mt_attn_dims dims, int segmented) {
    return mt_cuda_attention_dispatch_workspace(cuda_of(be), dims, segmented);
}

static void cuda_accumulate_f32(mt_backend *be, mt_stream *s, float *acc, const void *x, size_t count,
                                int accumulate) {
    keep_error(be, mt_cuda_accumulate_f32(mt_cuda_stream(s), acc, x, count, accumulate));
}

static void cuda_round_f32(mt_backend *be, mt_stream *s, void *y, const float *x, size_t count) {
    keep_error(be, mt_cuda_round_f32(mt_cuda_stream(s), y, x, count));
}

static void cuda_gate_split(mt_backend *be, mt_stream *s, void *q, void *gate, const void *qg, int n, int heads,
                            int head_dim) {
    keep_error(be, mt_cuda_gate_split(mt_cuda_stream(s), q, gate, qg, n, heads, head_dim));
}
static void cuda_gate_join(mt_backend *be, mt_stream *s, void *dqg, const void *dq, const void *dgate, int n,
                           int heads, int head_dim) {
    keep_error(be, mt_cuda_gate_join(mt_cuda_stream(s), dqg, dq, dgate, n, heads, head_dim));
}
static void cuda_out_gate(mt_backend *be, mt_stream *s, void *y, const void *x, const void *gate, size_t count) {
    keep_error(be, mt_cuda_out_gate(mt_cuda_stream(s), y, x, gate, count));
}
static void cuda_out_gate_dx(mt_backend *be, mt_stream *s, void *dx, void *dgate, const void *dy, const void *x,
                             const void *gate, size_t count) {
    keep_error(be, mt_cuda_out_gate_dx(mt_cuda_stream(s), dx, dgate, dy, x, gate, count));
}

static void cuda_gather_cols(mt_backend *be, mt_stream *s, void *y, const void *x, const int32_t *cols, int n, int in,
                             int out) {
    keep_error(be, mt_cuda_gather_cols(mt_cuda_stream(s), y, x, cols, n, in, out));
}
static void cuda_scatter_cols(mt_backend *be, mt_stream *s, void *dx, const void *dy, const int32_t *cols, int n,
                              int in, int out) {
    keep_error(be, mt_cuda_scatter_cols(mt_cuda_stream(s), dx, dy, cols, n, in, out));
}

static void cuda_swiglu(mt_backend *be, mt_stream *s, void *a, const void *g, const void *u, size_t count,
                        mt_glu_params p) {
    keep_error(be, mt_cuda_swiglu(mt_cuda_stream(s), a, g, u, count, p));
}

static void cuda_swiglu_dx(mt_backend *be, mt_stream *s, void *dg, void *du, const void *da,
                           const void *g, const void *u, size_t count, mt_glu_params p) {
    keep_error(be, mt_cuda_swiglu_dx(mt_cuda_stream(s), dg, du, da, g, u, count, p));
}

static void cuda_add(mt_backend *be, mt_stream *s, void *y, const void *a, const void *b, size_t count) {
    keep_error(be, mt_cuda_add(mt_cuda_stream(s), y, a, b, count));
}

static void cuda_embedding(mt_backend *be, mt_stream *s, void *x, const int32_t *tokens,
                           const void *wte, int n, int d, float scale) {
    keep_error(be, mt_cuda_embedding(mt_cuda_stream(s), x, tokens, wte, n, d, scale));
}

static void cuda_embedding_dw(mt_backend *be, mt_stream *s, float *dwte, const int32_t *tokens,
                              const void *dx, int n, int d, int v0, int rows, float scale) {
    keep_error(be, mt_cuda_embedding_dw(mt_cuda_stream(s), dwte, tokens, dx, n, d, v0, rows, scale));
}

static void cuda_lmhead_loss(mt_backend *be, mt_stream *s, float *loss_sum, float *lse, void *dx, float *dw,
                             const void *x, const void *w, const int32_t *targets, int n, int d,
                             int vocab, float scale, float softcap, int chunk, void *workspace) {
    keep_error(be, mt_cuda_lmhead_loss(cuda_of(be), mt_cuda_stream(s), loss_sum, lse, dx, dw, x, w,
                                        targets, n, d, vocab, scale, softcap, chunk, workspace));
}

static void cuda_lmhead_dw(mt_backend *be, mt_stream *s, float *dw, const void *x, const void *w,
                           const int32_t *targets, const float *lse, int n, int d, int v0, int rows, float scale,
                           float softcap, int chunk, void *workspace) {
    keep_error(be, mt_cuda_lmhead_dw(cuda_of(be), mt_cuda_stream(s), dw, x, w, targets, lse, n, d, v0, rows, scale,
                                     softcap, chunk, workspace));
}

static size_t cuda_lmhead_workspace(mt_backend *be, int chunk, int vocab) {
    return mt_cuda_lmhead_workspace(chunk, vocab);
}

static void cuda_sumsq(mt_backend *be, mt_stream *s, float *out, const float *x, size_t count) {
    keep_error(be, mt_cuda_sumsq(mt_cuda_stream(s), out, x, count));
}

static void cuda_clip_scale(mt_backend *be, mt_stream *s, float *scale, const float *norms, int count,
                            float max_norm) {
    keep_error(be, mt_cuda_clip_scale(mt_cuda_stream(s), scale, norms, count, max_norm));
}

static void cuda_adamw(mt_backend *be, mt_stream *s, const mt_adamw_params *p, int decay, const float *scale,
                       float *master, float *m, float *v, const float *grad, void *w, size_t n) {
    mt_adamw_coef c = mt_adamw_coef_of(p, decay);
    keep_error(be, mt_cuda_adamw(mt_cuda_stream(s), &c, scale, master, m, v, grad, w, n));
}

/* ---- mixture of experts ---- */

/* The pool keeps what it has handed out (release threshold: all), so that after the first layer
 * its allocations cost no driver call. */
static mt_status scratch_pool_create(mt_cuda_backend *cb) {
    struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
                              .location = {.type = cudaMemLocationTypeDevice, .id = cb->device}};
    MT_CUDA_CHECK(cudaMemPoolCreate(&cb->scratch_pool, &props));
    uint64_t keep = UINT64_MAX;
    MT_CUDA_CHECK(cudaMemPoolSetAttribute(cb->scratch_pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return MT_OK;
}

mt_status mt_cuda_scratch_alloc(mt_cuda_backend *cb, cudaStream_t s, size_t bytes, void **out) {
    pthread_mutex_lock(&cb->lock);
    mt_status status = cb->scratch_pool ? MT_OK : scratch_pool_create(cb);
    pthread_mutex_unlock(&cb->lock);
    MT_TRY(status);
    MT_CUDA_CHECK(cudaMallocFromPoolAsync(out, bytes ? bytes : 1, cb->scratch_pool, s));
    return MT_OK;
}

void mt_cuda_scratch_free(mt_cuda_backend *cb, cudaStream_t s, void *p) {
    cudaError_t err = cudaFreeAsync(p, s);
    if (err != cudaSuccess) mt_cuda_note(cb, mt_fail(MT_ERR_DEVICE, "cudaFreeAsync: %s", cudaGetErrorString(err)));
}

static void moe_route(mt_backend *be, mt_stream *s, float *weights, int32_t *experts, int32_t *counts, float *prob_sum,
                      const void *logits, int n, int E, int k, int renorm) {
    keep_error(be, mt_cuda_moe_route(cuda_of(be), mt_cuda_stream(s), weights, experts, counts, prob_sum, logits, n, E,
                                     k, renorm));
}
static void moe_route_dx(mt_backend *be, mt_stream *s, void *dlogits, const float *dweights, const void *logits,
                         const int32_t *experts, const float *aux_grad, int n, int E, int k, int renorm) {
    keep_error(be, mt_cuda_moe_route_dx(mt_cuda_stream(s), dlogits, dweights, logits, experts, aux_grad, n, E, k,
                                        renorm));
}
static void moe_permute(mt_backend *be, mt_stream *s, int32_t *order, int32_t *slot_row, int32_t *offsets,
                        const int32_t *experts, int n, int E, int k, int seg) {
    keep_error(be, mt_cuda_moe_permute(cuda_of(be), mt_cuda_stream(s), order, slot_row, offsets, experts, n, E, k,
                                       seg));
}
static void moe_gather(mt_backend *be, mt_stream *s, void *xs, const void *x, const int32_t *order, int n, int k,
                       int d) {
    keep_error(be, mt_cuda_moe_gather(mt_cuda_stream(s), xs, x, order, n, k, d));
}
static void moe_gather_dx(mt_backend *be, mt_stream *s, void *dx, const void *dxs, const int32_t *slot_row, int n,
                          int k, int d, int accumulate) {
    keep_error(be, mt_cuda_moe_gather_dx(mt_cuda_stream(s), dx, dxs, slot_row, n, k, d, accumulate));
}
static void moe_matmul(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w, const void *bias,
                       const int32_t *offsets, int rows, int E, int S, int in, int out) {
    mt_cuda_backend *cb = cuda_of(be);
    cudaStream_t st = mt_cuda_stream(s);
    mt_status status = cb->moe_gemm_kernel ? mt_cuda_moe_gemm(st, y, x, w, offsets, rows, E, S, in, out)
                                           : mt_cuda_moe_gemm_cublaslt(cb, st, y, x, w, offsets, rows, E, S, in, out);
    if (status == MT_OK && bias) status = mt_cuda_moe_bias(st, y, bias, offsets, rows, E, S, out);
    keep_error(be, status);
}
static void moe_matmul_dx(mt_backend *be, mt_stream *s, void *dx, const void *dy, const void *w,
                          const int32_t *offsets, int rows, int E, int S, int in, int out) {
    mt_cuda_backend *cb = cuda_of(be);
    cudaStream_t st = mt_cuda_stream(s);
    keep_error(be, cb->moe_gemm_kernel ? mt_cuda_moe_gemm_dx(st, dx, dy, w, offsets, rows, E, S, in, out)
                                       : mt_cuda_moe_gemm_dx_cublaslt(cb, st, dx, dy, w, offsets, rows, E, S, in, out));
}
static void moe_matmul_dw(mt_backend *be, mt_stream *s, float *dw, float *dbias, const void *dy, const void *x,
                          const int32_t *offsets, int rows, int E, int S, int in, int out) {
    mt_cuda_backend *cb = cuda_of(be);
    cudaStream_t st = mt_cuda_stream(s);
    mt_status status = cb->moe_gemm_kernel
                           ? mt_cuda_moe_gemm_dw(st, dw, dy, x, offsets, rows, E, S, in, out)
                           : mt_cuda_moe_gemm_dw_cublaslt(cb, st, dw, dy, x, offsets, rows, E, S, in, out);
    if (status == MT_OK && dbias) status = mt_cuda_moe_bias_grad(st, dbias, dy, offsets, E, S, out);
    keep_error(be, status);
}
static void moe_swiglu(mt_backend *be, mt_stream *s, void *a, const void *gu, int rows, int F, mt_glu_params p) {
    keep_error(be, mt_cuda_moe_swiglu(mt_cuda_stream(s), a, gu, rows, F, p));
}
static void moe_swiglu_dx(mt_backend *be, mt_stream *s, void *dgu, const void *da, const void *gu, int rows, int F,
                          mt_glu_params p) {
    keep_error(be, mt_cuda_moe_swiglu_dx(mt_cuda_stream(s), dgu, da, gu, rows, F, p));
}
static void moe_combine(mt_backend *be, mt_stream *s, void *y, const void *ys, const float *weights,
                        const int32_t *slot_row, int n, int k, int d) {
    keep_error(be, mt_cuda_moe_combine(mt_cuda_stream(s), y, ys, weights, slot_row, n, k, d));
}
static void moe_combine_dx(mt_backend *be, mt_stream *s, void *dys, float *dweights, const void *dy, const void *ys,
                           const float *weights, const int32_t *slot_row, int n, int k, int d) {
    keep_error(be, mt_cuda_moe_combine_dx(mt_cuda_stream(s), dys, dweights, dy, ys, weights, slot_row, n, k, d));
}
static void moe_gate_add(mt_backend *be, mt_stream *s, void *y, const void *a, const void *x, const void *g, int n,
                         int d) {
    keep_error(be, mt_cuda_moe_gate_add(mt_cuda_stream(s), y, a, x, g, n, d));
}
static void moe_gate_add_dx(mt_backend *be, mt_stream *s, void *dx, void *dg, const void *dy, const void *x,
                            const void *g, int n, int d) {
    keep_error(be, mt_cuda_moe_gate_add_dx(mt_cuda_stream(s), dx, dg, dy, x, g, n, d));
}
static void moe_aux_loss(mt_backend *be, mt_stream *s, float *loss_sum, float *grad, const int32_t *counts,
                         const float *prob_sum, int layers, int n, int E, float loss_scale, float grad_scale) {
    keep_error(be, mt_cuda_moe_aux_loss(mt_cuda_stream(s), loss_sum, grad, counts, prob_sum, layers, n, E, loss_scale,
                                        grad_scale));
}

/* ---- Gated DeltaNet (gdn_ops.cu, gdn_rule.cu) ---- */

static void gdn_conv(mt_backend *be, mt_stream *s, void *y, const void *x, const void *w, int C, mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_conv(mt_cuda_stream(s), y, x, w, C, d));
}
static void gdn_conv_dx(mt_backend *be, mt_stream *s, void *dx, float *dw, const void *dy, const void *x,
                        const void *w, int C, mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_conv_dx(mt_cuda_stream(s), dx, dw, dy, x, w, C, d));
}
static void gdn_qk_norm(mt_backend *be, mt_stream *s, void *qn, void *kn, const void *q, const void *k,
                        mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_qk_norm(mt_cuda_stream(s), qn, kn, q, k, d));
}
static void gdn_qk_norm_dx(mt_backend *be, mt_stream *s, void *dq, void *dk, const void *dqn, const void *dkn,
                           const void *q, const void *k, mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_qk_norm_dx(mt_cuda_stream(s), dq, dk, dqn, dkn, q, k, d));
}
static void gdn_decay(mt_backend *be, mt_stream *s, float *g, float *beta, const void *a, const void *b,
                      const void *A_log, const void *dt_bias, mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_decay(mt_cuda_stream(s), g, beta, a, b, A_log, dt_bias, d));
}
static void gdn_decay_dx(mt_backend *be, mt_stream *s, void *da, void *db, float *dA_log, float *ddt_bias,
                         const float *dg, const float *dbeta, const void *a, const void *b, const void *A_log,
                         const void *dt_bias, mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_decay_dx(mt_cuda_stream(s), da, db, dA_log, ddt_bias, dg, dbeta, a, b, A_log, dt_bias,
                                        d));
}
static void gdn_rule(mt_backend *be, mt_stream *s, void *o, const void *q, const void *k, const void *v,
                     const float *g, const float *beta, mt_gdn_dims d, void *workspace) {
    keep_error(be, mt_cuda_gdn_rule(mt_cuda_stream(s), o, q, k, v, g, beta, d, workspace));
}
static void gdn_rule_dx(mt_backend *be, mt_stream *s, void *dq, void *dk, void *dv, float *dg, float *dbeta,
                        const void *dout, const void *q, const void *k, const void *v, const float *g,
                        const float *beta, mt_gdn_dims d, void *workspace) {
    keep_error(be, mt_cuda_gdn_rule_dx(mt_cuda_stream(s), dq, dk, dv, dg, dbeta, dout, q, k, v, g, beta, d, workspace));
}
static size_t gdn_rule_workspace(mt_backend *be, mt_gdn_dims d) { return mt_cuda_gdn_rule_workspace(d); }
static void gdn_norm(mt_backend *be, mt_stream *s, void *y, const void *x, const void *z, const void *w, float eps,
                     mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_norm(mt_cuda_stream(s), y, x, z, w, eps, d));
}
static void gdn_norm_dx(mt_backend *be, mt_stream *s, void *dx, void *dz, float *dw, const void *dy, const void *x,
                        const void *z, const void *w, float eps, mt_gdn_dims d) {
    keep_error(be, mt_cuda_gdn_norm_dx(mt_cuda_stream(s), dx, dz, dw, dy, x, z, w, eps, d));
}

/* ---- lifecycle ---- */

static void cuda_destroy(mt_backend *be) {
    mt_cuda_backend *cb = cuda_of(be);
    if (!cb) return;
    mt_cudnn_attention_destroy(cb->cudnn);
    mt_cuda_moe_lt_destroy(cb->moe_lt);
    mt_cuda_profile_destroy(cb->profile);
    if (cb->scratch_pool) cudaMemPoolDestroy(cb->scratch_pool);
    if (cb->lt_workspace) cudaFree(cb->lt_workspace);
    if (cb->lt) cublasLtDestroy(cb->lt);
    pthread_mutex_destroy(&cb->lock);
    free(cb->allocations);
    free(cb);
}

/* No launch: ops enqueue asynchronously on the stream, so backend.c's fallback (run fn now)
 * keeps the stream's order. */
static const mt_device_info *cuda_device_info(mt_backend *be) { return &cuda_of(be)->info; }

static const mt_backend_ops cuda_ops = {
    .name = "cuda",
    .kind = MT_DEVICE_GPU,
    .act_dtype = MT_DTYPE_BF16,
    .weight_dtype = MT_DTYPE_BF16,
    .destroy = cuda_destroy,
    .device_info = cuda_device_info,
    .mem = {.dev_alloc = cuda_dev_alloc, .dev_free = cuda_dev_free, .host_alloc = cuda_host_alloc,
            .host_free = cuda_host_free, .dev_mem_info = cuda_dev_mem_info,
            .dev_in_use = cuda_dev_in_use},
    .stream = {.stream_create = cuda_stream_create, .stream_destroy = cuda_stream_destroy,
               .event_create = cuda_event_create, .event_destroy = cuda_event_destroy,
               .event_record = cuda_event_record, .stream_wait = cuda_stream_wait,
               .event_sync = cuda_event_sync, .copy = cuda_copy, .zero = cuda_zero,
               .event_done = cuda_event_done, .event_elapsed = cuda_event_elapsed, .check = cuda_check},
    .op = {.matmul = mt_cuda_op_matmul, .matmul_dx = mt_cuda_op_matmul_dx, .matmul_dw = mt_cuda_op_matmul_dw,
           .rmsnorm = cuda_rmsnorm, .rmsnorm_dx = cuda_rmsnorm_dx, .rope = cuda_rope,
           .attention = cuda_attention, .attention_dx = cuda_attention_dx,
           .attention_workspace = cuda_attention_workspace, .accumulate_f32 = cuda_accumulate_f32,
           .round_f32 = cuda_round_f32, .swiglu = cuda_swiglu,
           .swiglu_dx = cuda_swiglu_dx, .add = cuda_add, .embedding = cuda_embedding,
           .gate_split = cuda_gate_split, .gate_join = cuda_gate_join, .out_gate = cuda_out_gate,
           .out_gate_dx = cuda_out_gate_dx, .gather_cols = cuda_gather_cols, .scatter_cols = cuda_scatter_cols,
           .embedding_dw = cuda_embedding_dw, .lmhead_loss = cuda_lmhead_loss, .lmhead_dw = cuda_lmhead_dw,
           .lmhead_workspace = cuda_lmhead_workspace, .logits = mt_cuda_op_logits, .sumsq = cuda_sumsq,
           .clip_scale = cuda_clip_scale, .adamw = cuda_adamw},
    .moe = {.route = moe_route, .route_dx = moe_route_dx, .permute = moe_permute, .gather = moe_gather,
            .gather_dx = moe_gather_dx, .grouped_matmul = moe_matmul, .grouped_matmul_dx = moe_matmul_dx,
            .grouped_matmul_dw = moe_matmul_dw, .swiglu = moe_swiglu, .swiglu_dx = moe_swiglu_dx,
            .combine = moe_combine, .combine_dx = moe_combine_dx, .gate_add = moe_gate_add,
            .gate_add_dx = moe_gate_add_dx, .aux_loss = moe_aux_loss},
    .gdn = {.conv = gdn_conv, .conv_dx = gdn_conv_dx, .qk_norm = gdn_qk_norm, .qk_norm_dx = gdn_qk_norm_dx,
            .decay = gdn_decay, .decay_dx = gdn_decay_dx, .rule = gdn_rule, .rule_dx = gdn_rule_dx,
            .rule_workspace = gdn_rule_workspace, .norm = gdn_norm, .norm_dx = gdn_norm_dx},
    .coll = {.comm_init = mt_cuda_comm_init, .comm_init_world = mt_cuda_comm_init_world, .all_reduce = mt_cuda_all_reduce,
             .reduce_scatter = mt_cuda_reduce_scatter, .broadcast = mt_cuda_broadcast, .comm_abort = mt_cuda_comm_abort,
             .comm_free = mt_cuda_comm_free},
    .prof = {.begin = mt_cuda_prof_begin, .end = mt_cuda_prof_end, .collect = mt_cuda_prof_collect,
             .rows = mt_cuda_prof_rows, .clear = mt_cuda_prof_clear},
};

/* The expert GEMMs' way (docs/backends.md): MT_MOE_GEMM "cublaslt" (the default: a cuBLASLt GEMM an
 * expert after the offsets come home, fanned out over MT_MOE_STREAMS streams, default 4) or "kernel"
 * (moe_gemm.cu's, no host sync). */
enum { MOE_STREAMS_DEFAULT = 4 };

static mt_status read_moe_gemm(mt_cuda_backend *cb, int *streams) {
    const char *v = getenv("MT_MOE_GEMM");
    if (v && *v && strcmp(v, "cublaslt")) {
        if (strcmp(v, "kernel"))
            return mt_fail(MT_ERR_INVALID, "MT_MOE_GEMM=%s: expected cublaslt (the default) or kernel", v);
        cb->moe_gemm_kernel = 1;
    }
    *streams = MOE_STREAMS_DEFAULT;
    v = getenv("MT_MOE_STREAMS");
    if (v && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > MT_MOE_LT_MAX_STREAMS)
            return mt_fail(MT_ERR_INVALID, "MT_MOE_STREAMS=%s: expected 1 to %d (default %d)", v, MT_MOE_LT_MAX_STREAMS,
                           MOE_STREAMS_DEFAULT);
        *streams = (int)n;
    }
    return MT_OK;
}

/* A GPU the kernels cannot run on is refused before anything is allocated on it. */
static mt_status init_device(mt_cuda_backend *cb, int device) {
    int moe_streams;
    MT_TRY(read_moe_gemm(cb, &moe_streams));
    int count = 0;
    MT_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
        return mt_fail(MT_ERR_DEVICE, "CUDA device %d requested but %d visible", device, count);
    MT_TRY(mt_cuda_probe_device(device, &cb->info));
    MT_TRY(mt_device_check_capability(device, cb->info.name, cb->info.cc_major, cb->info.cc_minor));
    MT_CUDA_CHECK(cudaSetDevice(device));
    MT_TRY(mt_cuda_measure_pcie(&cb->info));
    cb->device = device;
    MT_CUBLAS_CHECK(cublasLtCreate(&cb->lt));
    cb->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    MT_CUDA_CHECK(cudaMalloc(&cb->lt_workspace, cb->lt_workspace_bytes));
    if (!cb->moe_gemm_kernel) MT_TRY(mt_cuda_moe_lt_create(&cb->moe_lt, moe_streams));
    MT_TRY(mt_cudnn_attention_create(&cb->cudnn));
    MT_TRY(mt_cuda_profile_create(&cb->profile));
    char text[512];
    mt_log_info("cuda device %d: %s", device, mt_device_info_text(&cb->info, text, sizeof text));
    return MT_OK;
}

mt_status mt_backend_cuda_create(mt_backend **out, int device) {
    mt_cuda_backend *cb = mt_calloc(1, sizeof *cb, "the cuda backend");
    if (!cb) return MT_ERR_NOMEM;
    pthread_mutex_init(&cb->lock, NULL);
    mt_status status = mt_backend_init(&cb->base, &cuda_ops);
    if (status == MT_OK) status = init_device(cb, device);
    if (status != MT_OK) {
        cudaGetLastError();
        cuda_destroy(&cb->base);
        return status;
    }
    *out = &cb->base;
    return MT_OK;
}
