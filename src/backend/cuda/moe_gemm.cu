/* Mixture of experts: the grouped expert GEMMs (backend.h's grouped_matmul, _dx, _dw) as one kernel
 * each that reads the experts' row offsets from device memory, so the host never waits for them
 * (docs/backends.md says why this and not cuBLAS: cuBLAS's grouped GEMMs take the sizes on the host).
 *
 * bf16 tensor-core MMAs (mma.sync m16n8k16, fp32 accumulation), 128 x 128 tiles of the output, 32 deep,
 * in a 4-stage cp.async pipeline; 8 warps of 64 x 32 each. Operands are row-major in memory, either
 * K-major (the reduction runs along a row: x, dy and w in the forward) or MN-major (it runs down the
 * rows: w in dx, dy and x in dw); ldmatrix reads the first, ldmatrix.trans the second, from shared
 * tiles padded by 16 bytes a row (conflict-free). Tiles past a matrix's edge are zero-filled.
 *
 *   forward  y[r, :out] = x[r, :in] . w[e]^T     A = x (K-major), B = w[e] [out, in] (K-major)
 *   dx       dx[r, :in] = dy[r, :out] . w[e]     A = dy (K-major), B = w[e] [out, in] (MN-major)
 *   dw       dw[e] += dy[rows of e]^T . x[...]  A = dy (MN-major), B = x (MN-major)
 *
 * The forward and dx run a persistent grid: each block finds, once, how many row tiles each expert
 * has (offsets), then takes output tiles (row tile, column tile) in turn, column tiles fastest, so
 * the blocks at work share an expert's weights and a few row tiles in L2. dw runs a block per
 * (expert, output tile): it loads the tile of dw, adds each segment's product in segment order
 * (a segment's sum starts from zero, so one call over S segments gives the bits of S calls) and
 * stores it once. Every output element is written by one block: no atomics, the same bits every run.
 *
 * ALIGNED (every width a multiple of 8, every pointer 16-byte aligned; real models) moves 16 bytes
 * with cp.async; otherwise elements are loaded one at a time (the op table's odd sizes). */
#include "backend/cuda/bf16_vec.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 32, STAGES = 4, THREADS = 256;
constexpr int WARP_M = 64, WARP_N = 32, MI = WARP_M / 16, NI = WARP_N / 8;
constexpr int KM_LD = BK + 8;  /* a K-major tile: [128][BK], rows padded */
constexpr int MN_LD = BM + 8;  /* an MN-major tile: [BK][128], rows padded */
constexpr int KM_ELEMS = BM * KM_LD, MN_ELEMS = BK * MN_LD;
constexpr int MAX_E = 512;
static_assert(BM == BN, "one MN-major tile shape serves A and B");

template <bool KMAJOR>
__host__ __device__ constexpr int tile_elems() { return KMAJOR ? KM_ELEMS : MN_ELEMS; }

template <bool A_KMAJOR, bool B_KMAJOR>
constexpr size_t smem_bytes() { return (size_t)STAGES * (tile_elems<A_KMAJOR>() + tile_elems<B_KMAJOR>()) * sizeof(bf16); }

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0; /* 0: no read, the 16 bytes zero-filled */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const bf16 *smem) {
    unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
}

