/* Causal grouped-query attention, flash style: no [seq x seq] matrix ever exists. With segments
 * (backend.h: packed examples), a query sees the keys of its own segment up to itself: the lowest
 * key row i may see is i - pos[i]; with a window (mt_attn_params), i - window + 1 if later; the
 * tiles no row of a block sees are skipped, so a window's cost grows as seq x window.
 *
 * The variants of mt_attn_params: the scale; the soft cap, s = cap tanh(s / cap) before the mask,
 * its derivative 1 - (s / cap)^2 in the backward; a sink, one more column of the softmax with no
 * value folded into each row's sum at the end of the forward, its gradient -sum p_sink delta a
 * block a head after delta.
 *
 * Each block owns a tile of 64 rows (queries in the forward and dq kernels, keys in the dk/dv
 * kernel) and streams the other side through shared memory 64 rows at a time. Its 8 warps own 8
 * rows each. Scores use one lane per streamed row (a full dot product from shared memory, 16-byte
 * loads); the weighted sums use one lane per pair of output elements, reading the probabilities
 * of its warp from shared memory. All math is fp32; the softmax works in base 2 and lse is
 * returned in natural log, per [batch, head, seq] as backend.h says ([n, heads] with segments).
 *
 * Head dims: multiples of 8 up to 256. Query head h reads kv head
 * h / (heads / kv_heads). The backward recomputes p = exp(s - lse) and needs
 * delta_i = dout_i . out_i, kept in the workspace.
 *
 * A window of queries (backend.h: positions [q0, q0 + q_rows) of each sequence, keys [0, kv_rows =
 * q0 + q_rows)): query tiles are cut from the first query, key tiles from the first key; a query at
 * position i sees the keys j <= i (of its segment). Without one, q0 = 0 and q_rows = kv_rows =
 * seq. lse and delta hold the call's query rows: [batch, heads, q rows], or [batch * q rows, heads]
 * with segments. */
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda_workspace.h"

enum { TILE = 64, WARPS = 8, ROWS = TILE / WARPS, THREADS = WARPS * 32, MAX_HEAD_DIM = 256 };

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

/* Geometry shared by the kernels. A "word" is a bf16 pair; rows read one per lane are padded by
 * 4 words so that the 8 lanes of a 16-byte access phase hit different banks. */
struct geometry {
    int seq, heads, kv_heads, head_dim;
    int q0, q_rows, kv_rows; /* the queries' first position and count, the keys they see (a sequence's) */
    const int32_t *pos;      /* segments: each key row's position in its segment; NULL: none */
    int window;              /* keys a query sees, itself included; 0: every earlier one */
    float scale, softcap;    /* softcap 0: none */
    const float *sinks;      /* [heads] or NULL */
    float *dsinks;           /* [heads], added to; NULL: none wanted */
    int words, vecs, padded; /* head_dim/2, head_dim/8, words + 4 */
    size_t q_stride, kv_stride; /* elements between consecutive rows of q and of k/v */
};

static geometry geometry_of(mt_attn_dims dims, const mt_attn_params *params, const int32_t *pos) {
    geometry g;
    g.pos = pos;
    g.window = params ? params->window : 0;
    g.scale = mt_attn_scale(params, dims.head_dim);
    g.softcap = params ? params->softcap : 0.0f;
    g.sinks = params ? params->sinks : NULL;
    g.dsinks = params ? params->dsinks : NULL;
    g.seq = dims.seq;
    g.q0 = dims.q_len > 0 ? dims.q0 : 0;
    g.q_rows = mt_attn_q_rows(dims);
    g.kv_rows = mt_attn_kv_rows(dims);
    g.heads = dims.heads;
    g.kv_heads = dims.kv_heads;
    g.head_dim = dims.head_dim;
    g.words = dims.head_dim / 2;
    g.vecs = dims.head_dim / 8;
    g.padded = g.words + 4;
    g.q_stride = (size_t)dims.heads * dims.head_dim;
    g.kv_stride = (size_t)dims.kv_heads * dims.head_dim;
    return g;
}

/* The first key row the query at position i of sequence b may see: its segment's first row (0
 * without segments), or its window's if later. Never decreasing in i. */
