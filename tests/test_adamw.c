/* AdamW: every SIMD kernel, part and thread count against the reference (bitwise), on fp32 and on
 * split masters; the parts against the whole update (bitwise unclipped, within fp32 rounding
 * clipped); bf16 rounding; and the reference against torch.optim.AdamW
 * (tests/reference/adamw_ref.py). */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "optim/adamw.h"
#include "util/bf16.h"
#include "util/split_f32.h"

static const mt_adamw_params params = {
    .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
    .step = 1, .grad_scale = 0.5f,
};

static uint64_t rng_next(uint64_t *state) { /* xorshift64*: deterministic test data */
    *state ^= *state >> 12, *state ^= *state << 25, *state ^= *state >> 27;
    return *state * 2685821657736338717ull;
}

/* Roughly normal values with scale `scale` (sum of uniforms). */
static void fill_random(float *x, size_t n, float scale, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        float sum = 0;
        for (int k = 0; k < 4; k++) sum += (float)(rng_next(&s) >> 40) / (float)(1 << 24) - 0.5f;
        x[i] = sum * scale;
    }
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The optimizer state of one run, allocated with `offset` elements of slack in front so the
 * arrays start unaligned; the masters as fp32 or split (optim/master.h). */
typedef struct {
    mt_master w;
    float *m, *v, *grad;
    size_t n;
    void *blocks[5];
} state;

static state state_new(size_t n, size_t offset, int split, uint64_t seed) {
    state s = {.n = n};
    for (int k = 0; k < 5; k++) {
        s.blocks[k] = malloc((n + offset) * sizeof(float));
        cr_assert_not_null(s.blocks[k]);
    }
    s.m = (float *)s.blocks[1] + offset, s.v = (float *)s.blocks[2] + offset, s.grad = (float *)s.blocks[3] + offset;
    float *master = (float *)s.blocks[0] + offset;
    fill_random(master, n, 1.0f, seed);
    if (split) { /* the halves at an odd element offset: 2-byte aligned only */
        s.w = (mt_master){.hi = (uint16_t *)s.blocks[4] + offset, .lo = (uint16_t *)s.blocks[4] + n + 2 * offset};
        mt_master_write(s.w, n, master);
    } else {
        s.w = (mt_master){.f32 = master};
    }
    fill_random(s.m, n, 1e-2f, seed + 1);
    fill_random(s.v, n, 1e-3f, seed + 2);
    for (size_t i = 0; i < n; i++) s.v[i] *= s.v[i]; /* second moments are >= 0 */
    fill_random(s.grad, n, 1e-1f, seed + 3);
    return s;
}

static void state_free(state *s) {
    for (int k = 0; k < 5; k++) free(s->blocks[k]);
}

/* The masters as fp32 (malloc'd). */
static float *masters_of(const state *s) {
    float *x = malloc(s->n * sizeof *x);
    cr_assert_not_null(x);
    mt_master_read(s->w, s->n, x);
    return x;
}

static void assert_same_bits(const float *a, const float *b, size_t n, const char *what,
                             const char *impl, size_t len) {
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(f32_bits(a[i]), f32_bits(b[i]), "%s: %s[%zu] = %.9g, reference %.9g (n %zu)",
                     impl, what, i, (double)a[i], (double)b[i], len);
}

static void assert_states_equal(const state *got, const state *want, const char *impl) {
    size_t n = got->n;
    float *a = masters_of(got), *b = masters_of(want);
    assert_same_bits(a, b, n, "master", impl, n);
    free(a), free(b);
    assert_same_bits(got->m, want->m, n, "m", impl, n);
    assert_same_bits(got->v, want->v, n, "v", impl, n);
    if (mt_master_is_split(got->w)) /* the halves themselves, not only what they join to */
        cr_assert(!memcmp(got->w.hi, want->w.hi, 2 * n) && !memcmp(got->w.lo, want->w.lo, 2 * n), "%s: halves", impl);
}

static const char *const part_names[] = {"full",      "masters", "moments", "ahead", "ahead correct masters",
                                         "correct moments", "ahead undo"};

/* Three steps of one part of `impl` with `threads` against three of the reference, one state
 * each. */
