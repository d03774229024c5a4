/* Causal grouped-query attention, scale 1/sqrt(head_dim). Query head h reads kv head
 * h / (heads / kv_heads); query position i sees keys 0..i of its own sequence. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* Keys are taken a tile at a time: a tile's scores are independent dot products that the CPU
 * overlaps, the softmax rescales once per tile, and in the backward a tile's dk and dv rows
 * stay in L1 while every query that sees them streams past. */
enum { KEY_TILE = 16 };

static float dot(const float *restrict a, const float *restrict b, int len) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < len; j++) s += a[j] * b[j];
    return s;
}

static void axpy(float *restrict y, float alpha, const float *restrict x, int len) {
    for (int j = 0; j < len; j++) y[j] += alpha * x[j];
}

static int min_int(int a, int b) { return a < b ? a : b; }

/* One query row against keys 0..keys-1 with an online (running-max) softmax, accumulating
 * straight into the output row, so no score buffer beyond a tile is needed. Returns the
 * log-sum-exp of the scaled scores. */
static float attend_row(float *restrict o, const float *restrict qi, const float *k, const float *v,
                        size_t kv_stride, int keys, int head_dim, float scale) {
    float max = -INFINITY, sum = 0.0f, s[KEY_TILE];
    memset(o, 0, (size_t)head_dim * sizeof *o);
    for (int t0 = 0; t0 < keys; t0 += KEY_TILE) {
        int len = min_int(KEY_TILE, keys - t0);
        float tile_max = -INFINITY;
        for (int t = 0; t < len; t++) {
            s[t] = dot(qi, k + (t0 + t) * kv_stride, head_dim) * scale;
            tile_max = fmaxf(tile_max, s[t]);
        }
        if (tile_max > max) {
            float shrink = expf(max - tile_max); /* rescale what was summed under the old max */
            sum *= shrink;
            for (int j = 0; j < head_dim; j++) o[j] *= shrink;
            max = tile_max;
        }
        for (int t = 0; t < len; t++) {
            float p = expf(s[t] - max);
            sum += p;
            axpy(o, p, v + (t0 + t) * kv_stride, head_dim);
        }
    }
    for (int j = 0; j < head_dim; j++) o[j] /= sum;
    return max + logf(sum);
}

void mt_cpu_attention(float *out, float *lse, const float *q, const float *k, const float *v, mt_attn_dims dims) {
    const int seq = dims.seq, heads = dims.heads, hd = dims.head_dim;
    const int group = heads / dims.kv_heads;
    const size_t q_stride = (size_t)heads * hd, kv_stride = (size_t)dims.kv_heads * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < dims.batch; b++) {
        for (int h = 0; h < heads; h++) {
            size_t row0 = (size_t)b * seq, kv_at = row0 * kv_stride + (size_t)(h / group) * hd;
            float *lse_bh = lse + ((size_t)b * heads + h) * seq;
            for (int i = 0; i < seq; i++) {
                size_t at = (row0 + i) * q_stride + (size_t)h * hd;
                lse_bh[i] = attend_row(out + at, q + at, k + kv_at, v + kv_at, kv_stride, i + 1, hd, scale);
            }
        }
    }
}

/* workspace: delta[batch, heads, seq] = dout . out per query row (the softmax backward's
 * row constant), computed once instead of once per key tile. */
size_t mt_cpu_attention_workspace(mt_attn_dims dims) {
    return (size_t)dims.batch * dims.heads * dims.seq * sizeof(float);
}

static void attention_delta(float *delta, const float *dout, const float *out, mt_attn_dims dims) {
    const int seq = dims.seq, heads = dims.heads, hd = dims.head_dim;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < dims.batch * seq; r++) {
        int b = r / seq, i = r % seq;
        for (int h = 0; h < heads; h++) {
            size_t at = ((size_t)r * heads + h) * hd;
            delta[((size_t)b * heads + h) * seq + i] = dot(dout + at, out + at, hd);
        }
    }
}

/* With p = exp(s - lse) and ds = p * (dout_i . v_t - delta_i):
 * dv_t += p dout_i, dq_i += scale ds k_t, dk_t += scale ds q_i. Each task owns one
 * (sequence, kv head), with the dq rows of its group's query heads, and walks key tiles, then
 * query heads, then queries in order, so every sum has a fixed order. */
void mt_cpu_attention_dx(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v,
                         mt_attn_dims dims, void *workspace) {
    const int seq = dims.seq, heads = dims.heads, hd = dims.head_dim;
    const int group = heads / dims.kv_heads;
    const size_t q_stride = (size_t)heads * hd, kv_stride = (size_t)dims.kv_heads * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *delta = workspace;
    attention_delta(delta, dout, out, dims);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < dims.batch; b++) {
        for (int g = 0; g < dims.kv_heads; g++) {
            size_t row0 = (size_t)b * seq, kv_at = row0 * kv_stride + (size_t)g * hd;
            const float *kb = k + kv_at, *vb = v + kv_at;
            float *dkb = dk + kv_at, *dvb = dv + kv_at;
            for (int t = 0; t < seq; t++) {
                memset(dkb + t * kv_stride, 0, (size_t)hd * sizeof *dk);
                memset(dvb + t * kv_stride, 0, (size_t)hd * sizeof *dv);
                memset(dq + (row0 + t) * q_stride + (size_t)g * group * hd, 0, (size_t)group * hd * sizeof *dq);
            }
            for (int t0 = 0; t0 < seq; t0 += KEY_TILE) {
                int len = min_int(KEY_TILE, seq - t0);
                for (int h = g * group; h < (g + 1) * group; h++) {
                    const float *lse_bh = lse + ((size_t)b * heads + h) * seq;
                    const float *delta_bh = delta + ((size_t)b * heads + h) * seq;
                    for (int i = t0; i < seq; i++) {
                        size_t at = (row0 + i) * q_stride + (size_t)h * hd;
                        const float *qi = q + at, *doi = dout + at;
                        int visible = min_int(len, i - t0 + 1); /* causal: keys t0..i */
                        float p[KEY_TILE], ds[KEY_TILE];
                        for (int t = 0; t < visible; t++) {
                            const float *kt = kb + (t0 + t) * kv_stride, *vt = vb + (t0 + t) * kv_stride;
                            p[t] = expf(dot(qi, kt, hd) * scale - lse_bh[i]);
                            ds[t] = p[t] * (dot(doi, vt, hd) - delta_bh[i]) * scale;
                        }
                        for (int t = 0; t < visible; t++) {
                            size_t kv_t = (size_t)(t0 + t) * kv_stride;
                            axpy(dvb + kv_t, p[t], doi, hd);
                            axpy(dkb + kv_t, ds[t], qi, hd);
                            axpy(dq + at, ds[t], kb + kv_t, hd);
                        }
                    }
                }
            }
        }
    }
}
