/* Every option is checked against its domain where it is parsed, with the domain in the message:
 * the training options (train, plan, bench alike), sample's and export's. A bad value never
 * reaches a run: the command exits 2 before it touches the run directory. Sizes (--gpu-mem,
 * --save-staging, --shard-size) go through one parser. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "megatrain.h"
#include "run_fixture.h"
#include "util/size.h"

#define TIMEOUT_S 30.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(options, .init = make_fixtures, .fini = remove_fixtures);

/* `command` with option `option` set to `value` (after a valid tiny run's options) is refused
 * with exit 2, naming the option and saying `domain`; nothing is written to the run directory. */
static void expect_refused(const char *command, const char *option, const char *value, const char *domain) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, command, MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", run, option, value,
               NULL);
    cr_assert(!r.timed_out && r.signal == 0, "%s %s %s: died or hung; stderr:\n%s", command, option, value, r.err);
    cr_assert_eq(r.exit_code, 2, "%s %s %s: exit %d, not 2; stderr:\n%s", command, option, value, r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, option), "%s %s: the message does not name the option:\n%s", option, value, r.err);
    cr_assert_not_null(strstr(r.err, domain), "%s %s: the message does not say '%s':\n%s", option, value, domain,
                       r.err);
    cr_assert_eq(hf_test_count_entries(run), -1, "%s %s %s: the refused command made the run directory", command,
                 option, value);
    mt_cli_result_free(&r);
}

Test(options, adamw_hyperparameters_outside_their_domain) {
    expect_refused("train", "--eps", "0", "a number in (0, 1]");
    expect_refused("train", "--eps", "-1e-8", "(0, 1]");
    expect_refused("train", "--eps", "1e-60", "(0, 1]"); /* 0 as a float */
    expect_refused("train", "--beta1", "1", "a number in [0, 1)");
    expect_refused("train", "--beta2", "1.5", "[0, 1)");
    expect_refused("train", "--beta2", "-0.1", "[0, 1)");
    expect_refused("train", "--beta1", "nan", "[0, 1)");
    expect_refused("train", "--weight-decay", "-0.1", "a finite number >= 0");
    expect_refused("train", "--weight-decay", "inf", "a finite number >= 0");
}

Test(options, learning_rate_and_schedule) {
    expect_refused("train", "--lr", "nan", "a finite number >= 0");
    expect_refused("train", "--lr", "-3e-4", "a finite number >= 0");
    expect_refused("train", "--lr", "1e39", "a finite number >= 0"); /* past a float */
    expect_refused("train", "--lr", "3e-4x", "a finite number >= 0");
    expect_refused("train", "--min-lr-ratio", "1.5", "[0, 1]");
    expect_refused("train", "--warmup", "-1", "an integer from 0");
    expect_refused("train", "--schedule", "linear", "expected cosine or constant");
    expect_refused("train", "--clip", "-1", "a finite number >= 0");
    expect_refused("train", "--clip", "inf", "a finite number >= 0");
}

Test(options, step_shape_and_counts) {
    expect_refused("train", "--seq", "0", "an integer from 1 to");
    expect_refused("train", "--seq", "99999999999", "an integer from 1 to");
    expect_refused("train", "--batch", "-2", "an integer from 1 to");
    expect_refused("train", "--micro-batches", "0", "an integer from 1 to");
    expect_refused("train", "--steps", "-1", "an integer from 0 to");
    expect_refused("train", "--steps", "1e3", "an integer from 0 to");
    expect_refused("train", "--val-fraction", "1", "[0, 1)");
    expect_refused("train", "--keep", "-1", "an integer from 0 to");
    expect_refused("train", "--max-skips", "-1", "an integer from 0 to");
    expect_refused("train", "--slots", "1", "an integer from 2 to");
    expect_refused("train", "--moments", "fp16", "expected fp32, bf16 or 8bit");
    expect_refused("train", "--backend", "tpu", "expected auto, cpu or cuda");
    /* Each in its domain, but together too many tokens a micro-batch. */
    expect_refused("train", "--batch", "16777216", "tokens a micro-batch");
}

