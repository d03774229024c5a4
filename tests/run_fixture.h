/* Test helpers for tests that train tiny runs through the megatrain command: a corpus file and
 * byte-for-byte comparison of checkpoint blobs. */
#ifndef MT_TESTS_RUN_FIXTURE_H
#define MT_TESTS_RUN_FIXTURE_H

/* Arguments of a tiny-model step that takes milliseconds on the cpu backend. */
#define MT_TINY_STEP "--preset", "tiny", "--seq", "16", "--batch", "2", "--backend", "cpu", "--eval-every", "0"

/* A scratch directory holding the corpus (dir/corpus.txt) and the path of a run in it (dir/run),
 * for suites that train tiny runs; each argument holds PATH_MAX bytes. */
void mt_test_make_run_dirs(char *dir, char *corpus, char *run);

/* About 20 KB of English-like words (bytes are the tiny model's tokens), the same every time. */
void mt_test_write_corpus(const char *path);

/* 1 when the files hold the same bytes; a test failure when either cannot be read. */
int mt_test_files_equal(const char *a, const char *b);

/* "<run>/ckpt-<step>/<name>.bin": a checkpoint blob (one of a few rotating static buffers). */
const char *mt_test_blob(const char *run, int step, const char *name);

/* The first blob of the fp32 training state (master, adam_m, adam_v) whose files differ between
 * the checkpoints of `step` in two runs, or NULL when they are byte for byte the same. */
const char *mt_test_state_differs(const char *run_a, const char *run_b, int step);

/* "<dir>/<name>" in one of 16 rotating static buffers: a call holds several paths at once. */
const char *mt_test_in(const char *dir, const char *name);

/* 1 when `path` exists. */
int mt_test_exists(const char *path);

#endif
