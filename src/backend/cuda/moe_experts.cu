/* Mixture of experts: the experts' GLU over fused [gate | up] rows and its backward, and a shared
 * expert's sigmoid gate (backend.h's moe group; the CPU reference is cpu/ops/moe_experts.c). The
 * dense GLU's arithmetic (glu_math.cuh); 8 bf16 at a time where the widths and the buffers
 * allow (VEC = 8), one otherwise. */
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/glu_math.cuh"

namespace {

constexpr int THREADS = 256;

template <int VEC>
__device__ __forceinline__ void load(const bf16 *p, float out[VEC]) {
    if constexpr (VEC == 8) bf16x8_to_float(*reinterpret_cast<const uint4 *>(p), out);
    else out[0] = __bfloat162float(*p);
}

template <int VEC>
__device__ __forceinline__ void store(bf16 *p, const float in[VEC]) {
    if constexpr (VEC == 8) *reinterpret_cast<uint4 *>(p) = float_to_bf16x8(in);
    else *p = __float2bfloat16(in[0]);
}

/* Element (r, i) of rows x F, VEC at a time: vector v is row v / (F / VEC), columns from
 * (v % (F / VEC)) * VEC. */
template <int VEC>
__global__ void swiglu_fused(bf16 *a, const bf16 *gu, long long rows, int F, mt_glu_params p) {
    long long per_row = F / VEC, vectors = rows * per_row;
    for (long long v = blockIdx.x * (long long)THREADS + threadIdx.x; v < vectors; v += (long long)gridDim.x * THREADS) {
        long long r = v / per_row;
        int i = (int)(v % per_row) * VEC;
        float g[VEC], u[VEC];
        load<VEC>(gu + r * 2 * F + i, g);
        load<VEC>(gu + r * 2 * F + F + i, u);
#pragma unroll
        for (int j = 0; j < VEC; j++) g[j] = glu_one(p, g[j], u[j]);
        store<VEC>(a + r * F + i, g);
    }
}

template <int VEC>
__global__ void swiglu_fused_dx(bf16 *dgu, const bf16 *da, const bf16 *gu, long long rows, int F, mt_glu_params p) {
    long long per_row = F / VEC, vectors = rows * per_row;
    for (long long v = blockIdx.x * (long long)THREADS + threadIdx.x; v < vectors; v += (long long)gridDim.x * THREADS) {
        long long r = v / per_row;
        int i = (int)(v % per_row) * VEC;
        float d[VEC], g[VEC], u[VEC], dg[VEC], du[VEC];
        load<VEC>(da + r * F + i, d);
        load<VEC>(gu + r * 2 * F + i, g);
        load<VEC>(gu + r * 2 * F + F + i, u);
#pragma unroll
        for (int j = 0; j < VEC; j++) glu_grad_one(p, d[j], g[j], u[j], &dg[j], &du[j]);
        store<VEC>(dgu + r * 2 * F + i, dg);
        store<VEC>(dgu + r * 2 * F + F + i, du);
    }
}

/* y[t] = a[t] + sigmoid(g[t]) * x[t], a block a token (y may alias a: each element is read and
 * written by the same thread). */
template <int VEC>
__global__ void gate_add_rows(bf16 *y, const bf16 *a, const bf16 *x, const bf16 *g, int n, int d) {
    for (int t = blockIdx.x; t < n; t += gridDim.x) {
        float sig = sigmoid(__bfloat162float(g[t]));
        for (int c = threadIdx.x * VEC; c < d; c += THREADS * VEC) {
            float av[VEC], xv[VEC];
            load<VEC>(a + (size_t)t * d + c, av);
            load<VEC>(x + (size_t)t * d + c, xv);
#pragma unroll
            for (int j = 0; j < VEC; j++) av[j] += sig * xv[j];
            store<VEC>(y + (size_t)t * d + c, av);
        }
    }
}

/* dx[t] = sigmoid(g[t]) * dy[t]; dg[t] = sigmoid'(g[t]) * (dy[t] . x[t]), the dot reduced over the
 * block in a fixed order. */
template <int VEC>
__global__ void gate_add_dx_rows(bf16 *dx, bf16 *dg, const bf16 *dy, const bf16 *x, const bf16 *g, int n, int d) {
    for (int t = blockIdx.x; t < n; t += gridDim.x) {
        float sig = sigmoid(__bfloat162float(g[t])), dot = 0.0f;
        for (int c = threadIdx.x * VEC; c < d; c += THREADS * VEC) {
            float dyv[VEC], xv[VEC];
            load<VEC>(dy + (size_t)t * d + c, dyv);
            load<VEC>(x + (size_t)t * d + c, xv);
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                dot += dyv[j] * xv[j];
                dyv[j] *= sig;
            }
            store<VEC>(dx + (size_t)t * d + c, dyv);
        }
        dot = block_sum(dot);
        if (threadIdx.x == 0) dg[t] = __float2bfloat16(sig * (1.0f - sig) * dot);
    }
}

