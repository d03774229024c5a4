/* AdamW kernel, AVX2: 8 elements a step. Same operations in the same order as
 * mt_adamw_kernel_ref, so results are bitwise equal to it. A partial vector (head or tail) goes
 * through small local buffers: AVX2 has no 16-bit masked loads or stores. */
#include "optim/adamw_kernels.h"

#if MT_ADAMW_HAVE_X86

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "optim/split_x86.h"

#define MT_AVX2 __attribute__((target("avx2")))
#define INLINE __attribute__((always_inline)) inline

typedef struct {
    __m256 grad_scale, decay_mul, beta1, one_minus_beta1, beta2, one_minus_beta2;
    __m256 sqrt_bias_correction2, eps, neg_step_size;
} coef8;

static INLINE MT_AVX2 __m256 load_master8(mt_master w, size_t i) {
    if (w.f32) return _mm256_loadu_ps(w.f32 + i);
    return _mm256_castsi256_ps(mt_split_join8(mt_split_load8(w.hi + i), mt_split_load8(w.lo + i)));
}

static INLINE MT_AVX2 void store_master8(mt_master w, size_t i, __m256 x) {
    if (w.f32) {
        _mm256_storeu_ps(w.f32 + i, x);
        return;
    }
    __m256i u = _mm256_castps_si256(x);
    mt_split_store8(w.hi + i, mt_split_hi8(u));
    mt_split_store8(w.lo + i, _mm256_and_si256(u, _mm256_set1_epi32(0xffff)));
}

static INLINE MT_AVX2 __m256 step8(const coef8 *k, __m256 mi, __m256 vi) {
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), k->sqrt_bias_correction2), k->eps);
    return _mm256_div_ps(_mm256_mul_ps(k->neg_step_size, mi), denom);
}

static INLINE MT_AVX2 __m256 stepped8(const coef8 *k, __m256 w, __m256 mi, __m256 vi) {
    return _mm256_add_ps(w, step8(k, mi, vi));
}

/* All ones in the lanes of x that are finite. */
static INLINE MT_AVX2 __m256 finite8(__m256 x) {
    __m256 magnitude = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    return _mm256_cmp_ps(magnitude, _mm256_set1_ps(__builtin_inff()), _CMP_LT_OQ);
}

/* One part of the update on the 8 elements at i. */
static INLINE MT_AVX2 void part8(const coef8 *k, mt_adamw_part part, mt_master w, float *m, float *v,
                                  const float *grad, size_t i) {
    switch (part) {
    case MT_ADAMW_FULL:
    case MT_ADAMW_MASTERS: {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), k->grad_scale);
        __m256 wi = _mm256_mul_ps(load_master8(w, i), k->decay_mul);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(k->beta1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(k->one_minus_beta1, g));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(k->beta2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(k->one_minus_beta2, g), g));
        if (part == MT_ADAMW_FULL) {
            _mm256_storeu_ps(m + i, mi);
            _mm256_storeu_ps(v + i, vi);
        }
        store_master8(w, i, stepped8(k, wi, mi, vi));
        break;
    }
    case MT_ADAMW_MOMENTS: {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), k->grad_scale);
        __m256 b = _mm256_mul_ps(k->one_minus_beta1, g), bv = _mm256_mul_ps(_mm256_mul_ps(k->one_minus_beta2, g), g);
        __m256 ok = finite8(bv), m0 = _mm256_loadu_ps(m + i), v0 = _mm256_loadu_ps(v + i);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(k->beta1, m0), b);
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(k->beta2, v0), bv);
        _mm256_storeu_ps(m + i, _mm256_blendv_ps(m0, mi, ok));
        _mm256_storeu_ps(v + i, _mm256_blendv_ps(v0, vi, ok));
        break;
    }
    case MT_ADAMW_AHEAD_UNDO: {
        __m256 g0 = _mm256_loadu_ps(grad + i);
        __m256 b = _mm256_mul_ps(k->one_minus_beta1, g0), bv = _mm256_mul_ps(_mm256_mul_ps(k->one_minus_beta2, g0), g0);
        __m256 ok = finite8(bv), m0 = _mm256_loadu_ps(m + i), v0 = _mm256_loadu_ps(v + i);
        __m256 w0 = load_master8(w, i);
        __m256 back = _mm256_div_ps(_mm256_sub_ps(w0, step8(k, m0, v0)), k->decay_mul);
        store_master8(w, i, _mm256_blendv_ps(w0, back, ok));
        __m256 mi = _mm256_div_ps(_mm256_sub_ps(m0, b), k->beta1);
        __m256 vi = _mm256_div_ps(_mm256_max_ps(_mm256_sub_ps(v0, bv), _mm256_setzero_ps()), k->beta2);
        _mm256_storeu_ps(m + i, _mm256_blendv_ps(m0, mi, ok));
        _mm256_storeu_ps(v + i, _mm256_blendv_ps(v0, vi, ok));
        break;
    }
    case MT_ADAMW_AHEAD: {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), k->grad_scale);
        __m256 b = _mm256_mul_ps(k->one_minus_beta1, g), bv = _mm256_mul_ps(_mm256_mul_ps(k->one_minus_beta2, g), g);
        __m256 ok = finite8(bv), m0 = _mm256_loadu_ps(m + i), v0 = _mm256_loadu_ps(v + i), w0 = load_master8(w, i);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(k->beta1, m0), b);
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(k->beta2, v0), bv);
        __m256 wi = stepped8(k, _mm256_mul_ps(w0, k->decay_mul), mi, vi);
        _mm256_storeu_ps(m + i, _mm256_blendv_ps(m0, mi, ok));
        _mm256_storeu_ps(v + i, _mm256_blendv_ps(v0, vi, ok));
        store_master8(w, i, _mm256_blendv_ps(w0, wi, ok));
        break;
    }
    case MT_ADAMW_AHEAD_CORRECT_MASTERS:
    case MT_ADAMW_CORRECT_MOMENTS: {
        __m256 g0 = _mm256_loadu_ps(grad + i), g = _mm256_mul_ps(g0, k->grad_scale);
        __m256 m0 = _mm256_loadu_ps(m + i), v0 = _mm256_loadu_ps(v + i);
        __m256 am = _mm256_sub_ps(m0, _mm256_mul_ps(k->one_minus_beta1, g0));
        __m256 av = _mm256_sub_ps(v0, _mm256_mul_ps(_mm256_mul_ps(k->one_minus_beta2, g0), g0));
        __m256 mi = _mm256_add_ps(am, _mm256_mul_ps(k->one_minus_beta1, g));
        __m256 vi = _mm256_add_ps(_mm256_max_ps(av, _mm256_setzero_ps()),
                                  _mm256_mul_ps(_mm256_mul_ps(k->one_minus_beta2, g), g));
        if (part == MT_ADAMW_CORRECT_MOMENTS) {
            _mm256_storeu_ps(m + i, mi);
            _mm256_storeu_ps(v + i, vi);
            break;
        }
        __m256 decayed = _mm256_sub_ps(load_master8(w, i), step8(k, m0, v0));
        store_master8(w, i, stepped8(k, decayed, mi, vi));
        break;
    }
    }
}

