/* Reduced-precision Adam moments (optim/moments.h): the 8-bit codes' round-trip bounds, one
 * bf16 and one 8-bit update against the fp32 update, the masked-rows update, training on the
 * demo corpus against fp32 moments, and resuming with another format refused. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_test_files.h"
#include "megatrain.h"
#include "optim/adamw.h"
#include "run_fixture.h"
#include "util/bf16.h"
#include "util/rng.h"
#include "test_limits.h"

static char dir[PATH_MAX];

static void make_dir(void) { hf_test_mkdtemp(dir); }
static void remove_dir(void) { hf_test_rmtree(dir); }

/* The training test is three runs of 80 steps: about 5 s plain and 28 s under ASan+UBSan on two
 * idle cores (15 and 30 s on busy ones); the limit keeps ten times that (test_limits.h). */
TestSuite(moments, .init = make_dir, .fini = remove_dir, .timeout = MT_TEST_LIMIT(300));

/* Odd sizes and an offset that is not a block boundary: partial blocks at both ends. */
enum { N = 1000, AT = 100, TOTAL = AT + N + 77 };

static void fill(float *x, size_t n, float scale, int positive, uint64_t seed) {
    mt_rng rng = {seed};
    for (size_t i = 0; i < n; i++) {
        /* magnitudes over six decades, as moments have */
        float r = (float)(mt_rng_normal(&rng) * pow(10.0, -6.0 * (double)(mt_rng_next(&rng) % 1000) / 1000.0));
        x[i] = positive ? scale * r * r : scale * r;
    }
}

static const mt_adamw_params params = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                       .weight_decay = 0.1f, .step = 7, .grad_scale = 0.5f};

/* Linear int8 codes: the error is at most half a step, absmax / 254 (and a float rounding). */
Test(moments, m_round_trip_within_half_a_step) {
    float x[MT_MOMENTS_BLOCK], y[MT_MOMENTS_BLOCK], scale;
    int8_t codes[MT_MOMENTS_BLOCK];
    fill(x, MT_MOMENTS_BLOCK, 1e-2f, 0, 1);
    mt_moments_quantize_m(x, MT_MOMENTS_BLOCK, codes, &scale);
    mt_moments_dequantize_m(codes, MT_MOMENTS_BLOCK, scale, y);
    for (int i = 0; i < MT_MOMENTS_BLOCK; i++)
        cr_assert_leq(fabsf(y[i] - x[i]), scale / 254.0f * (1 + 1e-5f), "m[%d] %g came back %g", i, x[i], y[i]);
}

/* The v code has a 4-bit mantissa: relative error at most 2^-5 (and float roundings, 1e-6),
 * above the lowest code; below it a positive v never becomes 0 and never exceeds the lowest
 * code; the block's absmax comes back exactly. */
Test(moments, v_round_trip_relative_and_never_zero) {
    float x[MT_MOMENTS_BLOCK], y[MT_MOMENTS_BLOCK], scale;
    uint8_t codes[MT_MOMENTS_BLOCK];
    fill(x, MT_MOMENTS_BLOCK, 1e-3f, 1, 2);
    x[3] = 1e-30f; /* far below the code's range */
    mt_moments_quantize_v(x, MT_MOMENTS_BLOCK, codes, &scale);
    mt_moments_dequantize_v(codes, MT_MOMENTS_BLOCK, scale, y);
    float lowest = scale * (17.0f / 16.0f) * ldexpf(1, -15) / (31.0f / 16.0f);
    for (int i = 0; i < MT_MOMENTS_BLOCK; i++) {
        if (x[i] == scale) cr_assert_eq(y[i], scale, "the absmax %g came back %g", x[i], y[i]);
        if (x[i] >= lowest)
            cr_assert_leq(fabsf(y[i] - x[i]), x[i] * (1.0f / 32 + 1e-6f), "v[%d] %g came back %g", i, x[i], y[i]);
        else
            cr_assert(y[i] > 0 && y[i] <= lowest * (1 + 1e-6f), "tiny v[%d] %g came back %g", i, x[i], y[i]);
    }
}

typedef struct {
    float master[TOTAL], grad[TOTAL], m[TOTAL], v[TOTAL];
    uint16_t hi[TOTAL], lo[TOTAL]; /* the masters split, as a bf16 store keeps them */
    mt_moments mom;
} state;

