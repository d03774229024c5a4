/* The gated delta rule in the chunked form (Yang et al., "Gated Delta Networks"; flash-linear-
 * attention's chunk_gated_delta_rule), chunks of MT_CUDA_GDN_CHUNK rows of a sequence, fp32 math on
 * bf16 data. Per chunk and value head, with G the cumulative sum of g within the chunk, Γ[i][j] =
 * exp(G_i - G_j) for j <= i in i's segment (else 0), and S0 the state before the chunk:
 *
 *   T   = (I + strict(diag(beta) K K^T ∘ Γ))^-1             (forward substitution: the WY form)
 *   W   = T diag(beta e) K,  U = T diag(beta) V             (e_i = exp(G_i) where i's segment began
 *                                                            before the chunk, else 0)
 *   Vn  = U - W S0
 *   O   = diag(e) Q S0 + (Q K^T ∘ Γ) Vn
 *   S1  = e_L S0 + (diag(f) K)^T Vn                         (f_i = exp(G_L - G_i) for i in the last
 *                                                            row's segment, else 0; e_L its e)
 *
 * so that a segment that starts inside a chunk sees nothing of S0 nor of the rows before it: the
 * state restarts exactly there. Three kernels: the forward (a block per sequence and head, over its
 * chunks in order, keeping S0 and Vn in the workspace), the backward's pass over the chunks in
 * reverse carrying dS (a block per sequence and head: dVn = (Q K^T ∘ Γ)^T dO + diag(f) K dS1, dS0 =
 * e_L dS1 + (diag(e) Q)^T dO - W^T dVn, keeping dS1 and dVn), and the chunks' gradients (a block
 * per chunk and head, all at once: the header's equations differentiated, T's by dN = T^T dT T^T).
 * Every chunk matrix lives in shared memory in fp32; products are 4 x 4 tiles a thread. */
#include "backend/cuda/bf16_vec.cuh"

enum { L = MT_CUDA_GDN_CHUNK, THREADS = 512, MAXD = MT_CUDA_GDN_MAX_DIM };

/* A matrix in memory (shared or global, fp32), read as transposed when t. */
struct Mat {
    const float *p;
    int ld, t;
    __device__ float at(int i, int k) const { return t ? p[(size_t)k * ld + i] : p[(size_t)i * ld + k]; }
};
__device__ __forceinline__ Mat mat(const float *p, int ld) { return Mat{p, ld, 0}; }
__device__ __forceinline__ Mat tr(const float *p, int ld) { return Mat{p, ld, 1}; }

/* acc[r][c] += sum over k < K of A(m0 + r, k) s[k] B(k, n0 + c) (s NULL: 1). */
__device__ __forceinline__ void mma(float acc[4][4], int m0, int n0, Mat A, Mat B, int K, const float *s = nullptr) {
    for (int k = 0; k < K; k++) {
        float a[4], b[4], sk = s ? s[k] : 1.0f;
#pragma unroll
        for (int r = 0; r < 4; r++) a[r] = A.at(m0 + r, k) * sk;
#pragma unroll
        for (int c = 0; c < 4; c++) b[c] = B.at(k, n0 + c);
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[r][c] += a[r] * b[c];
    }
}

__device__ __forceinline__ void zero(float acc[4][4]) {
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;
}

/* f(m0, n0) for each 4 x 4 tile of an M x N result, a tile a thread (M, N multiples of 4; the tiles
 * of a chunk's L x 128 fill the block exactly). */
template <class F>
__device__ __forceinline__ void for_tiles(int M, int N, F f) {
    int tn = N / 4;
    for (int t = threadIdx.x; t < M / 4 * tn; t += blockDim.x) f(t / tn * 4, t % tn * 4);
}

/* One chunk's row data and masks in shared memory. */
struct Chunk {
    float *G, *beta, *e, *f; /* [L] each */
    int *pos;                /* [L]: each row's position in its segment */
    int rows;                /* the chunk's rows (L, or fewer at the end of a sequence) */
    float eL;                /* e of the last row */
    /* Γ[i][j] */
    __device__ float gamma(int i, int j) const {
        return j <= i && j >= i - pos[i] && i < rows ? __expf(G[i] - G[j]) : 0.0f;
    }
};

