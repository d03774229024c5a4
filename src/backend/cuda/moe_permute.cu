/* Mixture of experts: the tokens' slots sorted by expert, the rows gathered there, and the experts'
 * outputs combined back by the routing weights (backend.h's moe group; the CPU reference is
 * cpu/ops/moe_permute.c).
 *
 * permute is a stable counting sort on the device, the CPU reference's order exactly (by expert,
 * then segment, then slot), all in integers, so the same bits on every run: the slots are cut into
 * tiles of TILE slots that never straddle a segment (a segment's slots are contiguous, so within a
 * tile the expert alone is the key); (1) each tile counts its slots per expert; (2) one block turns
 * the counts into offsets (expert-major over (expert, segment)) and each tile's first row per expert;
 * (3) each tile ranks its slots among those of the same expert in slot order (warp match, then the
 * warps in order, then the earlier rounds) and writes order and slot_row. The tiles' counts live in
 * stream-ordered scratch.
 *
 * gather_dx, combine and combine_dx pull through slot_row (a token's k rows, in choice order), so
 * nothing is scattered with atomics and every sum has a fixed order. */
#include "backend/cuda/bf16_vec.cuh"

namespace {

constexpr int THREADS = 256, WARPS = THREADS / 32;
constexpr int TILE = 2048;   /* slots a tile */
constexpr int SCAN_THREADS = 1024;
constexpr int MAX_E = 512, MAX_K = 32;

/* The slots of segments: segment s holds tokens [s * seg, min(n, (s + 1) * seg)), so slots
 * [s * seg * k, ...); tile j of segment s the TILE slots from the segment's start + j * TILE. */
struct tiling {
    long long slots, seg_slots; /* n * k, seg * k */
    int S, per_segment;         /* segments, tiles a segment */
};

__device__ __forceinline__ void tile_range(const tiling &g, int tile, long long *begin, long long *end) {
    int s = tile / g.per_segment, j = tile % g.per_segment;
    long long seg_begin = (long long)s * g.seg_slots, seg_end = min(g.slots, seg_begin + g.seg_slots);
    *begin = min(seg_end, seg_begin + (long long)j * TILE);
    *end = min(seg_end, *begin + TILE);
}

/* (1) counts[tile][e] = the tile's slots of expert e. */
__global__ void permute_count(int32_t *counts, const int32_t *experts, tiling g, int E) {
    __shared__ int hist[MAX_E];
    for (int e = threadIdx.x; e < E; e += THREADS) hist[e] = 0;
    __syncthreads();
    long long begin, end;
    tile_range(g, blockIdx.x, &begin, &end);
    for (long long i = begin + threadIdx.x; i < end; i += THREADS) {
        unsigned e = (unsigned)experts[i];
        if (e < (unsigned)E) atomicAdd(&hist[e], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += THREADS) counts[(size_t)blockIdx.x * E + e] = hist[e];
}

/* Inclusive sum over the block of v (blockDim.x == SCAN_THREADS); *total = the whole block's. */
__device__ int block_scan(int v, int *total) {
    __shared__ int warp_total[SCAN_THREADS / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
    }
    __syncthreads(); /* warp_total of a previous call is read */
    if (lane == 31) warp_total[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int w = warp_total[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int u = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += u;
        }
        warp_total[lane] = w;
    }
    __syncthreads();
    *total = warp_total[SCAN_THREADS / 32 - 1];
    return v + (warp > 0 ? warp_total[warp - 1] : 0);
}

/* (2) One block. counts[tile][e] becomes the tile's first row of expert e; offsets[E * S + 1]. */
__global__ void __launch_bounds__(SCAN_THREADS) permute_scan(int32_t *counts, int32_t *offsets, tiling g, int E) {
    int S = g.S, groups = E * S;
    /* each (segment, expert): its tiles' counts become running sums within the segment; the total
     * goes to offsets[1 + e * S + s] */
    for (int pair = threadIdx.x; pair < groups; pair += SCAN_THREADS) {
        int s = pair / E, e = pair % E, run = 0;
        for (int j = 0; j < g.per_segment; j++) {
            int32_t *c = &counts[((size_t)s * g.per_segment + j) * E + e];
            int here = *c;
            *c = run;
            run += here;
        }
        offsets[1 + e * S + s] = run;
    }
    __syncthreads();
    /* offsets: exclusive sums over (expert, segment), expert-major */
    int carry = 0;
    for (int base = 0; base < groups; base += SCAN_THREADS) {
        int i = base + threadIdx.x, total;
        int v = i < groups ? offsets[1 + i] : 0;
        int inclusive = block_scan(v, &total);
        if (i < groups) offsets[1 + i] = carry + inclusive;
        carry += total;
    }
    if (threadIdx.x == 0) offsets[0] = 0;
    __syncthreads();
    for (size_t i = threadIdx.x; i < (size_t)S * g.per_segment * E; i += SCAN_THREADS) {
        int tile = (int)(i / E), e = (int)(i % E);
        counts[i] += offsets[e * S + tile / g.per_segment];
    }
}

/* (3) The tile's slots in rounds of THREADS: a slot's row is its expert's first row in the tile
 * plus the expert's slots before it: in earlier rounds (run), in earlier warps of this round
 * (warp_count), in lower lanes of its warp (match). */
__global__ void permute_scatter(int32_t *order, int32_t *slot_row, const int32_t *first_row, const int32_t *experts,
                                tiling g, int E) {
    __shared__ int base[MAX_E], run[MAX_E], warp_count[WARPS][MAX_E];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int e = threadIdx.x; e < E; e += THREADS) {
        base[e] = first_row[(size_t)blockIdx.x * E + e];
        run[e] = 0;
        for (int w = 0; w < WARPS; w++) warp_count[w][e] = 0;
    }
    __syncthreads();
    long long begin, end;
    tile_range(g, blockIdx.x, &begin, &end);
    for (long long round = begin; round < end; round += THREADS) {
        long long slot = round + threadIdx.x;
        int e = slot < end ? experts[slot] : -1;
        bool valid = (unsigned)e < (unsigned)E;
        if (!valid) e = -1;
        unsigned same = __match_any_sync(0xffffffffu, e);
        int below = __popc(same & ((1u << lane) - 1)), leader = __ffs(same) - 1;
        if (valid && lane == leader) warp_count[warp][e] = __popc(same);
        __syncthreads();
        if (valid) {
            int rank = run[e] + below;
            for (int w = 0; w < warp; w++) rank += warp_count[w][e];
            int row = base[e] + rank;
            order[row] = (int32_t)slot;
            slot_row[slot] = row;
        }
        __syncthreads();
        if (valid && lane == leader) {
            atomicAdd(&run[e], __popc(same));
            warp_count[warp][e] = 0;
        }
        __syncwarp();
    }
}

/* Rows of width d: 8 bf16 at a time where every row and pointer allows (VEC = 8), else one. */
template <int VEC>
struct row_io {
    static __device__ __forceinline__ void load(const bf16 *p, float out[VEC]) {
        if constexpr (VEC == 8) bf16x8_to_float(*reinterpret_cast<const uint4 *>(p), out);
        else out[0] = __bfloat162float(*p);
    }
    static __device__ __forceinline__ void store(bf16 *p, const float in[VEC]) {
        if constexpr (VEC == 8) *reinterpret_cast<uint4 *>(p) = float_to_bf16x8(in);
        else *p = __float2bfloat16(in[0]);
    }
};

template <int VEC>
__global__ void gather_rows(bf16 *xs, const bf16 *x, const int32_t *order, long long rows, int k, int d) {
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const bf16 *src = x + (size_t)(order[r] / k) * d;
        bf16 *dst = xs + (size_t)r * d;
        for (int c = threadIdx.x * VEC; c < d; c += THREADS * VEC) {
            if constexpr (VEC == 8) *reinterpret_cast<uint4 *>(dst + c) = *reinterpret_cast<const uint4 *>(src + c);
            else dst[c] = src[c];
        }
    }
}