__device__ __forceinline__ int first_key(const geometry &g, int b, int i) {
    int first = g.pos && i < g.kv_rows ? i - g.pos[(size_t)b * g.seq + i] : 0;
    return g.window > 0 ? max(first, i - g.window + 1) : first;
}

/* A raw score (q.k) scaled and, with a soft cap, capped, in base 2 (scale_log2 = scale log2 e);
 * *slope: the cap's derivative there (1 without one). */
__device__ __forceinline__ float score_log2(const geometry &g, float dot, float scale_log2, float *slope) {
    if (g.softcap <= 0.0f) {
        *slope = 1.0f;
        return dot * scale_log2;
    }
    float t = tanhf(dot * g.scale / g.softcap);
    *slope = 1.0f - t * t;
    return g.softcap * t * LOG2E;
}

/* Where lse of (sequence b, head h, query row i) lies: [batch, heads, q rows], or [batch * q rows,
 * heads] with segments. */
__device__ __forceinline__ size_t lse_index(const geometry &g, int b, int h, int i) {
    return g.pos ? ((size_t)b * g.q_rows + i) * g.heads + h : ((size_t)b * g.heads + h) * g.q_rows + i;
}

/* Rows row0.. of one head into shared memory (stride in words); rows past `valid` are zero. */
__device__ void load_tile(uint32_t *dst, int stride, const bf16 *src, size_t src_stride, int row0,
                          int valid, int vecs) {
    for (int idx = threadIdx.x; idx < TILE * vecs; idx += THREADS) {
        int r = idx / vecs, c = idx % vecs;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r < valid) val = *reinterpret_cast<const uint4 *>(src + (size_t)(row0 + r) * src_stride + c * 8);
        *reinterpret_cast<uint4 *>(dst + r * stride + c * 4) = val;
    }
}

__device__ __forceinline__ float dot8(const float a[8], const float b[8]) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) s += a[i] * b[i];
    return s;
}

/* out[r][c] = row r of `mine` (the warp's ROWS rows, read by all lanes) . row lane + 32c of
 * `theirs` (padded rows, one per lane). */
__device__ __forceinline__ void tile_dots(float out[ROWS][2], const uint32_t *mine, int mine_stride,
                                          const uint32_t *theirs, int padded, int vecs) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < ROWS; r++) out[r][0] = out[r][1] = 0.0f;
    for (int c = 0; c < vecs; c++) {
        float t0[8], t1[8];
        bf16x8_to_float(*reinterpret_cast<const uint4 *>(theirs + lane * padded + c * 4), t0);
        bf16x8_to_float(*reinterpret_cast<const uint4 *>(theirs + (lane + 32) * padded + c * 4), t1);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float m[8];
            bf16x8_to_float(*reinterpret_cast<const uint4 *>(mine + r * mine_stride + c * 4), m);
            out[r][0] += dot8(m, t0);
            out[r][1] += dot8(m, t1);
        }
    }
}

/* acc[r][i] += sum over j < count of weight[r][j] * row j of `rows` (word lane + 32i); weight is
 * the warp's [ROWS][TILE] block in shared memory and must be zero where a row is absent. */
template <int NW>
__device__ __forceinline__ void tile_weighted_sum(float2 acc[ROWS][NW], const float *weight,
                                                  const uint32_t *rows, int stride, int words, int count) {
    const int lane = threadIdx.x % 32;
    for (int j = 0; j < count; j += 4) {
        float2 v[4][NW];
#pragma unroll
        for (int jj = 0; jj < 4; jj++)
#pragma unroll
            for (int i = 0; i < NW; i++) {
                int w = lane + 32 * i;
                uint32_t raw = w < words ? rows[(j + jj) * stride + w] : 0u;
                v[jj][i] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw));
            }
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float4 p = *reinterpret_cast<const float4 *>(weight + r * TILE + j);
#pragma unroll
            for (int i = 0; i < NW; i++) {
                acc[r][i].x += p.x * v[0][i].x + p.y * v[1][i].x + p.z * v[2][i].x + p.w * v[3][i].x;
                acc[r][i].y += p.x * v[0][i].y + p.y * v[1][i].y + p.z * v[2][i].y + p.w * v[3][i].y;
            }
        }
    }
}

