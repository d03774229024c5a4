/* megatrain train --gpus N: ranks that are threads of the cpu backend train a run whose checkpoints
 * are those of one store (resumable on any rank count); a rank that dies ends the run with a
 * message naming it and leaves the last checkpoint good; two ranks give one rank's bits; more GPUs
 * than there are is refused; two processes started as torchrun starts them train the same run. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "run_fixture.h"

#define TIMEOUT_S 120.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(ranks_cli, .init = make_fixtures, .fini = remove_fixtures);

static void train(const char *out, const char *gpus, int resume, mt_cli_result *r) {
#define SIX "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "0", "--data", corpus, \
            "--out", out, "--gpus", gpus
    if (resume) mt_cli_run(r, TIMEOUT_S, SIX, "--resume", NULL);
    else mt_cli_run(r, TIMEOUT_S, SIX, NULL);
#undef SIX
}

Test(ranks_cli, a_rank_that_dies_stops_the_run_and_keeps_the_last_checkpoint) {
    mt_cli_result r;
    setenv("MT_TEST_RANK_FAIL_STEP", "5", 1);
    train(run, "2", 0, &r);
    unsetenv("MT_TEST_RANK_FAIL_STEP");
    cr_assert_eq(r.signal, 0, "died of signal %d:\n%s", r.signal, r.err);
    cr_expect_eq(r.exit_code, 1, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "rank 1 of 2"), "stderr does not name the rank that died:\n%s", r.err);
    char ckpt[PATH_MAX + 32];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000004", run);
    cr_assert_eq(mt_checkpoint_verify(ckpt), MT_OK, "the last checkpoint is damaged: %s", mt_error());
    cr_expect(!mt_test_exists(mt_test_blob(run, 5, "master")), "a checkpoint was written after the failure");
    mt_cli_result_free(&r);

    /* Resumed on two ranks it is the run that never failed, bit for bit. */
    train(run, "2", 1, &r);
    cr_assert_eq(r.exit_code, 0, "resuming failed:\n%s", r.err);
    mt_cli_result_free(&r);
    char straight[PATH_MAX + 32];
    snprintf(straight, sizeof straight, "%s/straight", dir);
    train(straight, "2", 0, &r);
    cr_assert_eq(r.exit_code, 0, "the uninterrupted run failed:\n%s", r.err);
    mt_cli_result_free(&r);
    const char *differs = mt_test_state_differs(run, straight, 6);
    cr_expect_null(differs, "%s after the failure and resume differs from the straight run's", differs);
}

Test(ranks_cli, a_run_resumes_on_another_rank_count) {
    mt_cli_result r;
    train(run, "2", 0, &r);
    cr_assert_eq(r.exit_code, 0, "two ranks failed:\n%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "8", "--ckpt-every", "2", "--keep", "0", "--data",
               corpus, "--out", run, "--gpus", "1", "--resume", NULL);
    cr_assert_eq(r.exit_code, 0, "resuming on one rank failed:\n%s", r.err);
    cr_expect(strstr(r.err, "resumed from") && strstr(r.err, "at step 6"), "did not resume at step 6:\n%s", r.err);
    char ckpt[PATH_MAX + 32];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000008", run);
    cr_expect_eq(mt_checkpoint_verify(ckpt), MT_OK, "%s", mt_error());
    mt_cli_result_free(&r);
}

/* The cpu's ranks take turns with every gradient: --gpus 2 of one micro-batch trains to the bits of
 * one rank running both (every checkpoint's state), with exact clipping and without (--clip 0: the
 * leader's optimizer overlaps the backward). */
static void expect_one_ranks_bits(const char *clip) {
    char one[PATH_MAX + 32], two[PATH_MAX + 32];
    snprintf(one, sizeof one, "%s/one-%s", dir, clip);
    snprintf(two, sizeof two, "%s/two-%s", dir, clip);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "0", "--data",
               corpus, "--out", two, "--gpus", "2", "--micro-batches", "1", "--clip", clip, NULL);
    cr_assert_eq(r.exit_code, 0, "--gpus 2 --clip %s failed:\n%s", clip, r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep", "0", "--data",
               corpus, "--out", one, "--gpus", "1", "--micro-batches", "2", "--clip", clip, NULL);
    cr_assert_eq(r.exit_code, 0, "--gpus 1 --clip %s failed:\n%s", clip, r.err);
    mt_cli_result_free(&r);
    const char *differs = mt_test_state_differs(two, one, 6);
    cr_expect_null(differs, "--clip %s: %s of --gpus 2 differs from one rank of 2 micro-batches", clip, differs);
}