/* Fewer than 8 elements, through local buffers. */
static MT_AVX2 void part_partial(const coef8 *k, mt_adamw_part part, mt_master w, float *m, float *v,
                                 const float *grad, size_t count) {
    float lw[8] = {0}, lm[8] = {0}, lv[8] = {0}, lg[8] = {0};
    uint16_t lhi[8] = {0}, llo[8] = {0};
    mt_master local = w.f32 ? (mt_master){.f32 = lw} : (mt_master){.hi = lhi, .lo = llo};
    size_t bytes = count * sizeof(float);
    if (w.f32) memcpy(lw, w.f32, bytes);
    else memcpy(lhi, w.hi, count * 2), memcpy(llo, w.lo, count * 2);
    memcpy(lm, m, bytes);
    memcpy(lv, v, bytes);
    memcpy(lg, grad, bytes);
    part8(k, part, local, lm, lv, lg, 0);
    if (w.f32) memcpy(w.f32, lw, bytes);
    else memcpy(w.hi, lhi, count * 2), memcpy(w.lo, llo, count * 2);
    memcpy(m, lm, bytes);
    memcpy(v, lv, bytes);
}

/* The loop of one part, so that part8's switch folds away. */
#define RUN(PART)                                                                       \
    do {                                                                                \
        for (; i + 8 <= n; i += 8) part8(&k, PART, w, m, v, grad, i);                   \
    } while (0)

MT_AVX2 void mt_adamw_kernel_avx2(const mt_adamw_coef *c, mt_adamw_part part, mt_master w, float *m, float *v,
                                  const float *grad, size_t n) {
    coef8 k = {
        _mm256_set1_ps(c->grad_scale),      _mm256_set1_ps(c->decay_mul),
        _mm256_set1_ps(c->beta1),           _mm256_set1_ps(c->one_minus_beta1),
        _mm256_set1_ps(c->beta2),           _mm256_set1_ps(c->one_minus_beta2),
        _mm256_set1_ps(c->sqrt_bias_correction2), _mm256_set1_ps(c->eps),
        _mm256_set1_ps(c->neg_step_size),
    };
    size_t i = 0;
    MT_ADAMW_EACH_PART(part, RUN)
    if (i < n) part_partial(&k, part, mt_master_at(w, i), m + i, v + i, grad + i, n - i);
}

#endif
