/* AdamW kernel, AVX2: 8 elements a step. Same operations in the same order as
 * mt_adamw_kernel_ref, so results are bitwise equal to it. AVX2 has no 16-bit masked store, so
 * a partial vector (head or tail) goes through small local buffers instead of masks. */
#include "optim/adamw_kernels.h"

#if MT_ADAMW_HAVE_X86

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define MT_AVX2 __attribute__((target("avx2")))

typedef struct {
    __m256 grad_scale, decay_mul, beta1, one_minus_beta1, beta2, one_minus_beta2;
    __m256 sqrt_bias_correction2, eps, neg_step_size;
} coef8;

/* Updates 8 elements in master, m and v; returns the new master weights. */
static inline MT_AVX2 __m256 update8(const coef8 *k, float *master, float *m, float *v,
                                     const float *grad) {
    __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad), k->grad_scale);
    __m256 w = _mm256_mul_ps(_mm256_loadu_ps(master), k->decay_mul);
    __m256 mi = _mm256_add_ps(_mm256_mul_ps(k->beta1, _mm256_loadu_ps(m)),
                              _mm256_mul_ps(k->one_minus_beta1, g));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(k->beta2, _mm256_loadu_ps(v)),
                              _mm256_mul_ps(_mm256_mul_ps(k->one_minus_beta2, g), g));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), k->sqrt_bias_correction2),
                                 k->eps);
    w = _mm256_add_ps(w, _mm256_div_ps(_mm256_mul_ps(k->neg_step_size, mi), denom));
    _mm256_storeu_ps(master, w);
    _mm256_storeu_ps(m, mi);
    _mm256_storeu_ps(v, vi);
    return w;
}

/* 8 bf16 values of w: round to nearest even, NaN kept quiet. */
static inline MT_AVX2 __m128i bf16_bits8(__m256 w) {
    __m256i u = _mm256_castps_si256(w);
    __m256i high = _mm256_srli_epi32(u, 16);
    __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    __m256i bits = _mm256_srli_epi32(rounded, 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(w, w, _CMP_UNORD_Q));
    __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    bits = _mm256_blendv_epi8(bits, quiet_nan, nan);
    /* Every lane is below 0x10000, so the unsigned saturating pack just narrows. */
    return _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
}

static inline MT_AVX2 void store_out8(void *out, mt_dtype dtype, __m256 w, int stream) {
    if (dtype == MT_DTYPE_BF16) {
        if (stream)
            _mm_stream_si128((__m128i *)out, bf16_bits8(w));
        else
            _mm_storeu_si128((__m128i *)out, bf16_bits8(w));
    } else {
        if (stream)
            _mm256_stream_ps((float *)out, w);
        else
            _mm256_storeu_ps((float *)out, w);
    }
}

/* Fewer than 8 elements, through local buffers. */
static MT_AVX2 void update_partial(const coef8 *k, float *master, float *m, float *v,
                                   const float *grad, void *out, mt_dtype dtype, size_t count) {
    float lm[8] = {0}, lmo[8] = {0}, lv[8] = {0}, lg[8] = {0}, lout[8];
    size_t bytes = count * sizeof(float);
    memcpy(lm, master, bytes);
    memcpy(lmo, m, bytes);
    memcpy(lv, v, bytes);
    memcpy(lg, grad, bytes);
    store_out8(lout, dtype, update8(k, lm, lmo, lv, lg), 0);
    memcpy(master, lm, bytes);
    memcpy(m, lmo, bytes);
    memcpy(v, lv, bytes);
    memcpy(out, lout, count * mt_dtype_size(dtype));
}

MT_AVX2 void mt_adamw_kernel_avx2(const mt_adamw_coef *c, float *master, float *m, float *v,
                                  const float *grad, void *out, mt_dtype out_dtype, size_t n) {
    coef8 k = {
        _mm256_set1_ps(c->grad_scale),      _mm256_set1_ps(c->decay_mul),
        _mm256_set1_ps(c->beta1),           _mm256_set1_ps(c->one_minus_beta1),
        _mm256_set1_ps(c->beta2),           _mm256_set1_ps(c->one_minus_beta2),
        _mm256_set1_ps(c->sqrt_bias_correction2), _mm256_set1_ps(c->eps),
        _mm256_set1_ps(c->neg_step_size),
    };
    /* Streaming stores write whole aligned vectors (16 bytes of bf16, 32 of fp32): peel a head
     * up to that alignment, or do not stream when the output is misaligned for its type. */
    size_t elem = mt_dtype_size(out_dtype), align = 8 * elem;
    uintptr_t addr = (uintptr_t)out;
    int stream = c->stream_out && addr % elem == 0;
    size_t i = 0;
    if (stream) {
        size_t head = (align - addr % align) % align / elem;
        if (head > n) head = n;
        if (head) update_partial(&k, master, m, v, grad, out, out_dtype, head);
        i = head;
    }
    for (; i + 8 <= n; i += 8)
        store_out8((char *)out + i * elem, out_dtype,
                   update8(&k, master + i, m + i, v + i, grad + i), stream);
    if (i < n)
        update_partial(&k, master + i, m + i, v + i, grad + i, (char *)out + i * elem, out_dtype,
                       n - i);
    if (stream) _mm_sfence(); /* streaming stores are weakly ordered: publish them */
}

#endif
