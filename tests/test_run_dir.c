/* The run directory's protocol as a user meets it: one run at a time (a second one is refused,
 * naming the directory and the holder's pid); a directory without a manifest is nobody's to
 * delete, least of all a run's that then refuses to start; a checkpoint whose manifest fields
 * were changed is passed over by --resume; after a resume metrics.jsonl holds each step once. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "run_fixture.h"
#include "test_limits.h"

#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(rundir, .init = make_fixtures, .fini = remove_fixtures);

static void train(const char *steps, const char *extra, mt_cli_result *r) {
    mt_cli_run(r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", steps, "--ckpt-every", "2", "--keep", "0", "--data",
               corpus, "--out", run, "--resume", extra, NULL);
}

static void train_ok(const char *steps) {
    mt_cli_result r;
    train(steps, NULL, &r);
    cr_assert(!r.timed_out && r.signal == 0 && r.exit_code == 0, "exit %d:\n%s", r.exit_code, r.err);
    mt_cli_result_free(&r);
}

Test(rundir, a_second_run_on_the_same_directory_is_refused) {
    mt_cli_process first;
    mt_cli_start(&first, "train", MT_TINY_STEP, "--steps", "1000000", "--ckpt-every", "0", "--data", corpus, "--out",
                 run, NULL);
    char metrics[PATH_MAX];
    hf_test_path(metrics, run, "metrics.jsonl");
    for (int polls = 0; !mt_test_exists(metrics); polls++) {
        cr_assert_lt(polls, MT_TEST_LIMIT(3000), "the first run did not start");
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "3", "--data", corpus, "--out", run, "--resume", NULL);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)first.pid);
    int refused = r.exit_code != 0 && strstr(r.err, "in use by another megatrain run") && strstr(r.err, run) &&
                  strstr(r.err, pid);
    char why[4096];
    snprintf(why, sizeof why, "exit %d:\n%s", r.exit_code, r.err);
    mt_cli_result_free(&r);
    kill(first.pid, SIGTERM);
    mt_cli_wait(&first, TIMEOUT_S, &r);
    cr_assert(refused, "the second run was not refused naming the directory and %s: %s", pid, why);
    cr_assert_eq(r.exit_code, 128 + SIGTERM, "the first run was disturbed:\n%s", r.err);
    long long stopped;
    const char *at = strstr(r.err, "stopped on request at step ");
    cr_assert(at && sscanf(at, "stopped on request at step %lld", &stopped) == 1, "%s", r.err);
    mt_cli_result_free(&r);
    /* Once the holder is gone the directory is free again. */
    char steps[32];
    snprintf(steps, sizeof steps, "%lld", stopped + 2);
    train_ok(steps);
}

/* A checkpoint directory whose manifest is missing, and no deletion marker: a run that refuses to
 * start (here a fresh run over an existing one) must leave it, as must one that starts. */
Test(rundir, a_directory_without_manifest_is_left_alone) {
    train_ok("2");
    char blob[PATH_MAX + 64], manifest[PATH_MAX + 64];
    snprintf(blob, sizeof blob, "%s/ckpt-000004/master.bin", run);
    snprintf(manifest, sizeof manifest, "%s/ckpt-000004/manifest.json", run);
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "mkdir %s/ckpt-000004 && cp %s/ckpt-000002/master.bin %s", run, run, blob);
    cr_assert_eq(system(cmd), 0);
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "2", "--data", corpus, "--out", run, NULL);
    cr_assert_eq(r.exit_code, 2, "a fresh run over a run must be refused:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_assert(mt_test_exists(blob), "the refused run deleted a directory that was not proven a cut-short deletion");
    train(("3"), NULL, &r);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "without a manifest"), "the directory was not reported:\n%s", r.err);
    mt_cli_result_free(&r);
    cr_assert(mt_test_exists(blob), "a resumed run deleted it");
    cr_assert(!mt_test_exists(manifest));
}

/* Rewrites the "step" of a checkpoint's manifest in place, keeping its length. */
static void change_manifest_step(int step, int to) {
    char path[PATH_MAX + 64], from_text[32], to_text[32];
    snprintf(path, sizeof path, "%s/ckpt-%06d/manifest.json", run, step);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    snprintf(from_text, sizeof from_text, "\"step\": %d", step);
    snprintf(to_text, sizeof to_text, "\"step\": %d", to);
    cr_assert_eq(strlen(from_text), strlen(to_text));
    char *at = strstr(text, from_text);
    cr_assert_not_null(at, "%s does not hold %s", path, from_text);
    fseek(f, at - text, SEEK_SET);
    fputs(to_text, f);
    cr_assert_eq(fclose(f), 0);
}

Test(rundir, a_manifest_whose_fields_changed_is_passed_over) {
    train_ok("4");
    change_manifest_step(4, 6);
    mt_cli_result r;
    train("6", NULL, &r);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "checksum does not match"), "the changed manifest was not reported:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "ckpt-000002 at step 2"), "did not resume from the older checkpoint:\n%s", r.err);
    mt_cli_result_free(&r);
}

/* The step of each line of metrics.jsonl that logs a training loss, in order. */
static int logged_steps(int *steps, int cap) {
    char path[PATH_MAX + 16], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        json_t *e = json_loads(line, 0, NULL);
        cr_assert_not_null(e, "a line that is not JSON: %s", line);
        if (json_object_get(e, "loss")) steps[n++] = (int)json_integer_value(json_object_get(e, "step"));
        json_decref(e);
    }
    fclose(f);
    return n;
}