/* Loads rows [r0, r0 + rows) of a head's [*, d] bf16 slice (row stride ld) into x[L][d], zeros
 * below. */
__device__ void load_rows(float *x, const bf16 *src, size_t ld, int rows, int d) {
    for (int i = threadIdx.x; i < L * d; i += blockDim.x) {
        int r = i / d, c = i % d;
        x[i] = r < rows ? __bfloat162float(src[(size_t)r * ld + c]) : 0.0f;
    }
}

/* The chunk's vectors: G = cumsum(g), beta, positions, e and f (padding rows: 0, their own
 * segments). Ends with a barrier. */
__device__ void load_chunk(Chunk &ch, const float *g, const float *beta, const int32_t *pos, int seq, size_t r0,
                           int rows, int H, int h) {
    ch.rows = rows;
    for (int i = threadIdx.x; i < L; i += blockDim.x) {
        ch.beta[i] = i < rows ? beta[(r0 + i) * H + h] : 0.0f;
        ch.pos[i] = i < rows ? (pos ? pos[r0 + i] : (int)((r0 + i) % seq)) : 0;
    }
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < L; i++) ch.G[i] = sum += i < rows ? g[(r0 + i) * H + h] : 0.0f;
    }
    __syncthreads();
    int last = rows - 1;
    for (int i = threadIdx.x; i < L; i += blockDim.x) {
        ch.e[i] = i < rows && ch.pos[i] > i ? __expf(ch.G[i]) : 0.0f;
        ch.f[i] = i < rows && i >= last - ch.pos[last] ? __expf(ch.G[last] - ch.G[i]) : 0.0f;
    }
    ch.eL = ch.pos[last] > last ? __expf(ch.G[last]) : 0.0f;
    __syncthreads();
}

/* T = (I + strict(diag(beta) K K^T ∘ Γ))^-1 into t[L][L] from k[L][dk]; row[L] scratch. */
__device__ void wy_inverse(float *t, float *row, const float *k, int dk, const Chunk &ch) {
    for_tiles(L, L, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        if (n0 < m0 + 4) mma(acc, m0, n0, mat(k, dk), tr(k, dk), dk);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) {
                int i = m0 + r, j = n0 + c;
                t[i * L + j] = j < i ? -ch.beta[i] * acc[r][c] * ch.gamma(i, j) : 0.0f;
            }
    });
    __syncthreads();
    /* row i of (I - A)^-1 - I: A[i][j] + sum over j < m < i of A[i][m] T[m][j] (transformers' loop) */
    for (int i = 1; i < ch.rows; i++) {
        if (threadIdx.x < i) row[threadIdx.x] = t[i * L + threadIdx.x];
        __syncthreads();
        if (threadIdx.x < i) {
            int j = threadIdx.x;
            float sum = row[j];
            for (int m = j + 1; m < i; m++) sum += row[m] * t[m * L + j];
            t[i * L + j] = sum;
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < L; i += blockDim.x) t[i * L + i] = 1.0f;
    __syncthreads();
}

/* M = Q K^T ∘ Γ into m[L][L]. */
__device__ void qk_gamma(float *m, const float *q, const float *k, int dk, const Chunk &ch) {
    for_tiles(L, L, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        if (n0 < m0 + 4) mma(acc, m0, n0, mat(q, dk), tr(k, dk), dk);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) m[(m0 + r) * L + n0 + c] = acc[r][c] * ch.gamma(m0 + r, n0 + c);
    });
}

/* Shared memory: the chunk's vectors, then the matrices (floats). */
struct Vectors {
    float G[L], beta[L], e[L], f[L], be[L], row[L], dG[L], dbeta[L];
    int pos[L];
};
__device__ Chunk chunk_of(Vectors *v) {
    Chunk ch;
    ch.G = v->G, ch.beta = v->beta, ch.e = v->e, ch.f = v->f, ch.pos = v->pos;
    return ch;
}