static void check_impl(mt_adamw_impl impl, mt_adamw_part part, int threads, size_t n, size_t offset, int split,
                       int decay) {
    state want = state_new(n, offset, split, n), got = state_new(n, offset, split, n);
    for (int64_t step = 1; step <= 3; step++) {
        mt_adamw_params p = params;
        p.step = step;
        mt_adamw_update_with(MT_ADAMW_REF, part, &p, decay, want.w, want.m, want.v, want.grad, n, 1);
        mt_adamw_update_with(impl, part, &p, decay, got.w, got.m, got.v, got.grad, n, threads);
    }
    char what[64];
    snprintf(what, sizeof what, "%s %s, %s masters", mt_adamw_impl_name(impl), part_names[part], split ? "split" : "fp32");
    assert_states_equal(&got, &want, what);
    state_free(&want);
    state_free(&got);
}

static const mt_adamw_impl simd_impls[] = {MT_ADAMW_AVX2, MT_ADAMW_AVX512, MT_ADAMW_BEST};

/* Odd lengths around the vector widths (8 and 16) and misaligned starts, every part, both forms
 * of the masters. */
Test(adamw, simd_bitwise_equal_to_reference) {
    static const size_t lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099};
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0]; k++) {
        if (!mt_adamw_impl_supported(simd_impls[k])) {
            cr_log_info("adamw: this CPU lacks %s; not tested", mt_adamw_impl_name(simd_impls[k]));
            continue; /* a warning would make Criterion exit 1: make test would fail on such a CPU */
        }
        for (mt_adamw_part part = MT_ADAMW_FULL; part <= MT_ADAMW_AHEAD_UNDO; part++)
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
                for (size_t offset = 0; offset < 4; offset += 3)
                    for (int split = 0; split <= 1; split++) check_impl(simd_impls[k], part, 1, lengths[l], offset, split, 1);
        for (int split = 0; split <= 1; split++) check_impl(simd_impls[k], MT_ADAMW_FULL, 1, 33, 1, split, 0);
    }
}

/* Long enough that all 7 threads get a share (small tensors run on fewer), and not a multiple
 * of the split's chunk. */
Test(adamw, threads_do_not_change_results) {
    static const int threads[] = {2, 3, 7};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        check_impl(MT_ADAMW_REF, MT_ADAMW_FULL, threads[t], 7 * 16384 + 77, 1, 1, 1);
        check_impl(MT_ADAMW_BEST, MT_ADAMW_AHEAD_CORRECT_MASTERS, threads[t], 7 * 16384 + 77, 3, 0, 0);
    }
}

Test(adamw, weight_decay_only_where_asked) {
    /* With no gradient and no moments the update is zero, so only decay can move a weight. */
    float master[2] = {1.0f, -2.0f}, m[2] = {0}, v[2] = {0}, grad[2] = {0};
    mt_adamw_update(MT_ADAMW_FULL, &params, 0, (mt_master){.f32 = master}, m, v, grad, 2);
    cr_assert_eq(master[0], 1.0f);
    cr_assert_eq(master[1], -2.0f);
    mt_adamw_update(MT_ADAMW_FULL, &params, 1, (mt_master){.f32 = master}, m, v, grad, 2);
    cr_assert_eq(master[0], (float)(1.0 - 1e-3f * (double)0.1f));
}

static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round to nearest even at the bf16 boundary, including ties, overflow, denormals and NaNs. */
static const struct { uint32_t in; uint16_t want; } bf16_cases[] = {
    {0x3f800000, 0x3f80}, /* 1.0 exactly */
    {0x3f808000, 0x3f80}, /* tie, even below: down */
    {0x3f818000, 0x3f82}, /* tie, odd below: up */
    {0x3f807fff, 0x3f80}, /* just under the tie */
    {0x3f808001, 0x3f81}, /* just over the tie */
    {0xbf818000, 0xbf82}, /* negative tie rounds away like its magnitude */
    {0x7f7fffff, 0x7f80}, /* FLT_MAX overflows to +inf */
    {0xff800000, 0xff80}, /* -inf */
    {0x00018000, 0x0002}, /* denormal tie, odd below: up (not flushed to zero) */
    {0x80000000, 0x8000}, /* -0 */
    {0x7fc00001, 0x7fc0}, /* quiet NaN */
    {0x7f800001, 0x7fc0}, /* signaling NaN comes out quiet, not as inf */
    {0xff812345, 0xffc1}, /* negative NaN keeps its sign */
};
#define BF16_CASES (sizeof bf16_cases / sizeof bf16_cases[0])

