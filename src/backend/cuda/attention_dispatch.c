/* The attention ops of backend.h: cuDNN's fused attention for the dims it built plans for, the
 * CUDA-core flash kernels of attention.cu for the rest. With segments, cuDNN's ragged layout where
 * its plan for their count builds and fits the workspace sized for segments, else the kernels.
 * The one place that chooses; the forward and the backward of the same call choose alike. */
#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/cuda_backend.h"

static int by_cudnn(mt_cuda_backend *cb, mt_attn_dims dims, const mt_segments *seg) {
    return mt_cudnn_attention_supports(cb->cudnn, dims, seg ? seg->count : 0, NULL);
}

mt_status mt_cuda_attention_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *out, float *lse,
                                     const void *q, const void *k, const void *v, mt_attn_dims dims,
                                     const mt_segments *seg, void *workspace) {
    if (by_cudnn(cb, dims, seg)) return mt_cudnn_attention_forward(cb->cudnn, s, out, lse, q, k, v, dims, seg, workspace);
    return mt_cuda_attention(s, out, lse, q, k, v, dims, seg ? seg->pos : NULL);
}

mt_status mt_cuda_attention_dx_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *dq, void *dk,
                                        void *dv, const void *dout, const void *out,
                                        const float *lse, const void *q, const void *k,
                                        const void *v, mt_attn_dims dims, const mt_segments *seg,
                                        void *workspace) {
    if (by_cudnn(cb, dims, seg))
        return mt_cudnn_attention_backward(cb->cudnn, s, dq, dk, dv, dout, out, lse, q, k, v, dims, seg, workspace);
    return mt_cuda_attention_dx(s, dq, dk, dv, dout, out, lse, q, k, v, dims, seg ? seg->pos : NULL, workspace);
}

/* Enough for either path, so that the choice never depends on the workspace given (with segments:
 * cuDNN takes a count of them only where its plan fits what this sized, attention_cudnn.h). */
size_t mt_cuda_attention_dispatch_workspace(mt_cuda_backend *cb, mt_attn_dims dims, int segmented) {
    size_t bytes = mt_cuda_attention_workspace(dims), cudnn_bytes = 0;
    if (mt_cudnn_attention_supports(cb->cudnn, dims, 0, &cudnn_bytes) && cudnn_bytes > bytes) bytes = cudnn_bytes;
    return segmented ? mt_cudnn_attention_ragged_workspace(cb->cudnn, dims, bytes) : bytes;
}
