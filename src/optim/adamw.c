/* AdamW: the scalar factors, the plain C reference kernel, and the choice of kernel and threads.
 *
 * Bitwise agreement between kernels rests on every per-element step being one IEEE-rounded fp32
 * operation: the Makefile's -std=c11 turns off GCC's floating-point contraction (no fused
 * multiply-add), and the SIMD kernels use separate mul/add/div/sqrt in the same order. */
#include "optim/adamw.h"

#include <math.h>

#include "optim/adamw_kernels.h"
#include "optim/shares.h"
#include "util/split_f32.h"

/* Threads split a tensor in chunks of this many elements: 256 bytes of fp32 (128 of each split
 * half), so no two threads share a cache line of any array (given aligned arrays). */
#define MT_ADAMW_CHUNK 64

/* Fewer elements than this per thread and waking a thread costs more than it saves (norm
 * weights and biases run on one). */
#define MT_ADAMW_MIN_PER_THREAD ((size_t)1 << 14)
/* What a thread takes at a time (optim/shares.h): 0.9 MB of traffic with fp32 moments. */
#define MT_ADAMW_PIECE ((size_t)1 << 15)

static inline float load_master(mt_master w, size_t i) {
    return w.f32 ? w.f32[i] : mt_split_join(w.hi[i], w.lo[i]);
}

static inline void store_master(mt_master w, size_t i, float x) {
    if (w.f32) w.f32[i] = x;
    else mt_split_f32(x, &w.hi[i], &w.lo[i]);
}

/* The masters' step from moments mi, vi: (-step) m / (sqrt(v) / c2 + eps), added to the decayed
 * master. */
static inline float step_of(const mt_adamw_coef *c, float mi, float vi) {
    float denom = sqrtf(vi) / c->sqrt_bias_correction2 + c->eps;
    return c->neg_step_size * mi / denom;
}

static inline float stepped(const mt_adamw_coef *c, float w, float mi, float vi) { return w + step_of(c, mi, vi); }

void mt_adamw_kernel_ref(const mt_adamw_coef *c, mt_adamw_part part, mt_master w, float *m, float *v,
                         const float *grad, size_t n) {
    for (size_t i = 0; i < n; i++) {
        switch (part) {
        case MT_ADAMW_FULL:
        case MT_ADAMW_MASTERS: {
            float g = grad[i] * c->grad_scale;
            float wi = load_master(w, i) * c->decay_mul;
            float mi = c->beta1 * m[i] + c->one_minus_beta1 * g;
            float vi = c->beta2 * v[i] + c->one_minus_beta2 * g * g;
            if (part == MT_ADAMW_FULL) m[i] = mi, v[i] = vi;
            store_master(w, i, stepped(c, wi, mi, vi));
            break;
        }
        case MT_ADAMW_MOMENTS: {
            float g = grad[i] * c->grad_scale;
            float b = c->one_minus_beta1 * g, bv = c->one_minus_beta2 * g * g;
            if (isfinite(bv)) {
                m[i] = c->beta1 * m[i] + b;
                v[i] = c->beta2 * v[i] + bv;
            }
            break;
        }
        case MT_ADAMW_AHEAD_UNDO: {
            float g0 = grad[i];
            float b = c->one_minus_beta1 * g0, bv = c->one_minus_beta2 * g0 * g0;
            if (isfinite(bv)) {
                float av = v[i] - bv;
                store_master(w, i, (load_master(w, i) - step_of(c, m[i], v[i])) / c->decay_mul);
                m[i] = (m[i] - b) / c->beta1;
                v[i] = (av > 0 ? av : 0) / c->beta2;
            }
            break;
        }
        case MT_ADAMW_AHEAD: {
            float g = grad[i] * c->grad_scale;
            float b = c->one_minus_beta1 * g, bv = c->one_minus_beta2 * g * g;
            if (isfinite(bv)) {
                float wi = load_master(w, i) * c->decay_mul;
                float mi = c->beta1 * m[i] + b;
                float vi = c->beta2 * v[i] + bv;
                m[i] = mi;
                v[i] = vi;
                store_master(w, i, stepped(c, wi, mi, vi));
            }
            break;
        }
        case MT_ADAMW_AHEAD_CORRECT_MASTERS:
        case MT_ADAMW_CORRECT_MOMENTS: {
            float g0 = grad[i], g = g0 * c->grad_scale;
            float am = m[i] - c->one_minus_beta1 * g0, av = v[i] - c->one_minus_beta2 * g0 * g0;
            float mi = am + c->one_minus_beta1 * g;
            float vi = (av > 0 ? av : 0) + c->one_minus_beta2 * g * g;
            if (part == MT_ADAMW_CORRECT_MOMENTS) {
                m[i] = mi, v[i] = vi;
                break;
            }
            float decayed = load_master(w, i) - step_of(c, m[i], v[i]);
            store_master(w, i, stepped(c, decayed, mi, vi));
            break;
        }
        }
    }
}

