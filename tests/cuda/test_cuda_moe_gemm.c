/* The CUDA grouped expert GEMMs (grouped_matmul, _dx, _dw) in both of the backend's ways
 * (MT_MOE_GEMM: the cuBLASLt loop over the default 4 streams, and the kernels that read the offsets on
 * the device) against the CPU reference on the same bf16-rounded inputs: tiles cut by every edge (rows
 * of an expert, the columns, the depth), experts with no rows, every row to one expert, a skewed load,
 * widths that are not multiples of 8 (element-by-element loads, unaligned pointers), model shapes
 * (moe_big_*: OLMoE's and Qwen3-MoE's experts); dw's segment-by-segment sum (one call over S segments
 * gives the bits of S calls) and the bits of two runs; the cuBLASLt loop's bits on 1, 3 and 8 streams
 * and after other sizes filled its algorithm cache (the same), and its refusal of offsets that do not
 * add up; then the op table's MoE timing cases in both ways (--verbose for the rates).
 *
 * Tolerances (||got - ref|| / ||ref||): y and dx 1e-2 (bf16 outputs); dw 1e-5 against a float64 sum
 * (fp32 accumulation in another order), on every element or, at model shapes, on 4096 of them. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops_table.h"
#include "backend/cpu/cpu_ops.h"
#include "moe_check.h"

#define BF16_TOL 1e-2
#define SUM_TOL 1e-5
#define DW_SAMPLES 4096

static const char *const modes[] = {"cublaslt", "kernel"};

typedef enum { SPREAD, SKEWED, ALL_TO_ONE } load;

typedef struct {
    const char *name;
    int n, E, k, seg, in, out;
    load load;
} gemm_shape;

/* dw[e][o][i] + the sum over expert e's rows of dy[r][o] * x[r][i], in float64. */
static float dw_exact(const float *dw0, const float *dy, const float *x, const int32_t *offsets, int S, int in,
                      int out, int e, int o, int i) {
    double sum = dw0[((size_t)e * out + o) * in + i];
    for (int r = offsets[e * S]; r < offsets[(e + 1) * S]; r++) sum += (double)dy[(size_t)r * out + o] * x[(size_t)r * in + i];
    return (float)sum;
}