Test(adamw, bf16_round_nearest_even) {
    for (size_t i = 0; i < BF16_CASES; i++)
        cr_assert_eq(mt_f32_to_bf16(f32_from_bits(bf16_cases[i].in)), bf16_cases[i].want,
                     "0x%08x -> 0x%04x, want 0x%04x", bf16_cases[i].in,
                     mt_f32_to_bf16(f32_from_bits(bf16_cases[i].in)), bf16_cases[i].want);
}

/* The kernels' own split of the masters, through an update that leaves them unchanged: lr 0, no
 * gradient, no moments; the halves are util/split_f32.h's, ties, NaNs and denormals included. */
Test(adamw, kernels_split_the_masters_exactly) {
    static const mt_adamw_impl impls[] = {MT_ADAMW_REF, MT_ADAMW_AVX2, MT_ADAMW_AVX512};
    static const uint32_t cases[] = {0x3f800000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0xbf818000,
                                     0x7f7fffff, 0x7f7f8000, 0xff800000, 0x00018000, 0x80000000, 0x7fc00001,
                                     0x7fffffff, 0xffffffff, 0x7f800001, 0x7f80c000, 0xff812345, 0x00000001};
    enum { N = sizeof cases / sizeof cases[0] };
    mt_adamw_params p = params;
    p.lr = 0.0f;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!mt_adamw_impl_supported(impls[k])) continue;
        float m[N] = {0}, v[N] = {0}, grad[N] = {0};
        uint16_t hi[N], lo[N];
        for (size_t i = 0; i < N; i++) hi[i] = mt_split_hi_bits(cases[i]), lo[i] = (uint16_t)cases[i];
        mt_adamw_update_with(impls[k], MT_ADAMW_FULL, &p, 1, (mt_master){.hi = hi, .lo = lo}, m, v, grad, N, 1);
        for (size_t i = 0; i < N; i++) {
            float x = f32_from_bits(cases[i]);
            if (isnan(x)) { /* NaN * 1 keeps the payload but quiets it; the halves are still its split */
                uint32_t back = mt_split_join_bits(hi[i], lo[i]);
                cr_assert((back & 0x7fffffffu) > 0x7f800000u, "%s: 0x%08x is no longer a NaN", mt_adamw_impl_name(impls[k]), cases[i]);
                cr_assert_eq(hi[i], mt_split_hi_bits(back));
                continue;
            }
            cr_assert_eq(hi[i], mt_split_hi_bits(cases[i]), "%s: 0x%08x -> 0x%04x, want 0x%04x", mt_adamw_impl_name(impls[k]),
                         cases[i], hi[i], mt_split_hi_bits(cases[i]));
            cr_assert_eq(lo[i], (uint16_t)cases[i]);
        }
    }
}

/* MASTERS then MOMENTS is the whole update, bit for bit, whatever the scale: the engine's update
 * once the norm is known, the masters first (what the next forward waits for). */
Test(adamw, masters_then_moments_is_the_whole_update) {
    static const float scales[] = {1.0f, 0.37f, 1e-3f};
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0] + 1; k++) {
        mt_adamw_impl impl = k ? simd_impls[k - 1] : MT_ADAMW_REF;
        if (!mt_adamw_impl_supported(impl)) continue;
        for (int split = 0; split <= 1; split++)
            for (size_t sc = 0; sc < sizeof scales / sizeof scales[0]; sc++) {
                size_t n = 1031;
                state whole = state_new(n, 1, split, 7), parts = state_new(n, 1, split, 7);
                for (int64_t step = 1; step <= 3; step++) {
                    mt_adamw_params p = params;
                    p.step = step, p.grad_scale = scales[sc];
                    mt_adamw_update_with(impl, MT_ADAMW_FULL, &p, 1, whole.w, whole.m, whole.v, whole.grad, n, 1);
                    float *before = masters_of(&parts);
                    mt_adamw_update_with(impl, MT_ADAMW_MASTERS, &p, 1, parts.w, parts.m, parts.v, parts.grad, n, 1);
                    float *after = masters_of(&parts);
                    cr_assert(memcmp(before, after, n * 4), "%s: MASTERS moved no master", mt_adamw_impl_name(impl));
                    free(before), free(after);
                    mt_adamw_update_with(impl, MT_ADAMW_MOMENTS, &p, 1, parts.w, parts.m, parts.v, parts.grad, n, 1);
                }
                assert_states_equal(&parts, &whole, mt_adamw_impl_name(impl));
                state_free(&whole);
                state_free(&parts);
            }
    }
}

