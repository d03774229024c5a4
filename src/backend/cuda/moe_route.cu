/* Mixture of experts: the router's softmax and top-k with the load statistics, its backward, and the
 * load-balancing loss (backend.h's moe group; the CPU reference is cpu/ops/moe_route.c).
 *
 * One warp a token. Lane l holds the probabilities of experts l, l + 32, ... (PL of them, E <= 32 *
 * PL, PL a template parameter so that they stay in registers). The softmax is fp32 on the bf16
 * logits, as transformers' softmax(router_logits, dtype=float); route and route_dx share it, so the
 * backward's recomputed probabilities are the forward's bits. Top-k: k rounds of a warp arg-max,
 * equal probabilities to the lower expert index, as the CPU reference and torch.topk's order.
 *
 * No float atomics: the token counts are integer adds; the probability sums go through per-block
 * partial sums (fixed token ranges, fixed order) in stream-ordered scratch, added in block order by
 * a second kernel, so prob_sum has the same bits run after run. aux_loss is the CPU's double-precision
 * arithmetic operation for operation, so it gives the CPU's bits. */
#include "backend/cuda/bf16_vec.cuh"

namespace {

constexpr int THREADS = 256, WARPS = THREADS / 32;
constexpr int TOKENS_PER_BLOCK = 64; /* route: a block's token range (the statistics' partial sums) */
constexpr int MAX_E = 512, MAX_K = 32;

/* p[i] = softmax(row)[lane + 32 i] (0 past E). */
template <int PL>
__device__ __forceinline__ void softmax_lanes(float p[PL], const bf16 *row, int E, int lane) {
    float max = -INFINITY;
#pragma unroll
    for (int i = 0; i < PL; i++) {
        int e = lane + 32 * i;
        p[i] = e < E ? __bfloat162float(row[e]) : -INFINITY;
        max = fmaxf(max, p[i]);
    }
    max = warp_max(max);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < PL; i++) {
        int e = lane + 32 * i;
        p[i] = e < E ? expf(p[i] - max) : 0.0f;
        sum += p[i];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int i = 0; i < PL; i++) p[i] /= sum;
}

/* The lane's value of expert e (its owner is lane e % 32; the others return garbage). */
template <int PL>
__device__ __forceinline__ float lane_value(const float v[PL], int e) {
    float out = 0.0f;
#pragma unroll
    for (int i = 0; i < PL; i++)
        if (i == e / 32) out = v[i];
    return out;
}

/* Everyone's view of expert e's value in v. */
template <int PL>
__device__ __forceinline__ float warp_value(const float v[PL], int e) {
    return __shfl_sync(0xffffffffu, lane_value<PL>(v, e), e % 32);
}

/* One warp per token; block b routes tokens [b * TOKENS_PER_BLOCK, (b + 1) * TOKENS_PER_BLOCK). */
template <int PL>
__global__ void __launch_bounds__(THREADS) route_tokens(float *weights, int32_t *experts, int32_t *counts,
                                                        float *partials, const bf16 *logits, int n, int E, int k,
                                                        int renorm) {
    __shared__ int hist[MAX_E];
    __shared__ float psum[WARPS][MAX_E];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int e = threadIdx.x; e < E; e += THREADS) hist[e] = 0;
    __syncthreads();
    float acc[PL];
