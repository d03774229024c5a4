/* Columns of each row picked by a device map (Qwen3-Next's fused projections apart), and put back:
 * one thread an output element. */
#include "backend/cuda/bf16_vec.cuh"

__global__ void gather_cols_kernel(bf16 *y, const bf16 *x, const int32_t *cols, size_t count, int in, int out) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / out;
        y[e] = x[r * in + cols[e % out]];
    }
}

__global__ void scatter_cols_kernel(bf16 *dx, const bf16 *dy, const int32_t *cols, size_t count, int in, int out) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / out;
        dx[r * in + cols[e % out]] = dy[e];
    }
}

extern "C" mt_status mt_cuda_gather_cols(cudaStream_t s, void *y, const void *x, const int32_t *cols, int n, int in,
                                         int out) {
    size_t count = (size_t)n * out;
    if (count == 0) return MT_OK;
    gather_cols_kernel<<<grid_for(count, 256), 256, 0, s>>>((bf16 *)y, (const bf16 *)x, cols, count, in, out);
    return launch_status("gather_cols");
}

extern "C" mt_status mt_cuda_scatter_cols(cudaStream_t s, void *dx, const void *dy, const int32_t *cols, int n, int in,
                                          int out) {
    size_t count = (size_t)n * out;
    if (count == 0) return MT_OK;
    scatter_cols_kernel<<<grid_for(count, 256), 256, 0, s>>>((bf16 *)dx, (const bf16 *)dy, cols, count, in, out);
    return launch_status("scatter_cols");
}