template <int NW>
__device__ __forceinline__ void store_row(bf16 *dst, const float2 acc[NW], float factor, int words) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < NW; i++) {
        int w = lane + 32 * i;
        if (w < words)
            reinterpret_cast<__nv_bfloat162 *>(dst)[w] = __floats2bfloat162_rn(acc[i].x * factor, acc[i].y * factor);
    }
}

/* ---- forward: block (query tile, head, sequence) ---- */

template <int NW>
__global__ void __launch_bounds__(THREADS) attention_forward(bf16 *out, float *lse, const bf16 *q,
                                                             const bf16 *k, const bf16 *v, geometry g) {
    extern __shared__ uint4 smem[];
    uint32_t *qs = reinterpret_cast<uint32_t *>(smem);  /* [TILE][words] */
    uint32_t *ks = qs + TILE * g.words;                 /* [TILE][padded] */
    uint32_t *vs = ks + TILE * g.padded;                /* [TILE][words] */
    float *ps = reinterpret_cast<float *>(vs + TILE * g.words); /* [WARPS][ROWS][TILE] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int qt = (gridDim.x - 1 - blockIdx.x) * TILE; /* the longest tiles start first */
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (g.heads / g.kv_heads);
    const bf16 *qb = q + (size_t)b * g.q_rows * g.q_stride + (size_t)h * g.head_dim;
    const bf16 *kb = k + (size_t)b * g.seq * g.kv_stride + (size_t)kvh * g.head_dim;
    const bf16 *vb = v + (size_t)b * g.seq * g.kv_stride + (size_t)kvh * g.head_dim;
    const float scale_log2 = g.scale * LOG2E;
    float *my_p = ps + warp * ROWS * TILE;

    load_tile(qs, g.words, qb, g.q_stride, qt, g.q_rows - qt, g.vecs);
    float m[ROWS], l[ROWS];
    float2 acc[ROWS][NW];
    int lo[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        lo[r] = first_key(g, b, g.q0 + qt + warp * ROWS + r);
#pragma unroll
        for (int i = 0; i < NW; i++) acc[r][i] = make_float2(0.0f, 0.0f);
    }
    const int key_end = min(g.kv_rows, g.q0 + qt + TILE);
    for (int k0 = first_key(g, b, g.q0 + qt) / TILE * TILE; k0 < key_end; k0 += TILE) {
        __syncthreads(); /* the previous tile is consumed */
        load_tile(ks, g.padded, kb, g.kv_stride, k0, g.kv_rows - k0, g.vecs);
        load_tile(vs, g.words, vb, g.kv_stride, k0, g.kv_rows - k0, g.vecs);
        __syncthreads();
        float s[ROWS][2];
        tile_dots(s, qs + warp * ROWS * g.words, g.words, ks, g.padded, g.vecs);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int i = g.q0 + qt + warp * ROWS + r;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                int j = k0 + lane + 32 * c;
                float slope;
                s[r][c] = j <= i && j >= lo[r] && j < g.kv_rows ? score_log2(g, s[r][c], scale_log2, &slope) : -INFINITY;
            }
            float m_new = fmaxf(m[r], warp_max(fmaxf(s[r][0], s[r][1])));
            float base = m_new == -INFINITY ? 0.0f : m_new; /* no visible key yet: keep zeros */
            float shrink = exp2f(m[r] - base);
            float p0 = exp2f(s[r][0] - base), p1 = exp2f(s[r][1] - base);
            l[r] = l[r] * shrink + warp_sum(p0 + p1);
            m[r] = m_new;
#pragma unroll
            for (int i2 = 0; i2 < NW; i2++) {
                acc[r][i2].x *= shrink;
                acc[r][i2].y *= shrink;
            }
            my_p[r * TILE + lane] = p0;
            my_p[r * TILE + lane + 32] = p1;
        }
        __syncwarp();
        tile_weighted_sum<NW>(acc, my_p, vs, g.words, g.words, (min(TILE, key_end - k0) + 3) / 4 * 4);
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int i = qt + warp * ROWS + r;
        if (i >= g.q_rows) continue;
        float shrink = 1.0f;
        if (g.sinks) { /* the sink's column, last */
            float sink = g.sinks[h] * LOG2E, m_new = fmaxf(m[r], sink);
            shrink = exp2f(m[r] - m_new);
            l[r] = l[r] * shrink + exp2f(sink - m_new);
            m[r] = m_new;
        }
        store_row<NW>(out + ((size_t)b * g.q_rows + i) * g.q_stride + (size_t)h * g.head_dim, acc[r],
                      shrink / l[r], g.words);
        if (lane == 0) lse[lse_index(g, b, h, i)] = (m[r] + log2f(l[r])) * LN2;
    }
}