static void check_gemm(const char *mode, gemm_shape g, uint64_t seed) {
    int S = (g.n + g.seg - 1) / g.seg, rows = g.n * g.k;
    size_t groups = (size_t)g.E * S + 1, wc = (size_t)g.E * g.out * g.in;
    size_t xc = (size_t)rows * g.in, yc = (size_t)rows * g.out;
    char the_case[200];
    snprintf(the_case, sizeof the_case, "%s (MT_MOE_GEMM=%s): %d tokens, top %d of %d experts, segments of %d, in %d, "
             "out %d", g.name, mode, g.n, g.k, g.E, g.seg, g.in, g.out);
    uint64_t state = seed;
    int32_t *experts = moe_ints((size_t)rows), *order = moe_ints((size_t)rows), *slot_row = moe_ints((size_t)rows);
    int32_t *offsets = moe_ints(groups);
    if (g.load == ALL_TO_ONE) {
        cr_assert_eq(g.k, 1);
        for (int t = 0; t < g.n; t++) experts[t] = g.E / 2;
    } else {
        moe_random_experts(experts, g.n, g.k, g.E - 2, g.load == SKEWED, &state);
    }
    mt_cpu_moe_permute(order, slot_row, offsets, experts, g.n, g.E, g.k, g.seg);
    float *x = moe_floats(xc), *w = moe_floats(wc), *dy = moe_floats(yc), *dw0 = moe_floats(wc);
    moe_fill(x, xc, -1, 1, &state);
    moe_fill(w, wc, -0.2f, 0.2f, &state);
    moe_fill(dy, yc, -1, 1, &state);
    moe_fill(dw0, wc, -1, 1, &state);

    moe_dev d;
    moe_open(&d, mode, 0);
    void *d_x = moe_put_act(&d, x, xc), *d_w = moe_put_act(&d, w, wc), *d_dy = moe_put_act(&d, dy, yc);
    void *d_dw = moe_put_f32(&d, dw0, wc), *d_off = moe_put_i32(&d, offsets, groups);
    void *d_y = moe_zeros(&d, moe_act_bytes(&d, yc)), *d_dx = moe_zeros(&d, moe_act_bytes(&d, xc));
    const mt_moe_iface *m = &d.be->ops->moe;
    m->grouped_matmul(d.be, d.s, d_y, d_x, d_w, NULL, d_off, rows, g.E, S, g.in, g.out);
    m->grouped_matmul_dx(d.be, d.s, d_dx, d_dy, d_w, d_off, rows, g.E, S, g.in, g.out);
    m->grouped_matmul_dw(d.be, d.s, d_dw, NULL, d_dy, d_x, d_off, rows, g.E, S, g.in, g.out);
    moe_sync(&d, the_case);

    float *got = moe_floats(yc > xc ? yc : xc), *want = moe_floats(yc > xc ? yc : xc);
    moe_get_act(&d, got, d_y, yc);
    mt_cpu_moe_matmul(want, x, w, NULL, offsets, rows, g.E, S, g.in, g.out);
    moe_expect_close("y", the_case, got, want, yc, g.out, BF16_TOL);
    moe_get_act(&d, got, d_dx, xc);
    mt_cpu_moe_matmul_dx(want, dy, w, offsets, rows, g.E, S, g.in, g.out);
    moe_expect_close("dx", the_case, got, want, xc, g.in, BF16_TOL);

    float *dw = moe_floats(wc);
    moe_get_f32(&d, dw, d_dw, wc);
    if ((double)rows * g.in * g.out <= 2e8) { /* every element */
        float *exact = moe_floats(wc);
        for (int e = 0; e < g.E; e++)
            for (int o = 0; o < g.out; o++)
                for (int i = 0; i < g.in; i++)
                    exact[((size_t)e * g.out + o) * g.in + i] = dw_exact(dw0, dy, x, offsets, S, g.in, g.out, e, o, i);
        moe_expect_close("dw", the_case, dw, exact, wc, g.in, SUM_TOL);
    } else { /* DW_SAMPLES elements, each expert's first and last row and column among them */
        float *got_s = moe_floats(DW_SAMPLES), *want_s = moe_floats(DW_SAMPLES);
        for (int s = 0; s < DW_SAMPLES; s++) {
            int e = s % g.E, o = (int)(moe_next(&state) % g.out), i = (int)(moe_next(&state) % g.in);
            if (s / g.E == 0) o = 0, i = 0;
            if (s / g.E == 1) o = g.out - 1, i = g.in - 1;
            got_s[s] = dw[((size_t)e * g.out + o) * g.in + i];
            want_s[s] = dw_exact(dw0, dy, x, offsets, S, g.in, g.out, e, o, i);
        }
        moe_expect_close("dw (sampled: expert s % E, random rows and columns)", the_case, got_s, want_s, DW_SAMPLES,
                         1, SUM_TOL);
    }
    moe_close(&d);
}

static void check_shapes(const gemm_shape *shapes, size_t count) {
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
        for (size_t i = 0; i < count; i++) check_gemm(modes[m], shapes[i], 1000 + i);
}

Test(cuda, moe_grouped_gemms_match_cpu) {
    const gemm_shape shapes[] = {
        /* 16-byte path; row tiles cut at each expert's end, column tail 72, depth tail 8 */
        {"tails everywhere, two experts empty", 700, 16, 4, 300, 264, 200, SPREAD},
        {"every row to one expert", 1000, 32, 1, 1000, 256, 512, ALL_TO_ONE},
        {"a skewed load over 4 segments", 2048, 64, 8, 512, 128, 96, SKEWED},
        {"one row of one token", 1, 8, 1, 1, 64, 32, SPREAD},
        /* element-by-element path */
        {"widths not multiples of 8", 150, 10, 3, 150, 50, 37, SPREAD},
        {"the op table's odd widths, by segment", 40, 6, 2, 16, 48, 30, SPREAD},
    };
    check_shapes(shapes, sizeof shapes / sizeof *shapes);
}

