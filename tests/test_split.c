/* The split fp32 layout (util/split_f32.h): every one of the 2^32 patterns, NaNs and infinities
 * included, split into its halves and joined back bit for bit; the high half is the value rounded
 * to bf16 (nearest, ties away from zero), checked in double against its two bf16 neighbours; and
 * which NaNs stream as something else. Under the sanitizers (-O1, every access checked) the loop
 * over 2^32 would take minutes: there it takes a sample with every special range whole. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

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
    uint64_t checked, not_joined, nan_not_nan_hi, nan_hi_not_nan;
} tally;

/* Joins back, and keeps NaNs NaNs where it can. */
static void check_one(uint32_t u, tally *t) {
    uint16_t hi = mt_split_hi_bits(u), lo = mt_split_lo_bits(u);
    int nan = (u & 0x7fffffffu) > 0x7f800000u, hi_nan = (hi & 0x7fffu) > 0x7f80u;
    t->checked++;
    t->not_joined += mt_split_join_bits(hi, lo) != u;
    t->nan_not_nan_hi += nan && !hi_nan;
    t->nan_hi_not_nan += hi_nan && !nan;
}

/* Every pattern from `from` to `to` inclusive. */
static void check_range(uint32_t from, uint32_t to, tally *t) {
    for (uint64_t u = from; u <= to; u++) check_one((uint32_t)u, t);
}

/* Every pattern (or the sample) through the vector conversions of one implementation, in pieces
 * of 2^16: split, then joined back, and the halves against the scalar definition. */
static uint64_t vector_mismatches(mt_adamw_impl impl, uint32_t first_high, uint32_t highs, uint32_t step) {
    uint64_t bad = 0;
#pragma omp parallel reduction(+ : bad)
    {
        float *x = malloc(65536 * sizeof *x), *back = malloc(65536 * sizeof *back);
        uint16_t *hi = malloc(65536 * sizeof *hi), *lo = malloc(65536 * sizeof *lo);
#pragma omp for schedule(static)
        for (int64_t k = 0; k < highs; k++) {
            uint32_t high = first_high + (uint32_t)k * step;
            for (uint32_t i = 0; i < 65536; i++) x[i] = mt_f32_of_bits(high << 16 | i);
            mt_master w = {.hi = hi, .lo = lo};
            mt_master_write_with(impl, w, 65536, x);
            mt_master_read_with(impl, w, 65536, back);
            for (uint32_t i = 0; i < 65536; i++) {
                uint32_t u = high << 16 | i;
                bad += (mt_f32_bits(back[i]) != u) | (hi[i] != mt_split_hi_bits(u)) | (lo[i] != (uint16_t)i);
            }
        }
        free(x), free(back), free(hi), free(lo);
    }
    return bad;
}

/* The scalar definition on every pattern (the sample under the sanitizers), and each vector
 * implementation against it: the fastest on every pattern, the others on a sample. */
Test(split, every_pattern_joins_back) {
    tally total = {0};
#if EXHAUSTIVE
    uint64_t checked = 0, not_joined = 0, nan_not_nan_hi = 0, nan_hi_not_nan = 0;
#pragma omp parallel for schedule(static) reduction(+ : checked, not_joined, nan_not_nan_hi, nan_hi_not_nan)
    for (int64_t high = 0; high < 65536; high++) {
        tally mine = {0};
        check_range((uint32_t)high << 16, (uint32_t)high << 16 | 0xffffu, &mine);
        checked += mine.checked, not_joined += mine.not_joined;
        nan_not_nan_hi += mine.nan_not_nan_hi, nan_hi_not_nan += mine.nan_hi_not_nan;
    }
    total = (tally){checked, not_joined, nan_not_nan_hi, nan_hi_not_nan};
    cr_assert_eq(total.checked, (uint64_t)1 << 32);
    /* The NaNs whose high half is not a NaN: the signaling NaNs with payloads 1..0xffff, each sign. */
    cr_assert_eq(total.nan_not_nan_hi, 2 * 0xffffu, "%llu NaNs stream as a number", (unsigned long long)total.nan_not_nan_hi);
#else
    /* A spread sample, and whole the ranges where the cases change: zeros and the smallest values,
     * the largest finite values, the infinities and the NaNs next to them, and the largest NaNs, of
     * both signs. */
    for (uint64_t i = 0; i < ((uint64_t)1 << 22); i++) check_one((uint32_t)(i * 1048573u), &total);
    static const uint32_t ranges[][2] = {{0x00000000u, 0x0000ffffu}, {0x7f7f0000u, 0x7f81ffffu}, {0x7fff0000u, 0x7fffffffu}};
    for (int r = 0; r < 3; r++)
        for (uint32_t sign = 0; sign <= 1; sign++)
            check_range(sign << 31 | ranges[r][0], sign << 31 | ranges[r][1], &total);
#endif
    cr_assert_eq(total.not_joined, 0, "%llu patterns do not join back", (unsigned long long)total.not_joined);
    cr_assert_eq(total.nan_hi_not_nan, 0, "a number streams as a NaN");
}

Test(split, vector_conversions_match_the_definition) {
    static const uint32_t edges[] = {0x0000, 0x7f7f, 0x7f80, 0x7f81, 0x7fff, 0x8000, 0xff7f, 0xff80, 0xff81, 0xffff};
    for (mt_adamw_impl impl = MT_ADAMW_REF; impl <= MT_ADAMW_BEST; impl++) {
        if (!mt_adamw_impl_supported(impl)) continue;
        uint64_t bad = 0;
        for (int e = 0; e < 10; e++) bad += vector_mismatches(impl, edges[e], 1, 1);
        bad += vector_mismatches(impl, 3, 64, 1021); /* a spread of ordinary values */
        cr_assert_eq(bad, 0, "%s: %llu mismatches", mt_adamw_impl_name(impl), (unsigned long long)bad);
    }
#if EXHAUSTIVE
    uint64_t bad = vector_mismatches(MT_ADAMW_BEST, 0, 65536, 1);
    cr_assert_eq(bad, 0, "%s on every pattern: %llu mismatches", mt_adamw_impl_name(mt_adamw_impl_resolve(MT_ADAMW_BEST)),
                 (unsigned long long)bad);
#endif
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