/* dx[t] (+)= the sum over j of dxs[slot_row[t * k + j]], in choice order. */
template <int VEC>
__global__ void gather_dx_rows(bf16 *dx, const bf16 *dxs, const int32_t *slot_row, int n, int k, int d,
                               int accumulate) {
    for (int t = blockIdx.x; t < n; t += gridDim.x) {
        bf16 *out = dx + (size_t)t * d;
        for (int c = threadIdx.x * VEC; c < d; c += THREADS * VEC) {
            float sum[VEC], v[VEC];
            if (accumulate) row_io<VEC>::load(out + c, sum);
            else
#pragma unroll
                for (int i = 0; i < VEC; i++) sum[i] = 0.0f;
            for (int j = 0; j < k; j++) {
                row_io<VEC>::load(dxs + (size_t)slot_row[(size_t)t * k + j] * d + c, v);
#pragma unroll
                for (int i = 0; i < VEC; i++) sum[i] += v[i];
            }
            row_io<VEC>::store(out + c, sum);
        }
    }
}

/* y[t] = the sum over j of weights[t, j] * ys[slot_row[t * k + j]], in choice order, in fp32. */
template <int VEC>
__global__ void combine_rows(bf16 *y, const bf16 *ys, const float *weights, const int32_t *slot_row, int n, int k,
                             int d) {
    for (int t = blockIdx.x; t < n; t += gridDim.x) {
        for (int c = threadIdx.x * VEC; c < d; c += THREADS * VEC) {
            float sum[VEC], v[VEC];
#pragma unroll
            for (int i = 0; i < VEC; i++) sum[i] = 0.0f;
            for (int j = 0; j < k; j++) {
                float w = weights[(size_t)t * k + j];
                row_io<VEC>::load(ys + (size_t)slot_row[(size_t)t * k + j] * d + c, v);
#pragma unroll
                for (int i = 0; i < VEC; i++) sum[i] += w * v[i];
            }
            row_io<VEC>::store(y + (size_t)t * d + c, sum);
        }
    }
}