Test(cuda, moe_big_grouped_gemms_at_model_shapes) {
    const gemm_shape shapes[] = {
        {"OLMoE's gate_up", 2048, 64, 8, 2048, 2048, 2048, SPREAD},
        {"Qwen3-30B-A3B's down, skewed", 2048, 128, 8, 1024, 768, 2048, SKEWED},
    };
    check_shapes(shapes, sizeof shapes / sizeof *shapes);
}

/* dw over S segments in one call against S calls of one segment each (each segment's rows copied
 * out, expert by expert): the same bits; and the one call twice: the same bits. */
Test(cuda, moe_grouped_dw_adds_segment_by_segment) {
    enum { N = 600, SEG = 150, S = N / SEG, E = 8, K = 2, IN = 128, OUT = 96, ROWS = N * K };
    size_t wc = (size_t)E * OUT * IN;
    uint64_t state = 21;
    int32_t experts[ROWS], order[ROWS], slot_row[ROWS], offsets[E * S + 1];
    moe_random_experts(experts, N, K, E, 0, &state);
    mt_cpu_moe_permute(order, slot_row, offsets, experts, N, E, K, SEG);
    float *x = moe_floats((size_t)ROWS * IN), *dy = moe_floats((size_t)ROWS * OUT), *dw0 = moe_floats(wc);
    moe_fill(x, (size_t)ROWS * IN, -1, 1, &state);
    moe_fill(dy, (size_t)ROWS * OUT, -1, 1, &state);
    moe_fill(dw0, wc, -1, 1, &state);
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        char the_case[96];
        snprintf(the_case, sizeof the_case, "dw of 4 segments (MT_MOE_GEMM=%s)", modes[m]);
        moe_dev d;
        moe_open(&d, modes[m], 0);
        void *d_x = moe_put_act(&d, x, (size_t)ROWS * IN), *d_dy = moe_put_act(&d, dy, (size_t)ROWS * OUT);
        void *d_off = moe_put_i32(&d, offsets, E * S + 1);
        void *d_once = moe_put_f32(&d, dw0, wc), *d_again = moe_put_f32(&d, dw0, wc), *d_by = moe_put_f32(&d, dw0, wc);
        d.be->ops->moe.grouped_matmul_dw(d.be, d.s, d_once, NULL, d_dy, d_x, d_off, ROWS, E, S, IN, OUT);
        d.be->ops->moe.grouped_matmul_dw(d.be, d.s, d_again, NULL, d_dy, d_x, d_off, ROWS, E, S, IN, OUT);
        for (int s = 0; s < S; s++) {
            float *xs = moe_floats((size_t)ROWS * IN), *dys = moe_floats((size_t)ROWS * OUT);
            int32_t off_s[E + 1];
            off_s[0] = 0;
            for (int e = 0; e < E; e++) {
                int r0 = offsets[e * S + s], r1 = offsets[e * S + s + 1];
                memcpy(xs + (size_t)off_s[e] * IN, x + (size_t)r0 * IN, (size_t)(r1 - r0) * IN * sizeof *x);
                memcpy(dys + (size_t)off_s[e] * OUT, dy + (size_t)r0 * OUT, (size_t)(r1 - r0) * OUT * sizeof *dy);
                off_s[e + 1] = off_s[e] + r1 - r0;
            }
            void *d_xs = moe_put_act(&d, xs, (size_t)off_s[E] * IN), *d_dys = moe_put_act(&d, dys, (size_t)off_s[E] * OUT);
            void *d_off_s = moe_put_i32(&d, off_s, E + 1);
            d.be->ops->moe.grouped_matmul_dw(d.be, d.s, d_by, NULL, d_dys, d_xs, d_off_s, off_s[E], E, 1, IN, OUT);
            moe_sync(&d, the_case);
        }
        float *once = moe_floats(wc), *again = moe_floats(wc), *by = moe_floats(wc);
        moe_get_f32(&d, once, d_once, wc);
        moe_get_f32(&d, again, d_again, wc);
        moe_get_f32(&d, by, d_by, wc);
        moe_expect_same_floats("dw: one call against a call a segment", the_case, by, once, wc);
        moe_expect_same_floats("dw: one call twice", the_case, again, once, wc);
        moe_close(&d);
    }
}