__device__ __forceinline__ void mma_bf16(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* One GEMM operand: element (mn, k) at base[mn * ld + k] (K-major) or base[k * ld + mn] (MN-major),
 * present for mn < mn_end and k < k_end (indices absolute, k from the problem's k_begin). */
struct operand {
    const bf16 *base;
    long long ld, mn_end, k_end;
};

/* Copies the 128 x BK tile at (mn0, k0) of `op` into shared memory, zeros past its edges. */
template <bool KMAJOR, bool ALIGNED>
__device__ __forceinline__ void load_tile(bf16 *tile, const operand &op, long long mn0, long long k0) {
#pragma unroll
    for (int i = 0; i < (BM * BK / 8) / THREADS; i++) {
        int c = threadIdx.x + i * THREADS;
        /* K-major: 4 chunks of 8 along k in each of 128 rows; MN-major: 16 chunks along mn in BK rows */
        int row = KMAJOR ? c / (BK / 8) : c / (BM / 8), col = KMAJOR ? c % (BK / 8) * 8 : c % (BM / 8) * 8;
        long long mn = KMAJOR ? mn0 + row : mn0 + col, k = KMAJOR ? k0 + col : k0 + row;
        bf16 *dst = tile + row * (KMAJOR ? KM_LD : MN_LD) + col;
        if constexpr (ALIGNED) {
            bool valid = mn < op.mn_end && k < op.k_end;
            const bf16 *src = valid ? op.base + (KMAJOR ? mn * op.ld + k : k * op.ld + mn) : op.base;
            cp_async16(dst, src, valid);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                long long m = KMAJOR ? mn : mn + j, kk = KMAJOR ? k + j : k;
                dst[j] = m < op.mn_end && kk < op.k_end ? op.base[KMAJOR ? m * op.ld + kk : kk * op.ld + m]
                                                        : __float2bfloat16(0.0f);
            }
        }
    }
}

/* The warp's fragments of one 16-deep step from a stage's tiles, then its 16 MMAs. Lane l points
 * ldmatrix at row l % 8 of the 8x8 matrix l / 8 (see the A and B fragment layouts of m16n8k16). */
template <bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void mma_step(float acc[MI][NI][4], const bf16 *As, const bf16 *Bs, int kk, int wm,
                                         int wn) {
    int lane = threadIdx.x % 32, i = lane % 8, j = lane / 8;
    unsigned a[MI][4], b[NI][2];
#pragma unroll
    for (int mi = 0; mi < MI; mi++) {
        int m = wm + mi * 16;
        if constexpr (A_KMAJOR) ldmatrix_x4<false>(a[mi], As + (m + (j % 2) * 8 + i) * KM_LD + kk + (j / 2) * 8);
        else ldmatrix_x4<true>(a[mi], As + (kk + (j / 2) * 8 + i) * MN_LD + m + (j % 2) * 8);
    }
#pragma unroll
    for (int np = 0; np < NI / 2; np++) {
        int n = wn + np * 16;
        unsigned r[4];
        if constexpr (B_KMAJOR) ldmatrix_x4<false>(r, Bs + (n + (j / 2) * 8 + i) * KM_LD + kk + (j % 2) * 8);
        else ldmatrix_x4<true>(r, Bs + (kk + (j % 2) * 8 + i) * MN_LD + n + (j / 2) * 8);
        b[2 * np][0] = r[0], b[2 * np][1] = r[1], b[2 * np + 1][0] = r[2], b[2 * np + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++) mma_bf16(acc[mi][ni], a[mi], b[ni]);
}

/* acc += A[mn0 .. +128, k_begin .. k_end) . B[...]^T over the pipeline; leaves shared memory free. */
template <bool A_KMAJOR, bool B_KMAJOR, bool ALIGNED>
__device__ void mainloop(float acc[MI][NI][4], bf16 *smem, const operand &A, long long a0, const operand &B,
                         long long b0, long long k_begin) {
    constexpr int A_ELEMS = tile_elems<A_KMAJOR>(), STAGE = A_ELEMS + tile_elems<B_KMAJOR>();
    int warp = threadIdx.x / 32, wm = warp / (BN / WARP_N) * WARP_M, wn = warp % (BN / WARP_N) * WARP_N;
    int ktiles = (int)((A.k_end - k_begin + BK - 1) / BK);
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < ktiles) {
            load_tile<A_KMAJOR, ALIGNED>(smem + st * STAGE, A, a0, k_begin + (long long)st * BK);
            load_tile<B_KMAJOR, ALIGNED>(smem + st * STAGE + A_ELEMS, B, b0, k_begin + (long long)st * BK);
        }
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* stage kt is in; every warp is done with the stage loaded next */
        int next = kt + STAGES - 1;
        if (next < ktiles) {
            bf16 *st = smem + (next % STAGES) * STAGE;
            load_tile<A_KMAJOR, ALIGNED>(st, A, a0, k_begin + (long long)next * BK);
            load_tile<B_KMAJOR, ALIGNED>(st + A_ELEMS, B, b0, k_begin + (long long)next * BK);
        }
        cp_async_commit();
        const bf16 *As = smem + (kt % STAGES) * STAGE, *Bs = As + A_ELEMS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) mma_step<A_KMAJOR, B_KMAJOR>(acc, As, Bs, kk, wm, wn);
    }
    cp_async_wait<0>();
    __syncthreads();
}

__device__ __forceinline__ void zero(float acc[MI][NI][4]) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[mi][ni][q] = 0.0f;
}

/* Calls f(acc pair, row, col) for the thread's accumulator pairs: (row, col) and (row, col + 1) of the
 * 128 x 128 tile, rows wm + mi * 16 + lane / 4 (+ 8), columns wn + ni * 8 + 2 * (lane % 4). */
template <typename F>
__device__ __forceinline__ void for_pairs(float acc[MI][NI][4], F f) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int wm = warp / (BN / WARP_N) * WARP_M, wn = warp % (BN / WARP_N) * WARP_N;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                f(&acc[mi][ni][2 * h], wm + mi * 16 + lane / 4 + 8 * h, wn + ni * 8 + 2 * (lane % 4));
}

