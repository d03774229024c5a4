/* Every command that writes stops when asked and leaves nothing behind: SIGINT, SIGTERM or SIGHUP
 * during `tokenize`, during `export` and during `train`'s tokenization of its data end the
 * command at once with 128 + the signal, and no temporary shard, directory or token cache is
 * left; a second signal (which ends the process at once) leaves none either. `tokenize` given a
 * FIFO refuses it instead of waiting for a writer. The test hook MT_TEST_WRITE_PAUSE_MS paces the
 * writing so that the signal lands in the middle of it. */
#include <criterion/criterion.h>
#include <glob.h>
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
#include "run_fixture.h"
#include "test_limits.h"

#define TIMEOUT_S 60.0
#define TOKENIZER "tests/data/tokenizers/gpt2-bytelevel/tokenizer.json"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) {
    mt_test_make_run_dirs(dir, corpus, run);
    setenv("MT_TEST_WRITE_PAUSE_MS", "150", 1);
}
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(interrupts, .init = make_fixtures, .fini = remove_fixtures);

static const char *in_dir(const char *name) { return mt_test_in(dir, name); }

static size_t count_matching(const char *pattern) {
    glob_t g;
    size_t n = glob(pattern, 0, NULL, &g) == 0 ? g.gl_pathc : 0;
    if (n) globfree(&g);
    return n;
}

/* Waits until something matches `pattern` (the command is writing), then sends `sig` (`times`
 * times), and expects the command to end with 128 + sig. */
static void interrupt_when(mt_cli_process *p, const char *pattern, int sig, int times) {
    for (int polls = 0; !count_matching(pattern); polls++) {
        cr_assert_lt(polls, MT_TEST_LIMIT(3000), "nothing matching %s appeared", pattern);
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    for (int i = 0; i < times; i++) kill(p->pid, sig);
    mt_cli_result r;
    mt_cli_wait(p, TIMEOUT_S, &r);
    cr_assert(!r.timed_out, "the command went on after signal %d:\n%s", sig, r.err);
    cr_assert_eq(r.exit_code, 128 + sig, "exit %d (signal %d), not %d:\n%s", r.exit_code, r.signal, 128 + sig, r.err);
    if (times == 1) cr_assert_not_null(strstr(r.err, "stopped on request"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* About 1 MB of text: 16 parts of the smallest size tokenize cuts, each written after a pause. */
static const char *big_text(void) {
    const char *path = in_dir("big.txt");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 50; i++) {
        FILE *c = fopen(corpus, "r");
        char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, c)) > 0) fwrite(buf, 1, n, f);
        fclose(c);
    }
    cr_assert_eq(fclose(f), 0);
    return path;
}

static void tokenize_interrupted(int sig, int times) {
    const char *text = big_text();
    char out[PATH_MAX], pattern[PATH_MAX + 16];
    hf_test_path(out, dir, "shards");
    mt_cli_process p;
    char prefix[PATH_MAX + 8];
    snprintf(prefix, sizeof prefix, "%s/p", out);
    mt_cli_start(&p, "tokenize", "--tokenizer", TOKENIZER, "--threads", "1", text, "--out", prefix, NULL);
    snprintf(pattern, sizeof pattern, "%s/p_*.bin.tmp*", out);
    interrupt_when(&p, pattern, sig, times);
    cr_assert(!mt_test_exists(out), "tokenize left %s, which it made (%d entries)", out, hf_test_count_entries(out));
}

Test(interrupts, sigint_during_tokenize_leaves_no_shard) { tokenize_interrupted(SIGINT, 1); }
Test(interrupts, sigterm_during_tokenize_leaves_no_shard) { tokenize_interrupted(SIGTERM, 1); }
Test(interrupts, sighup_during_tokenize_leaves_no_shard) { tokenize_interrupted(SIGHUP, 1); }
Test(interrupts, a_second_signal_during_tokenize_leaves_no_shard) { tokenize_interrupted(SIGINT, 2); }

static void export_interrupted(int sig, int times) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", run, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    mt_cli_result_free(&r);
    const char *model = in_dir("exported");
    char pattern[PATH_MAX + 16];
    snprintf(pattern, sizeof pattern, "%s.tmp-*", model);
    mt_cli_process p;
    mt_cli_start(&p, "export", run, model, NULL);
    interrupt_when(&p, pattern, sig, times);
    cr_assert_eq(count_matching(pattern), 0, "export left its temporary directory");
    cr_assert(!mt_test_exists(model), "export left %s", model);
}

Test(interrupts, sigterm_during_export_leaves_nothing) { export_interrupted(SIGTERM, 1); }
Test(interrupts, a_second_signal_during_export_leaves_nothing) { export_interrupted(SIGINT, 2); }

/* Ctrl-C while train tokenizes its data: heard at once, not once the whole file is done; the run
 * directory it made goes with the cache. */
Test(interrupts, sigint_during_trains_tokenization_is_heard) {
    const char *text = big_text(), *config = in_dir("config.json");
    hf_test_write_text(config, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": "
                               "64, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
                               "\"vocab_size\": 2324, \"max_position_embeddings\": 128}");
    char pattern[PATH_MAX + 32];
    snprintf(pattern, sizeof pattern, "%s/data/*.bin.tmp*", run);
    mt_cli_process p;
    mt_cli_start(&p, "train", "--config", config, "--tokenizer", TOKENIZER, "--data", text, "--seq", "16", "--batch",
                 "2", "--backend", "cpu", "--steps", "1", "--out", run, NULL);
    interrupt_when(&p, pattern, SIGINT, 1);
    cr_assert(!mt_test_exists(run), "the interrupted run left %s", run);
}

Test(interrupts, tokenize_refuses_a_fifo_without_waiting) {
    const char *fifo = in_dir("pipe.txt");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    mt_cli_result r;
    mt_cli_run(&r, 10.0, "tokenize", "--tokenizer", TOKENIZER, fifo, "--out", in_dir("p"), NULL);
    cr_assert(!r.timed_out, "tokenize waited on the FIFO");
    cr_assert_neq(r.exit_code, 0);
    cr_assert(strstr(r.err, fifo) && strstr(r.err, "a FIFO"), "%s", r.err);
    mt_cli_result_free(&r);
    /* In a directory too. */
    cr_assert_eq(mkdir(in_dir("texts"), 0755), 0);
    cr_assert_eq(mkfifo(in_dir("texts/pipe.txt"), 0644), 0);
    mt_cli_run(&r, 10.0, "tokenize", "--tokenizer", TOKENIZER, in_dir("texts"), "--out", in_dir("p"), NULL);
    cr_assert(!r.timed_out, "tokenize waited on the FIFO");
    cr_assert_neq(r.exit_code, 0);
    cr_assert(strstr(r.err, "pipe.txt") && strstr(r.err, "a FIFO"), "%s", r.err);
    mt_cli_result_free(&r);
}
