/* Gated DeltaNet's per-token ops in fp32 on bf16 data: the convolution with SiLU (a thread per row
 * and channel; its weight gradient a band of rows per thread, added atomically), the q/k L2 norm
 * and the gated RMSNorm (a warp per head row), the decay and beta (a thread per value; a block per
 * head for the weight gradients). Segments restart the convolution as in backend.h. */
#include "backend/cuda/bf16_vec.cuh"

enum { THREADS = 256, K = MT_GDN_CONV, DW_ROWS = 256, NORM_ROWS = 64 };

__device__ __forceinline__ float ld(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ int row_pos(const int32_t *pos, int seq, int r) { return pos ? pos[r] : r % seq; }

/* The pre-activation of row t, channel c; taps before t's segment read zero. */
__device__ float conv_at(const bf16 *x, const bf16 *w, int C, int t, int pos, int c) {
    float u = 0.0f;
    for (int j = K - 1 - min(pos, K - 1); j < K; j++)
        u += ld(w, (size_t)c * K + j) * ld(x, (size_t)(t - (K - 1) + j) * C + c);
    return u;
}

__global__ void conv_rows(bf16 *y, const bf16 *x, const bf16 *w, int C, int n, const int32_t *pos, int seq) {
    size_t count = (size_t)n * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / C), c = (int)(i % C);
        float u = conv_at(x, w, C, t, row_pos(pos, seq, t), c);
        y[i] = __float2bfloat16(u * sigmoidf_(u));
    }
}

__device__ float conv_du(const bf16 *dy, const bf16 *x, const bf16 *w, int C, int t, int pos, int c) {
    float u = conv_at(x, w, C, t, pos, c), sig = sigmoidf_(u);
    return ld(dy, (size_t)t * C + c) * sig * (1.0f + u * (1.0f - sig));
}

/* dx[s, c] = sum over the taps j whose row t = s + 3 - j lies in s's segment of w[c, j] du[t, c]. */
__global__ void conv_dx_rows(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w, int C, int n,
                             const int32_t *pos, int seq) {
    size_t count = (size_t)n * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        int s = (int)(i / C), c = (int)(i % C);
        float sum = 0.0f;
        for (int j = 0; j < K; j++) {
            int t = s + K - 1 - j;
            if (t >= n) continue;
            int pt = row_pos(pos, seq, t);
            if (pt < K - 1 - j) continue; /* t's segment starts after s */
            sum += ld(w, (size_t)c * K + j) * conv_du(dy, x, w, C, t, pt, c);
        }
        dx[i] = __float2bfloat16(sum);
    }
}

/* dw[c, j] += du[t, c] x[t - 3 + j, c] over a band of DW_ROWS rows (blockIdx.y) per thread. */
__global__ void conv_dw_bands(float *dw, const bf16 *dy, const bf16 *x, const bf16 *w, int C, int n,
                              const int32_t *pos, int seq) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc[K] = {0};
    int t1 = min(n, (int)(blockIdx.y + 1) * DW_ROWS);
    for (int t = blockIdx.y * DW_ROWS; t < t1; t++) {
        int pt = row_pos(pos, seq, t);
        float du = conv_du(dy, x, w, C, t, pt, c);
        for (int j = K - 1 - min(pt, K - 1); j < K; j++) acc[j] += du * ld(x, (size_t)(t - (K - 1) + j) * C + c);
    }
    for (int j = 0; j < K; j++) atomicAdd(dw + (size_t)c * K + j, acc[j]);
}

static const int32_t *seg_pos(const mt_gdn_dims *d) { return d->seg ? d->seg->pos : NULL; }

extern "C" mt_status mt_cuda_gdn_conv(cudaStream_t s, void *y, const void *x, const void *w, int C, mt_gdn_dims d) {
    conv_rows<<<grid_for((size_t)d.n * C, THREADS), THREADS, 0, s>>>((bf16 *)y, (const bf16 *)x, (const bf16 *)w, C,
                                                                       d.n, seg_pos(&d), d.seq);
    return launch_status("gdn conv");
}

