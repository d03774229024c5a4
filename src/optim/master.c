/* The masters' conversions from and to fp32, and the choice of vector implementation that the
 * AdamW kernels share. */
#include "optim/master.h"

#include <string.h>

#include "optim/split_x86.h"
#include "util/split_f32.h"

int mt_adamw_impl_supported(mt_adamw_impl impl) {
    switch (impl) {
    case MT_ADAMW_REF:
    case MT_ADAMW_BEST: return 1;
#if defined(__x86_64__)
    case MT_ADAMW_AVX2: return __builtin_cpu_supports("avx2");
    case MT_ADAMW_AVX512: return __builtin_cpu_supports("avx512f");
#else
    default: return 0;
#endif
    }
    return 0;
}

const char *mt_adamw_impl_name(mt_adamw_impl impl) {
    switch (impl) {
    case MT_ADAMW_REF: return "ref";
    case MT_ADAMW_AVX2: return "avx2";
    case MT_ADAMW_AVX512: return "avx512";
    case MT_ADAMW_BEST: return "best";
    }
    return "unknown";
}

mt_adamw_impl mt_adamw_impl_resolve(mt_adamw_impl impl) {
    if (impl != MT_ADAMW_BEST && mt_adamw_impl_supported(impl)) return impl;
    return mt_adamw_impl_supported(MT_ADAMW_AVX512) ? MT_ADAMW_AVX512
           : mt_adamw_impl_supported(MT_ADAMW_AVX2) ? MT_ADAMW_AVX2
                                                    : MT_ADAMW_REF;
}

/* ---- the split halves' conversions, one implementation each ---- */

static void join_ref(const uint16_t *hi, const uint16_t *lo, size_t n, float *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = mt_split_join(hi[i], lo[i]);
}

static void split_ref(const float *src, size_t n, uint16_t *hi, uint16_t *lo) {
    for (size_t i = 0; i < n; i++) mt_split_f32(src[i], &hi[i], &lo[i]);
}

#if defined(__x86_64__)
static MT_SPLIT_AVX2 void join_avx2(const uint16_t *hi, const uint16_t *lo, size_t n, float *dst) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(dst + i), mt_split_join8(mt_split_load8(hi + i), mt_split_load8(lo + i)));
    join_ref(hi + i, lo + i, n - i, dst + i);
}

static MT_SPLIT_AVX2 void split_avx2(const float *src, size_t n, uint16_t *hi, uint16_t *lo) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        mt_split_store8(hi + i, mt_split_hi8(u));
        mt_split_store8(lo + i, _mm256_and_si256(u, _mm256_set1_epi32(0xffff)));
    }
    split_ref(src + i, n - i, hi + i, lo + i);
}

static MT_SPLIT_AVX512 void join_avx512(const uint16_t *hi, const uint16_t *lo, size_t n, float *dst) {
    for (size_t i = 0; i < n; i += 16) {
        size_t count = n - i < 16 ? n - i : 16;
        __m512i u = mt_split_join16(mt_split_load16(hi + i, count), mt_split_load16(lo + i, count));
        _mm512_mask_storeu_epi32(dst + i, (__mmask16)((1u << count) - 1u), u);
    }
}

static MT_SPLIT_AVX512 void split_avx512(const float *src, size_t n, uint16_t *hi, uint16_t *lo) {
    for (size_t i = 0; i < n; i += 16) {
        size_t count = n - i < 16 ? n - i : 16;
        __mmask16 mask = (__mmask16)((1u << count) - 1u);
        __m512i u = _mm512_maskz_loadu_epi32(mask, src + i);
        mt_split_store16(hi + i, mask, mt_split_hi16(u));
        mt_split_store16(lo + i, mask, _mm512_and_si512(u, _mm512_set1_epi32(0xffff)));
    }
}
#endif

static void join_with(mt_adamw_impl impl, const uint16_t *hi, const uint16_t *lo, size_t n, float *dst) {
    switch (mt_adamw_impl_resolve(impl)) {
#if defined(__x86_64__)
    case MT_ADAMW_AVX512: join_avx512(hi, lo, n, dst); return;
    case MT_ADAMW_AVX2: join_avx2(hi, lo, n, dst); return;
#endif
    default: join_ref(hi, lo, n, dst);
    }
}

static void split_with(mt_adamw_impl impl, const float *src, size_t n, uint16_t *hi, uint16_t *lo) {
    switch (mt_adamw_impl_resolve(impl)) {
#if defined(__x86_64__)
    case MT_ADAMW_AVX512: split_avx512(src, n, hi, lo); return;
    case MT_ADAMW_AVX2: split_avx2(src, n, hi, lo); return;
#endif
    default: split_ref(src, n, hi, lo);
    }
}

void mt_master_read_with(mt_adamw_impl impl, mt_master w, size_t n, float *dst) {
    if (w.f32) memcpy(dst, w.f32, n * sizeof *dst);
    else join_with(impl, w.hi, w.lo, n, dst);
}

void mt_master_write_with(mt_adamw_impl impl, mt_master w, size_t n, const float *src) {
    if (w.f32) memcpy(w.f32, src, n * sizeof *src);
    else split_with(impl, src, n, w.hi, w.lo);
}

/* Large conversions run on the OpenMP threads, each a run of whole pieces. */
enum { PIECE = 1 << 16 };

void mt_master_read(mt_master w, size_t n, float *dst) {
    size_t pieces = (n + PIECE - 1) / PIECE;
#pragma omp parallel for schedule(static) if (pieces > 16)
    for (size_t p = 0; p < pieces; p++) {
        size_t at = p * PIECE, count = n - at < PIECE ? n - at : PIECE;
        mt_master_read_with(MT_ADAMW_BEST, mt_master_at(w, at), count, dst + at);
    }
}

void mt_master_write(mt_master w, size_t n, const float *src) {
    size_t pieces = (n + PIECE - 1) / PIECE;
#pragma omp parallel for schedule(static) if (pieces > 16)
    for (size_t p = 0; p < pieces; p++) {
        size_t at = p * PIECE, count = n - at < PIECE ? n - at : PIECE;
        mt_master_write_with(MT_ADAMW_BEST, mt_master_at(w, at), count, src + at);
    }
}