/* The workspace: per chunk and head S0 and dS1 [dk][dv], Vn and dVn [L][dv], fp32. */
struct Workspace {
    float *S, *dS, *Vn, *dVn;
};
__host__ __device__ inline size_t chunks_of(const mt_gdn_dims &d) {
    return (size_t)(d.n / d.seq) * ((d.seq + L - 1) / L);
}
static Workspace workspace_of(void *ws, const mt_gdn_dims &d) {
    size_t units = chunks_of(d) * d.v_heads, state = (size_t)d.d_k * d.d_v, rows = (size_t)L * d.d_v;
    float *p = (float *)ws;
    return Workspace{p, p + units * state, p + 2 * units * state, p + 2 * units * state + units * rows};
}

struct Args {
    bf16 *o, *dq, *dk, *dv;
    float *dg, *dbeta;
    const bf16 *q, *k, *v, *dout;
    const float *g, *beta;
    const int32_t *pos;
    mt_gdn_dims d;
    Workspace ws;
};

/* ---- the forward: a block per (sequence, head), its chunks in order ---- */

__global__ void __launch_bounds__(THREADS) rule_forward(Args a) {
    extern __shared__ float smem[];
    const mt_gdn_dims &d = a.d;
    int b = blockIdx.x, h = blockIdx.y, H = d.v_heads, dk = d.d_k, dv = d.d_v, nc = (d.seq + L - 1) / L;
    Vectors *vec = (Vectors *)smem;
    float *sK = smem + sizeof(Vectors) / 4, *sX = sK + L * dk, *sU = sX + L * dk, *sV = sU + L * dv;
    float *sT = sV + max(L * dv, L * L), *sS = sT + L * L;
    Chunk ch = chunk_of(vec);
    for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) sS[i] = 0.0f;
    for (int c = 0; c < nc; c++) {
        size_t r0 = (size_t)b * d.seq + (size_t)c * L, unit = ((size_t)b * nc + c) * H + h;
        int rows = min(L, d.seq - c * L);
        load_chunk(ch, a.g, a.beta, a.pos, d.seq, r0, rows, H, h);
        load_rows(sK, a.k + (r0 * H + h) * dk, (size_t)H * dk, rows, dk);
        load_rows(sV, a.v + r0 * d.v_ld + (size_t)h * dv, d.v_ld, rows, dv);
        for (int i = threadIdx.x; i < L; i += blockDim.x) vec->be[i] = ch.beta[i] * ch.e[i];
        __syncthreads();
        wy_inverse(sT, vec->row, sK, dk, ch);
        /* U = T diag(beta) V, W = T diag(beta e) K; S0 kept */
        for_tiles(L, dv, [&](int m0, int n0) {
            float acc[4][4];
            zero(acc);
            mma(acc, m0, n0, mat(sT, L), mat(sV, dv), L, ch.beta);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) sU[(m0 + r) * dv + n0 + cc] = acc[r][cc];
        });
        for_tiles(L, dk, [&](int m0, int n0) {
            float acc[4][4];
            zero(acc);
            mma(acc, m0, n0, mat(sT, L), mat(sK, dk), L, vec->be);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) sX[(m0 + r) * dk + n0 + cc] = acc[r][cc];
        });
        float *S0 = a.ws.S + unit * dk * dv;
        for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) S0[i] = sS[i];
        __syncthreads();
        /* Vn = U - W S0, kept */
        float *Vn = a.ws.Vn + unit * L * dv;
        for_tiles(L, dv, [&](int m0, int n0) {
            float acc[4][4];
            zero(acc);
            mma(acc, m0, n0, mat(sX, dk), mat(sS, dv), dk);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) {
                    int at = (m0 + r) * dv + n0 + cc;
                    Vn[at] = sU[at] -= acc[r][cc];
                }
        });
        __syncthreads();
        /* O = diag(e) Q S0 + (Q K^T ∘ Γ) Vn, Q in sX and M in sV */
        load_rows(sX, a.q + (r0 * H + h) * dk, (size_t)H * dk, rows, dk);
        __syncthreads();
        qk_gamma(sV, sX, sK, dk, ch);
        __syncthreads();
        for_tiles(L, dv, [&](int m0, int n0) {
            float acc[4][4], inter[4][4];
            zero(acc);
            zero(inter);
            mma(inter, m0, n0, mat(sX, dk), mat(sS, dv), dk);
            mma(acc, m0, n0, mat(sV, L), mat(sU, dv), L);
            for (int r = 0; r < 4; r++)
                if (m0 + r < rows)
                    for (int cc = 0; cc < 4; cc++)
                        a.o[((r0 + m0 + r) * H + h) * dv + n0 + cc] =
                            __float2bfloat16(acc[r][cc] + ch.e[m0 + r] * inter[r][cc]);
        });
        __syncthreads();
        /* S1 = e_L S0 + (diag(f) K)^T Vn */
        for_tiles(dk, dv, [&](int m0, int n0) {
            float acc[4][4];
            zero(acc);
            mma(acc, m0, n0, tr(sK, dk), mat(sU, dv), L, ch.f);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) {
                    int at = (m0 + r) * dv + n0 + cc;
                    sS[at] = ch.eL * sS[at] + acc[r][cc];
                }
        });
        __syncthreads();
    }
}