/* The sinks folded into an attention computed without them (cuDNN's, attention_dispatch.c): each
 * row's lse' = logaddexp(lse, sink) and out *= exp(lse - lse'), the softmax with the sink's column
 * and its statistics. One warp per (query row, head); the lanes read lse before lane 0 rewrites it. */
__global__ void attention_sinks_fold(bf16 *out, float *lse, int n, geometry g) {
    size_t item = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (item >= (size_t)n * g.heads) return;
    size_t row = item / g.heads;
    int h = (int)(item % g.heads);
    float *at = lse + lse_index(g, (int)(row / g.q_rows), h, (int)(row % g.q_rows));
    const float before = *at, sink = g.sinks[h], top = fmaxf(before, sink);
    const float after = top + logf(expf(before - top) + expf(sink - top)), keep = expf(before - after);
    __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(out + row * g.q_stride + (size_t)h * g.head_dim);
    for (int w = lane; w < g.words; w += 32) {
        float2 x = __bfloat1622float2(o[w]);
        o[w] = __floats2bfloat162_rn(x.x * keep, x.y * keep);
    }
    __syncwarp();
    if (lane == 0) *at = after;
}

/* ---- backward ---- */

/* delta[b, h, i] = dout_i . out_i, one warp per (query row, head) */
__global__ void attention_delta(float *delta, const bf16 *dout, const bf16 *out, int n, geometry g) {
    size_t item = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (item >= (size_t)n * g.heads) return;
    size_t row = item / g.heads;
    int h = (int)(item % g.heads);
    const __nv_bfloat162 *a = reinterpret_cast<const __nv_bfloat162 *>(dout + row * g.q_stride + (size_t)h * g.head_dim);
    const __nv_bfloat162 *o = reinterpret_cast<const __nv_bfloat162 *>(out + row * g.q_stride + (size_t)h * g.head_dim);
    float sum = 0.0f;
    for (int w = lane; w < g.words; w += 32) {
        float2 x = __bfloat1622float2(a[w]), y = __bfloat1622float2(o[w]);
        sum += x.x * y.x + x.y * y.y;
    }
    sum = warp_sum(sum);
    int b = (int)(row / g.q_rows), i = (int)(row % g.q_rows);
    if (lane == 0) delta[((size_t)b * g.heads + h) * g.q_rows + i] = sum;
}

/* dsinks[h] -= sum over the rows of p_sink delta, p_sink = exp(sink - lse): block h, rows in a fixed
 * order a thread. */
__global__ void attention_dsinks(const float *delta, const float *lse, int batch, geometry g) {
    const int h = blockIdx.x;
    const float sink = g.sinks[h];
    float sum = 0.0f;
    for (int row = threadIdx.x; row < batch * g.q_rows; row += blockDim.x) {
        int b = row / g.q_rows, i = row % g.q_rows;
        sum += expf(sink - lse[lse_index(g, b, h, i)]) * delta[((size_t)b * g.heads + h) * g.q_rows + i];
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) g.dsinks[h] -= sum;
}

/* dq_i = scale * sum_j ds_ij k_j with ds = p (dout_i . v_j - delta_i): block (query tile, head,
 * sequence), streaming key tiles. */
