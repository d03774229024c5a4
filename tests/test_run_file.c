/* Run files (train/run_file.h): `megatrain train RUN.yaml` takes the file's options, a flag wins
 * over the file, a run writes RUN/run.yaml with the settings it resolved, and training from that
 * file runs the same settings again (the round trip); bad files are refused naming the file, the
 * line and the key. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(run_file, .init = make_fixtures, .fini = remove_fixtures);

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s exists", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)n + 1);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return text;
}

/* The file without its "out:" line. */
static char *without_out(const char *path) {
    char *text = slurp(path), *out = strstr(text, "\nout: ");
    cr_assert_not_null(out, "%s has no out:\n%s", path, text);
    char *end = strchr(out + 1, '\n');
    memmove(out, end ? end : out + strlen(out), strlen(end ? end : out + strlen(out)) + 1);
    return text;
}

/* The "loss" values of a run's metrics.jsonl step lines, concatenated as text. */
static char *losses(const char *run_dir) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    char *text = slurp(path), *out = calloc(1, strlen(text) + 1);
    for (char *p = strstr(text, "\"loss\":"); p; p = strstr(p + 1, "\"loss\":")) {
        strncat(out, p, strcspn(p, ","));
        strcat(out, " ");
    }
    free(text);
    return out;
}

static void ran(const mt_cli_result *r) {
    cr_assert(!r->timed_out && r->signal == 0, "died or hung:\n%s", r->err);
    cr_assert_eq(r->exit_code, 0, "exit %d:\n%s", r->exit_code, r->err);
}