/* dys[row of (t, j)] = weights[t, j] * dy[t]; dweights[t, j] = dy[t] . ys[row of (t, j)], each dot
 * reduced over the block in a fixed order. */
template <int VEC>
__global__ void combine_dx_rows(bf16 *dys, float *dweights, const bf16 *dy, const bf16 *ys, const float *weights,
                                const int32_t *slot_row, int n, int k, int d) {
    __shared__ float partial[MAX_K][WARPS];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int t = blockIdx.x; t < n; t += gridDim.x) {
        const bf16 *g = dy + (size_t)t * d;
        for (int j = 0; j < k; j++) {
            size_t row = (size_t)slot_row[(size_t)t * k + j] * d;
            float w = weights[(size_t)t * k + j], dot = 0.0f;
            for (int c = threadIdx.x * VEC; c < d; c += THREADS * VEC) {
                float gv[VEC], yv[VEC];
                row_io<VEC>::load(g + c, gv);
                row_io<VEC>::load(ys + row + c, yv);
#pragma unroll
                for (int i = 0; i < VEC; i++) {
                    dot += gv[i] * yv[i];
                    gv[i] *= w;
                }
                row_io<VEC>::store(dys + row + c, gv);
            }
            dot = warp_sum(dot);
            if (lane == 0) partial[j][warp] = dot;
        }
        __syncthreads();
        if (threadIdx.x < k) {
            float dot = 0.0f;
            for (int w = 0; w < WARPS; w++) dot += partial[threadIdx.x][w];
            dweights[(size_t)t * k + threadIdx.x] = dot;
        }
        __syncthreads(); /* partial is reused by the next token */
    }
}

bool rows_vec8(int d, const void *a, const void *b, const void *c = nullptr) { return d % 8 == 0 && aligned16(a, b, c); }

unsigned row_grid(long long rows) { return (unsigned)(rows < 65535ll * 16 ? (rows > 0 ? rows : 1) : 65535ll * 16); }

mt_status check_k(const char *op, int k) {
    if (k < 1 || k > MAX_K) return mt_fail(MT_ERR_INVALID, "cuda moe %s: top %d (the kernels take 1 to %d)", op, k, MAX_K);
    return MT_OK;
}

} // namespace

