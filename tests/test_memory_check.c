/* Up-front refusal: a run too large for the machine fails before allocating, naming what it
 * needs by class and what is available; plan prints the same comparison. Every command that
 * allocates the model refuses alike (train, bench, sample, export). MT_TEST_HOST_AVAILABLE stands
 * in for the machine's available memory. */
#include <criterion/criterion.h>
#include <limits.h>
#include <string.h>

#include <stdlib.h>

#include "cli_run.h"
#include "run_fixture.h"
#include "hf_test_files.h"
#include "util/clock.h"
#include "test_limits.h"

/* Refusal happens before any allocation, so it is quick; the bound leaves room for slow CI. */
#define REFUSAL_SECONDS MT_TEST_LIMIT(10.0)

/* llama-3-8b needs about 175 GB of host memory on the cpu backend (fp32 weights, gradients,
 * masters and moments): more than any CI machine has. */
Test(memory, refuses_a_model_larger_than_host_memory) {
    char dir[PATH_MAX], run[PATH_MAX];
    hf_test_mkdtemp(dir);
    mt_cli_result r;
    double t0 = mt_now();
    mt_cli_run(&r, 60.0, "train", "--preset", "llama-3-8b", "--backend", "cpu", "--steps", "1",
               "--data", "/dev/null", "--out", hf_test_path(run, dir, "run"), NULL);
    double seconds = mt_now() - t0;
    cr_assert_neq(r.exit_code, 0, "an 8B model must be refused here");
    cr_assert(strstr(r.err, "GB of host memory") && strstr(r.err, "GB available"),
              "the refusal must name both numbers:\n%s", r.err);
    cr_assert_lt(seconds, REFUSAL_SECONDS, "refusal took %.1f s: it must come before allocating", seconds);
    mt_cli_result_free(&r);
    hf_test_rmtree(dir);
}

Test(memory, plan_prints_the_fit) {
    mt_cli_result r;
    mt_cli_run(&r, 60.0, "plan", "--preset", "llama-3-8b", "--backend", "cpu", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "host needs") && strstr(r.out, "does NOT fit"), "no fit line:\n%s", r.out);
    mt_cli_result_free(&r);
}

/* The tiny model needs a few hundred kB or more: with 64 KiB available every command refuses it up front,
 * exit 1, naming the classes of what it needs (`class` among them). */
static void expect_host_refusal(mt_cli_result *r, const char *command, const char *what, const char *class) {
    cr_assert(!r->timed_out && r->signal == 0, "%s died or hung:\n%s", command, r->err);
    cr_assert_eq(r->exit_code, 1, "%s: exit %d with too little host memory:\n%s", command, r->exit_code, r->err);
    cr_assert_not_null(strstr(r->err, what), "%s: the refusal does not say whose need it is:\n%s", command, r->err);
    cr_assert(strstr(r->err, "B of host memory (") && strstr(r->err, class) && strstr(r->err, "available"),
              "%s: the refusal does not give the bytes by class:\n%s", command, r->err);
}

Test(memory, every_command_that_allocates_the_model_refuses_a_shortfall) {
    char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX], out[PATH_MAX];
    mt_test_make_run_dirs(dir, corpus, run);
    mt_cli_result r;
    mt_cli_run(&r, 60.0, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", run, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);

    setenv("MT_TEST_HOST_AVAILABLE", "64KiB", 1);
    mt_cli_run(&r, 60.0, "bench", "--preset", "tiny", "--backend", "cpu", "--steps", "1", NULL);
    expect_host_refusal(&r, "bench", "the run needs", "fp32 master");
    cr_assert_null(strstr(r.out, "timed step"), "bench ran steps:\n%s", r.out);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60.0, "train", MT_TINY_STEP, "--steps", "2", "--data", corpus, "--out", run, "--resume", NULL);
    expect_host_refusal(&r, "train", "the run needs", "fp32 master");
    cr_assert(strstr(r.err, "Adam moments") && strstr(r.err, "gradients"), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60.0, "sample", run, "--tokens", "3", "--backend", "cpu", NULL);
    /* Sampling needs the working weights and a forward-only engine: no masters, moments or gradients. */
    expect_host_refusal(&r, "sample", "sampling needs", "working weights");
    cr_assert(!strstr(r.err, "fp32 master") && !strstr(r.err, "Adam moments") && !strstr(r.err, "gradients"),
              "sample counts what it does not load:\n%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60.0, "export", run, hf_test_path(out, dir, "exported"), NULL);
    expect_host_refusal(&r, "export", "export needs", "fp32 master");
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60.0, "plan", "--preset", "tiny", "--backend", "cpu", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "66 kB available (MT_TEST_HOST_AVAILABLE): does NOT fit"), "plan's verdict differs:\n%s", r.out);
    mt_cli_result_free(&r);
    unsetenv("MT_TEST_HOST_AVAILABLE");
    hf_test_rmtree(dir);
}