/* Every value of both moments as fp32. */
static void moments_to_f32(const mt_moments *mom, float *m, float *v) {
    for (size_t b = 0; b < mt_moments_blocks(mom->n); b++) {
        size_t start = b * MT_MOMENTS_BLOCK;
        size_t count = mom->n - start < MT_MOMENTS_BLOCK ? mom->n - start : MT_MOMENTS_BLOCK;
        for (size_t i = start; i < start + count; i++) {
            if (mom->format == MT_MOMENTS_BF16) {
                m[i] = mt_bf16_to_f32(((const uint16_t *)mom->m)[i]);
                v[i] = mt_bf16_to_f32(((const uint16_t *)mom->v)[i]);
            }
        }
        if (mom->format == MT_MOMENTS_8BIT) {
            mt_moments_dequantize_m((const int8_t *)mom->m + start, count, mom->m_scale[b], m + start);
            mt_moments_dequantize_v((const uint8_t *)mom->v + start, count, mom->v_scale[b], v + start);
        }
    }
}

/* Random masters and gradients; moments in `format`, and the fp32 moments set to exactly the
 * values the format holds, so that both updates start from the same state. */
static void make_state(state *s, mt_moments_format format) {
    fill(s->master, TOTAL, 0.02f, 0, 3);
    mt_master_write((mt_master){.hi = s->hi, .lo = s->lo}, TOTAL, s->master);
    fill(s->grad, TOTAL, 1e-2f, 0, 4);
    fill(s->m, TOTAL, 1e-3f, 0, 5);
    fill(s->v, TOTAL, 1e-5f, 1, 6);
    cr_assert_eq(mt_moments_create(&s->mom, format, TOTAL), MT_OK);
    for (size_t b = 0; b < mt_moments_blocks(TOTAL); b++) {
        size_t start = b * MT_MOMENTS_BLOCK, count = TOTAL - start < MT_MOMENTS_BLOCK ? TOTAL - start : MT_MOMENTS_BLOCK;
        if (format == MT_MOMENTS_8BIT) {
            mt_moments_quantize_m(s->m + start, count, (int8_t *)s->mom.m + start, &s->mom.m_scale[b]);
            mt_moments_quantize_v(s->v + start, count, (uint8_t *)s->mom.v + start, &s->mom.v_scale[b]);
        }
    }
    for (size_t i = 0; i < TOTAL; i++) {
        if (format == MT_MOMENTS_BF16) {
            ((uint16_t *)s->mom.m)[i] = mt_f32_to_bf16(s->m[i]);
            ((uint16_t *)s->mom.v)[i] = mt_f32_to_bf16(s->v[i]);
        }
    }
    moments_to_f32(&s->mom, s->m, s->v);
}

static float block_absmax(const float *x, size_t i) {
    size_t start = i / MT_MOMENTS_BLOCK * MT_MOMENTS_BLOCK, end = start + MT_MOMENTS_BLOCK < TOTAL ? start + MT_MOMENTS_BLOCK : TOTAL;
    float a = 0;
    for (size_t j = start; j < end; j++) a = fmaxf(a, fabsf(x[j]));
    return a;
}

/* One update of [AT, AT + N) in `format` and in fp32 from the same state: the masters, fp32 and
 * split, are the same bits (the fp32 kernel sees the same inputs); the moments come back as the
 * fp32 ones rounded: bf16 exactly (round to nearest even of the same values), 8-bit within the
 * round-trip bounds above, taken on the block's new absmax. 2 threads: the result must not
 * depend on them. */
