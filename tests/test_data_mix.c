/* Several datasets in one run (train/data_mix.h): --data given twice mixes them in the shares of
 * their weights, and the run trains on the mix (one epoch in order covers it, so its contents are
 * what the run trains on); a run file's list does the same; a resumed run reads the cached mix;
 * weights on some datasets only are refused. The datasets are bytes of disjoint alphabets (the
 * tiny model's tokens), so each token of the mix tells which dataset it came from. */
#include <criterion/criterion.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/tokens.h"
#include "run_fixture.h"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

/* n bytes of letters from `from` to `to`, words of 5 and a space. */
static void write_letters(const char *path, size_t n, char from, char to, unsigned seed) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        fputc(i % 6 == 5 ? ' ' : from + (int)((seed >> 16) % (unsigned)(to - from + 1)), f);
    }
    fclose(f);
}

static void make_fixtures(void) {
    mt_test_make_run_dirs(dir, corpus, run);
    write_letters(mt_test_in(dir, "a.txt"), 42000, 'a', 'm', 1);
    write_letters(mt_test_in(dir, "b.txt"), 9000, 'n', 'z', 2);
}
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(data_mix, .init = make_fixtures, .fini = remove_fixtures);

static void ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

/* The shares of a.txt's and b.txt's tokens in the run's mix (spaces, which both have, apart). */
static void mix_shares(const char *run_dir, double *a, double *b) {
    char pattern[PATH_MAX + 64];
    snprintf(pattern, sizeof pattern, "%s/data/mix-*_000000.bin", run_dir);
    glob_t g;
    cr_assert_eq(glob(pattern, 0, NULL, &g), 0, "no mix in %s/data", run_dir);
    cr_assert_eq(g.gl_pathc, 1);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(g.gl_pathv[0], &t), MT_OK, "%s", mt_error());
    globfree(&g);
    size_t from_a = 0, from_b = 0;
    for (size_t i = 0; i < t.count; i++) {
        uint32_t id = mt_tokens_get(&t, i);
        from_a += id >= 'a' && id <= 'm';
        from_b += id >= 'n' && id <= 'z';
    }
    cr_assert_eq(mt_tokens_status(&t), MT_OK, "%s", mt_error());
    mt_tokens_close(&t);
    *a = (double)from_a / (double)(from_a + from_b);
    *b = (double)from_b / (double)(from_a + from_b);
}

#define RUN "train", "--preset", "tiny", "--seq", "256", "--batch", "16", "--backend", "cpu", "--eval-every", "0", \
    "--sequential", "--val-fraction", "0", "--threads", "1"

Test(data_mix, weights_give_the_shares_over_a_run) {
    char a[PATH_MAX + 16], b[PATH_MAX + 16];
    snprintf(a, sizeof a, "%s:0.7", mt_test_in(dir, "a.txt"));
    snprintf(b, sizeof b, "%s:0.3", mt_test_in(dir, "b.txt"));
    mt_cli_result r;
    mt_cli_run(&r, 300, RUN, "--data", a, "--data", b, "--epochs", "1", "--out", run, NULL);
    ran(&r);
    cr_expect(strstr(r.err, "mixed 2 datasets") && strstr(r.err, "b.txt 30."), "%s", r.err);
    mt_cli_result_free(&r);
    double share_a, share_b;
    mix_shares(run, &share_a, &share_b);
    cr_expect(share_a > 0.68 && share_a < 0.72, "a.txt's share is %.4f, asked 0.7", share_a);
    cr_expect(share_b > 0.28 && share_b < 0.32, "b.txt's share is %.4f, asked 0.3", share_b);
    /* resumed: the same mix, from the cache */
    mt_cli_run(&r, 300, "train", "--out", run, "--resume", "--epochs", "1.1", "--backend", "cpu", "--threads", "1",
               NULL);
    ran(&r);
    cr_expect(strstr(r.err, "the mix cached in") && !strstr(r.err, "mixed 2"), "%s", r.err);
    mt_cli_result_free(&r);
}

Test(data_mix, a_run_file_list_mixes_and_partial_weights_are_refused) {
    char yaml[PATH_MAX + 16], text[3 * PATH_MAX];
    snprintf(yaml, sizeof yaml, "%s/run.yaml", dir);
    snprintf(text, sizeof text, "data:\n  - %s:0.5\n  - %s:0.5\n", mt_test_in(dir, "a.txt"), mt_test_in(dir, "b.txt"));
    hf_test_write_text(yaml, text);
    mt_cli_result r;
    mt_cli_run(&r, 300, RUN, yaml, "--steps", "1", "--out", run, NULL);
    ran(&r);
    mt_cli_result_free(&r);
    double share_a, share_b;
    mix_shares(run, &share_a, &share_b);
    cr_expect(share_a > 0.48 && share_a < 0.52, "a.txt's share is %.4f, asked 0.5", share_a);

    char a[PATH_MAX + 16];
    snprintf(a, sizeof a, "%s:0.7", mt_test_in(dir, "a.txt"));
    mt_cli_run(&r, 60, RUN, "--data", a, "--data", mt_test_in(dir, "b.txt"), "--steps", "1", "--out",
               mt_test_in(dir, "other"), NULL);
    cr_expect_eq(r.exit_code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "weights for some datasets and not others"), "%s", r.err);
    mt_cli_result_free(&r);
}
