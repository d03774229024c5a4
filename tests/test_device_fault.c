/* A device error in the middle of a run (injected through MT_TEST_DEVICE_FAULT_STEP, the way a
 * CUDA error reaches the trainer: the step's pass reports MT_ERR_DEVICE) ends the run with a
 * clear message, writes nothing, and leaves the last checkpoint good: resuming from it gives
 * exactly the weights of a run that never failed. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "run_fixture.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(faults, .init = make_fixtures, .fini = remove_fixtures);

static void train(const char *out, int resume, mt_cli_result *r) {
#define SIX "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "0", "--data", corpus, "--out", out
    if (resume) mt_cli_run(r, TIMEOUT_S, SIX, "--resume", NULL);
    else mt_cli_run(r, TIMEOUT_S, SIX, NULL);
#undef SIX
}

Test(faults, device_error_stops_the_run_and_keeps_the_last_checkpoint) {
    mt_cli_result r;
    setenv("MT_TEST_DEVICE_FAULT_STEP", "5", 1);
    train(run, 0, &r);
    unsetenv("MT_TEST_DEVICE_FAULT_STEP");
    cr_assert_eq(r.signal, 0, "died of signal %d:\n%s", r.signal, r.err);
    cr_expect_eq(r.exit_code, 1, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "device fault"), "stderr does not say what failed:\n%s", r.err);
    char ckpt[PATH_MAX + 32];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000004", run);
    cr_assert_eq(mt_checkpoint_verify(ckpt), MT_OK, "the last checkpoint is damaged: %s", mt_error());
    cr_expect(!mt_test_exists(mt_test_blob(run, 5, "master")), "a checkpoint was written after the fault");
    cr_expect(!mt_test_exists(mt_test_blob(run, 6, "master")), "a checkpoint was written after the fault");
    mt_cli_result_free(&r);

    train(run, 1, &r);
    cr_assert_eq(r.exit_code, 0, "resuming failed:\n%s", r.err);
    mt_cli_result_free(&r);
    char straight[PATH_MAX + 32];
    snprintf(straight, sizeof straight, "%s/straight", dir);
    train(straight, 0, &r);
    cr_assert_eq(r.exit_code, 0, "the uninterrupted run failed:\n%s", r.err);
    mt_cli_result_free(&r);
    const char *differs = mt_test_state_differs(run, straight, 6);
    cr_expect_null(differs, "%s after the fault and resume differs from the straight run's", differs);
}