Test(ranks_cli, two_ranks_give_the_bits_of_one_running_both_micro_batches) {
    expect_one_ranks_bits("1");
    expect_one_ranks_bits("0");
}

Test(ranks_cli, refuses_more_gpus_than_there_are) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", "--preset", "tiny", "--backend", "cuda", "--gpus", "64", "--steps", "1",
               "--data", corpus, "--out", run, NULL);
    cr_expect_neq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "--gpus 64"), "the refusal does not name --gpus:\n%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--gpus", "0", "--steps", "1", "--data", corpus, "--out", run,
               NULL);
    cr_expect_neq(r.exit_code, 0, "exit %d:\n%s", r.exit_code, r.err);
    cr_expect(strstr(r.err, "--gpus"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* Started as torchrun starts it (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), two
 * processes on the cpu backend train the run to the bits of --gpus 2 (both sum in rank order);
 * rank 0 alone writes the run directory. */
static void set_world(int rank, int port) {
    char r[16], p[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(p, sizeof p, "%d", port);
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", r, 1);
    setenv("LOCAL_RANK", r, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", p, 1);
}

Test(ranks_cli, two_processes_under_torchruns_variables_train_as_two_ranks) {
    int port = 20000 + (int)(getpid() % 20000);
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) { /* rank 1: its output is of no interest, its exit status is */
        set_world(1, port);
        freopen("/dev/null", "w", stderr);
        execl(getenv("MT_BIN"), "megatrain", "train", MT_TINY_STEP, "--steps", "6", "--ckpt-every", "2", "--keep",
              "0", "--data", corpus, "--out", run, (char *)NULL);
        _exit(127);
    }
    set_world(0, port);
    mt_cli_result r;
    train(run, "1", 0, &r);
    unsetenv("WORLD_SIZE"), unsetenv("RANK"), unsetenv("LOCAL_RANK"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    int status;
    waitpid(child, &status, 0);
    cr_assert_eq(r.exit_code, 0, "rank 0 failed:\n%s", r.err);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 failed (status %d)", status);
    cr_expect(strstr(r.err, "rank 0 of 2 processes"), "%s", r.err);
    mt_cli_result_free(&r);
    char threads[PATH_MAX + 32];
    snprintf(threads, sizeof threads, "%s/threads", dir);
    setenv("MT_TEST_RANKS_SUMMED", "1", 1); /* processes sum in rank order; threads otherwise take turns */
    train(threads, "2", 0, &r);
    unsetenv("MT_TEST_RANKS_SUMMED");
    cr_assert_eq(r.exit_code, 0, "--gpus 2 failed:\n%s", r.err);
    mt_cli_result_free(&r);
    const char *differs = mt_test_state_differs(run, threads, 6);
    cr_expect_null(differs, "%s of two processes differs from --gpus 2's", differs);
}

/* bench under torchrun's variables: the two processes run the steps together (each its block of
 * the step's sequences) and rank 0 alone appends the summary, which counts both. */
Test(ranks_cli, two_processes_bench_together_and_rank_0_reports) {
    int port = 20000 + (int)((getpid() + 7919) % 20000);
    char json[PATH_MAX + 16];
    snprintf(json, sizeof json, "%s/bench.jsonl", dir);
#define BENCH "bench", "--preset", "tiny", "--seq", "16", "--batch", "2", "--backend", "cpu", "--steps", "2", \
              "--json", json
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) {
        set_world(1, port);
        freopen("/dev/null", "w", stderr);
        freopen("/dev/null", "w", stdout);
        execl(getenv("MT_BIN"), "megatrain", BENCH, (char *)NULL);
        _exit(127);
    }
    set_world(0, port);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, BENCH, NULL);
#undef BENCH
    unsetenv("WORLD_SIZE"), unsetenv("RANK"), unsetenv("LOCAL_RANK"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    int status;
    waitpid(child, &status, 0);
    cr_assert_eq(r.exit_code, 0, "rank 0 failed:\n%s", r.err);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 failed (status %d)", status);
    mt_cli_result_free(&r);
    FILE *f = fopen(json, "r");
    cr_assert(f, "%s: no summary", json);
    char line[16384];
    int lines = 0, two = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        two = strstr(line, "\"gpus\":2,") && strstr(line, "\"system\":\"megatrain-processes\"") &&
              strstr(line, "\"tokens_per_step\":64.0");
    }
    fclose(f);
    cr_expect_eq(lines, 1, "%d summaries in %s: rank 0 alone writes one", lines, json);
    cr_expect(two, "the summary does not count both processes (gpus 2, 2 x 2 x 16 tokens a step):\n%s", line);
}