/* Scalars in double, as torch forms them in Python, each rounded to float once. */
mt_adamw_coef mt_adamw_coef_of(const mt_adamw_params *p, int decay) {
    double lr = p->lr, beta1 = p->beta1, beta2 = p->beta2, step = (double)p->step;
    return (mt_adamw_coef){
        .grad_scale = p->grad_scale,
        .decay_mul = decay ? (float)(1.0 - lr * (double)p->weight_decay) : 1.0f,
        .beta1 = p->beta1,
        .one_minus_beta1 = (float)(1.0 - beta1),
        .beta2 = p->beta2,
        .one_minus_beta2 = (float)(1.0 - beta2),
        .sqrt_bias_correction2 = (float)sqrt(1.0 - pow(beta2, step)),
        .eps = p->eps,
        .neg_step_size = (float)(-lr / (1.0 - pow(beta1, step))),
    };
}

mt_adamw_kernel mt_adamw_kernel_of(mt_adamw_impl impl) {
    switch (mt_adamw_impl_resolve(impl)) {
#if MT_ADAMW_HAVE_X86
    case MT_ADAMW_AVX2: return mt_adamw_kernel_avx2;
    case MT_ADAMW_AVX512: return mt_adamw_kernel_avx512;
#endif
    default: return mt_adamw_kernel_ref;
    }
}

/* Thread `t` of `nt`'s share: one contiguous run of whole chunks. */
void mt_adamw_share(size_t n, int t, int nt, size_t *begin, size_t *count) {
    mt_share_of(n, MT_ADAMW_CHUNK, t, nt, begin, count);
}

int mt_adamw_threads(size_t n, int threads) {
    size_t useful_threads = n / MT_ADAMW_MIN_PER_THREAD + 1;
    if ((size_t)threads > useful_threads) threads = (int)useful_threads;
    return threads > 1 ? threads : 1;
}

typedef struct {
    mt_adamw_kernel kernel;
    mt_adamw_coef coef;
    mt_adamw_part part;
    mt_master w;
    float *m, *v;
    const float *grad;
} update;

static void update_piece(void *ctx, size_t begin, size_t end) {
    const update *u = ctx;
    u->kernel(&u->coef, u->part, mt_master_at(u->w, begin), u->m + begin, u->v + begin, u->grad + begin, end - begin);
}

void mt_adamw_update_with(mt_adamw_impl impl, mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w,
                          float *m, float *v, const float *grad, size_t n, int threads) {
    update u = {.kernel = mt_adamw_kernel_of(impl), .coef = mt_adamw_coef_of(p, decay), .part = part, .w = w, .m = m,
                .v = v, .grad = grad};
    mt_shares_run(n, MT_ADAMW_CHUNK, MT_ADAMW_PIECE, mt_adamw_threads(n, threads), update_piece, &u);
}

void mt_adamw_update_parallel(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, float *m,
                              float *v, const float *grad, size_t n, int threads) {
    mt_adamw_update_with(MT_ADAMW_BEST, part, p, decay, w, m, v, grad, n, threads);
}

void mt_adamw_update(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, float *m, float *v,
                     const float *grad, size_t n) {
    mt_adamw_update_with(MT_ADAMW_BEST, part, p, decay, w, m, v, grad, n, 1);
}

double mt_adamw_part_bytes(mt_adamw_part part, double moment_bytes) {
    double master = 4, grad = 4, moments = 2 * moment_bytes;
    switch (part) {
    case MT_ADAMW_FULL:
    case MT_ADAMW_AHEAD:
    case MT_ADAMW_AHEAD_UNDO: return grad + 2 * master + 2 * moments;        /* read all; write masters, moments */
    case MT_ADAMW_MOMENTS:
    case MT_ADAMW_CORRECT_MOMENTS: return grad + 2 * moments;                 /* read gradient, moments; write moments */
    case MT_ADAMW_MASTERS:
    case MT_ADAMW_AHEAD_CORRECT_MASTERS: return grad + 2 * master + moments; /* read all; write masters */
    }
    return 0;
}