/* ---- the backward's pass over the chunks in reverse: dS, dVn ---- */

__global__ void __launch_bounds__(THREADS) rule_state_grads(Args a) {
    extern __shared__ float smem[];
    const mt_gdn_dims &d = a.d;
    int b = blockIdx.x, h = blockIdx.y, H = d.v_heads, dk = d.d_k, dv = d.d_v, nc = (d.seq + L - 1) / L;
    Vectors *vec = (Vectors *)smem;
    float *sK = smem + sizeof(Vectors) / 4, *sX = sK + L * dk, *sDO = sX + L * dk, *sDV = sDO + L * dv;
    float *sT = sDV + L * dv, *sM = sT + L * L, *sS = sM + L * L;
    Chunk ch = chunk_of(vec);
    for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) sS[i] = 0.0f;
    for (int c = nc - 1; c >= 0; c--) {
        size_t r0 = (size_t)b * d.seq + (size_t)c * L, unit = ((size_t)b * nc + c) * H + h;
        int rows = min(L, d.seq - c * L);
        load_chunk(ch, a.g, a.beta, a.pos, d.seq, r0, rows, H, h);
        load_rows(sK, a.k + (r0 * H + h) * dk, (size_t)H * dk, rows, dk);
        load_rows(sX, a.q + (r0 * H + h) * dk, (size_t)H * dk, rows, dk);
        load_rows(sDO, a.dout + (r0 * H + h) * dv, (size_t)H * dv, rows, dv);
        for (int i = threadIdx.x; i < L; i += blockDim.x) vec->be[i] = ch.beta[i] * ch.e[i];
        float *dS1 = a.ws.dS + unit * dk * dv;
        for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) dS1[i] = sS[i];
        __syncthreads();
        wy_inverse(sT, vec->row, sK, dk, ch);
        qk_gamma(sM, sX, sK, dk, ch);
        __syncthreads();
        /* dVn = M^T dO + diag(f) K dS1, kept */
        float *dVn = a.ws.dVn + unit * L * dv;
        for_tiles(L, dv, [&](int m0, int n0) {
            float acc[4][4], kd[4][4];
            zero(acc);
            zero(kd);
            mma(acc, m0, n0, tr(sM, L), mat(sDO, dv), L);
            mma(kd, m0, n0, mat(sK, dk), mat(sS, dv), dk);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) {
                    int at = (m0 + r) * dv + n0 + cc;
                    dVn[at] = sDV[at] = acc[r][cc] + ch.f[m0 + r] * kd[r][cc];
                }
        });
        __syncthreads();
        /* dS = e_L dS1 + (diag(e) Q)^T dO */
        for_tiles(dk, dv, [&](int m0, int n0) {
            float acc[4][4];
            zero(acc);
            mma(acc, m0, n0, tr(sX, dk), mat(sDO, dv), L, ch.e);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) {
                    int at = (m0 + r) * dv + n0 + cc;
                    sS[at] = ch.eL * sS[at] + acc[r][cc];
                }
        });
        __syncthreads();
        /* W = T diag(beta e) K into sX; dS -= W^T dVn */
        for_tiles(L, dk, [&](int m0, int n0) {
            float acc[4][4];
            zero(acc);
            mma(acc, m0, n0, mat(sT, L), mat(sK, dk), L, vec->be);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) sX[(m0 + r) * dk + n0 + cc] = acc[r][cc];
        });
        __syncthreads();
        for_tiles(dk, dv, [&](int m0, int n0) {
            float acc[4][4];
            zero(acc);
            mma(acc, m0, n0, tr(sX, dk), mat(sDV, dv), L);
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) sS[(m0 + r) * dv + n0 + cc] -= acc[r][cc];
        });
        __syncthreads();
    }
}