/* A moment term's elements where (1 - beta2) g^2 is not finite keep their moments: the step's
 * norm is not finite either, so it is skipped. */
Test(adamw, moments_keep_where_the_gradient_is_not_finite) {
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0] + 1; k++) {
        mt_adamw_impl impl = k ? simd_impls[k - 1] : MT_ADAMW_REF;
        if (!mt_adamw_impl_supported(impl)) continue;
        float m[19], v[19], grad[19], master[19];
        for (int i = 0; i < 19; i++) m[i] = 0.5f, v[i] = 0.25f, grad[i] = 0.1f, master[i] = 1;
        grad[3] = NAN, grad[9] = INFINITY, grad[17] = 1e30f; /* the last: finite, its square is not */
        mt_adamw_update_with(impl, MT_ADAMW_MOMENTS, &params, 1, (mt_master){.f32 = master}, m, v, grad, 19, 1);
        for (int i = 0; i < 19; i++) {
            int kept = i == 3 || i == 9 || i == 17;
            cr_assert_eq(m[i] == 0.5f && v[i] == 0.25f, kept, "%s: element %d", mt_adamw_impl_name(impl), i);
        }
        for (int i = 0; i < 19; i++) m[i] = 0.5f, v[i] = 0.25f; /* AHEAD keeps the master there too */
        mt_adamw_update_with(impl, MT_ADAMW_AHEAD, &params, 1, (mt_master){.f32 = master}, m, v, grad, 19, 1);
        for (int i = 0; i < 19; i++) {
            int kept = i == 3 || i == 9 || i == 17;
            cr_assert_eq(m[i] == 0.5f && v[i] == 0.25f && master[i] == 1, kept, "%s: ahead, element %d",
                         mt_adamw_impl_name(impl), i);
        }
    }
}

/* AHEAD with finite gradients is FULL, bit for bit (a step that turns out not clipped is the plain
 * update). */
Test(adamw, ahead_is_the_whole_update) {
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0] + 1; k++) {
        mt_adamw_impl impl = k ? simd_impls[k - 1] : MT_ADAMW_REF;
        if (!mt_adamw_impl_supported(impl)) continue;
        for (int split = 0; split <= 1; split++) {
            size_t n = 1031;
            state whole = state_new(n, 1, split, 27), ahead = state_new(n, 1, split, 27);
            for (int64_t step = 1; step <= 3; step++) {
                mt_adamw_params p = params;
                p.step = step, p.grad_scale = 1.0f;
                mt_adamw_update_with(impl, MT_ADAMW_FULL, &p, 1, whole.w, whole.m, whole.v, whole.grad, n, 1);
                mt_adamw_update_with(impl, MT_ADAMW_AHEAD, &p, 1, ahead.w, ahead.m, ahead.v, ahead.grad, n, 1);
            }
            assert_states_equal(&ahead, &whole, mt_adamw_impl_name(impl));
            state_free(&whole);
            state_free(&ahead);
        }
    }
}

/* The step after AHEAD (the whole update ahead of the norm, the gradient as it is), once the clip
 * coefficient c is known: AHEAD_CORRECT_MASTERS then CORRECT_MOMENTS against the plain update with c
 * (FULL), one step from the same state. The recovery of beta1 m as m' - (1 - beta1) g is exact up to
 * the rounding of the sum that made m' and of the subtraction, so each moment is off by at most a
 * few roundings of the terms that formed it, S_m = beta1 |m| + (1 - beta1) |g| + |m_full| (S_v
 * likewise): bound 2 FLT_EPSILON S, i.e. 4 units of half an ulp, the sum's, the subtraction's and the
 * two final roundings. The masters then move by the step's change that those moments' errors make,
 * bounded in double from the same S, plus a rounding of the master, plus the recovery of the
 * decayed master from AHEAD's: half an ulp of AHEAD's master and of the recovered one. Measured
 * worst over scales 0.9 to 1e-3, as a share of these bounds: printed by the test. */