#pragma unroll
    for (int i = 0; i < PL; i++) acc[i] = 0.0f;
    int t_end = min(n, (blockIdx.x + 1) * TOKENS_PER_BLOCK);
    for (int t = blockIdx.x * TOKENS_PER_BLOCK + warp; t < t_end; t += WARPS) {
        float p[PL], v[PL];
        softmax_lanes<PL>(p, logits + (size_t)t * E, E, lane);
#pragma unroll
        for (int i = 0; i < PL; i++) {
            acc[i] += p[i];
            v[i] = lane + 32 * i < E ? p[i] : -1.0f; /* below every probability: never chosen */
        }
        int my_e = 0;
        float my_w = 0.0f;
        for (int j = 0; j < k; j++) {
            /* the lane's best: lanes hold increasing experts, so a strict > keeps the lowest of equals */
            float best = -2.0f;
            int best_e = 0x7fffffff;
#pragma unroll
            for (int i = 0; i < PL; i++)
                if (v[i] > best) best = v[i], best_e = lane + 32 * i;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                float other = __shfl_xor_sync(0xffffffffu, best, o);
                int other_e = __shfl_xor_sync(0xffffffffu, best_e, o);
                if (other > best || (other == best && other_e < best_e)) best = other, best_e = other_e;
            }
#pragma unroll
            for (int i = 0; i < PL; i++)
                if (lane + 32 * i == best_e) v[i] = -1.0f;
            if (lane == j) my_e = best_e, my_w = best;
        }
        if (renorm) { /* the chosen probabilities' sum in choice order, as the CPU adds them */
            float sum = 0.0f;
            for (int j = 0; j < k; j++) sum += __shfl_sync(0xffffffffu, my_w, j);
            my_w /= sum;
        }
        if (lane < k) {
            experts[(size_t)t * k + lane] = my_e;
            weights[(size_t)t * k + lane] = my_w;
            if (counts) atomicAdd(&hist[my_e], 1);
        }
    }
    if (partials) {
#pragma unroll
        for (int i = 0; i < PL; i++)
            if (lane + 32 * i < E) psum[warp][lane + 32 * i] = acc[i];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += THREADS) {
        if (counts && hist[e]) atomicAdd(&counts[e], hist[e]); /* integer adds: any order gives the same */
        if (partials) {
            float s = 0.0f;
            for (int w = 0; w < WARPS; w++) s += psum[w][e];
            partials[(size_t)blockIdx.x * E + e] = s;
        }
    }
}

/* prob_sum[e] += the blocks' partial sums, in block order. */
__global__ void add_partials(float *prob_sum, const float *partials, int blocks, int E) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    float s = 0.0f;
    for (int b = 0; b < blocks; b++) s += partials[(size_t)b * E + e];
    prob_sum[e] += s;
}

/* cpu/ops/moe_route.c's arithmetic: dL/dp from the weights' gradient (through the renormalisation)
 * plus the auxiliary loss's, then through the softmax. */
template <int PL>
__global__ void __launch_bounds__(THREADS) route_dx_tokens(bf16 *dlogits, const float *dweights, const bf16 *logits,
                                                           const int32_t *experts, const float *aux_grad, int n,
                                                           int E, int k, int renorm) {
    int lane = threadIdx.x % 32;
    int t = blockIdx.x * WARPS + threadIdx.x / 32;
    if (t >= n) return; /* a whole warp */
    float p[PL], dp[PL];
    softmax_lanes<PL>(p, logits + (size_t)t * E, E, lane);
#pragma unroll
    for (int i = 0; i < PL; i++) dp[i] = aux_grad && lane + 32 * i < E ? aux_grad[lane + 32 * i] : 0.0f;
    int my_e = lane < k ? experts[(size_t)t * k + lane] : 0;
    float my_dw = lane < k ? dweights[(size_t)t * k + lane] : 0.0f;
    float sum = 1.0f, dot = 0.0f;
    if (renorm) {
        sum = 0.0f;
        for (int j = 0; j < k; j++) sum += warp_value<PL>(p, __shfl_sync(0xffffffffu, my_e, j));
        for (int j = 0; j < k; j++) {
            int e = __shfl_sync(0xffffffffu, my_e, j);
            dot += __shfl_sync(0xffffffffu, my_dw, j) * (warp_value<PL>(p, e) / sum);
        }
    }
    for (int j = 0; j < k; j++) {
        int e = __shfl_sync(0xffffffffu, my_e, j);
        float dw = __shfl_sync(0xffffffffu, my_dw, j);
        float add = renorm ? (dw - dot) / sum : dw;
#pragma unroll
        for (int i = 0; i < PL; i++)
            if (lane + 32 * i == e) dp[i] += add;
    }
    float pdp = 0.0f;
#pragma unroll
    for (int i = 0; i < PL; i++) pdp += p[i] * dp[i];
    pdp = warp_sum(pdp);
    bf16 *dl = dlogits + (size_t)t * E;
#pragma unroll
    for (int i = 0; i < PL; i++)
        if (lane + 32 * i < E) dl[lane + 32 * i] = __float2bfloat16(p[i] * (dp[i] - pdp));
}

/* One block. Explicitly rounded double operations in the CPU's order (no fused multiply-adds), so
 * the loss and the gradient are the CPU reference's bits. */