/* The forward (B_KMAJOR) and dx: y[r, :N] = a[r, :K] . (w[e] as B), rows r of expert e. */
template <bool B_KMAJOR, bool ALIGNED>
__global__ void __launch_bounds__(THREADS, 2) grouped_rows(bf16 *y, const bf16 *a, const bf16 *w,
                                                          const int32_t *offsets, int E, int S, int K, int N) {
    extern __shared__ __align__(16) unsigned char dynamic_smem[];
    __shared__ int tile_start[MAX_E + 1]; /* the row tiles of the experts before e */
    bf16 *smem = reinterpret_cast<bf16 *>(dynamic_smem);
    for (int e = threadIdx.x; e < E; e += THREADS)
        tile_start[e + 1] = (offsets[(e + 1) * S] - offsets[e * S] + BM - 1) / BM;
    if (threadIdx.x == 0) tile_start[0] = 0;
    __syncthreads();
    if (threadIdx.x < 32) { /* inclusive sums, 32 at a time with a carry */
        int carry = 0;
        for (int base = 1; base <= E; base += 32) {
            int e = base + threadIdx.x, v = e <= E ? tile_start[e] : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                int u = __shfl_up_sync(0xffffffffu, v, o);
                if ((int)threadIdx.x >= o) v += u;
            }
            if (e <= E) tile_start[e] = carry + v;
            carry += __shfl_sync(0xffffffffu, v, 31);
        }
    }
    __syncthreads();
    int col_tiles = (N + BN - 1) / BN;
    long long work = (long long)tile_start[E] * col_tiles;
    for (long long item = blockIdx.x; item < work; item += gridDim.x) {
        int row_tile = (int)(item / col_tiles), col_tile = (int)(item % col_tiles);
        int lo = 0, hi = E - 1; /* the last expert whose tiles start at or before row_tile: its own */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (tile_start[mid] <= row_tile) lo = mid;
            else hi = mid - 1;
        }
        long long row0 = offsets[lo * S] + (long long)(row_tile - tile_start[lo]) * BM, row_end = offsets[(lo + 1) * S];
        long long col0 = (long long)col_tile * BN;
        operand A = {a, K, row_end, K};
        operand B = {w + (size_t)lo * K * N, B_KMAJOR ? K : N, N, K};
        float acc[MI][NI][4];
        zero(acc);
        mainloop<true, B_KMAJOR, ALIGNED>(acc, smem, A, row0, B, col0, 0);
        for_pairs(acc, [&](float *v, int r, int c) {
            long long row = row0 + r, col = col0 + c;
            if (row >= row_end) return;
            bf16 *out = y + row * N + col;
            if (ALIGNED) {
                if (col < N) *reinterpret_cast<__nv_bfloat162 *>(out) = __floats2bfloat162_rn(v[0], v[1]);
            } else {
                if (col < N) out[0] = __float2bfloat16(v[0]);
                if (col + 1 < N) out[1] = __float2bfloat16(v[1]);
            }
        });
    }
}

/* dw[e][out, in] += dy[rows of e]^T . x[rows of e], segment by segment; block (column tile, row tile,
 * expert). */
template <bool ALIGNED>
__global__ void __launch_bounds__(THREADS, 1) grouped_dw(float *dw, const bf16 *dy, const bf16 *x,
                                                        const int32_t *offsets, int S, int out, int in) {
    extern __shared__ __align__(16) unsigned char dynamic_smem[];
    bf16 *smem = reinterpret_cast<bf16 *>(dynamic_smem);
    int e = blockIdx.z;
    if (offsets[e * S] == offsets[(e + 1) * S]) return; /* no rows: nothing to add */
    long long m0 = (long long)blockIdx.y * BM, n0 = (long long)blockIdx.x * BN;
    float *tile = dw + (size_t)e * out * in;
    float total[MI][NI][4];
    for_pairs(total, [&](float *v, int r, int c) {
        long long row = m0 + r, col = n0 + c;
        bool in_row = row < out;
        if (ALIGNED && in_row && col < in) {
            float2 t = *reinterpret_cast<const float2 *>(tile + row * in + col);
            v[0] = t.x, v[1] = t.y;
        } else {
            v[0] = in_row && col < in ? tile[row * in + col] : 0.0f;
            v[1] = in_row && col + 1 < in ? tile[row * in + col + 1] : 0.0f;
        }
    });
    for (int s = 0; s < S; s++) {
        int r0 = offsets[e * S + s], r1 = offsets[e * S + s + 1];
        if (r0 == r1) continue;
        operand A = {dy, out, out, r1}, B = {x, in, in, r1};
        float acc[MI][NI][4];
        zero(acc);
        mainloop<false, false, ALIGNED>(acc, smem, A, m0, B, n0, r0);
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
#pragma unroll
                for (int q = 0; q < 4; q++) total[mi][ni][q] += acc[mi][ni][q];
    }
    for_pairs(total, [&](float *v, int r, int c) {
        long long row = m0 + r, col = n0 + c;
        if (row >= out) return;
        if (ALIGNED) {
            if (col < in) *reinterpret_cast<float2 *>(tile + row * in + col) = make_float2(v[0], v[1]);
        } else {
            if (col < in) tile[row * in + col] = v[0];
            if (col + 1 < in) tile[row * in + col + 1] = v[1];
        }
    });
}