unsigned elementwise_grid(long long items) { return grid_for((size_t)items, THREADS); }
unsigned token_grid(int n) { return (unsigned)(n < 65535 * 16 ? n : 65535 * 16); }

} // namespace

extern "C" mt_status mt_cuda_moe_swiglu(cudaStream_t s, void *a, const void *gu, int rows, int F, mt_glu_params p) {
    if (rows == 0 || F == 0) return MT_OK;
    if (F % 8 == 0 && aligned16(a, gu))
        swiglu_fused<8><<<elementwise_grid((long long)rows * F / 8), THREADS, 0, s>>>((bf16 *)a, (const bf16 *)gu, rows,
                                                                                     F, p);
    else
        swiglu_fused<1><<<elementwise_grid((long long)rows * F), THREADS, 0, s>>>((bf16 *)a, (const bf16 *)gu, rows, F,
                                                                                 p);
    return launch_status("moe swiglu");
}

extern "C" mt_status mt_cuda_moe_swiglu_dx(cudaStream_t s, void *dgu, const void *da, const void *gu, int rows, int F,
                                            mt_glu_params p) {
    if (rows == 0 || F == 0) return MT_OK;
    if (F % 8 == 0 && aligned16(dgu, da, gu))
        swiglu_fused_dx<8><<<elementwise_grid((long long)rows * F / 8), THREADS, 0, s>>>(
            (bf16 *)dgu, (const bf16 *)da, (const bf16 *)gu, rows, F, p);
    else
        swiglu_fused_dx<1><<<elementwise_grid((long long)rows * F), THREADS, 0, s>>>(
            (bf16 *)dgu, (const bf16 *)da, (const bf16 *)gu, rows, F, p);
    return launch_status("moe swiglu_dx");
}

extern "C" mt_status mt_cuda_moe_gate_add(cudaStream_t s, void *y, const void *a, const void *x, const void *g, int n,
                                          int d) {
    if (n == 0 || d == 0) return MT_OK;
    if (d % 8 == 0 && aligned16(y, a, x))
        gate_add_rows<8><<<token_grid(n), THREADS, 0, s>>>((bf16 *)y, (const bf16 *)a, (const bf16 *)x,
                                                          (const bf16 *)g, n, d);
    else
        gate_add_rows<1><<<token_grid(n), THREADS, 0, s>>>((bf16 *)y, (const bf16 *)a, (const bf16 *)x,
                                                          (const bf16 *)g, n, d);
    return launch_status("moe gate_add");
}

extern "C" mt_status mt_cuda_moe_gate_add_dx(cudaStream_t s, void *dx, void *dg, const void *dy, const void *x,
                                             const void *g, int n, int d) {
    if (n == 0) return MT_OK;
    if (d % 8 == 0 && aligned16(dx, dy, x))
        gate_add_dx_rows<8><<<token_grid(n), THREADS, 0, s>>>((bf16 *)dx, (bf16 *)dg, (const bf16 *)dy,
                                                             (const bf16 *)x, (const bf16 *)g, n, d);
    else
        gate_add_dx_rows<1><<<token_grid(n), THREADS, 0, s>>>((bf16 *)dx, (bf16 *)dg, (const bf16 *)dy,
                                                             (const bf16 *)x, (const bf16 *)g, n, d);
    return launch_status("moe gate_add_dx");
}
