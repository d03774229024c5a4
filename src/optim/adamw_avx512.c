/* AdamW kernel, AVX-512F: 16 elements a step, masked at the head and tail. Same operations in
 * the same order as mt_adamw_kernel_ref, so results are bitwise equal to it. bf16 rounding is
 * done with integer ops rather than AVX512_BF16's VCVTNEPS2BF16, which flushes denormals to
 * zero and so would differ from the reference. */
#include "optim/adamw_kernels.h"

#if MT_ADAMW_HAVE_X86

#include <immintrin.h>
#include <stdint.h>

#define MT_AVX512 __attribute__((target("avx512f")))

typedef struct {
    __m512 grad_scale, decay_mul, beta1, one_minus_beta1, beta2, one_minus_beta2;
    __m512 sqrt_bias_correction2, eps, neg_step_size;
} coef16;

/* Updates the elements of `mask` at i in master, m and v; returns the new master weights. */
static inline MT_AVX512 __m512 update16(const coef16 *k, __mmask16 mask, float *master, float *m,
                                        float *v, const float *grad, size_t i) {
    __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, grad + i), k->grad_scale);
    __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, master + i), k->decay_mul);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(k->beta1, _mm512_maskz_loadu_ps(mask, m + i)),
                              _mm512_mul_ps(k->one_minus_beta1, g));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(k->beta2, _mm512_maskz_loadu_ps(mask, v + i)),
                              _mm512_mul_ps(_mm512_mul_ps(k->one_minus_beta2, g), g));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), k->sqrt_bias_correction2),
                                 k->eps);
    w = _mm512_add_ps(w, _mm512_div_ps(_mm512_mul_ps(k->neg_step_size, mi), denom));
    _mm512_mask_storeu_ps(master + i, mask, w);
    _mm512_mask_storeu_ps(m + i, mask, mi);
    _mm512_mask_storeu_ps(v + i, mask, vi);
    return w;
}

/* bf16 bits of w in the low half of each 32-bit lane: round to nearest even, NaN kept quiet. */
static inline MT_AVX512 __m512i bf16_bits16(__m512 w) {
    __m512i u = _mm512_castps_si512(w);
    __m512i high = _mm512_srli_epi32(u, 16);
    __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
    __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    __m512i bits = _mm512_srli_epi32(rounded, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(bits, nan, high, _mm512_set1_epi32(0x40));
}

static inline MT_AVX512 void store_out16(void *out, mt_dtype dtype, size_t i, __mmask16 mask,
                                         __m512 w, int stream) {
    if (dtype == MT_DTYPE_BF16) {
        uint16_t *dst = (uint16_t *)out + i;
        if (stream)
            _mm256_stream_si256((__m256i *)dst, _mm512_cvtepi32_epi16(bf16_bits16(w)));
        else
            _mm512_mask_cvtepi32_storeu_epi16(dst, mask, bf16_bits16(w));
    } else {
        float *dst = (float *)out + i;
        if (stream)
            _mm512_stream_ps(dst, w);
        else
            _mm512_mask_storeu_ps(dst, mask, w);
    }
}

static inline __mmask16 first_lanes(size_t count) { return (__mmask16)((1u << count) - 1u); }

MT_AVX512 void mt_adamw_kernel_avx512(const mt_adamw_coef *c, float *master, float *m, float *v,
                                      const float *grad, void *out, mt_dtype out_dtype,
                                      size_t n) {
    coef16 k = {
        _mm512_set1_ps(c->grad_scale),      _mm512_set1_ps(c->decay_mul),
        _mm512_set1_ps(c->beta1),           _mm512_set1_ps(c->one_minus_beta1),
        _mm512_set1_ps(c->beta2),           _mm512_set1_ps(c->one_minus_beta2),
        _mm512_set1_ps(c->sqrt_bias_correction2), _mm512_set1_ps(c->eps),
        _mm512_set1_ps(c->neg_step_size),
    };
    /* Streaming stores write whole aligned vectors (32 bytes of bf16, 64 of fp32): peel a head
     * of elements up to that alignment, or do not stream when the output is misaligned for its
     * element type. */
    size_t elem = mt_dtype_size(out_dtype), align = 16 * elem;
    uintptr_t addr = (uintptr_t)out;
    int stream = c->stream_out && addr % elem == 0;
    size_t i = 0;
    if (stream) {
        size_t head = (align - addr % align) % align / elem;
        if (head > n) head = n;
        if (head) store_out16(out, out_dtype, 0, first_lanes(head),
                              update16(&k, first_lanes(head), master, m, v, grad, 0), 0);
        i = head;
    }
    for (; i + 16 <= n; i += 16)
        store_out16(out, out_dtype, i, 0xffff, update16(&k, 0xffff, master, m, v, grad, i),
                    stream);
    if (i < n) {
        __mmask16 tail = first_lanes(n - i);
        store_out16(out, out_dtype, i, tail, update16(&k, tail, master, m, v, grad, i), 0);
    }
    if (stream) _mm_sfence(); /* streaming stores are weakly ordered: publish them */
}

#endif
