/* AdamW: every SIMD kernel and thread count against the reference (bitwise), bf16 rounding, and
 * the reference against torch.optim.AdamW (tests/reference/adamw_ref.py). */
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

/* The optimizer state of one run, allocated with `offset` floats of slack in front so the
 * arrays start unaligned. */
typedef struct {
    float *master, *m, *v, *grad;
    void *out;
    size_t n;
    float *blocks[5];
} state;

static state state_new(size_t n, size_t offset, mt_dtype dtype, uint64_t seed) {
    state s = {.n = n};
    for (int k = 0; k < 5; k++) {
        s.blocks[k] = malloc((n + offset) * sizeof(float));
        cr_assert_not_null(s.blocks[k]);
    }
    s.master = s.blocks[0] + offset, s.m = s.blocks[1] + offset, s.v = s.blocks[2] + offset;
    s.grad = s.blocks[3] + offset;
    /* bf16 output at an odd element offset as well: 2-byte aligned only. */
    s.out = dtype == MT_DTYPE_BF16 ? (void *)((uint16_t *)s.blocks[4] + offset)
                                   : (void *)(s.blocks[4] + offset);
    fill_random(s.master, n, 1.0f, seed);
    fill_random(s.m, n, 1e-2f, seed + 1);
    fill_random(s.v, n, 1e-3f, seed + 2);
    for (size_t i = 0; i < n; i++) s.v[i] *= s.v[i]; /* second moments are >= 0 */
    fill_random(s.grad, n, 1e-1f, seed + 3);
    return s;
}

static void state_free(state *s) {
    for (int k = 0; k < 5; k++) free(s->blocks[k]);
}

static void assert_same_bits(const float *a, const float *b, size_t n, const char *what,
                             const char *impl, size_t len) {
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(f32_bits(a[i]), f32_bits(b[i]), "%s: %s[%zu] = %.9g, reference %.9g (n %zu)",
                     impl, what, i, (double)a[i], (double)b[i], len);
}

static void assert_states_equal(const state *got, const state *want, mt_dtype dtype,
                                const char *impl) {
    size_t n = got->n;
    assert_same_bits(got->master, want->master, n, "master", impl, n);
    assert_same_bits(got->m, want->m, n, "m", impl, n);
    assert_same_bits(got->v, want->v, n, "v", impl, n);
    cr_assert_eq(memcmp(got->out, want->out, n * mt_dtype_size(dtype)), 0,
                 "%s: weights_out differs from the reference (n %zu)", impl, n);
}

/* Three steps of `impl` with `threads` against three of the reference, one state each. */
static void check_impl(mt_adamw_impl impl, int threads, size_t n, size_t offset, mt_dtype dtype,
                       int decay) {
    state want = state_new(n, offset, dtype, n), got = state_new(n, offset, dtype, n);
    for (int64_t step = 1; step <= 3; step++) {
        mt_adamw_params p = params;
        p.step = step;
        mt_adamw_update_with(MT_ADAMW_REF, &p, decay, want.master, want.m, want.v, want.grad,
                             want.out, dtype, n, 1);
        mt_adamw_update_with(impl, &p, decay, got.master, got.m, got.v, got.grad, got.out, dtype,
                             n, threads);
    }
    assert_states_equal(&got, &want, dtype, mt_adamw_impl_name(impl));
    state_free(&want);
    state_free(&got);
}

static const mt_adamw_impl simd_impls[] = {MT_ADAMW_AVX2, MT_ADAMW_AVX512, MT_ADAMW_BEST};

/* Odd lengths around the vector widths (8 and 16) and misaligned starts. */
Test(adamw, simd_bitwise_equal_to_reference) {
    static const size_t lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099};
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0]; k++) {
        if (!mt_adamw_impl_supported(simd_impls[k])) {
            cr_log_info("adamw: this CPU lacks %s; not tested", mt_adamw_impl_name(simd_impls[k]));
            continue; /* a warning would make Criterion exit 1: make test would fail on such a CPU */
        }
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (size_t offset = 0; offset < 4; offset += 3)
                for (int decay = 0; decay <= 1; decay++) {
                    check_impl(simd_impls[k], 1, lengths[l], offset, MT_DTYPE_F32, decay);
                    check_impl(simd_impls[k], 1, lengths[l], offset, MT_DTYPE_BF16, decay);
                }
    }
}