static void check_update(mt_moments_format format) {
    static state s, want, split;
    make_state(&s, format);
    want = split = s;
    split.mom.m = malloc(TOTAL * 4), split.mom.v = malloc(TOTAL * 4); /* its own moments, the same values */
    memcpy(split.mom.m, s.mom.m, TOTAL * mt_moments_value_size(format));
    memcpy(split.mom.v, s.mom.v, TOTAL * mt_moments_value_size(format));
    if (format == MT_MOMENTS_8BIT) {
        split.mom.m_scale = malloc(mt_moments_blocks(TOTAL) * 4), split.mom.v_scale = malloc(mt_moments_blocks(TOTAL) * 4);
        memcpy(split.mom.m_scale, s.mom.m_scale, mt_moments_blocks(TOTAL) * 4);
        memcpy(split.mom.v_scale, s.mom.v_scale, mt_moments_blocks(TOTAL) * 4);
    }
    mt_adamw_update_moments(MT_ADAMW_FULL, &params, 1, (mt_master){.f32 = s.master + AT}, &s.mom, AT, s.grad + AT, N, 2);
    mt_adamw_update_moments(MT_ADAMW_FULL, &params, 1, (mt_master){.hi = split.hi + AT, .lo = split.lo + AT}, &split.mom,
                            AT, split.grad + AT, N, 2);
    mt_adamw_update(MT_ADAMW_FULL, &params, 1, (mt_master){.f32 = want.master + AT}, want.m + AT, want.v + AT,
                    want.grad + AT, N);
    float m[TOTAL], v[TOTAL], joined[TOTAL];
    moments_to_f32(&s.mom, m, v);
    cr_assert_arr_eq(s.master, want.master, sizeof s.master, "masters differ from the fp32 update");
    mt_master_read((mt_master){.hi = split.hi, .lo = split.lo}, TOTAL, joined);
    cr_assert_arr_eq(joined, want.master, sizeof joined, "split masters differ from the fp32 update");
    cr_assert_arr_eq(split.mom.m, s.mom.m, TOTAL * mt_moments_value_size(format), "moments differ with split masters");
    free(split.mom.m), free(split.mom.v), free(split.mom.m_scale), free(split.mom.v_scale);
    for (size_t i = 0; i < TOTAL; i++) {
        if (format == MT_MOMENTS_BF16) {
            cr_assert_eq(((uint16_t *)s.mom.m)[i], mt_f32_to_bf16(want.m[i]), "m[%zu]", i);
            cr_assert_eq(((uint16_t *)s.mom.v)[i], mt_f32_to_bf16(want.v[i]), "v[%zu]", i);
            continue;
        }
        float m_bound = block_absmax(want.m, i) / 254.0f * (1 + 1e-5f);
        float v_bound = fmaxf(want.v[i] * (1.0f / 32 + 1e-6f), block_absmax(want.v, i) * ldexpf(1, -15));
        cr_assert_leq(fabsf(m[i] - want.m[i]), m_bound, "m[%zu] %g, fp32 %g", i, m[i], want.m[i]);
        cr_assert_leq(fabsf(v[i] - want.v[i]), v_bound, "v[%zu] %g, fp32 %g", i, v[i], want.v[i]);
    }
    mt_moments_free(&s.mom);
}

Test(moments, bf16_update_is_fp32_update_rounded) { check_update(MT_MOMENTS_BF16); }
Test(moments, eight_bit_update_within_quantization_of_fp32) { check_update(MT_MOMENTS_8BIT); }

/* Rows picked by a mask: the picked rows get the fp32 update's masters, the others keep theirs,
 * in both formats (rows of 100 straddle the 8-bit blocks). */
Test(moments, masked_rows_update_only_their_rows) {
    enum { ROWS = 10, COLS = 100 };
    uint8_t mask[ROWS] = {1, 0, 0, 1, 1, 0, 1, 0, 0, 1};
    for (mt_moments_format f = MT_MOMENTS_BF16; f <= MT_MOMENTS_8BIT; f++) {
        static state s, want, before;
        make_state(&s, f);
        want = before = s;
        mt_adamw_update_rows(MT_ADAMW_FULL, &params, 0, (mt_master){.f32 = s.master + AT}, &s.mom, AT, s.grad + AT,
                             COLS, ROWS, COLS, mask, 1, 2);
        mt_adamw_update(MT_ADAMW_FULL, &params, 0, (mt_master){.f32 = want.master + AT}, want.m + AT, want.v + AT,
                        want.grad + AT, ROWS * COLS);
        for (size_t i = AT; i < AT + ROWS * COLS; i++) {
            int picked = mask[(i - AT) / COLS];
            float expected = picked ? want.master[i] : before.master[i];
            cr_assert_eq(s.master[i], expected, "%s: element %zu (row picked: %d)", mt_moments_format_name(f), i, picked);
        }
        mt_moments_free(&s.mom);
    }
}

/* One row of zeros that every row takes (grad_stride 0, as the engine updates the embedding's rows
 * no input token touched) is a zero gradient of the matrix's shape, bit for bit, in every format. */
Test(moments, a_shared_zero_row_is_a_zero_gradient) {
    enum { ROWS = 10, COLS = 100 };
    uint8_t mask[ROWS] = {1, 0, 0, 1, 1, 0, 1, 0, 0, 1};
    static const float zero_row[COLS];
    for (mt_moments_format f = MT_MOMENTS_F32; f <= MT_MOMENTS_8BIT; f++) {
        static state shared, whole;
        make_state(&shared, f);
        make_state(&whole, f);
        memset(whole.grad + AT, 0, ROWS * COLS * sizeof *whole.grad);
        mt_adamw_update_rows(MT_ADAMW_FULL, &params, 1, (mt_master){.f32 = shared.master + AT}, &shared.mom, AT,
                             zero_row, 0, ROWS, COLS, mask, 0, 2);
        mt_adamw_update_rows(MT_ADAMW_FULL, &params, 1, (mt_master){.f32 = whole.master + AT}, &whole.mom, AT,
                             whole.grad + AT, COLS, ROWS, COLS, mask, 0, 2);
        cr_assert_arr_eq(shared.master, whole.master, sizeof shared.master, "%s: masters", mt_moments_format_name(f));
        size_t bytes = TOTAL * mt_moments_value_size(f);
        cr_assert_arr_eq(shared.mom.m, whole.mom.m, bytes, "%s: m", mt_moments_format_name(f));
        cr_assert_arr_eq(shared.mom.v, whole.mom.v, bytes, "%s: v", mt_moments_format_name(f));
        if (f == MT_MOMENTS_8BIT)
            cr_assert_arr_eq(shared.mom.m_scale, whole.mom.m_scale, mt_moments_blocks(TOTAL) * 4, "8bit: scales");
        static state untouched;
        make_state(&untouched, f);
        cr_assert_neq(shared.master[AT + COLS], untouched.master[AT + COLS], "%s: row 1 did not move",
                      mt_moments_format_name(f));
        mt_moments_free(&untouched.mom);
        mt_moments_free(&shared.mom);
        mt_moments_free(&whole.mom);
    }
}