/* One routing's three GEMMs on a backend: y, dx and dw (from dw0) brought home. */
typedef struct {
    int n, E, k, seg, in, out, skewed;
    uint64_t seed;
} bits_case;

typedef struct {
    float *y, *dx, *dw;
} bits_out;

static bits_out run_three(moe_dev *d, bits_case c, const char *the_case) {
    int S = (c.n + c.seg - 1) / c.seg, rows = c.n * c.k;
    size_t groups = (size_t)c.E * S + 1, wc = (size_t)c.E * c.out * c.in, xc = (size_t)rows * c.in,
           yc = (size_t)rows * c.out;
    uint64_t state = c.seed;
    int32_t *experts = moe_ints((size_t)rows), *order = moe_ints((size_t)rows), *slot_row = moe_ints((size_t)rows);
    int32_t *offsets = moe_ints(groups);
    moe_random_experts(experts, c.n, c.k, c.E - 2, c.skewed, &state); /* the last two experts get no row */
    mt_cpu_moe_permute(order, slot_row, offsets, experts, c.n, c.E, c.k, c.seg);
    float *x = moe_floats(xc), *w = moe_floats(wc), *dy = moe_floats(yc), *dw0 = moe_floats(wc);
    moe_fill(x, xc, -1, 1, &state);
    moe_fill(w, wc, -0.2f, 0.2f, &state);
    moe_fill(dy, yc, -1, 1, &state);
    moe_fill(dw0, wc, -1, 1, &state);
    void *d_x = moe_put_act(d, x, xc), *d_w = moe_put_act(d, w, wc), *d_dy = moe_put_act(d, dy, yc);
    void *d_dw = moe_put_f32(d, dw0, wc), *d_off = moe_put_i32(d, offsets, groups);
    void *d_y = moe_zeros(d, moe_act_bytes(d, yc)), *d_dx = moe_zeros(d, moe_act_bytes(d, xc));
    const mt_moe_iface *m = &d->be->ops->moe;
    m->grouped_matmul(d->be, d->s, d_y, d_x, d_w, NULL, d_off, rows, c.E, S, c.in, c.out);
    m->grouped_matmul_dx(d->be, d->s, d_dx, d_dy, d_w, d_off, rows, c.E, S, c.in, c.out);
    m->grouped_matmul_dw(d->be, d->s, d_dw, NULL, d_dy, d_x, d_off, rows, c.E, S, c.in, c.out);
    moe_sync(d, the_case);
    bits_out o = {moe_floats(yc), moe_floats(xc), moe_floats(wc)};
    moe_get_act(d, o.y, d_y, yc);
    moe_get_act(d, o.dx, d_dx, xc);
    moe_get_f32(d, o.dw, d_dw, wc);
    return o;
}

static void expect_same_bits(const char *the_case, bits_case c, bits_out got, bits_out want) {
    size_t rows = (size_t)c.n * c.k;
    moe_expect_same_floats("y", the_case, got.y, want.y, rows * c.out);
    moe_expect_same_floats("dx", the_case, got.dx, want.dx, rows * c.in);
    moe_expect_same_floats("dw", the_case, got.dw, want.dw, (size_t)c.E * c.out * c.in);
}

/* The cuBLASLt loop on 1, 3 and 8 streams: an expert's GEMMs run on one stream whichever it is, so the
 * same bits (a skewed load over 3 segments; aligned widths, then odd ones). */
