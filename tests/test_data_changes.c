/* Token data that changes under a run, and data that is no file: a corpus truncated or rewritten
 * while a run reads it is reported by name (never a SIGBUS), and the steps taken are saved; a
 * FIFO, a directory or a device given as data is refused at once, without blocking in open(). */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/tokens.h"
#include "run_fixture.h"
#include "util/clock.h"
#include "test_limits.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(data, .init = make_fixtures, .fini = remove_fixtures);

/* Starts a long run on the corpus, lets it take a few steps, applies `change` to the corpus, and
 * expects the run to stop with an error naming the corpus and saying `problem`. */
static void expect_change_reported(void (*change)(void), const char *problem) {
    mt_cli_process p;
    mt_cli_start(&p, "train", MT_TINY_STEP, "--steps", "1000000", "--ckpt-every", "0", "--data", corpus, "--out", run,
                 NULL);
    char metrics[PATH_MAX];
    hf_test_path(metrics, run, "metrics.jsonl");
    struct stat st;
    for (int polls = 0; stat(metrics, &st) != 0 || st.st_size < 400; polls++) {
        cr_assert_lt(polls, MT_TEST_LIMIT(3000), "the run did not start");
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    change();
    mt_cli_result r;
    mt_cli_wait(&p, TIMEOUT_S, &r);
    cr_assert(!r.timed_out, "the run went on after its data changed:\n%s", r.err);
    cr_assert_eq(r.signal, 0, "the run died of signal %d (SIGBUS is %d):\n%s", r.signal, SIGBUS, r.err);
    cr_assert_eq(r.exit_code, 1, "exit %d:\n%s", r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, corpus), "the message does not name the corpus:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, problem), "the message does not say '%s':\n%s", problem, r.err);
    long long saved;
    const char *at = strstr(r.err, "the steps up to ");
    cr_assert(at && sscanf(at, "the steps up to %lld are saved", &saved) == 1, "the steps taken were not saved:\n%s",
              r.err);
    mt_cli_result_free(&r);
    /* What was saved resumes (once the data is right again), for one more step. */
    mt_test_write_corpus(corpus);
    char steps[32];
    snprintf(steps, sizeof steps, "%lld", saved + 1);
    mt_cli_run(&r, TIMEOUT_S, "train", "--out", run, "--resume", "--backend", "cpu", "--steps", steps, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "resumed from"), "%s", r.err);
    mt_cli_result_free(&r);
}

static void truncate_corpus(void) { cr_assert_eq(truncate(corpus, 100), 0); }

static void rewrite_corpus(void) {
    /* Same size, other bytes, a later modification time. */
    nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    FILE *f = fopen(corpus, "r+b");
    cr_assert_not_null(f);
    fputs("changed", f);
    cr_assert_eq(fclose(f), 0);
}

Test(data, a_corpus_truncated_under_a_run_is_reported) { expect_change_reported(truncate_corpus, "changed while"); }

Test(data, a_corpus_rewritten_under_a_run_is_reported) { expect_change_reported(rewrite_corpus, "modified since"); }

/* Refused at once, naming the file and what it is. */
static void expect_not_a_file(const char *path, const char *kind) {
    mt_cli_result r;
    double t0 = mt_now();
    mt_cli_run(&r, 10.0, "train", MT_TINY_STEP, "--steps", "2", "--data", path, "--out", run, NULL);
    cr_assert(!r.timed_out, "train --data %s blocked (%.1f s)", path, mt_now() - t0);
    cr_assert_eq(r.exit_code, 2, "exit %d:\n%s", r.exit_code, r.err);
    cr_assert_not_null(strstr(r.err, path), "%s", r.err);
    cr_assert_not_null(strstr(r.err, kind), "the message does not say '%s':\n%s", kind, r.err);
    mt_cli_result_free(&r);
}

Test(data, a_fifo_directory_or_device_is_refused_without_blocking) {
    char fifo[PATH_MAX];
    hf_test_path(fifo, dir, "pipe");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    expect_not_a_file(fifo, "a FIFO");
    expect_not_a_file(dir, "a directory");
    expect_not_a_file("/dev/zero", "a character device");
}

/* The reader itself: a read after the file shrank fails naming it, fills zeros, and the error
 * stays; a file that grew is a change too. Nothing is mapped, so nothing can fault. */
Test(data, the_token_reader_reports_a_file_cut_short) {
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(corpus, &t), MT_OK, "%s", mt_error());
    int32_t ids[64];
    mt_tokens_copy(&t, 1000, 64, ids);
    cr_assert_eq(mt_tokens_status(&t), MT_OK, "%s", mt_error());
    cr_assert_eq(truncate(corpus, 500), 0);
    mt_tokens_copy(&t, 1000, 64, ids);
    cr_assert_eq(mt_tokens_status(&t), MT_ERR_IO);
    cr_assert(strstr(mt_error(), corpus) && strstr(mt_error(), "changed while"), "%s", mt_error());
    for (int i = 0; i < 64; i++) cr_assert_eq(ids[i], 0, "a failed read left data in the buffer");
    mt_tokens_copy(&t, 0, 4, ids);
    cr_assert_eq(mt_tokens_status(&t), MT_ERR_IO, "the error stays");
    mt_tokens_close(&t);
}