Test(adamw, ahead_corrected_is_within_rounding_of_the_clipped_update) {
    static const float scales[] = {0.9f, 0.5f, 0.1f, 0.01f, 1e-3f};
    double worst[3] = {0};
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0] + 1; k++) {
        mt_adamw_impl impl = k ? simd_impls[k - 1] : MT_ADAMW_REF;
        if (!mt_adamw_impl_supported(impl)) continue;
        for (int split = 0; split <= 1; split++)
            for (size_t sc = 0; sc < sizeof scales / sizeof scales[0]; sc++) {
                size_t n = 4099;
                state full = state_new(n, 0, split, 11), ahead = state_new(n, 0, split, 11);
                float *m0 = malloc(n * 4), *v0 = malloc(n * 4), *w0 = masters_of(&ahead);
                memcpy(m0, full.m, n * 4), memcpy(v0, full.v, n * 4);
                mt_adamw_params p = params;
                p.step = 3;
                p.grad_scale = scales[sc];
                mt_adamw_update_with(impl, MT_ADAMW_FULL, &p, 1, full.w, full.m, full.v, full.grad, n, 1);
                mt_adamw_params q = p;
                q.grad_scale = 1.0f;
                mt_adamw_update_with(impl, MT_ADAMW_AHEAD, &q, 1, ahead.w, ahead.m, ahead.v, ahead.grad, n, 1);
                float *wa = masters_of(&ahead);
                mt_adamw_update_with(impl, MT_ADAMW_AHEAD_CORRECT_MASTERS, &p, 1, ahead.w, ahead.m, ahead.v, ahead.grad, n, 1);
                mt_adamw_update_with(impl, MT_ADAMW_CORRECT_MOMENTS, &p, 1, ahead.w, ahead.m, ahead.v, ahead.grad, n, 1);
                float *wf = masters_of(&full), *wc = masters_of(&ahead);
                double b1 = p.beta1, b2 = p.beta2, eps = FLT_EPSILON;
                double step = p.lr / (1 - pow(b1, 3)), c2 = sqrt(1 - pow(b2, 3));
                for (size_t i = 0; i < n; i++) {
                    double g = ahead.grad[i];
                    double sm = b1 * fabs(m0[i]) + (1 - b1) * fabs(g) + fabs(full.m[i]);
                    double sv = b2 * v0[i] + (1 - b2) * g * g + full.v[i];
                    double dm = fabs((double)ahead.m[i] - full.m[i]), dv = fabs((double)ahead.v[i] - full.v[i]);
                    double denom = sqrt(full.v[i]) / c2 + p.eps;
                    /* d(m / denom) for errors of 2 eps S in m and v (d sqrt(v) <= dv / (2 sqrt(v)), or sqrt(dv)) */
                    double dsqrt = full.v[i] > 0 ? fmin(2 * eps * sv / (2 * sqrt(full.v[i])), sqrt(2 * eps * sv)) : sqrt(2 * eps * sv);
                    double dstep = step * (2 * eps * sm / denom + fabs(full.m[i]) * dsqrt / c2 / (denom * denom));
                    double da = fabs((double)wc[i] - wf[i]);
                    double a_bound = dstep + eps * fabs(wf[i]) + eps * (fabs(wa[i]) + fabs(w0[i]));
                    cr_assert_leq(dm, 2 * eps * sm, "%s c %g: m[%zu] %.9g, plain %.9g", mt_adamw_impl_name(impl),
                                  (double)scales[sc], i, (double)ahead.m[i], (double)full.m[i]);
                    cr_assert_leq(dv, 2 * eps * sv, "%s c %g: v[%zu] %.9g, plain %.9g", mt_adamw_impl_name(impl),
                                  (double)scales[sc], i, (double)ahead.v[i], (double)full.v[i]);
                    cr_assert_leq(da, a_bound, "%s c %g: master[%zu] %.9g, plain %.9g", mt_adamw_impl_name(impl),
                                  (double)scales[sc], i, (double)wc[i], (double)wf[i]);
                    cr_assert_geq(ahead.v[i], 0.0f);
                    worst[0] = fmax(worst[0], dm / (2 * eps * sm));
                    worst[1] = fmax(worst[1], dv / (2 * eps * sv));
                    worst[2] = fmax(worst[2], da / a_bound);
                }
                free(wf), free(wa), free(wc), free(w0), free(m0), free(v0);
                state_free(&full);
                state_free(&ahead);
            }
    }
    cr_log_info("ahead corrected: worst share of the bound: m %.3f, v %.3f, master %.3f", worst[0], worst[1], worst[2]);
}

