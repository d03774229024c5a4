/* The split fp32 layout (util/split_f32.h): every one of the 2^32 patterns, NaNs and infinities
 * included, split into its halves and joined back bit for bit; the high half is the value rounded
 * to bf16 (nearest, ties away from zero), checked in double against its two bf16 neighbours; and
 * which NaNs stream as something else. Under the sanitizers (-O1, every access checked) the loop
 * over 2^32 would take minutes: there it takes a sample with every special range whole. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/master.h"
#include "util/split_f32.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EXHAUSTIVE 0
#else
#define EXHAUSTIVE 1
#endif

/* The bf16 value of bits h as a double; the infinity counts as 2^128, where rounding puts it. */
static double bf16_value(uint32_t h) {
    if ((h & 0x7fffu) == 0x7f80u) return (h & 0x8000u) ? -ldexp(1, 128) : ldexp(1, 128);
    return (double)mt_f32_of_bits(h << 16);
}

/* 1 when hi is x rounded to nearest bf16 with ties away from zero, for a finite x, or x itself
 * for an infinity. */
static int rounds_right(uint32_t u, uint16_t hi) {
    float x = mt_f32_of_bits(u);
    if (isinf(x)) return hi == (uint16_t)(u >> 16);
    uint32_t toward_zero = u >> 16, away = toward_zero + 1; /* magnitudes: the neighbours in bf16 */
    double below = fabs(x - bf16_value(toward_zero)), above = fabs(bf16_value(away) - x);
    uint32_t want = below < above ? toward_zero : away; /* a tie goes away from zero */
    return hi == (uint16_t)want;
}

typedef struct {
    uint64_t checked, not_joined, nan_not_nan_hi, nan_hi_not_nan, vector_differs;
} tally;

static void add(tally *into, const tally *t) {
    into->checked += t->checked, into->not_joined += t->not_joined, into->nan_not_nan_hi += t->nan_not_nan_hi;
    into->nan_hi_not_nan += t->nan_hi_not_nan, into->vector_differs += t->vector_differs;
}

/* The scalar definition on the 2^16 patterns high << 16 | i: the halves into hi[], and how many do
 * not join back. Vectorized where the CPU has AVX2 (the exhaustive run's cost). */
#define SCALAR_BLOCK(NAME, ATTR)                                                                  \
    ATTR static uint32_t NAME(uint32_t high, uint16_t *hi) {                                      \
        uint32_t not_joined = 0;                                                                  \
        for (int i = 0; i < 65536; i++) {                                                         \
            uint32_t u = high << 16 | (uint32_t)i;                                                \
            uint16_t h = mt_split_hi_bits(u);                                                     \
            hi[i] = h;                                                                            \
            not_joined += mt_split_join_bits(h, (uint16_t)u) != u;                                \
        }                                                                                         \
        return not_joined;                                                                        \
    }
SCALAR_BLOCK(scalar_block_plain, )
#if defined(__x86_64__)
SCALAR_BLOCK(scalar_block_avx2, __attribute__((target("avx2"))))
#endif

/* Which of the block's values are NaNs, and which high halves: counted one by one where the block
 * holds NaNs or infinities (a magnitude from 0x7f80 << 16 on), else only the NaN high halves (there
 * must be none). */
static void nan_tally(uint32_t high, const uint16_t *hi, tally *t) {
    if ((high & 0x7fffu) < 0x7f80u) {
        uint32_t nan_hi = 0;
        for (int i = 0; i < 65536; i++) nan_hi += (hi[i] & 0x7fffu) > 0x7f80u;
        t->nan_hi_not_nan += nan_hi;
        return;
    }
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t u = high << 16 | i;
        int nan = (u & 0x7fffffffu) > 0x7f800000u, hi_nan = (hi[i] & 0x7fffu) > 0x7f80u;
        t->nan_not_nan_hi += nan && !hi_nan;
        t->nan_hi_not_nan += hi_nan && !nan;
    }
}

static void scalar_block(uint32_t high, uint16_t *hi, tally *t) {
#if defined(__x86_64__)
    t->not_joined += __builtin_cpu_supports("avx2") ? scalar_block_avx2(high, hi) : scalar_block_plain(high, hi);
#else
    t->not_joined += scalar_block_plain(high, hi);
#endif
    t->checked += 65536;
    nan_tally(high, hi, t);
}

/* The highs first_high + k * step (k < highs), every low half: the scalar definition, and the
 * vector conversions of `impl` (split, then joined back) against it. */
static tally check_highs(mt_adamw_impl impl, uint32_t first_high, uint32_t highs, uint32_t step) {
    tally total = {0};
#pragma omp parallel
    {
        tally mine = {0};
        float *x = malloc(65536 * sizeof *x), *back = malloc(65536 * sizeof *back);
        uint16_t *want = malloc(65536 * 2), *hi = malloc(65536 * 2), *lo = malloc(65536 * 2);
        cr_assert(x && back && want && hi && lo);
#pragma omp for schedule(static)
        for (int64_t k = 0; k < highs; k++) {
            uint32_t high = first_high + (uint32_t)k * step;
            scalar_block(high, want, &mine);
            for (uint32_t i = 0; i < 65536; i++) x[i] = mt_f32_of_bits(high << 16 | i);
            mt_master w = {.hi = hi, .lo = lo};
            mt_master_write_with(impl, w, 65536, x);
            mt_master_read_with(impl, w, 65536, back);
            int same_lo = 1;
            for (uint32_t i = 0; i < 65536; i++) same_lo &= lo[i] == (uint16_t)i;
            mine.vector_differs += memcmp(hi, want, 65536 * 2) || !same_lo || memcmp(back, x, 65536 * 4);
        }
#pragma omp critical
        add(&total, &mine);
        free(x), free(back), free(want), free(hi), free(lo);
    }
    return total;
}

