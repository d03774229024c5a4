/* Attention's output gate (Qwen3-Next, Qwen3.5), over bf16: q_proj's rows hold each head's query
 * and then its gate (split apart, joined back in the backward); the gate scales the attention's
 * output by its sigmoid, in fp32. */
#include "backend/cuda/bf16_vec.cuh"

/* One thread an element of q (and of the gate): r, h, i of [n, heads, head_dim]. */
__global__ void gate_split_kernel(bf16 *q, bf16 *gate, const bf16 *qg, size_t count, int head_dim) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        size_t head = e / head_dim, i = e % head_dim, src = head * 2 * head_dim + i;
        q[e] = qg[src];
        gate[e] = qg[src + head_dim];
    }
}

__global__ void gate_join_kernel(bf16 *dqg, const bf16 *dq, const bf16 *dgate, size_t count, int head_dim) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        size_t head = e / head_dim, i = e % head_dim, dst = head * 2 * head_dim + i;
        dqg[dst] = dq[e];
        dqg[dst + head_dim] = dgate[e];
    }
}

__device__ inline float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void out_gate_kernel(bf16 *y, const bf16 *x, const bf16 *gate, size_t count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(__bfloat162float(x[i]) * sigmoid_f(__bfloat162float(gate[i])));
}

/* dgate may be gate: each thread reads its element before writing it. */
__global__ void out_gate_dx_kernel(bf16 *dx, bf16 *dgate, const bf16 *dy, const bf16 *x, const bf16 *gate,
                                   size_t count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float s = sigmoid_f(__bfloat162float(gate[i])), d = __bfloat162float(dy[i]), xv = __bfloat162float(x[i]);
        dgate[i] = __float2bfloat16(d * xv * s * (1.0f - s));
        dx[i] = __float2bfloat16(d * s);
    }
}

extern "C" mt_status mt_cuda_gate_split(cudaStream_t s, void *q, void *gate, const void *qg, int n, int heads,
                                        int head_dim) {
    size_t count = (size_t)n * heads * head_dim;
    if (count == 0) return MT_OK;
    gate_split_kernel<<<grid_for(count, 256), 256, 0, s>>>((bf16 *)q, (bf16 *)gate, (const bf16 *)qg, count,
                                                           head_dim);
    return launch_status("gate_split");
}

extern "C" mt_status mt_cuda_gate_join(cudaStream_t s, void *dqg, const void *dq, const void *dgate, int n,
                                       int heads, int head_dim) {
    size_t count = (size_t)n * heads * head_dim;
    if (count == 0) return MT_OK;
    gate_join_kernel<<<grid_for(count, 256), 256, 0, s>>>((bf16 *)dqg, (const bf16 *)dq, (const bf16 *)dgate, count,
                                                          head_dim);
    return launch_status("gate_join");
}

extern "C" mt_status mt_cuda_out_gate(cudaStream_t s, void *y, const void *x, const void *gate, size_t count) {
    if (count == 0) return MT_OK;
    out_gate_kernel<<<grid_for(count, 256), 256, 0, s>>>((bf16 *)y, (const bf16 *)x, (const bf16 *)gate, count);
    return launch_status("out_gate");
}

extern "C" mt_status mt_cuda_out_gate_dx(cudaStream_t s, void *dx, void *dgate, const void *dy, const void *x,
                                         const void *gate, size_t count) {
    if (count == 0) return MT_OK;
    out_gate_dx_kernel<<<grid_for(count, 256), 256, 0, s>>>((bf16 *)dx, (bf16 *)dgate, (const bf16 *)dy,
                                                            (const bf16 *)x, (const bf16 *)gate, count);
    return launch_status("out_gate_dx");
}
