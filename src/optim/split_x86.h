/* Internal to src/optim: the split fp32 layout (util/split_f32.h) eight and sixteen lanes at a
 * time, for the AVX2 and AVX-512 code (the AdamW kernels, the masters' conversions). Lanes are
 * 32 bits wide; a half sits in the low 16 bits of its lane. Each is the scalar definition's
 * cases as masks and blends, so the bits are the same. */
#ifndef MT_OPTIM_SPLIT_X86_H
#define MT_OPTIM_SPLIT_X86_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MT_SPLIT_AVX2 __attribute__((target("avx2")))
#define MT_SPLIT_AVX512 __attribute__((target("avx512f")))

/* ---- AVX2 ---- */

/* The high halves of the fp32 values whose bits are u. Magnitudes are below 2^31, so the signed
 * compares order them. */
static inline MT_SPLIT_AVX2 __m256i mt_split_hi8(__m256i u) {
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nearest = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x8000)), 16);
    __m256i top = _mm256_srli_epi32(u, 16);
    __m256i big_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f80ffff));
    __m256i low_nan = _mm256_andnot_si256(big_nan, _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f807fff)));
    __m256i r = _mm256_blendv_epi8(nearest, top, big_nan);
    return _mm256_blendv_epi8(r, _mm256_and_si256(top, _mm256_set1_epi32(0x8000)), low_nan);
}

/* The fp32 bits of high and low halves hi, lo (each in the low 16 bits of its lane). */
static inline MT_SPLIT_AVX2 __m256i mt_split_join8(__m256i hi, __m256i lo) {
    __m256i h = _mm256_slli_epi32(hi, 16), mag = _mm256_and_si256(hi, _mm256_set1_epi32(0x7fff));
    __m256i carry = _mm256_cmpgt_epi32(lo, _mm256_set1_epi32(0x7fff)); /* all ones: subtract 1 << 16 */
    __m256i nearest = _mm256_or_si256(_mm256_add_epi32(h, _mm256_slli_epi32(carry, 16)), lo);
    __m256i nan_hi = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f80));
    __m256i zero_nan = _mm256_and_si256(_mm256_cmpeq_epi32(mag, _mm256_setzero_si256()), carry);
    __m256i r = _mm256_blendv_epi8(nearest, _mm256_or_si256(h, lo), nan_hi);
    return _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_or_si256(h, lo), _mm256_set1_epi32(0x7f800000)), zero_nan);
}

/* 8 halves from memory into lanes, and lanes (below 2^16) into memory. */
static inline MT_SPLIT_AVX2 __m256i mt_split_load8(const uint16_t *p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
}
static inline MT_SPLIT_AVX2 void mt_split_store8(uint16_t *p, __m256i x) {
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)));
}

/* ---- AVX-512 ---- */

static inline MT_SPLIT_AVX512 __m512i mt_split_hi16(__m512i u) {
    __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x8000)), 16);
    __m512i top = _mm512_srli_epi32(u, 16);
    __mmask16 big_nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f80ffff));
    __mmask16 low_nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f807fff)) & (__mmask16)~big_nan;
    r = _mm512_mask_mov_epi32(r, big_nan, top);
    return _mm512_mask_mov_epi32(r, low_nan, _mm512_and_si512(top, _mm512_set1_epi32(0x8000)));
}

static inline MT_SPLIT_AVX512 __m512i mt_split_join16(__m512i hi, __m512i lo) {
    __m512i h = _mm512_slli_epi32(hi, 16), mag = _mm512_and_si512(hi, _mm512_set1_epi32(0x7fff));
    __mmask16 carry = _mm512_cmpgt_epi32_mask(lo, _mm512_set1_epi32(0x7fff));
    __m512i exact = _mm512_or_si512(h, lo);
    __m512i r = _mm512_mask_sub_epi32(exact, carry, exact, _mm512_set1_epi32(0x10000));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7f80)), exact);
    __mmask16 zero_nan = _mm512_cmpeq_epi32_mask(mag, _mm512_setzero_si512()) & carry;
    return _mm512_mask_mov_epi32(r, zero_nan, _mm512_or_si512(exact, _mm512_set1_epi32(0x7f800000)));
}

/* The first `count` (at most 16) halves at p; the rest of the lanes 0. AVX-512F has no masked
 * 16-bit load, so a partial vector goes through a local buffer. */
static inline MT_SPLIT_AVX512 __m512i mt_split_load16(const uint16_t *p, size_t count) {
    if (count == 16) return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    uint16_t part[16] = {0};
    memcpy(part, p, count * sizeof *p);
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)part));
}
static inline MT_SPLIT_AVX512 void mt_split_store16(uint16_t *p, __mmask16 mask, __m512i x) {
    _mm512_mask_cvtepi32_storeu_epi16(p, mask, x);
}

#endif
#endif