bool all_aligned(int in, int out, const void *p, const void *q, const void *r) {
    return in % 8 == 0 && out % 8 == 0 && aligned16(p, q, r);
}

mt_status check_sizes(const char *op, int rows, int E, int S, int in, int out) {
    if (E < 1 || E > MAX_E || S < 1 || rows < 0 || in < 1 || out < 1)
        return mt_fail(MT_ERR_INVALID, "cuda moe %s: %d rows, %d experts (1 to %d), %d segments, %d x %d", op, rows, E,
                       MAX_E, S, in, out);
    return MT_OK;
}

/* A persistent grid of as many blocks as the GPU holds at once, or fewer where fewer tiles can be. */
template <bool B_KMAJOR, bool ALIGNED>
mt_status launch_rows(cudaStream_t s, bf16 *y, const bf16 *a, const bf16 *w, const int32_t *offsets, int rows, int E,
                      int S, int K, int N) {
    auto kernel = grouped_rows<B_KMAJOR, ALIGNED>;
    size_t smem = smem_bytes<true, B_KMAJOR>();
    int device, sms, per_sm;
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    MT_CUDA_CHECK(cudaGetDevice(&device));
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem));
    long long tiles = ((long long)rows + BM - 1) / BM + E, most = tiles * ((N + BN - 1) / BN);
    long long grid = (long long)sms * (per_sm > 0 ? per_sm : 1);
    kernel<<<(unsigned)(grid < most ? grid : most), THREADS, smem, s>>>(y, a, w, offsets, E, S, K, N);
    return MT_OK;
}

template <bool ALIGNED>
mt_status launch_dw(cudaStream_t s, float *dw, const bf16 *dy, const bf16 *x, const int32_t *offsets, int E, int S,
                    int in, int out) {
    auto kernel = grouped_dw<ALIGNED>;
    size_t smem = smem_bytes<false, false>();
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((in + BN - 1) / BN, (out + BM - 1) / BM, E);
    kernel<<<grid, THREADS, smem, s>>>(dw, dy, x, offsets, S, out, in);
    return MT_OK;
}

} // namespace

extern "C" mt_status mt_cuda_moe_gemm(cudaStream_t s, void *y, const void *x, const void *w, const int32_t *offsets,
                                      int rows, int E, int S, int in, int out) {
    MT_TRY(check_sizes("grouped_matmul", rows, E, S, in, out));
    if (rows == 0) return MT_OK;
    if (all_aligned(in, out, y, x, w))
        MT_TRY((launch_rows<true, true>(s, (bf16 *)y, (const bf16 *)x, (const bf16 *)w, offsets, rows, E, S, in, out)));
    else
        MT_TRY((launch_rows<true, false>(s, (bf16 *)y, (const bf16 *)x, (const bf16 *)w, offsets, rows, E, S, in, out)));
    return launch_status("moe grouped_matmul");
}

extern "C" mt_status mt_cuda_moe_gemm_dx(cudaStream_t s, void *dx, const void *dy, const void *w,
                                         const int32_t *offsets, int rows, int E, int S, int in, int out) {
    MT_TRY(check_sizes("grouped_matmul_dx", rows, E, S, in, out));
    if (rows == 0) return MT_OK;
    if (all_aligned(in, out, dx, dy, w))
        MT_TRY((launch_rows<false, true>(s, (bf16 *)dx, (const bf16 *)dy, (const bf16 *)w, offsets, rows, E, S, out, in)));
    else
        MT_TRY((launch_rows<false, false>(s, (bf16 *)dx, (const bf16 *)dy, (const bf16 *)w, offsets, rows, E, S, out, in)));
    return launch_status("moe grouped_matmul_dx");
}

extern "C" mt_status mt_cuda_moe_gemm_dw(cudaStream_t s, float *dw, const void *dy, const void *x,
                                         const int32_t *offsets, int rows, int E, int S, int in, int out) {
    MT_TRY(check_sizes("grouped_matmul_dw", rows, E, S, in, out));
    if (rows == 0) return MT_OK;
    if (all_aligned(in, out, dw, dy, x))
        MT_TRY(launch_dw<true>(s, dw, (const bf16 *)dy, (const bf16 *)x, offsets, E, S, in, out));
    else
        MT_TRY(launch_dw<false>(s, dw, (const bf16 *)dy, (const bf16 *)x, offsets, E, S, in, out));
    return launch_status("moe grouped_matmul_dw");
}