template <int NW>
__global__ void __launch_bounds__(THREADS) attention_dq(bf16 *dq, const bf16 *dout, const float *lse,
                                                        const float *delta, const bf16 *q, const bf16 *k,
                                                        const bf16 *v, geometry g) {
    extern __shared__ uint4 smem[];
    uint32_t *qs = reinterpret_cast<uint32_t *>(smem); /* [TILE][words] */
    uint32_t *dos = qs + TILE * g.words;               /* [TILE][words] */
    uint32_t *ks = dos + TILE * g.words;               /* [TILE][padded] */
    uint32_t *vs = ks + TILE * g.padded;               /* [TILE][padded] */
    float *ps = reinterpret_cast<float *>(vs + TILE * g.padded); /* [WARPS][ROWS][TILE] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int qt = (gridDim.x - 1 - blockIdx.x) * TILE;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (g.heads / g.kv_heads);
    const size_t q_at = (size_t)b * g.q_rows * g.q_stride + (size_t)h * g.head_dim;
    const size_t kv_at = (size_t)b * g.seq * g.kv_stride + (size_t)kvh * g.head_dim;
    const float scale_log2 = g.scale * LOG2E;
    const float *delta_bh = delta + ((size_t)b * g.heads + h) * g.q_rows;
    float *my_ds = ps + warp * ROWS * TILE;

    load_tile(qs, g.words, q + q_at, g.q_stride, qt, g.q_rows - qt, g.vecs);
    load_tile(dos, g.words, dout + q_at, g.q_stride, qt, g.q_rows - qt, g.vecs);
    float lse2[ROWS], dl[ROWS];
    float2 acc[ROWS][NW];
    int lo[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        int i = min(qt + warp * ROWS + r, g.q_rows - 1);
        lse2[r] = lse[lse_index(g, b, h, i)] * LOG2E;
        dl[r] = delta_bh[i];
        lo[r] = first_key(g, b, g.q0 + qt + warp * ROWS + r);
#pragma unroll
        for (int i2 = 0; i2 < NW; i2++) acc[r][i2] = make_float2(0.0f, 0.0f);
    }
    const int key_end = min(g.kv_rows, g.q0 + qt + TILE);
    for (int k0 = first_key(g, b, g.q0 + qt) / TILE * TILE; k0 < key_end; k0 += TILE) {
        __syncthreads();
        load_tile(ks, g.padded, k + kv_at, g.kv_stride, k0, g.kv_rows - k0, g.vecs);
        load_tile(vs, g.padded, v + kv_at, g.kv_stride, k0, g.kv_rows - k0, g.vecs);
        __syncthreads();
        float s[ROWS][2], dp[ROWS][2];
        tile_dots(s, qs + warp * ROWS * g.words, g.words, ks, g.padded, g.vecs);
        tile_dots(dp, dos + warp * ROWS * g.words, g.words, vs, g.padded, g.vecs);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int il = qt + warp * ROWS + r, i = g.q0 + il;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                int j = k0 + lane + 32 * c;
                float slope, x = score_log2(g, s[r][c], scale_log2, &slope);
                float p = j <= i && j >= lo[r] && j < g.kv_rows && il < g.q_rows ? exp2f(x - lse2[r]) : 0.0f;
                my_ds[r * TILE + lane + 32 * c] = p * (dp[r][c] - dl[r]) * slope;
            }
        }
        __syncwarp();
        tile_weighted_sum<NW>(acc, my_ds, ks, g.padded, g.words, (min(TILE, key_end - k0) + 3) / 4 * 4);
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int i = qt + warp * ROWS + r;
        if (i < g.q_rows) store_row<NW>(dq + q_at + (size_t)i * g.q_stride, acc[r], g.scale, g.words);
    }
}

/* dv_j = sum_i p_ij dout_i and dk_j = scale * sum_i ds_ij q_i over every query head of the kv
 * head's group: block (key tile, kv head, sequence), streaming query tiles from the first query
 * that sees the key tile on. */
template <int NW>
__global__ void __launch_bounds__(THREADS) attention_dkv(bf16 *dk, bf16 *dv, const bf16 *dout,
                                                         const float *lse, const float *delta,
                                                         const bf16 *q, const bf16 *k, const bf16 *v,
                                                         geometry g) {
    extern __shared__ uint4 smem[];
    uint32_t *ks = reinterpret_cast<uint32_t *>(smem); /* [TILE][words] */
    uint32_t *vs = ks + TILE * g.words;                /* [TILE][words] */
    uint32_t *qs = vs + TILE * g.words;                /* [TILE][padded] */
    uint32_t *dos = qs + TILE * g.padded;              /* [TILE][padded] */
    float *ps = reinterpret_cast<float *>(dos + TILE * g.padded); /* [WARPS][ROWS][TILE] */
    float *dss = ps + WARPS * ROWS * TILE;             /* [WARPS][ROWS][TILE] */
    float *lse2s = dss + WARPS * ROWS * TILE;          /* [TILE] */
    float *deltas = lse2s + TILE;                      /* [TILE] */
    int *los = reinterpret_cast<int *>(deltas + TILE); /* [TILE]: each query row's first key */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int k0 = blockIdx.x * TILE; /* the longest tiles (first keys) start first */
    const int kvh = blockIdx.y, b = blockIdx.z, group = g.heads / g.kv_heads;
    const size_t kv_at = (size_t)b * g.seq * g.kv_stride + (size_t)kvh * g.head_dim;
    const float scale_log2 = g.scale * LOG2E;
    float *my_p = ps + warp * ROWS * TILE, *my_ds = dss + warp * ROWS * TILE;

    load_tile(ks, g.words, k + kv_at, g.kv_stride, k0, g.kv_rows - k0, g.vecs);
    load_tile(vs, g.words, v + kv_at, g.kv_stride, k0, g.kv_rows - k0, g.vecs);
    float2 acc_k[ROWS][NW], acc_v[ROWS][NW];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int i2 = 0; i2 < NW; i2++) acc_k[r][i2] = acc_v[r][i2] = make_float2(0.0f, 0.0f);

    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        const size_t q_at = (size_t)b * g.q_rows * g.q_stride + (size_t)h * g.head_dim;
        const size_t stat_at = ((size_t)b * g.heads + h) * g.q_rows;
        const int key_last = min(g.kv_rows, k0 + TILE) - 1;
        /* Segments and windows start in row order: once a query tile's first row starts after this
         * tile's last key, no later query sees any of its keys. */
        for (int qt = max(0, k0 - g.q0); qt < g.q_rows && first_key(g, b, g.q0 + qt) <= key_last; qt += TILE) {
            __syncthreads();
            load_tile(qs, g.padded, q + q_at, g.q_stride, qt, g.q_rows - qt, g.vecs);
            load_tile(dos, g.padded, dout + q_at, g.q_stride, qt, g.q_rows - qt, g.vecs);
            if (threadIdx.x < TILE) {
                int i = qt + threadIdx.x;
                lse2s[threadIdx.x] = i < g.q_rows ? lse[lse_index(g, b, h, i)] * LOG2E : 0.0f;
                deltas[threadIdx.x] = i < g.q_rows ? delta[stat_at + i] : 0.0f;
                los[threadIdx.x] = first_key(g, b, g.q0 + i);
            }
            __syncthreads();
            float s[ROWS][2], dp[ROWS][2];
            tile_dots(s, ks + warp * ROWS * g.words, g.words, qs, g.padded, g.vecs);
            tile_dots(dp, vs + warp * ROWS * g.words, g.words, dos, g.padded, g.vecs);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const int j = k0 + warp * ROWS + r;
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int t = lane + 32 * c, il = qt + t;
                    float slope, x = score_log2(g, s[r][c], scale_log2, &slope);
                    float p = g.q0 + il >= j && j >= los[t] && il < g.q_rows ? exp2f(x - lse2s[t]) : 0.0f;
                    my_p[r * TILE + t] = p;
                    my_ds[r * TILE + t] = p * (dp[r][c] - deltas[t]) * slope;
                }
            }
            __syncwarp();
            int count = (min(TILE, g.q_rows - qt) + 3) / 4 * 4;
            tile_weighted_sum<NW>(acc_v, my_p, dos, g.padded, g.words, count);
            tile_weighted_sum<NW>(acc_k, my_ds, qs, g.padded, g.words, count);
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int j = k0 + warp * ROWS + r;
        if (j >= g.kv_rows) continue;
        store_row<NW>(dk + kv_at + (size_t)j * g.kv_stride, acc_k[r], g.scale, g.words);
        store_row<NW>(dv + kv_at + (size_t)j * g.kv_stride, acc_v[r], 1.0f, g.words);
    }
}