/* Big enough for streaming stores, which peel an unaligned head first. */
Test(adamw, simd_streaming_bitwise_equal_to_reference) {
    size_t n = ((size_t)1 << 18) + 13;
    for (size_t k = 0; k < sizeof simd_impls / sizeof simd_impls[0]; k++) {
        if (!mt_adamw_impl_supported(simd_impls[k])) continue;
        check_impl(simd_impls[k], 1, n, 3, MT_DTYPE_BF16, 1);
        check_impl(simd_impls[k], 1, n, 1, MT_DTYPE_F32, 1);
    }
}

/* Long enough that all 7 threads get a share (small tensors run on fewer), and not a multiple
 * of the split's chunk. */
Test(adamw, threads_do_not_change_results) {
    static const int threads[] = {2, 3, 7};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        check_impl(MT_ADAMW_REF, threads[t], 7 * 16384 + 77, 1, MT_DTYPE_BF16, 1);
        check_impl(MT_ADAMW_BEST, threads[t], 7 * 16384 + 77, 3, MT_DTYPE_F32, 0);
    }
}

Test(adamw, weight_decay_only_where_asked) {
    /* With no gradient and no moments the update is zero, so only decay can move a weight. */
    float master[2] = {1.0f, -2.0f}, m[2] = {0}, v[2] = {0}, grad[2] = {0}, out[2];
    mt_adamw_update(&params, 0, master, m, v, grad, out, MT_DTYPE_F32, 2);
    cr_assert_eq(master[0], 1.0f);
    cr_assert_eq(out[1], -2.0f);
    mt_adamw_update(&params, 1, master, m, v, grad, out, MT_DTYPE_F32, 2);
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

/* The kernels' own bf16 conversion, through an update that leaves the weights unchanged: lr 0,
 * no gradient, no moments. */
Test(adamw, bf16_round_nearest_even_in_kernels) {
    static const mt_adamw_impl impls[] = {MT_ADAMW_REF, MT_ADAMW_AVX2, MT_ADAMW_AVX512};
    mt_adamw_params p = params;
    p.lr = 0.0f;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (!mt_adamw_impl_supported(impls[k])) continue;
        float master[BF16_CASES], m[BF16_CASES] = {0}, v[BF16_CASES] = {0}, grad[BF16_CASES] = {0};
        uint16_t out[BF16_CASES];
        for (size_t i = 0; i < BF16_CASES; i++) master[i] = f32_from_bits(bf16_cases[i].in);
        mt_adamw_update_with(impls[k], &p, 1, master, m, v, grad, out, MT_DTYPE_BF16, BF16_CASES,
                             1);
        for (size_t i = 0; i < BF16_CASES; i++)
            cr_assert_eq(out[i], bf16_cases[i].want, "%s: 0x%08x -> 0x%04x, want 0x%04x",
                         mt_adamw_impl_name(impls[k]), bf16_cases[i].in, out[i],
                         bf16_cases[i].want);
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
    float master[N], m[N] = {0}, v[N] = {0};
    uint16_t out[N];
    fill_random(data, N, 1.0f, 42);
    fill_random(data + N, (size_t)N * STEPS, 1e-1f, 43);
    memcpy(master, data, sizeof master);

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
        mt_adamw_update(&p, 1, master, m, v, grad, out, MT_DTYPE_BF16, DECAY_N);
        mt_adamw_update(&p, 0, master + DECAY_N, m + DECAY_N, v + DECAY_N, grad + DECAY_N,
                        out + DECAY_N, MT_DTYPE_BF16, N - DECAY_N);
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
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], mt_f32_to_bf16(master[i]), "bf16 weights_out[%d]", i);
}