Test(cuda, moe_grouped_gemms_give_the_same_bits_on_any_streams) {
    const bits_case cases[] = {{1500, 64, 4, 500, 136, 88, 1, 31}, {300, 12, 3, 128, 50, 37, 0, 32}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bits_out want = {0};
        const int streams[] = {1, 3, 8};
        for (int j = 0; j < 3; j++) {
            char the_case[96];
            snprintf(the_case, sizeof the_case, "case %zu (in %d, out %d) on %d streams against 1", i, cases[i].in,
                     cases[i].out, streams[j]);
            moe_dev d;
            moe_open(&d, "cublaslt", streams[j]);
            bits_out got = run_three(&d, cases[i], the_case);
            moe_close(&d);
            if (j == 0) want = got;
            else expect_same_bits(the_case, cases[i], got, want);
        }
    }
}

/* The cuBLASLt loop's algorithms are a function of each GEMM's size bucket, not of which sizes came
 * first: a routing after another (whose experts' rows fall in the same buckets) gives the bits it
 * gives on a fresh backend. */
Test(cuda, moe_grouped_gemm_bits_do_not_depend_on_history) {
    const bits_case first = {700, 16, 4, 700, 256, 192, 0, 41}, then = {650, 16, 4, 325, 256, 192, 0, 42};
    moe_dev d;
    moe_open(&d, "cublaslt", 0);
    run_three(&d, first, "the first routing");
    bits_out after = run_three(&d, then, "the second routing after the first");
    moe_close(&d);
    moe_open(&d, "cublaslt", 0);
    bits_out fresh = run_three(&d, then, "the second routing on a fresh backend");
    moe_close(&d);
    expect_same_bits("the second routing: after the first against on a fresh backend", then, after, fresh);
}

/* Offsets that do not run from 0 up to the rows are refused with the offending one named, before any
 * GEMM reads rows that are not there. */
Test(cuda, moe_grouped_gemm_refuses_offsets_that_do_not_add_up) {
    enum { E = 4, ROWS = 64, IN = 32, OUT = 16 };
    const int32_t bad[][E + 1] = {{0, 16, 32, 48, 60}, {0, 16, 8, 48, 64}, {4, 16, 32, 48, 64}};
    moe_dev d;
    moe_open(&d, "cublaslt", 0);
    void *x = moe_zeros(&d, moe_act_bytes(&d, (size_t)ROWS * IN)), *w = moe_zeros(&d, moe_act_bytes(&d, E * OUT * IN));
    void *y = moe_zeros(&d, moe_act_bytes(&d, (size_t)ROWS * OUT));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        void *off = moe_put_i32(&d, bad[i], E + 1);
        d.be->ops->moe.grouped_matmul(d.be, d.s, y, x, w, NULL, off, ROWS, E, 1, IN, OUT);
        mt_event_record(d.be, d.done, d.s);
        mt_event_sync(d.be, d.done);
        mt_status status = mt_backend_check(d.be);
        cr_expect_eq(status, MT_ERR_INVALID, "offsets case %zu: status %d (%s)", i, status, mt_error());
        cr_expect(strstr(mt_error(), "offsets["), "offsets case %zu: the message names no offset: %s", i, mt_error());
    }
    moe_close(&d);
}

/* The op table's MoE cases at OLMoE-1B-7B's and Qwen3-30B-A3B's sizes, both ways for the GEMMs: a
 * record of the rates (bench/moe_gemm measures them properly), and finite outputs. */
Test(cuda, moe_ops_timing) {
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        moe_dev d;
        moe_open(&d, modes[m], 0);
        for (size_t i = 0; i < ops_moe_timing_case_count; i++) {
            const ops_case *c = &ops_moe_timing_cases[i];
            if (m > 0 && c->kind != &OPS_MOE_GROUPED) continue;
            double seconds = ops_time_case(d.be, c, 3);
            double flops = c->kind->flops ? c->kind->flops(c) : 0;
            if (flops > 0)
                cr_log_info("%-36s %-9s %9.3f ms  %7.1f TFLOP/s", c->name, modes[m], seconds * 1e3,
                            flops / seconds * 1e-12);
            else
                cr_log_info("%-36s %-9s %9.3f ms  %7.1f GB/s", c->name, modes[m], seconds * 1e3,
                            ops_case_bytes(d.be, c) / seconds * 1e-9);
        }
        moe_close(&d);
    }
}