Test(rundir, metrics_hold_each_step_once_after_a_resume) {
    train_ok("6");
    char last[PATH_MAX + 16];
    snprintf(last, sizeof last, "%s/ckpt-000006", run);
    hf_test_rmtree(last); /* as if killed after step 6 was logged, before its checkpoint */
    train_ok("8");
    int steps[64];
    int n = logged_steps(steps, 64);
    cr_assert_eq(n, 8, "%d training lines for 8 steps", n);
    for (int i = 0; i < n; i++) cr_assert_eq(steps[i], i + 1, "line %d logs step %d", i + 1, steps[i]);
}

/* Which checkpoint is newest is the step its sealed manifest holds, not its directory's name: a
 * copy of step 2 named ckpt-000006 must not pass for the newest, over the good step 4. */
Test(rundir, a_copy_named_for_a_later_step_is_not_taken_for_the_newest) {
    train_ok("4");
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp -r %s/ckpt-000002 %s/ckpt-000006", run, run);
    cr_assert_eq(system(cmd), 0);
    mt_cli_result r;
    train("5", NULL, &r);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "ckpt-000004 at step 4"), "did not resume from step 4:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "holds step 2, not the step 6 its name says"), "the copy was not reported:\n%s",
                       r.err);
    mt_cli_result_free(&r);
    /* sample and export of the run directory take the same one. */
    mt_cli_run(&r, TIMEOUT_S, "sample", run, "--tokens", "2", "--backend", "cpu", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "not the step 6 its name says"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* A fresh run starts only in a new, empty or megatrain's own directory: not in one of other files,
 * nor inside a checkpoint; refused, it writes nothing there. */
Test(rundir, a_fresh_run_refuses_a_directory_of_other_files) {
    char other[PATH_MAX], notes[PATH_MAX + 16];
    hf_test_path(other, dir, "mine");
    cr_assert_eq(mkdir(other, 0755), 0);
    snprintf(notes, sizeof notes, "%s/notes.txt", other);
    hf_test_write_text(notes, "my notes\n");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", other, NULL);
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "not empty and not a megatrain run directory (it holds notes.txt)"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_eq(hf_test_count_entries(other), 1, "the refused run wrote into %s", other);
    /* --resume of a directory without checkpoints starts a run: refused the same. */
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", other, "--resume", NULL);
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_eq(hf_test_count_entries(other), 1, "the refused run wrote into %s", other);
    /* The inside of a checkpoint. */
    train_ok("2");
    char ckpt[PATH_MAX + 16];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000002", run);
    int entries = hf_test_count_entries(ckpt);
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", ckpt, NULL);
    cr_assert_eq(r.exit_code, 2, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "manifest.json"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_eq(hf_test_count_entries(ckpt), entries, "the refused run wrote into %s", ckpt);
    cr_assert_eq(mt_checkpoint_verify(ckpt), MT_OK, "%s", mt_error());
    /* A shell's log of the run beside nothing else is no obstacle. */
    char fresh[PATH_MAX], log[PATH_MAX + 16];
    hf_test_path(fresh, dir, "logged");
    cr_assert_eq(mkdir(fresh, 0755), 0);
    snprintf(log, sizeof log, "%s/train.log", fresh);
    hf_test_write_text(log, "");
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", fresh, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
}

/* Refused before it wrote anything, a run leaves the directory as it found it: the directories it
 * made, its .lock and the token cache it made are gone. */
Test(rundir, a_refused_run_leaves_no_debris) {
    char deep[PATH_MAX], top[PATH_MAX], missing[PATH_MAX];
    hf_test_path(top, dir, "new");
    hf_test_path(deep, dir, "new/deeper/run");
    hf_test_path(missing, dir, "absent.txt");
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", missing, "--out", deep, NULL);
    cr_assert_neq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert(!mt_test_exists(top), "the refused run left %s", top);
    /* An empty directory stays empty. */
    char empty[PATH_MAX];
    hf_test_path(empty, dir, "empty");
    cr_assert_eq(mkdir(empty, 0755), 0);
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", missing, "--out", empty, NULL);
    cr_assert_neq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_eq(hf_test_count_entries(empty), 0, "the refused run left something in %s", empty);
    /* Text tokenized into the run's cache, then refused (too short for one window): the cache goes. */
    char cmd[4 * PATH_MAX], tok[PATH_MAX], config[PATH_MAX], text[PATH_MAX];
    hf_test_path(tok, dir, "tok.json");
    snprintf(cmd, sizeof cmd, "cp tests/data/tokenizers/gpt2-bytelevel/tokenizer.json %s", tok);
    cr_assert_eq(system(cmd), 0);
    hf_test_path(config, dir, "config.json");
    hf_test_write_text(config, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": "
                               "64, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
                               "\"vocab_size\": 2324, \"max_position_embeddings\": 128}");
    hf_test_path(text, dir, "short.txt");
    hf_test_write_text(text, "a few words only\n");
    mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--tokenizer", tok, "--data", text, "--seq", "64",
               "--backend", "cpu", "--steps", "1", "--out", empty, NULL);
    cr_assert_neq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "tokenizing"), "%s", r.err);
    mt_cli_result_free(&r);
    cr_assert_eq(hf_test_count_entries(empty), 0, "the refused run left its token cache in %s", empty);
}