Test(options, sizes_refused_instead_of_meaning_no_budget) {
    expect_refused("train", "--gpu-mem", "0", "a size from 1 byte to 1 PiB");
    expect_refused("train", "--gpu-mem", "inf", "not a size");
    expect_refused("train", "--gpu-mem", "nan", "not a size");
    expect_refused("train", "--gpu-mem", "1e30", "a size from 1 byte to 1 PiB");
    expect_refused("train", "--gpu-mem", "-24GiB", "a size from");
    expect_refused("train", "--gpu-mem", "24GiBs", "not a size");
    expect_refused("plan", "--gpu-mem", "0", "a size from 1 byte");
    expect_refused("bench", "--gpu-mem", "2PiB", "a size from 1 byte to 1 PiB");
    expect_refused("train", "--save-staging", "-1", "a size from 0 bytes");
}

/* The planner's rates for another machine: positive and finite, and below any machine's. */
Test(options, planner_rates) {
    expect_refused("plan", "--rate-gemm", "0", "a number in [0.001, 100000]");
    expect_refused("plan", "--rate-gemm", "1e-300", "a number in [0.001, 100000]"); /* not a time of 300 digits */
    expect_refused("plan", "--rate-gemm", "-700", "[0.001, 100000]");
    expect_refused("plan", "--rate-gemm", "1e6", "[0.001, 100000]");
    expect_refused("plan", "--rate-pcie", "nan", "a number in [0.001, 10000]");
    expect_refused("plan", "--rate-pcie", "inf", "[0.001, 10000]");
    expect_refused("plan", "--rate-pcie", "25GB", "[0.001, 10000]");
    expect_refused("plan", "--rate-adamw", "0", "a number in [0.001, 10000]");
    expect_refused("train", "--rate-adamw", "", "[0.001, 10000]");
    mt_train_options o = mt_train_defaults();
    cr_assert_eq(o.rate_gemm, 0, "unset: measured or looked up");
    cr_assert_eq(mt_train_option_set(&o, "rate-gemm", "165.2"), MT_OK, "%s", mt_error());
    cr_assert_eq(o.rate_gemm, 165.2);
    cr_assert_eq(mt_train_option_set(&o, "rate-pcie", "0"), MT_ERR_INVALID);
    cr_assert_eq(o.rate_pcie, 0, "a refused value leaves the option as it was");
    o.rate_adamw = -1; /* a library caller's bad value */
    o.out_dir = run;
    cr_assert_eq(mt_plan(&o, stdout), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "--rate-adamw -1: must be a number in [0.001, 10000]"), "%s", mt_error());
}

/* The same domains hold for a library caller that fills the struct itself. */
Test(options, the_library_checks_a_struct_too) {
    mt_train_options o = mt_train_defaults();
    o.preset = "tiny";
    o.data_path = corpus;
    o.out_dir = run;
    o.backend = "cpu";
    o.eps = 0;
    cr_assert_eq(mt_train(&o), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "--eps 0: must be a number in (0, 1]"), "%s", mt_error());
    o.eps = 1e-8f;
    o.beta2 = NAN;
    o.gpu_mem = -5;
    cr_assert_eq(mt_train(&o), MT_ERR_INVALID, "NaN is the unset beta2, but a negative budget is no budget");
    cr_assert_not_null(strstr(mt_error(), "--gpu-mem"), "%s", mt_error());
    cr_assert_eq(hf_test_count_entries(run), -1, "a refused run made its directory");
    cr_assert_eq(mt_train_option_set(&o, "beta1", "0.999"), MT_OK, "%s", mt_error());
    cr_assert_float_eq(o.beta1, 0.999f, 0);
    cr_assert_eq(mt_train_option_set(&o, "beta1", "2"), MT_ERR_INVALID);
    cr_assert_float_eq(o.beta1, 0.999f, 0, "a refused value leaves the option as it was");
    cr_assert_eq(mt_train_option_set(&o, "no-such-option", "1"), MT_ERR_INVALID);
}