/* A skipped step after AHEAD: AHEAD_UNDO brings each moment back to within the rounding of the sum
 * and subtraction that went through it and of the division by beta: 2 FLT_EPSILON (|m| + |m'|) /
 * beta1 (v likewise), and each master to within the roundings of AHEAD's sum, of its subtraction
 * and of the division by the decay: 2 FLT_EPSILON (|w| + |w'|). */
Test(adamw, ahead_undo_is_within_rounding_of_before) {
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0] + 1; k++) {
        mt_adamw_impl impl = k ? simd_impls[k - 1] : MT_ADAMW_REF;
        if (!mt_adamw_impl_supported(impl)) continue;
        for (int split = 0; split <= 1; split++) {
            size_t n = 4099;
            state s = state_new(n, 0, split, 31);
            float *m0 = malloc(n * 4), *v0 = malloc(n * 4), *w0 = masters_of(&s), *m1 = malloc(n * 4), *v1 = malloc(n * 4);
            memcpy(m0, s.m, n * 4), memcpy(v0, s.v, n * 4);
            mt_adamw_params p = params;
            p.grad_scale = 1.0f;
            mt_adamw_update_with(impl, MT_ADAMW_AHEAD, &p, 1, s.w, s.m, s.v, s.grad, n, 1);
            memcpy(m1, s.m, n * 4), memcpy(v1, s.v, n * 4);
            float *w1 = masters_of(&s);
            mt_adamw_update_with(impl, MT_ADAMW_AHEAD_UNDO, &p, 1, s.w, s.m, s.v, s.grad, n, 1);
            float *w2 = masters_of(&s);
            int moved = 0;
            for (size_t i = 0; i < n; i++) {
                double bw = 2 * FLT_EPSILON * (fabs(w0[i]) + fabs(w1[i]));
                double bm = 2 * FLT_EPSILON * (fabs(m0[i]) + fabs(m1[i])) / params.beta1;
                double bv = 2 * FLT_EPSILON * (v0[i] + v1[i]) / params.beta2;
                moved |= w1[i] != w0[i];
                cr_assert_leq(fabs((double)w2[i] - w0[i]), bw, "%s: master[%zu] %.9g, before %.9g", mt_adamw_impl_name(impl),
                              i, (double)w2[i], (double)w0[i]);
                cr_assert_leq(fabs((double)s.m[i] - m0[i]), bm, "%s: m[%zu]", mt_adamw_impl_name(impl), i);
                cr_assert_leq(fabs((double)s.v[i] - v0[i]), bv, "%s: v[%zu]", mt_adamw_impl_name(impl), i);
            }
            cr_assert(moved, "%s: AHEAD moved no master (the test would not see an undo)", mt_adamw_impl_name(impl));
            free(m0), free(v0), free(w0), free(m1), free(v1), free(w1), free(w2);
            state_free(&s);
        }
    }
}

static void write_floats(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(x, sizeof(float), n, f), n, "cannot write %s", path);
    cr_assert_eq(fclose(f), 0);
}

/* The script beside this file: tests/reference/adamw_ref.py from the repository root. */
static void reference_script(char *path, size_t size) {
    const char *dir_end = strrchr(__FILE__, '/');
    int dir_len = dir_end ? (int)(dir_end - __FILE__) : 1;
    snprintf(path, size, "%.*s/reference/adamw_ref.py", dir_len, dir_end ? __FILE__ : ".");
}

