/* The gated delta rule as transformers' torch_recurrent_gated_delta_rule writes it: per value head a
 * state S [d_k, d_v] in fp32, token by token,
 *     S' = exp(g_t) S;  kv = S'^T k_t;  delta = beta_t (v_t - kv);  S = S' + k_t delta^T;  o_t = S^T q_t,
 * S zero before each segment's first row. One thread a head.
 *
 * The backward runs each segment's tokens in reverse with dS, the gradient of the state:
 *     dS += q_t do_t^T;  dq_t = S do_t;  ddelta = dS^T k_t;  dk_t = dS delta + S' dkv;
 *     dv_t = beta_t ddelta;  dbeta_t = ddelta . (v_t - kv);  dkv = -beta_t ddelta;
 *     dS' = dS + k_t dkv^T;  dg_t = sum(S' * dS');  dS = exp(g_t) dS'
 * It needs the state before each token: the forward's states at every MT_CPU_GDN_CHUNK-th token of a
 * segment are kept in the workspace, and a chunk's states recomputed from them. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

enum { CHUNK = MT_CPU_GDN_CHUNK };

static int segment_count(const mt_gdn_dims *d) { return d->seg ? d->seg->count : (d->n + d->seq - 1) / d->seq; }
static void segment_rows(const mt_gdn_dims *d, int i, int *a, int *e) {
    *a = d->seg ? d->seg->starts[i] : i * d->seq;
    *e = d->seg ? d->seg->starts[i + 1] : (i + 1) * d->seq < d->n ? (i + 1) * d->seq : d->n;
}

/* Checkpoints a head: one a chunk of each segment, at most n / CHUNK + segments. */
static size_t checkpoints(const mt_gdn_dims *d) { return (size_t)d->n / CHUNK + (size_t)segment_count(d); }
static size_t state_size(const mt_gdn_dims *d) { return (size_t)d->d_k * d->d_v; }

/* One head's states: its checkpoints, a chunk's states before and after each token, and dS. */
static size_t head_states(const mt_gdn_dims *d) { return checkpoints(d) + CHUNK + 2; }
static float *head_workspace(void *workspace, const mt_gdn_dims *d, int h) {
    return (float *)workspace + (size_t)h * head_states(d) * state_size(d);
}

size_t mt_cpu_gdn_rule_workspace(mt_gdn_dims d) {
    return (size_t)d.v_heads * head_states(&d) * state_size(&d) * sizeof(float);
}

/* The token's update of S in place; kv and delta [d_v] are left for the backward. */
static void step(float *S, float *kv, float *delta, const float *k, const float *v, float g, float beta, int dk,
                 int dv) {
    float a = expf(g);
    for (int c = 0; c < dv; c++) kv[c] = 0.0f;
    for (int i = 0; i < dk; i++)
        for (int c = 0; c < dv; c++) {
            S[(size_t)i * dv + c] *= a;
            kv[c] += S[(size_t)i * dv + c] * k[i];
        }
    for (int c = 0; c < dv; c++) delta[c] = beta * (v[c] - kv[c]);
    for (int i = 0; i < dk; i++)
        for (int c = 0; c < dv; c++) S[(size_t)i * dv + c] += k[i] * delta[c];
}

void mt_cpu_gdn_rule(float *o, const float *q, const float *k, const float *v, const float *g, const float *beta,
                     mt_gdn_dims d, void *workspace) {
    int H = d.v_heads, dk = d.d_k, dv = d.d_v, segs = segment_count(&d);
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float *S = head_workspace(workspace, &d, h), kv[dv], delta[dv];
        for (int sgi = 0; sgi < segs; sgi++) {
            int a, e;
            segment_rows(&d, sgi, &a, &e);
            memset(S, 0, state_size(&d) * sizeof *S);
            for (int t = a; t < e; t++) {
                size_t th = (size_t)t * H + h;
                step(S, kv, delta, k + th * dk, v + (size_t)t * d.v_ld + (size_t)h * dv, g[th], beta[th], dk, dv);
                for (int c = 0; c < dv; c++) {
                    float sum = 0.0f;
                    for (int i = 0; i < dk; i++) sum += S[(size_t)i * dv + c] * q[th * dk + i];
                    o[th * dv + c] = sum;
                }
            }
        }
    }
}

/* One token's backward (the header's equations); dS holds the gradient of the state after token t
 * on entry and before it on return. */
