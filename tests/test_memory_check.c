/* Up-front refusal: a run too large for the machine fails before allocating, naming what it
 * needs and what is available; plan prints the same comparison. */
#include <criterion/criterion.h>
#include <limits.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "util/clock.h"

/* Refusal happens before any allocation, so it is quick; the bound leaves room for slow CI. */
#define REFUSAL_SECONDS 10.0

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