extern "C" mt_status mt_cuda_gdn_conv_dx(cudaStream_t s, void *dx, float *dw, const void *dy, const void *x,
                                         const void *w, int C, mt_gdn_dims d) {
    conv_dx_rows<<<grid_for((size_t)d.n * C, THREADS), THREADS, 0, s>>>(
        (bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, C, d.n, seg_pos(&d), d.seq);
    dim3 grid((C + THREADS - 1) / THREADS, (d.n + DW_ROWS - 1) / DW_ROWS);
    conv_dw_bands<<<grid, THREADS, 0, s>>>(dw, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, C, d.n,
                                           seg_pos(&d), d.seq);
    return launch_status("gdn conv_dx");
}

/* ---- q/k L2 norm: a warp per (row, q/k head) ---- */

__device__ float warp_inv_norm(const bf16 *x, int n) {
    float ss = 0.0f;
    for (int i = threadIdx.x % 32; i < n; i += 32) ss += ld(x, i) * ld(x, i);
    return rsqrtf(warp_sum(ss) + 1e-6f);
}

__global__ void qk_norm_rows(bf16 *qn, bf16 *kn, const bf16 *q, const bf16 *k, mt_gdn_dims d) {
    size_t row = (size_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
    if (row >= (size_t)d.n * d.k_heads) return;
    int t = (int)(row / d.k_heads), h = (int)(row % d.k_heads), rep = d.v_heads / d.k_heads, dk = d.d_k;
    const bf16 *qh = q + (size_t)t * d.qk_ld + (size_t)h * dk, *kh = k + (size_t)t * d.qk_ld + (size_t)h * dk;
    float iq = warp_inv_norm(qh, dk) * rsqrtf((float)dk), ik = warp_inv_norm(kh, dk);
    for (int r = 0; r < rep; r++) {
        size_t o = ((size_t)t * d.v_heads + (size_t)h * rep + r) * dk;
        for (int i = threadIdx.x % 32; i < dk; i += 32) {
            qn[o + i] = __float2bfloat16(ld(qh, i) * iq);
            kn[o + i] = __float2bfloat16(ld(kh, i) * ik);
        }
    }
}

/* dx = c inv (g - inv^2 x (x . g)), g = dy summed over the repeats. */
__device__ void warp_norm_dx(bf16 *dx, const bf16 *dy, int rep, const bf16 *x, int n, float c) {
    float inv = warp_inv_norm(x, n), dot = 0.0f;
    for (int i = threadIdx.x % 32; i < n; i += 32) {
        float g = 0.0f;
        for (int r = 0; r < rep; r++) g += ld(dy, (size_t)r * n + i);
        dot += ld(x, i) * g;
    }
    dot = warp_sum(dot);
    for (int i = threadIdx.x % 32; i < n; i += 32) {
        float g = 0.0f;
        for (int r = 0; r < rep; r++) g += ld(dy, (size_t)r * n + i);
        dx[i] = __float2bfloat16(c * inv * (g - inv * inv * ld(x, i) * dot));
    }
}

__global__ void qk_norm_dx_rows(bf16 *dq, bf16 *dk, const bf16 *dqn, const bf16 *dkn, const bf16 *q, const bf16 *k,
                                mt_gdn_dims d) {
    size_t row = (size_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
    if (row >= (size_t)d.n * d.k_heads) return;
    int t = (int)(row / d.k_heads), h = (int)(row % d.k_heads), rep = d.v_heads / d.k_heads, n = d.d_k;
    size_t x = (size_t)t * d.qk_ld + (size_t)h * n, y = ((size_t)t * d.v_heads + (size_t)h * rep) * n;
    warp_norm_dx(dq + x, dqn + y, rep, q + x, n, rsqrtf((float)n));
    warp_norm_dx(dk + x, dkn + y, rep, k + x, n, 1.0f);
}

extern "C" mt_status mt_cuda_gdn_qk_norm(cudaStream_t s, void *qn, void *kn, const void *q, const void *k,
                                         mt_gdn_dims d) {
    unsigned blocks = (unsigned)(((size_t)d.n * d.k_heads + THREADS / 32 - 1) / (THREADS / 32));
    qk_norm_rows<<<blocks, THREADS, 0, s>>>((bf16 *)qn, (bf16 *)kn, (const bf16 *)q, (const bf16 *)k, d);
    return launch_status("gdn qk_norm");
}

extern "C" mt_status mt_cuda_gdn_qk_norm_dx(cudaStream_t s, void *dq, void *dk, const void *dqn, const void *dkn,
                                            const void *q, const void *k, mt_gdn_dims d) {
    unsigned blocks = (unsigned)(((size_t)d.n * d.k_heads + THREADS / 32 - 1) / (THREADS / 32));
    qk_norm_dx_rows<<<blocks, THREADS, 0, s>>>((bf16 *)dq, (bf16 *)dk, (const bf16 *)dqn, (const bf16 *)dkn,
                                               (const bf16 *)q, (const bf16 *)k, d);
    return launch_status("gdn qk_norm_dx");
}

/* ---- decay and beta ---- */

/* torch's softplus (beta 1, threshold 20) and its derivative. */
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float softplus_grad(float x) { return x > 20.0f ? 1.0f : sigmoidf_(x); }

__global__ void decay_rows(float *g, float *beta, const bf16 *a, const bf16 *b, const bf16 *A_log,
                           const bf16 *dt_bias, int n, int H) {
    size_t count = (size_t)n * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        int h = (int)(i % H);
        g[i] = -expf(ld(A_log, h)) * softplus(ld(a, i) + ld(dt_bias, h));
        beta[i] = sigmoidf_(ld(b, i));
    }
}

/* A block per head: da, db of its rows, and its dA_log, ddt_bias summed over them. */
__global__ void decay_dx_head(bf16 *da, bf16 *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                              const bf16 *a, const bf16 *b, const bf16 *A_log, const bf16 *dt_bias, int n, int H) {
    int h = blockIdx.x;
    float A = expf(ld(A_log, h)), bias = ld(dt_bias, h), sum_a = 0.0f, sum_dt = 0.0f;
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        size_t i = (size_t)t * H + h;
        float x = ld(a, i) + bias, sb = sigmoidf_(ld(b, i)), dx = dg[i] * -A * softplus_grad(x);
        da[i] = __float2bfloat16(dx);
        db[i] = __float2bfloat16(dbeta[i] * sb * (1.0f - sb));
        sum_a += dg[i] * -A * softplus(x);
        sum_dt += dx;
    }
    sum_a = block_sum(sum_a);
    sum_dt = block_sum(sum_dt);
    if (threadIdx.x == 0) {
        dA_log[h] += sum_a;
        ddt_bias[h] += sum_dt;
    }
}

extern "C" mt_status mt_cuda_gdn_decay(cudaStream_t s, float *g, float *beta, const void *a, const void *b,
                                       const void *A_log, const void *dt_bias, mt_gdn_dims d) {
    decay_rows<<<grid_for((size_t)d.n * d.v_heads, THREADS), THREADS, 0, s>>>(
        g, beta, (const bf16 *)a, (const bf16 *)b, (const bf16 *)A_log, (const bf16 *)dt_bias, d.n, d.v_heads);
    return launch_status("gdn decay");
}

extern "C" mt_status mt_cuda_gdn_decay_dx(cudaStream_t s, void *da, void *db, float *dA_log, float *ddt_bias,
                                          const float *dg, const float *dbeta, const void *a, const void *b,
                                          const void *A_log, const void *dt_bias, mt_gdn_dims d) {
    decay_dx_head<<<d.v_heads, THREADS, 0, s>>>((bf16 *)da, (bf16 *)db, dA_log, ddt_bias, dg, dbeta, (const bf16 *)a,
                                                (const bf16 *)b, (const bf16 *)A_log, (const bf16 *)dt_bias, d.n,
                                                d.v_heads);
    return launch_status("gdn decay_dx");
}

/* ---- the gated RMSNorm: a warp per head row, d_v <= 128 (4 values a lane) ---- */

__global__ void norm_rows(bf16 *y, const bf16 *x, const bf16 *z, const bf16 *w, float eps, size_t rows, int n) {
    size_t r = (size_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const bf16 *xr = x + r * n, *zr = z + r * n;
    float ss = 0.0f;
    for (int i = threadIdx.x % 32; i < n; i += 32) ss += ld(xr, i) * ld(xr, i);
    float rs = rsqrtf(warp_sum(ss) / (float)n + eps);
    for (int i = threadIdx.x % 32; i < n; i += 32) {
        float zi = ld(zr, i);
        y[r * n + i] = __float2bfloat16(ld(xr, i) * rs * ld(w, i) * zi * sigmoidf_(zi));
    }
}

/* NORM_ROWS rows a block, a warp a row at a time; dw's share of the block summed in shared memory
 * and added atomically. */
__global__ void norm_dx_rows(bf16 *dx, bf16 *dz, float *dw, const bf16 *dy, const bf16 *x, const bf16 *z,
                             const bf16 *w, float eps, size_t rows, int n) {
    __shared__ float part[THREADS / 32][MT_CUDA_GDN_MAX_DIM];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float acc[MT_CUDA_GDN_MAX_DIM / 32] = {0};
    for (size_t r = (size_t)blockIdx.x * NORM_ROWS + warp; r < min(rows, (size_t)(blockIdx.x + 1) * NORM_ROWS);
         r += THREADS / 32) {
        const bf16 *xr = x + r * n, *zr = z + r * n, *dyr = dy + r * n;
        float ss = 0.0f, dot = 0.0f;
        for (int i = lane; i < n; i += 32) ss += ld(xr, i) * ld(xr, i);
        float rs = rsqrtf(warp_sum(ss) / (float)n + eps);
        for (int i = lane; i < n; i += 32) {
            float zi = ld(zr, i), sg = sigmoidf_(zi), xh = ld(xr, i) * rs, g = ld(dyr, i);
            dz[r * n + i] = __float2bfloat16(g * xh * ld(w, i) * sg * (1.0f + zi * (1.0f - sg)));
            dot += g * ld(w, i) * zi * sg * xh;
            acc[i / 32] += g * xh * zi * sg;
        }
        dot = warp_sum(dot) / (float)n;
        for (int i = lane; i < n; i += 32) {
            float zi = ld(zr, i), xh = ld(xr, i) * rs;
            dx[r * n + i] = __float2bfloat16(rs * (ld(dyr, i) * ld(w, i) * zi * sigmoidf_(zi) - xh * dot));
        }
    }
    for (int i = lane; i < n; i += 32) part[warp][i] = acc[i / 32];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float sum = 0.0f;
        for (int k = 0; k < THREADS / 32; k++) sum += part[k][i];
        atomicAdd(dw + i, sum);
    }
}

extern "C" mt_status mt_cuda_gdn_norm(cudaStream_t s, void *y, const void *x, const void *z, const void *w, float eps,
                                      mt_gdn_dims d) {
    size_t rows = (size_t)d.n * d.v_heads;
    norm_rows<<<(unsigned)((rows + THREADS / 32 - 1) / (THREADS / 32)), THREADS, 0, s>>>(
        (bf16 *)y, (const bf16 *)x, (const bf16 *)z, (const bf16 *)w, eps, rows, d.d_v);
    return launch_status("gdn norm");
}

extern "C" mt_status mt_cuda_gdn_norm_dx(cudaStream_t s, void *dx, void *dz, float *dw, const void *dy, const void *x,
                                         const void *z, const void *w, float eps, mt_gdn_dims d) {
    size_t rows = (size_t)d.n * d.v_heads;
    norm_dx_rows<<<(unsigned)((rows + NORM_ROWS - 1) / NORM_ROWS), THREADS, 0, s>>>(
        (bf16 *)dx, (bf16 *)dz, dw, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)z, (const bf16 *)w, eps, rows,
        d.d_v);
    return launch_status("gdn norm_dx");
}