/* ---- the chunks' gradients: a block per (chunk, head), all at once ---- */

/* Adds x to v[i] across the block (shared memory). */
__device__ __forceinline__ void add(float *v, int i, float x) { atomicAdd(v + i, x); }

__global__ void __launch_bounds__(THREADS) rule_chunk_grads(Args a) {
    extern __shared__ float smem[];
    const mt_gdn_dims &d = a.d;
    int H = d.v_heads, dk = d.d_k, dv = d.d_v, nc = (d.seq + L - 1) / L, h = blockIdx.y;
    int b = blockIdx.x / nc, c = blockIdx.x % nc, rows = min(L, d.seq - c * L), last = rows - 1;
    size_t r0 = (size_t)b * d.seq + (size_t)c * L, unit = (size_t)blockIdx.x * H + h;
    Vectors *vec = (Vectors *)smem;
    float *sK = smem + sizeof(Vectors) / 4, *sQ = sK + L * dk, *sDW = sQ + L * dk, *sV = sDW + L * dk;
    float *sDO = sV + L * dv, *sT = sDO + L * dv, *sM = sT + L * L, *sP = sM + L * L, *sDT = sP + L * L;
    const float *S0 = a.ws.S + unit * dk * dv, *dS1 = a.ws.dS + unit * dk * dv;
    const float *Vn = a.ws.Vn + unit * L * dv, *dVn = a.ws.dVn + unit * L * dv;
    float *dG = vec->dG, *dbeta = vec->dbeta;
    Chunk ch = chunk_of(vec);
    load_chunk(ch, a.g, a.beta, a.pos, d.seq, r0, rows, H, h);
    load_rows(sK, a.k + (r0 * H + h) * dk, (size_t)H * dk, rows, dk);
    load_rows(sQ, a.q + (r0 * H + h) * dk, (size_t)H * dk, rows, dk);
    load_rows(sV, a.v + r0 * d.v_ld + (size_t)h * dv, d.v_ld, rows, dv);
    load_rows(sDO, a.dout + (r0 * H + h) * dv, (size_t)H * dv, rows, dv);
    for (int i = threadIdx.x; i < L; i += blockDim.x) {
        vec->be[i] = ch.beta[i] * ch.e[i];
        dG[i] = dbeta[i] = 0.0f;
    }
    __syncthreads();
    wy_inverse(sT, vec->row, sK, dk, ch);
    /* P = diag(beta) K K^T ∘ Γ, strictly lower; M = Q K^T ∘ Γ */
    for_tiles(L, L, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        if (n0 < m0 + 4) mma(acc, m0, n0, mat(sK, dk), tr(sK, dk), dk);
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) {
                int i = m0 + r, j = n0 + cc;
                sP[i * L + j] = j < i ? ch.beta[i] * acc[r][cc] * ch.gamma(i, j) : 0.0f;
            }
    });
    qk_gamma(sM, sQ, sK, dk, ch);
    __syncthreads();
    /* dM = dO Vn^T on M's entries: dG gets dM ∘ M by rows and less by columns; dM ∘ Γ into sDT */
    for_tiles(L, L, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        if (n0 < m0 + 4) mma(acc, m0, n0, mat(sDO, dv), tr(Vn, dv), dv);
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) {
                int i = m0 + r, j = n0 + cc;
                float gm = ch.gamma(i, j), x = acc[r][cc] * sM[i * L + j];
                if (gm != 0.0f) {
                    add(dG, i, x);
                    add(dG, j, -x);
                }
                sDT[i * L + j] = acc[r][cc] * gm;
            }
    });
    __syncthreads();
    /* dQ = diag(e) dO S0^T + (dM ∘ Γ) K; dG += (dO S0^T) ∘ Q e by rows */
    for_tiles(L, dk, [&](int m0, int n0) {
        float inter[4][4], acc[4][4];
        zero(inter);
        zero(acc);
        mma(inter, m0, n0, mat(sDO, dv), tr(S0, dv), dv);
        mma(acc, m0, n0, mat(sDT, L), mat(sK, dk), L);
        for (int r = 0; r < 4; r++) {
            int i = m0 + r;
            float x = 0.0f;
            for (int cc = 0; cc < 4; cc++) {
                x += inter[r][cc] * sQ[i * dk + n0 + cc] * ch.e[i];
                if (i < rows)
                    a.dq[((r0 + i) * H + h) * dk + n0 + cc] = __float2bfloat16(acc[r][cc] + ch.e[i] * inter[r][cc]);
            }
            add(dG, i, x);
        }
    });
    /* dK, a tile a thread kept in registers: (dM ∘ Γ)^T Q + diag(f) Vn dS1^T, whose ∘ K f takes from
     * each row's dG and gives the last row's */
    float dK[4][4];
    int km0 = -1, kn0 = 0;
    zero(dK);
    for_tiles(L, dk, [&](int m0, int n0) {
        float kd[4][4];
        zero(kd);
        km0 = m0, kn0 = n0;
        mma(dK, m0, n0, tr(sDT, L), mat(sQ, dk), L);
        mma(kd, m0, n0, mat(Vn, dv), tr(dS1, dv), dv);
        for (int r = 0; r < 4; r++) {
            int i = m0 + r;
            float x = 0.0f;
            for (int cc = 0; cc < 4; cc++) {
                dK[r][cc] += ch.f[i] * kd[r][cc];
                x += kd[r][cc] * sK[i * dk + n0 + cc] * ch.f[i];
            }
            add(dG, i, -x);
            add(dG, last, x);
        }
    });
    /* dW = -dVn S0^T */
    for_tiles(L, dk, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        mma(acc, m0, n0, mat(dVn, dv), tr(S0, dv), dv);
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) sDW[(m0 + r) * dk + n0 + cc] = -acc[r][cc];
    });
    __syncthreads();
    /* dT = dVn (diag(beta) V)^T + dW (diag(beta e) K)^T */
    for_tiles(L, L, [&](int m0, int n0) {
        float uv[4][4], wk[4][4];
        zero(uv);
        zero(wk);
        mma(uv, m0, n0, mat(dVn, dv), tr(sV, dv), dv);
        mma(wk, m0, n0, mat(sDW, dk), tr(sK, dk), dk);
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) {
                int j = n0 + cc;
                sDT[(m0 + r) * L + j] = uv[r][cc] * ch.beta[j] + wk[r][cc] * vec->be[j];
            }
    });
    /* dVb = T^T dVn: dv = diag(beta) dVb, dbeta += dVb . v by rows */
    for_tiles(L, dv, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        mma(acc, m0, n0, tr(sT, L), mat(dVn, dv), L);
        for (int r = 0; r < 4; r++) {
            int i = m0 + r;
            float x = 0.0f;
            for (int cc = 0; cc < 4; cc++) {
                x += acc[r][cc] * sV[i * dv + n0 + cc];
                if (i < rows)
                    a.dv[(r0 + i) * d.v_ld + (size_t)h * dv + n0 + cc] = __float2bfloat16(ch.beta[i] * acc[r][cc]);
            }
            add(dbeta, i, x);
        }
    });
    /* dKbg = T^T dW: dK += diag(beta e) dKbg; dbeta += e dKbg . k; dG += dKbg . k beta e */
    for_tiles(L, dk, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        mma(acc, m0, n0, tr(sT, L), mat(sDW, dk), L);
        for (int r = 0; r < 4; r++) {
            int i = m0 + r;
            float x = 0.0f;
            for (int cc = 0; cc < 4; cc++) {
                dK[r][cc] += vec->be[i] * acc[r][cc];
                x += acc[r][cc] * sK[i * dk + n0 + cc];
            }
            add(dbeta, i, ch.e[i] * x);
            add(dG, i, vec->be[i] * x);
        }
    });
    __syncthreads();
    /* X = T^T dT into sM */
    for_tiles(L, L, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        mma(acc, m0, n0, tr(sT, L), mat(sDT, L), L);
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) sM[(m0 + r) * L + n0 + cc] = acc[r][cc];
    });
    __syncthreads();
    /* dP = -(X T^T), strictly lower: dG gets dP ∘ P by rows and less by columns; dP ∘ Γ into sDT */
    for_tiles(L, L, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        if (n0 < m0 + 4) mma(acc, m0, n0, mat(sM, L), tr(sT, L), L);
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) {
                int i = m0 + r, j = n0 + cc;
                float gm = j < i ? ch.gamma(i, j) : 0.0f, x = -acc[r][cc] * sP[i * L + j];
                if (gm != 0.0f) {
                    add(dG, i, x);
                    add(dG, j, -x);
                }
                sDT[i * L + j] = -acc[r][cc] * gm;
            }
    });
    __syncthreads();
    /* dK += (dP ∘ Γ)^T diag(beta) K + diag(beta) (dP ∘ Γ) K; dbeta += ((dP ∘ Γ) K) . k */
    for_tiles(L, dk, [&](int m0, int n0) {
        float acc[4][4];
        zero(acc);
        mma(dK, m0, n0, tr(sDT, L), mat(sK, dk), L, ch.beta);
        mma(acc, m0, n0, mat(sDT, L), mat(sK, dk), L);
        for (int r = 0; r < 4; r++) {
            int i = m0 + r;
            float x = 0.0f;
            for (int cc = 0; cc < 4; cc++) {
                dK[r][cc] += ch.beta[i] * acc[r][cc];
                x += acc[r][cc] * sK[i * dk + n0 + cc];
            }
            add(dbeta, i, x);
        }
    });
    if (km0 >= 0)
        for (int r = 0; r < 4 && km0 + r < rows; r++)
            for (int cc = 0; cc < 4; cc++)
                a.dk[((r0 + km0 + r) * H + h) * dk + kn0 + cc] = __float2bfloat16(dK[r][cc]);
    /* S1's e_L S0: the last row's dG += e_L (dS1 . S0) */
    float x = 0.0f;
    for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) x += dS1[i] * S0[i];
    x = block_sum(x);
    if (threadIdx.x == 0) dG[last] += ch.eL * x;
    __syncthreads();
    /* dg: G's gradient summed from each row to the chunk's end */
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        float sum = 0.0f;
        for (int m = i; m < rows; m++) sum += dG[m];
        a.dg[(r0 + i) * H + h] = sum;
        a.dbeta[(r0 + i) * H + h] = dbeta[i];
    }
}