Test(options, one_size_parser) {
    int64_t b;
    cr_assert_eq(mt_size_parse("--x", "24GiB", 1, &b), MT_OK);
    cr_assert_eq(b, 24LL << 30);
    cr_assert_eq(mt_size_parse("--x", "512 mb", 1, &b), MT_OK);
    cr_assert_eq(b, 512000000);
    cr_assert_eq(mt_size_parse("--x", "1.5KiB", 1, &b), MT_OK);
    cr_assert_eq(b, 1536);
    cr_assert_eq(mt_size_parse("--x", "1PiB", 1, &b), MT_OK);
    cr_assert_eq(mt_size_parse("--x", "1.0001PiB", 1, &b), MT_ERR_INVALID);
    cr_assert_eq(mt_size_parse("--x", "0", 1, &b), MT_ERR_INVALID);
    cr_assert_eq(mt_size_parse("--x", "0", 0, &b), MT_OK);
    cr_assert_eq(mt_size_parse("--x", "", 0, &b), MT_ERR_INVALID);
    cr_assert_eq(mt_size_parse("--x", "GiB", 0, &b), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "--x 'GiB'"), "%s", mt_error());
}

/* sample answers each bad argument with its own problem, never a bare "bad arguments". */
static void expect_sample_refused(const char *option, const char *value, const char *problem) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "sample", run, option, value, NULL);
    cr_assert(!r.timed_out && r.signal == 0, "sample %s %s died or hung:\n%s", option, value, r.err);
    cr_assert_eq(r.exit_code, 2, "sample %s %s: exit %d; stderr:\n%s", option, value, r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, problem), "sample %s %s: the message does not say '%s':\n%s", option, value,
                       problem, r.err);
    cr_assert_null(strstr(r.err, "bad arguments"), "a bare 'bad arguments':\n%s", r.err);
    mt_cli_result_free(&r);
}

Test(options, sample_arguments) {
    expect_sample_refused("--tokens", "99999999999", "--tokens '99999999999': must be an integer from 0 to 1048576");
    expect_sample_refused("--tokens", "4294967296", "must be an integer from 0 to 1048576"); /* 0 once truncated */
    expect_sample_refused("--tokens", "-5", "must be an integer from 0");
    expect_sample_refused("--temperature", "nan", "--temperature 'nan': must be a finite number >= 0");
    expect_sample_refused("--temperature", "-0.5", "must be a finite number >= 0");
    expect_sample_refused("--temperature", "inf", "must be a finite number >= 0");
    expect_sample_refused("--top-k", "-1", "--top-k '-1': must be an integer from 0");
    expect_sample_refused("--seed", "-1", "--seed '-1'");
    expect_sample_refused("--backend", "gpu", "expected auto, cpu or cuda");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "sample", NULL);
    cr_assert_eq(r.exit_code, 2);
    cr_assert_not_null(strstr(r.err, "no run directory or checkpoint given"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "sample", run, "extra", NULL);
    cr_assert_eq(r.exit_code, 2);
    cr_assert_not_null(strstr(r.err, "got also 'extra'"), "%s", r.err);
    mt_cli_result_free(&r);
}

static void expect_export_refused(const char *problem, const char *a, const char *b, const char *c) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "export", a, b, c, NULL);
    cr_assert(!r.timed_out && r.signal == 0, "export died or hung:\n%s", r.err);
    cr_assert_eq(r.exit_code, 2, "exit %d; stderr:\n%s", r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, problem), "the message does not say '%s':\n%s", problem, r.err);
    cr_assert_null(strstr(r.err, "bad arguments"), "a bare 'bad arguments':\n%s", r.err);
    mt_cli_result_free(&r);
}

Test(options, export_arguments) {
    char out[PATH_MAX];
    hf_test_path(out, dir, "exported");
    expect_export_refused("--dtype 'fp16': expected bf16 or fp32", "--dtype=fp16", run, out);
    expect_export_refused("--shard-size '0': must be a size from 1 byte", "--shard-size=0", run, out);
    expect_export_refused("--shard-size 'lots': not a size", "--shard-size=lots", run, out);
    expect_export_refused("got 1 argument", run, NULL, NULL);
    expect_export_refused("got 3 arguments", run, out, "more");
}
