/* The attention ops of backend.h: cuDNN's fused attention for the dims it built plans for, the
 * CUDA-core flash kernels of attention.cu for the rest. The one place that chooses. */
#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/cuda_backend.h"

mt_status mt_cuda_attention_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *out, float *lse,
                                     const void *q, const void *k, const void *v, mt_attn_dims dims,
                                     void *workspace) {
    if (mt_cudnn_attention_supports(cb->cudnn, dims, NULL))
        return mt_cudnn_attention_forward(cb->cudnn, s, out, lse, q, k, v, dims, workspace);
    return mt_cuda_attention(s, out, lse, q, k, v, dims);
}

mt_status mt_cuda_attention_dx_dispatch(mt_cuda_backend *cb, cudaStream_t s, void *dq, void *dk,
                                        void *dv, const void *dout, const void *out,
                                        const float *lse, const void *q, const void *k,
                                        const void *v, mt_attn_dims dims, void *workspace) {
    if (mt_cudnn_attention_supports(cb->cudnn, dims, NULL))
        return mt_cudnn_attention_backward(cb->cudnn, s, dq, dk, dv, dout, out, lse, q, k, v, dims,
                                           workspace);
    return mt_cuda_attention_dx(s, dq, dk, dv, dout, out, lse, q, k, v, dims, workspace);
}

/* Enough for either path, so that the choice never depends on the workspace given. */
size_t mt_cuda_attention_dispatch_workspace(mt_cuda_backend *cb, mt_attn_dims dims) {
    size_t cudnn_bytes = 0, kernel_bytes = mt_cuda_attention_workspace(dims);
    if (!mt_cudnn_attention_supports(cb->cudnn, dims, &cudnn_bytes)) return kernel_bytes;
    return cudnn_bytes > kernel_bytes ? cudnn_bytes : kernel_bytes;
}