static void step_dx(float *dS, float *dq, float *dk, float *dv, float *dg, float *dbeta, const float *prev,
                    const float *S, const float *q, const float *k, const float *v, const float *dout, float g,
                    float beta, int nk, int nv) {
    float a = expf(g), kv[nv], delta[nv], ddelta[nv];
    for (int c = 0; c < nv; c++) {
        kv[c] = 0.0f;
        for (int i = 0; i < nk; i++) kv[c] += a * prev[(size_t)i * nv + c] * k[i];
        delta[c] = beta * (v[c] - kv[c]);
    }
    for (int i = 0; i < nk; i++) {
        float sum = 0.0f;
        for (int c = 0; c < nv; c++) {
            dS[(size_t)i * nv + c] += q[i] * dout[c];
            sum += S[(size_t)i * nv + c] * dout[c];
        }
        dq[i] = sum;
    }
    float db = 0.0f;
    for (int c = 0; c < nv; c++) {
        float sum = 0.0f;
        for (int i = 0; i < nk; i++) sum += dS[(size_t)i * nv + c] * k[i];
        ddelta[c] = sum;
        dv[c] = beta * sum;
        db += sum * (v[c] - kv[c]);
    }
    *dbeta = db;
    float dgs = 0.0f;
    for (int i = 0; i < nk; i++) {
        float sum = 0.0f;
        for (int c = 0; c < nv; c++) {
            size_t ic = (size_t)i * nv + c;
            float dkv = -beta * ddelta[c], Sp = a * prev[ic];
            sum += dS[ic] * delta[c] + Sp * dkv;
            dS[ic] += k[i] * dkv;
            dgs += Sp * dS[ic];
            dS[ic] *= a;
        }
        dk[i] = sum;
    }
    *dg = dgs;
}

void mt_cpu_gdn_rule_dx(float *dq, float *dk, float *dv, float *dg, float *dbeta, const float *dout, const float *q,
                        const float *k, const float *v, const float *g, const float *beta, mt_gdn_dims d,
                        void *workspace) {
    int H = d.v_heads, nk = d.d_k, nv = d.d_v, segs = segment_count(&d);
    size_t ss = state_size(&d);
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float *ckpt = head_workspace(workspace, &d, h), *states = ckpt + checkpoints(&d) * ss;
        float *dS = states + (CHUNK + 1) * ss, kv[nv], delta[nv];
        for (int sgi = 0; sgi < segs; sgi++) {
            int a, e;
            segment_rows(&d, sgi, &a, &e);
            /* The forward, keeping the state before every chunk's first token. */
            memset(states, 0, ss * sizeof *states);
            for (int t = a; t < e; t++) {
                size_t th = (size_t)t * H + h;
                if ((t - a) % CHUNK == 0) memcpy(ckpt + (size_t)((t - a) / CHUNK) * ss, states, ss * sizeof *states);
                step(states, kv, delta, k + th * nk, v + (size_t)t * d.v_ld + (size_t)h * nv, g[th], beta[th], nk, nv);
            }
            memset(dS, 0, ss * sizeof *dS);
            for (int c0 = a + (e - 1 - a) / CHUNK * CHUNK; c0 >= a; c0 -= CHUNK) {
                int c1 = c0 + CHUNK < e ? c0 + CHUNK : e;
                memcpy(states, ckpt + (size_t)((c0 - a) / CHUNK) * ss, ss * sizeof *states);
                for (int t = c0; t < c1; t++) {
                    size_t th = (size_t)t * H + h;
                    float *S = states + (size_t)(t - c0 + 1) * ss;
                    memcpy(S, S - ss, ss * sizeof *S);
                    step(S, kv, delta, k + th * nk, v + (size_t)t * d.v_ld + (size_t)h * nv, g[th], beta[th], nk, nv);
                }
                for (int t = c1 - 1; t >= c0; t--) {
                    size_t th = (size_t)t * H + h, tv = (size_t)t * d.v_ld + (size_t)h * nv;
                    const float *S = states + (size_t)(t - c0 + 1) * ss;
                    step_dx(dS, dq + th * nk, dk + th * nk, dv + tv, dg + th, dbeta + th, S - ss, S, q + th * nk,
                            k + th * nk, v + tv, dout + th * nv, g[th], beta[th], nk, nv);
                }
            }
        }
    }
}