/* ---- launchers ---- */

static mt_status check_dims(mt_attn_dims dims, const mt_attn_params *params) {
    if (params && (params->window < 0 || params->scale < 0.0f || params->softcap < 0.0f))
        return mt_fail(MT_ERR_INVALID, "attention: window %d, scale %g or soft cap %g negative", params->window,
                       (double)params->scale, (double)params->softcap);
    if (dims.head_dim % 8 != 0 || dims.head_dim > MAX_HEAD_DIM || dims.kv_heads <= 0 ||
        dims.heads % dims.kv_heads != 0)
        return mt_fail(MT_ERR_INVALID,
                       "attention: head_dim %d (need a multiple of 8, at most %d) or heads %d / "
                       "kv_heads %d unsupported", dims.head_dim, MAX_HEAD_DIM, dims.heads, dims.kv_heads);
    if (dims.q_len < 0 || (dims.q_len > 0 && (dims.q0 < 0 || dims.q0 + dims.q_len > dims.seq)))
        return mt_fail(MT_ERR_INVALID, "attention: a window of %d queries from position %d lies outside the "
                       "sequence of %d", dims.q_len, dims.q0, dims.seq);
    return MT_OK;
}

/* Words of a lane's share of one row in the weighted sums: head_dim <= 64 * NW. */
static int words_per_lane(int head_dim) { return head_dim <= 64 ? 1 : head_dim <= 128 ? 2 : 4; }

