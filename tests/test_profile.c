/* bench --profile on the CPU side: the option parsed and refused where it cannot run (the cpu
 * backend has no device timers), before any step; the backend's prof group absent there; and the
 * report's two files from rows of known times: the JSON's shape, its sums and shares, the Markdown's
 * tables. The profile's times themselves are the device's (tests/cuda/test_cuda_profile.c). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "engine/block.h"
#include "hf_test_files.h"
#include "run_fixture.h"
#include "train/profile_report.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(profile, .init = make_fixtures, .fini = remove_fixtures);

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

Test(profile, bench_refuses_it_on_the_cpu_backend_before_any_step) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "bench", "--preset", "tiny", "--seq", "16", "--batch", "2", "--backend", "cpu", "--steps",
               "1", "--profile", in_dir("prof"), NULL);
    cr_assert(!r.timed_out && r.signal == 0, "died or hung:\n%s", r.err);
    cr_expect_eq(r.exit_code, 2, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "megatrain: error: --profile") && strstr(r.err, "the cpu backend") &&
                  strstr(r.err, "needs the cuda backend"),
              "the refusal does not say why:\n%s", r.err);
    cr_expect_null(strstr(r.out, "step 0"), "the steps ran first:\n%s", r.out);
    FILE *f = fopen(in_dir("prof.json"), "r");
    cr_expect_null(f, "a profile was written");
    if (f) fclose(f);
    mt_cli_result_free(&r);
}

Test(profile, bench_takes_a_prefix_and_says_so) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "bench", "--preset", "tiny", "--backend", "cpu", "--profile", "", NULL);
    cr_assert(!r.timed_out && r.signal == 0, "died or hung:\n%s", r.err);
    cr_expect_eq(r.exit_code, 2, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "--profile ''") && strstr(r.err, "path prefix"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "bench", "--help", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "--profile PREFIX") && strstr(r.out, "PREFIX.json"), "--help does not list it:\n%s", r.out);
    mt_cli_result_free(&r);
}

Test(profile, the_cpu_backend_has_no_prof_group) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK, "%s", mt_error());
    cr_expect(!mt_backend_has_profile(be));
    cr_expect_eq(mt_profile_start(be), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "needs the cuda backend"), "%s", mt_error());
    cr_expect_eq(be->profiling, 0);
    int count = -1;
    cr_expect_null(mt_profile_rows(be, &count));
    cr_expect_eq(count, 0);
    cr_expect_eq(mt_profile_collect(be), MT_OK);
    mt_backend_destroy(be);
}

/* Two steps of a one-block model: the forward's router GEMM (8 GFLOP in 10 ms: 0.8 TFLOP/s) and
 * routing, the recomputation's gate/up GEMM, the backward's down dW GEMM and its offsets' wait, a
 * wait on weights and the head outside the blocks; 200 ms of wall clock in all. */
static const mt_prof_row rows[] = {
    {"step", "embedding", 2, 0.002, 0},
    {MT_PHASE_FORWARD, "router GEMM", 2, 0.010, 8e9},
    {MT_PHASE_FORWARD, "route: softmax, top k", 2, 0.005, 0},
    {"wait", "block weights in (backward)", 2, 0.020, 0},
    {MT_PHASE_BACKWARD, "down dW GEMM", 2, 0.040, 6e13},
    {MT_PHASE_RECOMPUTE, "gate/up GEMM", 2, 0.030, 1.5e13},
    {MT_PHASE_BACKWARD, "host sync: expert offsets home", 2, 0.015, 0},
    {"step", "head and loss", 2, 0.028, 0},
};
enum { ROWS = sizeof rows / sizeof *rows };

static const mt_profile_run profiled = {.model = "olmoe-1b-7b", .device = "NVIDIA H100 80GB HBM3", .steps = 2,
                                        .layers = 1, .tokens_per_step = 65536, .step_seconds = 0.200, .tflops = 243.5};

static json_t *number_of(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    cr_assert(json_is_number(v), "'%s' is not a number", key);
    return v;
}

static void expect_near(double got, double want, const char *what) {
    cr_expect(fabs(got - want) <= 1e-9 * (fabs(want) + 1), "%s: %.12g, not %.12g", what, got, want);
}