/* Every pattern (under the sanitizers, the highs around every case's edges and a spread), through
 * the scalar definition and the fastest vector conversions. */
Test(split, every_pattern_joins_back) {
#if EXHAUSTIVE
    tally t = check_highs(MT_ADAMW_BEST, 0, 65536, 1);
    cr_assert_eq(t.checked, (uint64_t)1 << 32);
    /* The NaNs whose high half is not a NaN: the signaling NaNs with payloads 1..0xffff, each sign. */
    cr_assert_eq(t.nan_not_nan_hi, 2 * 0xffffu, "%llu NaNs stream as a number", (unsigned long long)t.nan_not_nan_hi);
#else
    static const uint32_t edges[] = {0x0000, 0x0001, 0x7f7f, 0x7f80, 0x7f81, 0x7fff, 0x8000, 0xff7f, 0xff80, 0xff81, 0xffff};
    tally t = {0}, spread = check_highs(MT_ADAMW_BEST, 3, 64, 1021);
    for (int e = 0; e < 11; e++) {
        tally one = check_highs(MT_ADAMW_BEST, edges[e], 1, 1);
        add(&t, &one);
    }
    add(&t, &spread);
#endif
    cr_assert_eq(t.not_joined, 0, "%llu patterns do not join back", (unsigned long long)t.not_joined);
    cr_assert_eq(t.nan_hi_not_nan, 0, "a number streams as a NaN");
    cr_assert_eq(t.vector_differs, 0, "%s: %llu blocks of 2^16 differ from the definition",
                 mt_adamw_impl_name(mt_adamw_impl_resolve(MT_ADAMW_BEST)), (unsigned long long)t.vector_differs);
}

/* Every implementation the CPU has, on the edges of every case and a spread of ordinary values. */
Test(split, vector_conversions_match_the_definition) {
    static const uint32_t edges[] = {0x0000, 0x7f7f, 0x7f80, 0x7f81, 0x7fff, 0x8000, 0xff7f, 0xff80, 0xff81, 0xffff};
    for (mt_adamw_impl impl = MT_ADAMW_REF; impl <= MT_ADAMW_AVX512; impl++) {
        if (!mt_adamw_impl_supported(impl)) continue;
        uint64_t bad = 0;
        for (int e = 0; e < 10; e++) bad += check_highs(impl, edges[e], 1, 1).vector_differs;
        bad += check_highs(impl, 3, 16, 4093).vector_differs;
        cr_assert_eq(bad, 0, "%s: %llu blocks of 2^16 differ", mt_adamw_impl_name(impl), (unsigned long long)bad);
    }
}

/* Rounding depends on the low half against 0x8000 and on the exponent: every high half with the
 * low halves around those cuts and a few others, each checked in double against its neighbours. */
Test(split, high_half_rounds_to_nearest_ties_away) {
    static const uint16_t lows[] = {0x0000, 0x0001, 0x1234, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0x9abc, 0xfffe, 0xffff};
    uint64_t misrounded = 0, checked = 0;
    for (uint32_t high = 0; high < 65536; high++)
        for (int i = 0; i < 10; i++) {
            uint32_t u = high << 16 | lows[i];
            if ((u & 0x7fffffffu) > 0x7f800000u) continue; /* NaNs: the test above */
            checked++;
            misrounded += !rounds_right(u, mt_split_hi_bits(u));
        }
    cr_assert_gt(checked, 600000);
    cr_assert_eq(misrounded, 0, "%llu values' high halves are not their rounding", (unsigned long long)misrounded);
}

Test(split, quiet_nans_and_cuda_nan_stream_as_nans) {
    static const uint32_t quiet[] = {0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu, 0x7fff8000u, 0x7fc08000u};
    for (int i = 0; i < 6; i++) {
        uint16_t hi = mt_split_hi_bits(quiet[i]);
        cr_assert(isnan(mt_f32_of_bits((uint32_t)hi << 16)), "%08x streams as %04x", quiet[i], hi);
        cr_assert_eq(mt_split_join_bits(hi, mt_split_lo_bits(quiet[i])), quiet[i]);
    }
}

Test(split, ties_round_away_from_zero) {
    /* 1 + 2^-8 lies halfway between the bf16 neighbours 1 and 1 + 2^-7 (mantissa 7 bits). */
    float tie = 1.0f + 0x1p-8f;
    uint16_t hi, lo;
    mt_split_f32(tie, &hi, &lo);
    cr_assert_eq(hi, 0x3f81, "up, away from zero (nearest even would give 0x3f80)");
    mt_split_f32(-tie, &hi, &lo);
    cr_assert_eq(hi, 0xbf81);
    cr_assert_eq(mt_f32_bits(mt_split_join(hi, lo)), mt_f32_bits(-tie));
}