Test(run_file, a_run_written_run_file_runs_the_same_settings_again) {
    char file[PATH_MAX + 32], a_file[PATH_MAX + 32], b[PATH_MAX + 32], b_file[PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/mine.yaml", dir);
    /* options from a file, one of them (steps) overridden by a flag */
    char text[PATH_MAX + 512];
    snprintf(text, sizeof text, "# a run file\npreset: tiny\ndata: %s\nseq: 16\nbatch: 2\nsteps: 9\nlr: 2e-3\n"
             "schedule: constant\nwarmup: 1\nsequential: true\neval-every: 0\nbackend: cpu\nthreads: 1\n", corpus);
    write_file(file, text);
    mt_cli_result r;
    mt_cli_run(&r, 120, "train", file, "--steps", "3", "--out", run, NULL);
    ran(&r);
    mt_cli_result_free(&r);
    snprintf(a_file, sizeof a_file, "%s/run.yaml", run);
    char *a = slurp(a_file);
    cr_expect(strstr(a, "\nsteps: 3\n"), "the flag's steps, not the file's:\n%s", a);
    cr_expect(strstr(a, "\nlr: 0.002\n") && strstr(a, "\nschedule: constant\n") && strstr(a, "\nsequential: true\n") &&
              strstr(a, "\nwarmup: 1\n") && strstr(a, "\nseq: 16\n"), "the file's settings:\n%s", a);
    free(a);
    /* the run's own run file, with another --out: the same settings and the same losses */
    snprintf(b, sizeof b, "%s/again", dir);
    mt_cli_run(&r, 120, "train", a_file, "--out", b, "--threads", "1", NULL);
    ran(&r);
    mt_cli_result_free(&r);
    snprintf(b_file, sizeof b_file, "%s/run.yaml", b);
    char *x = without_out(a_file), *y = without_out(b_file);
    cr_expect_str_eq(x, y);
    free(x);
    free(y);
    x = losses(run);
    y = losses(b);
    cr_expect(strlen(x) > 20, "no losses: %s", x);
    cr_expect_str_eq(x, y, "the run again does not train the same");
    free(x);
    free(y);
}

static void expect_refused(const char *text, const char *needle) {
    char file[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/bad.yaml", dir);
    write_file(file, text);
    mt_cli_result r;
    mt_cli_run(&r, 60, "train", file, "--out", run, NULL);
    cr_assert(!r.timed_out && r.signal == 0, "died or hung:\n%s", r.err);
    cr_expect_eq(r.exit_code, 2, "exit %d for:\n%s\nstderr:\n%s", r.exit_code, text, r.err);
    cr_expect(strstr(r.err, file), "the file is not named:\n%s", r.err);
    cr_expect(strstr(r.err, needle), "'%s' not in:\n%s", needle, r.err);
    mt_cli_result_free(&r);
}

Test(run_file, bad_files_are_refused_naming_file_line_and_key) {
    expect_refused("steps: 3\nstpes: 4\n", "bad.yaml:2: unknown key 'stpes'");
    expect_refused("steps: 3\nlr: 1e-3\nsteps: 4\n", "bad.yaml:3: key 'steps' is given twice");
    expect_refused("steps:\n  - 3\n  - 4\n", "bad.yaml:2: steps: the value is a list");
    expect_refused("seq: 16\nsteps: -3\n", "bad.yaml:2: --steps");
    expect_refused("lr: fast\n", "bad.yaml:1: --lr 'fast'");
    expect_refused("schedule: wavy\n", "bad.yaml:1: --schedule 'wavy'");
    expect_refused("sequential: maybe\n", "bad.yaml:1: sequential: 'maybe' is not true or false");
    expect_refused("steps: [3\n", "bad.yaml:2: not YAML");
    expect_refused("- steps\n- 3\n", "bad.yaml:1: the run file is a list");
    mt_cli_result r;
    mt_cli_run(&r, 60, "train", "/nonexistent/run.yaml", NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "/nonexistent/run.yaml: cannot open the run file"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* ---- --val-data: validation files of their own ---- */

static void write_words(const char *path, int n, unsigned seed) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    static const char *const words[] = {"light", "water", "stone", "river", "bread", "house", "field", "wind"};
    for (int i = 0; i < n; i++) fprintf(f, "%s%c", words[(seed + (unsigned)i * 7u) % 8], i % 9 == 8 ? '\n' : ' ');
    fclose(f);
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Each file's loss at each evaluation, in metrics.jsonl and loss.svg; kept on resume; errors name
 * the file. */
Test(run_file, val_data_files_are_each_evaluated_and_kept_on_resume) {
    char v1[PATH_MAX + 16], v2[PATH_MAX + 16], metrics[PATH_MAX + 32], svg[PATH_MAX + 32], list[2 * PATH_MAX + 40];
    snprintf(v1, sizeof v1, "%s/v1.txt", dir);
    snprintf(v2, sizeof v2, "%s/v2.txt", dir);
    write_words(v1, 300, 1);
    write_words(v2, 200, 5);
    snprintf(list, sizeof list, "%s,%s", v1, v2);
    mt_cli_result r;
    mt_cli_run(&r, 120, "train", MT_TINY_STEP, "--data", corpus, "--out", run, "--steps", "4", "--eval-every", "2",
               "--val-data", list, "--threads", "1", NULL);
    ran(&r);
    cr_expect(strstr(r.err, "validation loss") && strstr(r.err, " on "), "no per-file validation line:\n%s", r.err);
    mt_cli_result_free(&r);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run);
    char key1[PATH_MAX + 64], key2[PATH_MAX + 64];
    snprintf(key1, sizeof key1, "\"val_loss/v1.txt\":");
    snprintf(key2, sizeof key2, "\"val_loss/v2.txt\":");
    char *text = slurp(metrics);
    cr_expect_eq(count(text, key1), 2, "steps 2 and 4 for %s:\n%s", v1, text);
    cr_expect_eq(count(text, key2), 2, "steps 2 and 4 for %s:\n%s", v2, text);
    free(text);
    snprintf(svg, sizeof svg, "%s/loss.svg", run);
    text = slurp(svg);
    cr_expect(strstr(text, v1) && strstr(text, v2), "loss.svg has no curve named after each file");
    free(text);
    /* a bare --resume keeps them */
    mt_cli_run(&r, 120, "train", "--out", run, "--resume", "--steps", "6", "--threads", "1", NULL);
    ran(&r);
    mt_cli_result_free(&r);
    text = slurp(metrics);
    cr_expect_eq(count(text, key1), 3, "the resumed run did not evaluate %s:\n%s", v1, text);
    free(text);

    /* errors name the file */
    char missing[PATH_MAX + 16], tiny[PATH_MAX + 16], other[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "%s/missing.txt", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    mt_cli_run(&r, 60, "train", MT_TINY_STEP, "--data", corpus, "--out", other, "--val-data", missing, NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, "--val-data") && strstr(r.err, missing), "%s", r.err);
    mt_cli_result_free(&r);
    snprintf(tiny, sizeof tiny, "%s/tiny.txt", dir);
    write_file(tiny, "a");
    mt_cli_run(&r, 60, "train", MT_TINY_STEP, "--data", corpus, "--out", other, "--val-data", tiny, NULL);
    cr_expect_eq(r.exit_code, 2);
    cr_expect(strstr(r.err, tiny) && strstr(r.err, "no target to validate on"), "%s", r.err);
    mt_cli_result_free(&r);
}