/* ---- training ---- */

/* The demo corpus when it has been made (scripts/make-demo-corpus.sh), else the tests' own. */
static const char *corpus(char *path) {
    if (access("data/kjv.txt", R_OK) == 0) return "data/kjv.txt";
    cr_log_info("data/kjv.txt is missing: training on the tests' corpus instead");
    mt_test_write_corpus(hf_test_path(path, dir, "corpus.txt"));
    return path;
}

static mt_train_options tiny_run(const char *data, const char *out, const char *moments, int64_t steps) {
    mt_train_options o = mt_train_defaults();
    o.preset = "tiny";
    o.data_path = data;
    o.seq_len = 64;
    o.steps = steps;
    o.backend = "cpu";
    /* One compute thread: what is measured is the moments' numerics, and OpenBLAS threads its
     * GEMMs (allocating a 0.5 MiB job table each time, which ASan maps and unmaps) only when
     * several are asked for. The optimizer's threads still split the updates. */
    o.threads = 1;
    o.out_dir = out;
    o.eval_every = 0;
    o.ckpt_every = 0;
    o.moments = moments;
    return o;
}

/* Mean training loss of the last `count` steps logged in <run>/metrics.jsonl. */
static double tail_loss(const char *run, int count) {
    char path[PATH_MAX + 32];
    double loss[1000];
    int n = 0;
    json_error_t error;
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    for (json_t *j; n < 1000 && (j = json_loadf(f, JSON_DISABLE_EOF_CHECK, &error)); json_decref(j))
        if (json_is_number(json_object_get(j, "loss"))) loss[n++] = json_number_value(json_object_get(j, "loss"));
    fclose(f);
    cr_assert_geq(n, count, "%s: %d losses logged", path, n);
    double sum = 0;
    for (int i = n - count; i < n; i++) sum += loss[i];
    return sum / count;
}

/* The bar: 80 steps of the tiny model, 8 x 64 tokens a step; the mean loss of the last
 * 20 steps with bf16 or 8-bit moments within 3% of fp32's. Measured on data/kjv.txt: fp32
 * 2.4043, bf16 2.4061 (+0.07%), 8-bit 2.3936 (-0.45%). */
Test(moments, loss_tracks_fp32_moments) {
    char data[PATH_MAX], out[PATH_MAX];
    const char *text = corpus(data);
    const char *formats[] = {"fp32", "bf16", "8bit"};
    double loss[3];
    for (int f = 0; f < 3; f++) {
        mt_train_options o = tiny_run(text, hf_test_path(out, dir, formats[f]), formats[f], 80);
        cr_assert_eq(mt_train(&o), MT_OK, "%s moments: %s", formats[f], mt_error());
        loss[f] = tail_loss(out, 20);
    }
    for (int f = 1; f < 3; f++)
        cr_assert_leq(fabs(loss[f] - loss[0]), 0.03 * loss[0], "%s moments: loss %.4f, fp32 %.4f", formats[f],
                      loss[f], loss[0]);
}

Test(moments, resume_with_another_format_is_refused) {
    char data[PATH_MAX], out[PATH_MAX];
    const char *text = corpus(data);
    mt_train_options o = tiny_run(text, hf_test_path(out, dir, "run"), "8bit", 2);
    o.seq_len = 16;
    o.batch = 2;
    cr_assert_eq(mt_train(&o), MT_OK, "%s", mt_error());
    o.moments = "fp32";
    o.resume = 1;
    o.steps = 3;
    cr_assert_eq(mt_train(&o), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "a run with --moments 8bit") && strstr(mt_error(), "--moments fp32"), "%s", mt_error());
    /* Left out, the run's own format is taken. */
    o.moments = NULL;
    cr_assert_eq(mt_train(&o), MT_OK, "%s", mt_error());
}
