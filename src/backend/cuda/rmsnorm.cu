/* RMSNorm and its backward, fp32 math; the gain w or (unit_offset, Gemma's) 1 + w, formed in
 * fp32. Wide rows (the hidden size) take a block each; narrow rows (up to WARP_ROW_MAX_D: the
 * per-head q/k norms, a head_dim wide, tokens x heads of them) a warp each, WARPS rows to a block,
 * so that no block idles on a short row. 8-element vectors when the width and the buffers allow
 * (VEC = 8), single elements otherwise (VEC = 1). */
#include "backend/cuda/bf16_vec.cuh"

enum { THREADS = 256, WARPS = THREADS / 32, WARP_ROW_MAX_D = 1024, DW_ROWS = 64, MAX_BANDS = 4096 };

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

/* ROW threads work on one row: 32 (a warp) or THREADS (the block). */
template <int ROW>
__device__ __forceinline__ size_t row_index() {
    return ROW == 32 ? (size_t)blockIdx.x * WARPS + threadIdx.x / 32 : blockIdx.x;
}

/* The gains of VEC columns: w, or 1 + w. */
template <int VEC>
__device__ __forceinline__ void load_gain(const bf16 *w, float out[VEC], int unit_offset) {
    load<VEC>(w, out);
    if (unit_offset) {
#pragma unroll
        for (int i = 0; i < VEC; i++) out[i] += 1.0f;
    }
}

template <int ROW>
__device__ __forceinline__ float row_sum(float v) {
    if constexpr (ROW == 32) return warp_sum(v);
    else return block_sum(v);
}

template <int ROW>
static unsigned row_blocks(int n) {
    return ROW == 32 ? (unsigned)((n + WARPS - 1) / WARPS) : (unsigned)n;
}

template <int VEC, int ROW>
__global__ void rmsnorm_rows(bf16 *y, float *rstd, const bf16 *x, const bf16 *w, int n, int d, float eps,
                             int unit_offset) {
    size_t r = row_index<ROW>();
    int lane = threadIdx.x % ROW;
    if (r >= (size_t)n) return; /* a whole warp past the last row; never a block */
    const bf16 *xr = x + r * d;
    bf16 *yr = y + r * d;
    float sumsq = 0.0f;
    for (int j = lane * VEC; j < d; j += ROW * VEC) {
        float v[VEC];
        load<VEC>(xr + j, v);
#pragma unroll
        for (int i = 0; i < VEC; i++) sumsq += v[i] * v[i];
    }
    float s = rsqrtf(row_sum<ROW>(sumsq) / d + eps);
    if (lane == 0) rstd[r] = s;
    for (int j = lane * VEC; j < d; j += ROW * VEC) {
        float v[VEC], g[VEC];
        load<VEC>(xr + j, v);
        load_gain<VEC>(w + j, g, unit_offset);
#pragma unroll
        for (int i = 0; i < VEC; i++) v[i] *= s * g[i];
        store<VEC>(yr + j, v);
    }
}

/* dx_k = s * (dy_k w_k - x_k s^2 c), c = sum_j dy_j w_j x_j / d, w the gain */
template <int VEC, int ROW>
__global__ void rmsnorm_dx_rows(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w,
                                const float *rstd, int n, int d, int unit_offset, int accumulate) {
    size_t r = row_index<ROW>();
    int lane = threadIdx.x % ROW;
    if (r >= (size_t)n) return;
    size_t at = r * d;
    float s = rstd[r], dot = 0.0f;
    for (int j = lane * VEC; j < d; j += ROW * VEC) {
        float g[VEC], v[VEC], gw[VEC];
        load<VEC>(dy + at + j, g);
        load<VEC>(x + at + j, v);
        load_gain<VEC>(w + j, gw, unit_offset);
#pragma unroll
        for (int i = 0; i < VEC; i++) dot += g[i] * gw[i] * v[i];
    }
    float c = row_sum<ROW>(dot) / d * s * s;
    for (int j = lane * VEC; j < d; j += ROW * VEC) {
        float g[VEC], v[VEC], gw[VEC], prev[VEC];
        load<VEC>(dy + at + j, g);
        load<VEC>(x + at + j, v);
        load_gain<VEC>(w + j, gw, unit_offset);
        if (accumulate) load<VEC>(dx + at + j, prev);
#pragma unroll
        for (int i = 0; i < VEC; i++) {
            float grad = s * (g[i] * gw[i] - v[i] * c);
            v[i] = accumulate ? prev[i] + grad : grad;
        }
        store<VEC>(dx + at + j, v);
    }
}