/* ---- launchers ---- */

extern "C" mt_status mt_cuda_gdn_check(mt_gdn_dims d) {
    if (d.d_k > MAXD || d.d_v > MAXD || d.d_k % 4 || d.d_v % 4)
        return mt_fail(MT_ERR_INVALID, "the cuda backend's Gated DeltaNet takes d_k and d_v of at most %d, multiples "
                       "of 4, not %d and %d", MAXD, d.d_k, d.d_v);
    if (d.k_heads <= 0 || d.v_heads % d.k_heads || d.seq <= 0 || d.n % d.seq)
        return mt_fail(MT_ERR_INVALID, "Gated DeltaNet: %d value heads over %d q/k heads, %d rows in sequences of %d: "
                       "not whole", d.v_heads, d.k_heads, d.n, d.seq);
    return MT_OK;
}

extern "C" size_t mt_cuda_gdn_rule_workspace(mt_gdn_dims d) {
    return mt_cuda_gdn_rule_workspace_bytes(d.n, d.seq, d.v_heads, d.d_k, d.d_v);
}

static size_t smem_forward(const mt_gdn_dims &d) {
    return sizeof(Vectors) + (2 * L * d.d_k + L * d.d_v + max(L * d.d_v, L * L) + L * L + d.d_k * d.d_v) * 4;
}
static size_t smem_state_grads(const mt_gdn_dims &d) {
    return sizeof(Vectors) + (2 * L * d.d_k + 2 * L * d.d_v + 2 * L * L + d.d_k * d.d_v) * 4;
}
static size_t smem_chunk_grads(const mt_gdn_dims &d) {
    return sizeof(Vectors) + (3 * L * d.d_k + 2 * L * d.d_v + 4 * L * L) * 4;
}

