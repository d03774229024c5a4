/* The attention ops of backend.h: cuDNN's fused attention for the dims it built plans for, the
 * CUDA-core flash kernels of attention.cu for the rest. With segments, cuDNN's ragged layout where
 * its plan for their count builds and fits the workspace sized for segments, else the kernels; a
 * window of queries with segments runs on the kernels (cuDNN's ragged plans here take whole
 * sequences). Of mt_attn_params' variants the graphs take the scale and, over whole sequences
 * without segments, a sliding window; sinks fold into their output and statistics after the forward
 * (attention.cu: the backward given those is the sinks' own, their gradient a kernel's beside it);
 * a soft cap, or a sliding window over a window of queries or segments, runs on the kernels. The
 * one place that chooses; the forward and the backward of the same call choose alike. */
#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/cuda_backend.h"

#include <stdlib.h>

/* The sliding window that hides keys from some query (shorter than the keys), else 0. */
static int hiding_window(mt_attn_dims dims, const mt_attn_params *params) {
    return params && params->window > 0 && params->window < mt_attn_kv_rows(dims) ? params->window : 0;
}

/* cuDNN runs causal attention with a scale, sinks (folded after) and, over whole sequences without
 * segments, a sliding window whose plans need no more workspace than the call was given (sized
 * without the window: mt_cuda_attention_dispatch_workspace). */
static int by_cudnn(mt_cuda_backend *cb, mt_attn_dims dims, const mt_attn_params *params, const mt_segments *seg) {
    if (getenv("MT_TEST_ATTENTION_KERNELS")) return 0; /* device checks: the kernels against cuDNN */
    int band = hiding_window(dims, params);
    if ((seg && dims.q_len > 0) || (params && params->softcap > 0.0f)) return 0;
    if (band && (seg || dims.q_len > 0)) return 0;
    size_t bytes = 0;
    if (!mt_cudnn_attention_supports(cb->cudnn, dims, seg ? seg->count : 0, band, &bytes)) return 0;
    return !band || bytes <= mt_cuda_attention_dispatch_workspace(cb, dims, 0);
}

/* The segments' positions of the call's key rows, for the kernels. */
static const int32_t *positions(const mt_segments *seg) { return seg ? seg->pos + seg->row0 : NULL; }

mt_status mt_cuda_attention_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *out, float *lse,
                                     const void *q, const void *k, const void *v, mt_attn_dims dims,
                                     const mt_attn_params *params, const mt_segments *seg, void *workspace) {
    if (!by_cudnn(cb, dims, params, seg)) return mt_cuda_attention(s, out, lse, q, k, v, dims, params, positions(seg));
    MT_TRY(mt_cudnn_attention_forward(cb->cudnn, s, out, lse, q, k, v, dims, mt_attn_scale(params, dims.head_dim), seg,
                                      hiding_window(dims, params), workspace));
    return params && params->sinks ? mt_cuda_attention_sinks_fold(s, out, lse, dims, params, positions(seg)) : MT_OK;
}

mt_status mt_cuda_attention_dx_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *dq, void *dk,
                                        void *dv, const void *dout, const void *out,
                                        const float *lse, const void *q, const void *k,
                                        const void *v, mt_attn_dims dims, const mt_attn_params *params,
                                        const mt_segments *seg, void *workspace) {
    if (!by_cudnn(cb, dims, params, seg))
        return mt_cuda_attention_dx(s, dq, dk, dv, dout, out, lse, q, k, v, dims, params, positions(seg), workspace);
    if (params && params->sinks && params->dsinks) /* before cuDNN, which takes the workspace after it */
        MT_TRY(mt_cuda_attention_sinks_dx(s, dout, out, lse, dims, params, positions(seg), workspace));
    return mt_cudnn_attention_backward(cb->cudnn, s, dq, dk, dv, dout, out, lse, q, k, v, dims,
                                       mt_attn_scale(params, dims.head_dim), seg, hiding_window(dims, params),
                                       workspace);
}

/* Enough for either path, so that the choice never depends on the workspace given (with segments:
 * cuDNN takes a count of them only where its plan fits what this sized, attention_cudnn.h). */
size_t mt_cuda_attention_dispatch_workspace(mt_cuda_backend *cb, mt_attn_dims dims, int segmented) {
    size_t bytes = mt_cuda_attention_workspace(dims), cudnn_bytes = 0;
    if (mt_cudnn_attention_supports(cb->cudnn, dims, 0, 0, &cudnn_bytes) && cudnn_bytes > bytes) bytes = cudnn_bytes;
    return segmented ? mt_cudnn_attention_ragged_workspace(cb->cudnn, dims, bytes) : bytes;
}