Test(profile, report_json_has_every_row_with_its_share_and_rate) {
    const char *prefix = in_dir("olmoe-profile");
    FILE *out = tmpfile();
    cr_assert_eq(mt_profile_report(rows, ROWS, &profiled, prefix, out), MT_OK, "%s", mt_error());
    fclose(out);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s.json", prefix);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    cr_assert_not_null(j, "%s: %s", path, err.text);
    cr_expect_str_eq(json_string_value(json_object_get(j, "model")), "olmoe-1b-7b");
    cr_expect_str_eq(json_string_value(json_object_get(j, "device")), "NVIDIA H100 80GB HBM3");
    cr_expect_eq(json_integer_value(json_object_get(j, "steps")), 2);
    cr_expect_eq(json_integer_value(json_object_get(j, "layers")), 1);
    expect_near(json_number_value(number_of(j, "tokens_per_step")), 65536, "tokens_per_step");
    expect_near(json_number_value(number_of(j, "tflops")), 243.5, "tflops");
    double blocks = 10 + 5 + 40 + 30 + 15, accounted = blocks + 2 + 20 + 28;
    expect_near(json_number_value(number_of(j, "step_ms")), 200, "step_ms");
    expect_near(json_number_value(number_of(j, "blocks_ms")), blocks, "blocks_ms");
    expect_near(json_number_value(number_of(j, "accounted_ms")), accounted, "accounted_ms");
    expect_near(json_number_value(number_of(j, "idle_ms")), 200 - accounted, "idle_ms");
    /* the blocks' GEMMs: 8e9 + 6e13 + 1.5e13 FLOPs in 80 ms */
    expect_near(json_number_value(number_of(j, "gemm_tflops")), (8e9 + 6e13 + 1.5e13) / 0.080 / 1e12, "gemm_tflops");
    json_t *list = json_object_get(j, "rows");
    cr_assert(json_is_array(list));
    cr_assert_eq(json_array_size(list), ROWS, "%zu rows, not %d", json_array_size(list), ROWS);
    double block_shares = 0;
    for (size_t i = 0; i < ROWS; i++) {
        json_t *r = json_array_get(list, i);
        cr_expect_str_eq(json_string_value(json_object_get(r, "phase")), rows[i].phase);
        cr_expect_str_eq(json_string_value(json_object_get(r, "op")), rows[i].op);
        cr_expect_eq(json_integer_value(json_object_get(r, "calls")), rows[i].calls);
        expect_near(json_number_value(number_of(r, "total_ms")), 1e3 * rows[i].seconds, rows[i].op);
        int in_block = mt_profile_row_in_block(&rows[i]);
        cr_expect_eq(json_is_true(json_object_get(r, "in_block")), in_block, "%s", rows[i].op);
        double share = json_number_value(number_of(r, "share"));
        expect_near(share, 1e3 * rows[i].seconds / (in_block ? blocks : 200), rows[i].op);
        if (in_block) block_shares += share;
        json_t *rate = json_object_get(r, "tflops");
        if (rows[i].flops > 0) expect_near(json_number_value(rate), rows[i].flops / rows[i].seconds / 1e12, rows[i].op);
        else cr_expect(json_is_null(rate), "%s has a rate but is no GEMM", rows[i].op);
    }
    expect_near(block_shares, 1, "the blocks' shares");
    json_decref(j);
}

/* The Markdown: the blocks' rows phase by phase (forward, recomputation, backward), the rest with
 * the device's idle time outside every span. */
Test(profile, report_tables_take_the_blocks_phase_by_phase) {
    const char *prefix = in_dir("tables");
    FILE *out = tmpfile();
    cr_assert_eq(mt_profile_report(rows, ROWS, &profiled, prefix, out), MT_OK, "%s", mt_error());
    fclose(out);
    char path[PATH_MAX], text[16384];
    snprintf(path, sizeof path, "%s.md", prefix);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *blocks = strstr(text, "## The blocks"), *rest = strstr(text, "## The rest of the step");
    cr_assert(blocks && rest && blocks < rest, "%s", text);
    const char *router = strstr(blocks, "| forward | router GEMM | 2 | 10.0 | 5.000 | 10.0% | 0.8 |");
    const char *recompute = strstr(blocks, "| backward: recompute | gate/up GEMM | 2 | 30.0 |");
    const char *dw = strstr(blocks, "| backward | down dW GEMM | 2 | 40.0 |");
    cr_expect(router && recompute && dw && router < recompute && recompute < dw && dw < rest,
              "the blocks' rows are not phase by phase:\n%s", text);
    cr_expect(strstr(blocks, "| | all | | 100.0 | 50.000 | 100.0% | |"), "%s", text);
    cr_expect(strstr(rest, "| wait | block weights in (backward) | 2 | 20.0 | 10.0% |"), "%s", text);
    cr_expect(strstr(rest, "| | device idle outside every span | | 50.0 | 25.0% |"), "%s", text);
    cr_expect(!strstr(rest, "router GEMM"), "a block row in the rest:\n%s", text);
}

Test(profile, report_to_an_unwritable_prefix_names_the_file) {
    FILE *out = tmpfile();
    mt_status rc = mt_profile_report(rows, ROWS, &profiled, in_dir("absent/dir/p"), out);
    fclose(out);
    cr_expect_eq(rc, MT_ERR_IO);
    cr_expect(strstr(mt_error(), "absent/dir/p.md"), "%s", mt_error());
}