__global__ void aux_loss_kernel(float *loss_sum, float *grad, const int32_t *counts, const float *prob_sum,
                                int layers, int n, int E, float loss_scale, float grad_scale) {
    __shared__ double c_of[MAX_E];
    double T = __dmul_rn((double)layers, (double)n), TT = __dmul_rn(T, T);
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double c = 0.0;
        for (int l = 0; l < layers; l++) c = __dadd_rn(c, (double)counts[(size_t)l * E + e]);
        c_of[e] = c;
        grad[e] = (float)__ddiv_rn(__dmul_rn(__dmul_rn((double)grad_scale, (double)E), c), TT);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    double loss = 0.0;
    for (int e = 0; e < E; e++)
        loss = __dadd_rn(loss, __dmul_rn(__ddiv_rn(c_of[e], T), __ddiv_rn((double)prob_sum[e], T)));
    *loss_sum += (float)__dmul_rn(__dmul_rn((double)loss_scale, (double)E), loss);
}

mt_status check_sizes(const char *op, int E, int k) {
    if (E < 1 || E > MAX_E || k < 1 || k > E || k > MAX_K)
        return mt_fail(MT_ERR_INVALID, "cuda moe %s: %d experts, top %d: the kernels take 1 to %d experts and a top "
                       "k of 1 to min(experts, %d)", op, E, k, MAX_E, MAX_K);
    return MT_OK;
}

/* Instantiates `kernel` for the lanes' count the experts need. */
#define MT_MOE_BY_LANES(E, kernel, grid, ...)                                                        \
    do {                                                                                             \
        if ((E) <= 32) kernel<1><<<(grid), THREADS, 0, s>>>(__VA_ARGS__);                            \
        else if ((E) <= 64) kernel<2><<<(grid), THREADS, 0, s>>>(__VA_ARGS__);                       \
        else if ((E) <= 128) kernel<4><<<(grid), THREADS, 0, s>>>(__VA_ARGS__);                      \
        else if ((E) <= 256) kernel<8><<<(grid), THREADS, 0, s>>>(__VA_ARGS__);                      \
        else kernel<16><<<(grid), THREADS, 0, s>>>(__VA_ARGS__);                                     \
    } while (0)

} // namespace

extern "C" mt_status mt_cuda_moe_route(mt_cuda_backend *cb, cudaStream_t s, float *weights, int32_t *experts,
                                       int32_t *counts, float *prob_sum, const void *logits, int n, int E, int k,
                                       int renorm) {
    MT_TRY(check_sizes("route", E, k));
    if (n == 0) return MT_OK;
    unsigned blocks = (unsigned)((n + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK);
    float *partials = NULL;
    if (prob_sum) MT_TRY(mt_cuda_scratch_alloc(cb, s, (size_t)blocks * E * sizeof(float), (void **)&partials));
    MT_MOE_BY_LANES(E, route_tokens, blocks, weights, experts, counts, partials, (const bf16 *)logits, n, E, k,
                    renorm);
    if (prob_sum) {
        add_partials<<<(E + THREADS - 1) / THREADS, THREADS, 0, s>>>(prob_sum, partials, (int)blocks, E);
        mt_cuda_scratch_free(cb, s, partials);
    }
    return launch_status("moe route");
}

extern "C" mt_status mt_cuda_moe_route_dx(cudaStream_t s, void *dlogits, const float *dweights, const void *logits,
                                          const int32_t *experts, const float *aux_grad, int n, int E, int k,
                                          int renorm) {
    MT_TRY(check_sizes("route_dx", E, k));
    if (n == 0) return MT_OK;
    unsigned blocks = (unsigned)((n + WARPS - 1) / WARPS);
    MT_MOE_BY_LANES(E, route_dx_tokens, blocks, (bf16 *)dlogits, dweights, (const bf16 *)logits, experts, aux_grad,
                    n, E, k, renorm);
    return launch_status("moe route_dx");
}

extern "C" mt_status mt_cuda_moe_aux_loss(cudaStream_t s, float *loss_sum, float *grad, const int32_t *counts,
                                          const float *prob_sum, int layers, int n, int E, float loss_scale,
                                          float grad_scale) {
    if (E < 1 || E > MAX_E)
        return mt_fail(MT_ERR_INVALID, "cuda moe aux_loss: %d experts (1 to %d)", E, MAX_E);
    if (layers < 1 || n < 1)
        return mt_fail(MT_ERR_INVALID, "cuda moe aux_loss: %d layers of %d tokens", layers, n);
    aux_loss_kernel<<<1, THREADS, 0, s>>>(loss_sum, grad, counts, prob_sum, layers, n, E, loss_scale, grad_scale);
    return launch_status("moe aux_loss");
}