/* Kernels here use more than the default 48 KB of dynamic shared memory. */
template <typename Kernel>
static mt_status allow_smem(Kernel kernel, size_t bytes) {
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return MT_OK;
}

template <int NW>
static mt_status forward(cudaStream_t s, void *out, float *lse, const void *q, const void *k,
                         const void *v, geometry g, int batch) {
    size_t smem = (size_t)TILE * (2 * g.words + g.padded) * 4 + (size_t)WARPS * ROWS * TILE * 4;
    MT_TRY(allow_smem(attention_forward<NW>, smem));
    dim3 grid((g.q_rows + TILE - 1) / TILE, g.heads, batch);
    attention_forward<NW><<<grid, THREADS, smem, s>>>((bf16 *)out, lse, (const bf16 *)q,
                                                      (const bf16 *)k, (const bf16 *)v, g);
    return launch_status("attention");
}

/* Blocks of 256 threads for one warp per (query row, head) of batch sequences. */
static unsigned warp_blocks(geometry g, int batch) {
    size_t warps = (size_t)batch * g.q_rows * g.heads;
    return (unsigned)((warps * 32 + 255) / 256);
}

/* delta = dout . out per (query row, head), and the sinks' gradient from it where g asks. */
static mt_status delta_and_dsinks(cudaStream_t s, const void *dout, const void *out, const float *lse, geometry g,
                                  int batch, float *delta) {
    attention_delta<<<warp_blocks(g, batch), 256, 0, s>>>(delta, (const bf16 *)dout, (const bf16 *)out,
                                                         batch * g.q_rows, g);
    MT_TRY(launch_status("attention delta"));
    if (g.sinks && g.dsinks) {
        attention_dsinks<<<g.heads, 256, 0, s>>>(delta, lse, batch, g);
        MT_TRY(launch_status("attention dsinks"));
    }
    return MT_OK;
}