/* dw_j += sum over rows of dy * x * rstd: each thread owns a column and sums the DW_ROWS-row
 * bands blockIdx.y, blockIdx.y + gridDim.y, ... (at most MAX_BANDS blocks high, whatever the
 * rows: tokens x heads can pass the grid's 65535 limit), then adds its sum atomically. */
__global__ void rmsnorm_dw_bands(float *dw, const bf16 *dy, const bf16 *x, const float *rstd, int n, int d) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    float sum = 0.0f;
    for (size_t r0 = (size_t)blockIdx.y * DW_ROWS; r0 < (size_t)n; r0 += (size_t)gridDim.y * DW_ROWS) {
        size_t r1 = min((size_t)n, r0 + DW_ROWS);
        for (size_t r = r0; r < r1; r++) {
            size_t at = r * d + j;
            sum += __bfloat162float(dy[at]) * __bfloat162float(x[at]) * rstd[r];
        }
    }
    atomicAdd(dw + j, sum);
}

template <int VEC>
static void rmsnorm_launch(cudaStream_t s, bf16 *y, float *rstd, const bf16 *x, const bf16 *w, int n, int d,
                           mt_rmsnorm_params p) {
    if (d <= WARP_ROW_MAX_D)
        rmsnorm_rows<VEC, 32><<<row_blocks<32>(n), THREADS, 0, s>>>(y, rstd, x, w, n, d, p.eps, p.unit_offset);
    else
        rmsnorm_rows<VEC, THREADS><<<row_blocks<THREADS>(n), THREADS, 0, s>>>(y, rstd, x, w, n, d, p.eps,
                                                                              p.unit_offset);
}

template <int VEC>
static void rmsnorm_dx_launch(cudaStream_t s, bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w,
                              const float *rstd, int n, int d, mt_rmsnorm_params p, int accumulate) {
    if (d <= WARP_ROW_MAX_D)
        rmsnorm_dx_rows<VEC, 32><<<row_blocks<32>(n), THREADS, 0, s>>>(dx, dy, x, w, rstd, n, d, p.unit_offset,
                                                                       accumulate);
    else
        rmsnorm_dx_rows<VEC, THREADS><<<row_blocks<THREADS>(n), THREADS, 0, s>>>(dx, dy, x, w, rstd, n, d,
                                                                                 p.unit_offset, accumulate);
}

extern "C" mt_status mt_cuda_rmsnorm(cudaStream_t s, void *y, float *rstd, const void *x,
                                     const void *w, int n, int d, mt_rmsnorm_params p) {
    if (n == 0) return MT_OK;
    if (d % 8 == 0 && aligned16(y, x, w))
        rmsnorm_launch<8>(s, (bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w, n, d, p);
    else
        rmsnorm_launch<1>(s, (bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w, n, d, p);
    return launch_status("rmsnorm");
}

extern "C" mt_status mt_cuda_rmsnorm_dx(cudaStream_t s, void *dx, float *dw, const void *dy,
                                        const void *x, const void *w, const float *rstd, int n,
                                        int d, mt_rmsnorm_params p, int accumulate) {
    if (n == 0) return MT_OK;
    if (d % 8 == 0 && aligned16(dx, dy, x) && aligned16(w))
        rmsnorm_dx_launch<8>(s, (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, rstd, n, d, p,
                             accumulate);
    else
        rmsnorm_dx_launch<1>(s, (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, rstd, n, d, p,
                             accumulate);
    int bands = (n - 1) / DW_ROWS + 1;
    dim3 grid((d + THREADS - 1) / THREADS, bands < MAX_BANDS ? bands : MAX_BANDS);
    rmsnorm_dw_bands<<<grid, THREADS, 0, s>>>(dw, (const bf16 *)dy, (const bf16 *)x, rstd, n, d);
    return launch_status("rmsnorm_dx");
}