template <class K>
static mt_status launch(K kernel, dim3 grid, size_t smem, cudaStream_t s, const Args &a, const char *name) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess)
        return mt_fail(MT_ERR_DEVICE, "%s: %zu bytes of shared memory: %s", name, smem, cudaGetErrorString(err));
    kernel<<<grid, THREADS, smem, s>>>(a);
    return launch_status(name);
}

extern "C" mt_status mt_cuda_gdn_rule(cudaStream_t s, void *o, const void *q, const void *k, const void *v,
                                      const float *g, const float *beta, mt_gdn_dims d, void *workspace) {
    mt_status rc = mt_cuda_gdn_check(d);
    if (rc != MT_OK) return rc;
    Args a = {};
    a.o = (bf16 *)o, a.q = (const bf16 *)q, a.k = (const bf16 *)k, a.v = (const bf16 *)v, a.g = g, a.beta = beta;
    a.pos = d.seg ? d.seg->pos : NULL, a.d = d, a.ws = workspace_of(workspace, d);
    return launch(rule_forward, dim3(d.n / d.seq, d.v_heads), smem_forward(d), s, a, "gdn rule");
}

extern "C" mt_status mt_cuda_gdn_rule_dx(cudaStream_t s, void *dq, void *dk, void *dv, float *dg, float *dbeta,
                                         const void *dout, const void *q, const void *k, const void *v, const float *g,
                                         const float *beta, mt_gdn_dims d, void *workspace) {
    mt_status rc = mt_cuda_gdn_check(d);
    if (rc != MT_OK) return rc;
    Args a = {};
    a.dq = (bf16 *)dq, a.dk = (bf16 *)dk, a.dv = (bf16 *)dv, a.dg = dg, a.dbeta = dbeta, a.dout = (const bf16 *)dout;
    a.q = (const bf16 *)q, a.k = (const bf16 *)k, a.v = (const bf16 *)v, a.g = g, a.beta = beta;
    a.pos = d.seg ? d.seg->pos : NULL, a.d = d, a.ws = workspace_of(workspace, d);
    rc = launch(rule_state_grads, dim3(d.n / d.seq, d.v_heads), smem_state_grads(d), s, a, "gdn rule_dx (states)");
    if (rc != MT_OK) return rc;
    return launch(rule_chunk_grads, dim3((unsigned)chunks_of(d), d.v_heads), smem_chunk_grads(d), s, a,
                  "gdn rule_dx (chunks)");
}