template <int NW>
static mt_status backward(cudaStream_t s, void *dq, void *dk, void *dv, const void *dout,
                          const void *out, const float *lse, const void *q, const void *k,
                          const void *v, geometry g, int batch, float *delta) {
    MT_TRY(delta_and_dsinks(s, dout, out, lse, g, batch, delta));

    size_t dq_smem = (size_t)TILE * (2 * g.words + 2 * g.padded) * 4 + (size_t)WARPS * ROWS * TILE * 4;
    MT_TRY(allow_smem(attention_dq<NW>, dq_smem));
    dim3 dq_grid((g.q_rows + TILE - 1) / TILE, g.heads, batch);
    attention_dq<NW><<<dq_grid, THREADS, dq_smem, s>>>((bf16 *)dq, (const bf16 *)dout, lse, delta,
                                                        (const bf16 *)q, (const bf16 *)k,
                                                        (const bf16 *)v, g);
    MT_TRY(launch_status("attention dq"));

    size_t dkv_smem = (size_t)TILE * (2 * g.words + 2 * g.padded) * 4 +
                      (size_t)2 * WARPS * ROWS * TILE * 4 + 3 * TILE * 4;
    MT_TRY(allow_smem(attention_dkv<NW>, dkv_smem));
    dim3 dkv_grid((g.kv_rows + TILE - 1) / TILE, g.kv_heads, batch);
    attention_dkv<NW><<<dkv_grid, THREADS, dkv_smem, s>>>((bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                                                           lse, delta, (const bf16 *)q,
                                                           (const bf16 *)k, (const bf16 *)v, g);
    return launch_status("attention dk/dv");
}

extern "C" mt_status mt_cuda_attention(cudaStream_t s, void *out, float *lse, const void *q,
                                       const void *k, const void *v, mt_attn_dims dims,
                                       const mt_attn_params *params, const int32_t *pos) {
    MT_TRY(check_dims(dims, params));
    if (dims.batch == 0 || dims.seq == 0) return MT_OK;
    geometry g = geometry_of(dims, params, pos);
    switch (words_per_lane(dims.head_dim)) {
    case 1: return forward<1>(s, out, lse, q, k, v, g, dims.batch);
    case 2: return forward<2>(s, out, lse, q, k, v, g, dims.batch);
    default: return forward<4>(s, out, lse, q, k, v, g, dims.batch);
    }
}

/* workspace: delta [batch, heads, q rows] floats */
extern "C" size_t mt_cuda_attention_workspace(mt_attn_dims dims) {
    return mt_cuda_attention_workspace_bytes(dims.batch, dims.heads, mt_attn_q_rows(dims));
}

extern "C" mt_status mt_cuda_attention_dx(cudaStream_t s, void *dq, void *dk, void *dv,
                                          const void *dout, const void *out, const float *lse,
                                          const void *q, const void *k, const void *v,
                                          mt_attn_dims dims, const mt_attn_params *params,
                                          const int32_t *pos, void *workspace) {
    MT_TRY(check_dims(dims, params));
    if (dims.batch == 0 || dims.seq == 0) return MT_OK;
    geometry g = geometry_of(dims, params, pos);
    float *delta = (float *)workspace;
    switch (words_per_lane(dims.head_dim)) {
    case 1: return backward<1>(s, dq, dk, dv, dout, out, lse, q, k, v, g, dims.batch, delta);
    case 2: return backward<2>(s, dq, dk, dv, dout, out, lse, q, k, v, g, dims.batch, delta);
    default: return backward<4>(s, dq, dk, dv, dout, out, lse, q, k, v, g, dims.batch, delta);
    }
}

extern "C" mt_status mt_cuda_attention_sinks_fold(cudaStream_t s, void *out, float *lse, mt_attn_dims dims,
                                                  const mt_attn_params *params, const int32_t *pos) {
    MT_TRY(check_dims(dims, params));
    if (dims.batch == 0 || dims.seq == 0) return MT_OK;
    geometry g = geometry_of(dims, params, pos);
    attention_sinks_fold<<<warp_blocks(g, dims.batch), 256, 0, s>>>((bf16 *)out, lse, dims.batch * g.q_rows, g);
    return launch_status("attention sinks");
}

extern "C" mt_status mt_cuda_attention_sinks_dx(cudaStream_t s, const void *dout, const void *out, const float *lse,
                                                mt_attn_dims dims, const mt_attn_params *params, const int32_t *pos,
                                                void *workspace) {
    MT_TRY(check_dims(dims, params));
    if (dims.batch == 0 || dims.seq == 0) return MT_OK;
    return delta_and_dsinks(s, dout, out, lse, geometry_of(dims, params, pos), dims.batch, (float *)workspace);
}