/* Five steps on 1001 weights, the first DECAY_N with weight decay and the rest without. */
Test(adamw, matches_torch_adamw) {
    enum { N = 1001, DECAY_N = 500, STEPS = 5 };
    static float data[N * (STEPS + 1)], torch_out[3 * N];
    float master[N], m[N] = {0}, v[N] = {0}, split_m[N] = {0}, split_v[N] = {0};
    uint16_t hi[N], lo[N];
    fill_random(data, N, 1.0f, 42);
    fill_random(data + N, (size_t)N * STEPS, 1e-1f, 43);
    memcpy(master, data, sizeof master);
    mt_master split = {.hi = hi, .lo = lo}; /* the same run on split masters: the same bits */
    mt_master_write(split, N, master);

    char dir[] = "/tmp/mt_adamw_XXXXXX", in_path[64], out_path[64], script[512], cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(in_path, sizeof in_path, "%s/in.f32", dir);
    snprintf(out_path, sizeof out_path, "%s/out.f32", dir);
    write_floats(in_path, data, sizeof data / sizeof data[0]);
    reference_script(script, sizeof script);
    /* %.17g prints each float's exact value, so Python forms the same double scalars. */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s --in %s --out %s --n %d --steps %d --decay-n %d --lr %.17g "
             "--beta1 %.17g --beta2 %.17g --eps %.17g --weight-decay %.17g --grad-scale %.17g",
             script, in_path, out_path, N, STEPS, DECAY_N, (double)params.lr,
             (double)params.beta1, (double)params.beta2, (double)params.eps,
             (double)params.weight_decay, (double)params.grad_scale);
    int rc = system(cmd);
    cr_assert_neq(WEXITSTATUS(rc), 3,
                  "/usr/bin/python3 cannot import torch or numpy: install python3-torch (Debian) "
                  "to run the PyTorch comparison");
    cr_assert_eq(rc, 0, "%s failed with status %d", cmd, rc);
    FILE *f = fopen(out_path, "rb");
    cr_assert_not_null(f, "no output from %s", script);
    cr_assert_eq(fread(torch_out, sizeof(float), 3 * N, f), (size_t)3 * N,
                 "%s: short output", out_path);
    fclose(f);
    unlink(in_path);
    unlink(out_path);
    rmdir(dir);

    for (int64_t step = 1; step <= STEPS; step++) {
        mt_adamw_params p = params;
        p.step = step;
        const float *grad = data + (size_t)N * step;
        mt_adamw_update(MT_ADAMW_FULL, &p, 1, (mt_master){.f32 = master}, m, v, grad, DECAY_N);
        mt_adamw_update(MT_ADAMW_FULL, &p, 0, (mt_master){.f32 = master + DECAY_N}, m + DECAY_N, v + DECAY_N,
                        grad + DECAY_N, N - DECAY_N);
        mt_adamw_update(MT_ADAMW_FULL, &p, 1, split, split_m, split_v, grad, DECAY_N);
        mt_adamw_update(MT_ADAMW_FULL, &p, 0, mt_master_at(split, DECAY_N), split_m + DECAY_N, split_v + DECAY_N,
                        grad + DECAY_N, N - DECAY_N);
    }
    /* torch's add(alpha) and addcmul vectorize with fused multiply-adds and its division by a
     * scalar may be a multiply by the reciprocal, so a result may differ from ours by about a
     * rounding of the terms that formed it. Where those terms cancel, that is many ulps of the
     * result, so the bound is in units of the terms' size: the largest scaled gradient (m), its
     * square (v), the weight plus its total movement (master). Measured worst: 0.9, 0.3 and 0.2
     * FLT_EPSILON of that size (master, m, v); bound: 2. */
    for (int i = 0; i < N; i++) {
        float g_max = 0;
        for (int step = 1; step <= STEPS; step++)
            g_max = fmaxf(g_max, fabsf(data[(size_t)N * step + i] * params.grad_scale));
        const struct { const char *name; float ours, theirs, size; } values[] = {
            {"master", master[i], torch_out[i], fabsf(data[i]) + STEPS * params.lr},
            {"exp_avg", m[i], torch_out[N + i], g_max},
            {"exp_avg_sq", v[i], torch_out[2 * N + i], g_max * g_max},
        };
        for (size_t a = 0; a < 3; a++)
            cr_assert_leq(fabsf(values[a].ours - values[a].theirs),
                          2 * FLT_EPSILON * values[a].size,
                          "%s[%d] = %.9g, torch %.9g", values[a].name, i,
                          (double)values[a].ours, (double)values[a].theirs);
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(f32_bits(mt_split_join(hi[i], lo[i])), f32_bits(master[i]), "split master[%d]", i);
        cr_assert_eq(f32_bits(split_m[i]), f32_bits(m[i]));
        cr_assert_eq(f32_bits(split_v[i]), f32_bits(v[i]));
    }
}
