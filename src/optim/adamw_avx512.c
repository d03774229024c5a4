/* AdamW kernel, AVX-512F: 16 elements a step, masked at the tail. Same operations in the same
 * order as mt_adamw_kernel_ref, so results are bitwise equal to it. */
#include "optim/adamw_kernels.h"

#if MT_ADAMW_HAVE_X86

#include <immintrin.h>
#include <stdint.h>

#include "optim/split_x86.h"

#define MT_AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) inline

typedef struct {
    __m512 grad_scale, decay_mul, beta1, one_minus_beta1, beta2, one_minus_beta2;
    __m512 sqrt_bias_correction2, eps, neg_step_size;
} coef16;

static INLINE MT_AVX512 __m512 load_master16(mt_master w, size_t i, __mmask16 mask, size_t count) {
    if (w.f32) return _mm512_maskz_loadu_ps(mask, w.f32 + i);
    return _mm512_castsi512_ps(mt_split_join16(mt_split_load16(w.hi + i, count), mt_split_load16(w.lo + i, count)));
}

static INLINE MT_AVX512 void store_master16(mt_master w, size_t i, __mmask16 mask, __m512 x) {
    if (w.f32) {
        _mm512_mask_storeu_ps(w.f32 + i, mask, x);
        return;
    }
    __m512i u = _mm512_castps_si512(x);
    mt_split_store16(w.hi + i, mask, mt_split_hi16(u));
    mt_split_store16(w.lo + i, mask, _mm512_and_si512(u, _mm512_set1_epi32(0xffff)));
}

static INLINE MT_AVX512 __m512 step16(const coef16 *k, __m512 mi, __m512 vi) {
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), k->sqrt_bias_correction2), k->eps);
    return _mm512_div_ps(_mm512_mul_ps(k->neg_step_size, mi), denom);
}

static INLINE MT_AVX512 __m512 stepped16(const coef16 *k, __m512 w, __m512 mi, __m512 vi) {
    return _mm512_add_ps(w, step16(k, mi, vi));
}

/* The lanes of x that are finite. */
static INLINE MT_AVX512 __mmask16 finite16(__m512 x) {
    __m512 magnitude = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
    return _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ);
}