extern "C" mt_status mt_cuda_moe_permute(mt_cuda_backend *cb, cudaStream_t s, int32_t *order, int32_t *slot_row,
                                         int32_t *offsets, const int32_t *experts, int n, int E, int k, int seg) {
    if (E < 1 || E > MAX_E || k < 1 || seg < 1)
        return mt_fail(MT_ERR_INVALID, "cuda moe permute: %d experts (1 to %d), top %d, segments of %d", E, MAX_E, k,
                       seg);
    tiling g;
    g.S = (n + seg - 1) / seg;
    g.slots = (long long)n * k;
    g.seg_slots = (long long)seg * k;
    g.per_segment = (int)((g.seg_slots + TILE - 1) / TILE);
    if ((long long)E * g.S + 1 > INT32_MAX || g.slots > INT32_MAX)
        return mt_fail(MT_ERR_INVALID, "cuda moe permute: %d tokens, top %d, %d experts, %d segments: past int32 rows",
                       n, k, E, g.S);
    if (n == 0) {
        MT_CUDA_CHECK(cudaMemsetAsync(offsets, 0, sizeof *offsets, s));
        return MT_OK;
    }
    int tiles = g.S * g.per_segment;
    int32_t *counts;
    MT_TRY(mt_cuda_scratch_alloc(cb, s, (size_t)tiles * E * sizeof *counts, (void **)&counts));
    permute_count<<<tiles, THREADS, 0, s>>>(counts, experts, g, E);
    permute_scan<<<1, SCAN_THREADS, 0, s>>>(counts, offsets, g, E);
    permute_scatter<<<tiles, THREADS, 0, s>>>(order, slot_row, counts, experts, g, E);
    mt_cuda_scratch_free(cb, s, counts);
    return launch_status("moe permute");
}

extern "C" mt_status mt_cuda_moe_gather(cudaStream_t s, void *xs, const void *x, const int32_t *order, int n, int k,
                                        int d) {
    long long rows = (long long)n * k;
    if (rows == 0 || d == 0) return MT_OK;
    if (rows_vec8(d, xs, x)) gather_rows<8><<<row_grid(rows), THREADS, 0, s>>>((bf16 *)xs, (const bf16 *)x, order, rows, k, d);
    else gather_rows<1><<<row_grid(rows), THREADS, 0, s>>>((bf16 *)xs, (const bf16 *)x, order, rows, k, d);
    return launch_status("moe gather");
}

extern "C" mt_status mt_cuda_moe_gather_dx(cudaStream_t s, void *dx, const void *dxs, const int32_t *slot_row, int n,
                                           int k, int d, int accumulate) {
    MT_TRY(check_k("gather_dx", k));
    if (n == 0 || d == 0) return MT_OK;
    if (rows_vec8(d, dx, dxs))
        gather_dx_rows<8><<<row_grid(n), THREADS, 0, s>>>((bf16 *)dx, (const bf16 *)dxs, slot_row, n, k, d, accumulate);
    else
        gather_dx_rows<1><<<row_grid(n), THREADS, 0, s>>>((bf16 *)dx, (const bf16 *)dxs, slot_row, n, k, d, accumulate);
    return launch_status("moe gather_dx");
}

extern "C" mt_status mt_cuda_moe_combine(cudaStream_t s, void *y, const void *ys, const float *weights,
                                         const int32_t *slot_row, int n, int k, int d) {
    MT_TRY(check_k("combine", k));
    if (n == 0 || d == 0) return MT_OK;
    if (rows_vec8(d, y, ys))
        combine_rows<8><<<row_grid(n), THREADS, 0, s>>>((bf16 *)y, (const bf16 *)ys, weights, slot_row, n, k, d);
    else
        combine_rows<1><<<row_grid(n), THREADS, 0, s>>>((bf16 *)y, (const bf16 *)ys, weights, slot_row, n, k, d);
    return launch_status("moe combine");
}

extern "C" mt_status mt_cuda_moe_combine_dx(cudaStream_t s, void *dys, float *dweights, const void *dy, const void *ys,
                                            const float *weights, const int32_t *slot_row, int n, int k, int d) {
    MT_TRY(check_k("combine_dx", k));
    if (n == 0) return MT_OK;
    if (rows_vec8(d, dys, dy, ys))
        combine_dx_rows<8><<<row_grid(n), THREADS, 0, s>>>((bf16 *)dys, dweights, (const bf16 *)dy, (const bf16 *)ys,
                                                           weights, slot_row, n, k, d);
    else
        combine_dx_rows<1><<<row_grid(n), THREADS, 0, s>>>((bf16 *)dys, dweights, (const bf16 *)dy, (const bf16 *)ys,
                                                           weights, slot_row, n, k, d);
    return launch_status("moe combine_dx");
}