/* One part of the update on the `count` (mask) elements at i. */
static INLINE MT_AVX512 void part16(const coef16 *k, mt_adamw_part part, mt_master w, float *m, float *v,
                                     const float *grad, size_t i, __mmask16 mask, size_t count) {
    switch (part) {
    case MT_ADAMW_FULL:
    case MT_ADAMW_MASTERS: {
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, grad + i), k->grad_scale);
        __m512 wi = _mm512_mul_ps(load_master16(w, i, mask, count), k->decay_mul);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(k->beta1, _mm512_maskz_loadu_ps(mask, m + i)),
                                  _mm512_mul_ps(k->one_minus_beta1, g));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(k->beta2, _mm512_maskz_loadu_ps(mask, v + i)),
                                  _mm512_mul_ps(_mm512_mul_ps(k->one_minus_beta2, g), g));
        if (part == MT_ADAMW_FULL) {
            _mm512_mask_storeu_ps(m + i, mask, mi);
            _mm512_mask_storeu_ps(v + i, mask, vi);
        }
        store_master16(w, i, mask, stepped16(k, wi, mi, vi));
        break;
    }
    case MT_ADAMW_MOMENTS: {
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, grad + i), k->grad_scale);
        __m512 b = _mm512_mul_ps(k->one_minus_beta1, g), bv = _mm512_mul_ps(_mm512_mul_ps(k->one_minus_beta2, g), g);
        __mmask16 ok = finite16(bv) & mask;
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(k->beta1, _mm512_maskz_loadu_ps(mask, m + i)), b);
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(k->beta2, _mm512_maskz_loadu_ps(mask, v + i)), bv);
        _mm512_mask_storeu_ps(m + i, ok, mi);
        _mm512_mask_storeu_ps(v + i, ok, vi);
        break;
    }
    case MT_ADAMW_AHEAD_UNDO: {
        __m512 g0 = _mm512_maskz_loadu_ps(mask, grad + i);
        __m512 b = _mm512_mul_ps(k->one_minus_beta1, g0), bv = _mm512_mul_ps(_mm512_mul_ps(k->one_minus_beta2, g0), g0);
        __mmask16 ok = finite16(bv) & mask;
        __m512 m0 = _mm512_maskz_loadu_ps(mask, m + i), v0 = _mm512_maskz_loadu_ps(mask, v + i);
        store_master16(w, i, ok,
                       _mm512_div_ps(_mm512_sub_ps(load_master16(w, i, mask, count), step16(k, m0, v0)), k->decay_mul));
        __m512 mi = _mm512_div_ps(_mm512_sub_ps(m0, b), k->beta1);
        __m512 vi = _mm512_div_ps(_mm512_max_ps(_mm512_sub_ps(v0, bv), _mm512_setzero_ps()), k->beta2);
        _mm512_mask_storeu_ps(m + i, ok, mi);
        _mm512_mask_storeu_ps(v + i, ok, vi);
        break;
    }
    case MT_ADAMW_AHEAD: {
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, grad + i), k->grad_scale);
        __m512 b = _mm512_mul_ps(k->one_minus_beta1, g), bv = _mm512_mul_ps(_mm512_mul_ps(k->one_minus_beta2, g), g);
        __mmask16 ok = finite16(bv) & mask;
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(k->beta1, _mm512_maskz_loadu_ps(mask, m + i)), b);
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(k->beta2, _mm512_maskz_loadu_ps(mask, v + i)), bv);
        __m512 wi = _mm512_mul_ps(load_master16(w, i, mask, count), k->decay_mul);
        _mm512_mask_storeu_ps(m + i, ok, mi);
        _mm512_mask_storeu_ps(v + i, ok, vi);
        store_master16(w, i, ok, stepped16(k, wi, mi, vi));
        break;
    }
    case MT_ADAMW_AHEAD_CORRECT_MASTERS:
    case MT_ADAMW_CORRECT_MOMENTS: {
        __m512 g0 = _mm512_maskz_loadu_ps(mask, grad + i), g = _mm512_mul_ps(g0, k->grad_scale);
        __m512 m0 = _mm512_maskz_loadu_ps(mask, m + i), v0 = _mm512_maskz_loadu_ps(mask, v + i);
        __m512 am = _mm512_sub_ps(m0, _mm512_mul_ps(k->one_minus_beta1, g0));
        __m512 av = _mm512_sub_ps(v0, _mm512_mul_ps(_mm512_mul_ps(k->one_minus_beta2, g0), g0));
        __m512 mi = _mm512_add_ps(am, _mm512_mul_ps(k->one_minus_beta1, g));
        __m512 vi = _mm512_add_ps(_mm512_max_ps(av, _mm512_setzero_ps()),
                                  _mm512_mul_ps(_mm512_mul_ps(k->one_minus_beta2, g), g));
        if (part == MT_ADAMW_CORRECT_MOMENTS) {
            _mm512_mask_storeu_ps(m + i, mask, mi);
            _mm512_mask_storeu_ps(v + i, mask, vi);
            break;
        }
        __m512 decayed = _mm512_sub_ps(load_master16(w, i, mask, count), step16(k, m0, v0));
        store_master16(w, i, mask, stepped16(k, decayed, mi, vi));
        break;
    }
    }
}

/* The loop of one part, so that part16's switch folds away; the tail masked. */
#define RUN(PART)                                                                                  \
    do {                                                                                           \
        for (; i + 16 <= n; i += 16) part16(&k, PART, w, m, v, grad, i, 0xffff, 16);               \
        if (i < n) part16(&k, PART, w, m, v, grad, i, (__mmask16)((1u << (n - i)) - 1u), n - i);    \
    } while (0)

MT_AVX512 void mt_adamw_kernel_avx512(const mt_adamw_coef *c, mt_adamw_part part, mt_master w, float *m, float *v,
                                      const float *grad, size_t n) {
    coef16 k = {
        _mm512_set1_ps(c->grad_scale),      _mm512_set1_ps(c->decay_mul),
        _mm512_set1_ps(c->beta1),           _mm512_set1_ps(c->one_minus_beta1),
        _mm512_set1_ps(c->beta2),           _mm512_set1_ps(c->one_minus_beta2),
        _mm512_set1_ps(c->sqrt_bias_correction2), _mm512_set1_ps(c->eps),
        _mm512_set1_ps(c->neg_step_size),
    };
    size_t i = 0;
    MT_ADAMW_EACH_PART(part, RUN)
}

#endif
