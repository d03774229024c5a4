/* A full disk, for real: the run directory sits on a small tmpfs mounted by the test (CI runs
 * as root). The tmpfs holds one checkpoint and a half, so the second checkpoint cannot be
 * written: the save must fail with a clear message, leave no partial checkpoint, keep the first
 * one valid, and then stop the run -- or, with --continue-on-save-error, let it train on. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "run_fixture.h"

/* Bytes of everything under `dir` (one level of subdirectories: a run's checkpoints). */
static long long tree_bytes(const char *dir) {
    long long total = 0;
    DIR *d = opendir(dir);
    cr_assert(d, "cannot list %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        cr_assert(stat(path, &st) == 0);
        total += S_ISDIR(st.st_mode) ? tree_bytes(path) : (long long)st.st_size;
    }
    closedir(d);
    return total;
}

static int count_prefixed(const char *dir, const char *prefix) {
    int n = 0;
    DIR *d = opendir(dir);
    cr_assert(d, "cannot list %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) n += strstr(e->d_name, prefix) != NULL;
    closedir(d);
    return n;
}

typedef struct {
    char root[256], mnt[300], data[300], run[400];
} disk_fixture;

/* Measures one checkpoint of the tiny model, then mounts a tmpfs of 1.5 times that. */
static void setup(disk_fixture *f) {
    char probe[300], ckpt[512];
    hf_test_mkdtemp(f->root);
    snprintf(f->data, sizeof f->data, "%s/corpus.txt", f->root);
    snprintf(probe, sizeof probe, "%s/probe", f->root);
    mt_test_write_corpus(f->data);
    mt_cli_result r;
    mt_cli_run(&r, 60, "train", MT_TINY_STEP, "--data", f->data, "--steps", "1", "--out", probe, NULL);
    cr_assert_eq(r.exit_code, 0, "probe run failed: %s", r.err);
    mt_cli_result_free(&r);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000001", probe);
    long long one = tree_bytes(ckpt);

    snprintf(f->mnt, sizeof f->mnt, "%s/mnt", f->root);
    cr_assert(mkdir(f->mnt, 0777) == 0);
    char options[64];
    snprintf(options, sizeof options, "size=%lldk", (one * 3 / 2) / 1024 + 4);
    if (mount("tmpfs", f->mnt, "tmpfs", 0, options) != 0) {
        hf_test_rmtree(f->root);
        cr_skip_test("cannot mount a tmpfs here (needs root: %s); test_checkpoint's file-size-limit "
                     "test covers the same path", strerror(errno));
    }
    snprintf(f->run, sizeof f->run, "%s/run", f->mnt);
}

static void teardown(disk_fixture *f) {
    umount(f->mnt);
    hf_test_rmtree(f->root);
}

/* The first checkpoint survives whole and nothing half-written is left beside it. */
static void expect_first_checkpoint_intact(const disk_fixture *f) {
    char first[512];
    snprintf(first, sizeof first, "%s/ckpt-000001", f->run);
    cr_expect_eq(mt_checkpoint_verify(first), MT_OK, "%s no longer verifies: %s", first, mt_error());
    cr_expect_eq(count_prefixed(f->run, "ckpt-"), 1, "a second (partial) checkpoint was left in %s", f->run);
    cr_expect_eq(count_prefixed(f->run, ".tmp"), 0, "a temporary checkpoint directory was left in %s", f->run);
}

Test(disk, full_disk_stops_the_run_and_keeps_the_last_checkpoint) {
    disk_fixture f;
    setup(&f);
    mt_cli_result r;
    mt_cli_run(&r, 60, "train", MT_TINY_STEP, "--data", f.data, "--steps", "4", "--ckpt-every", "1",
               "--keep", "1", "--out", f.run, NULL);
    cr_expect_eq(r.signal, 0, "died of signal %d", r.signal);
    cr_expect_neq(r.exit_code, 0, "the run went on past a failed checkpoint");
    cr_expect(strstr(r.err, "No space left on device") != NULL, "stderr does not say the disk is full:\n%s", r.err);
    cr_expect(strstr(r.err, "ckpt-000002") != NULL, "stderr does not name the checkpoint:\n%s", r.err);
    expect_first_checkpoint_intact(&f);
    mt_cli_result_free(&r);
    teardown(&f);
}

Test(disk, continue_on_save_error_trains_on) {
    disk_fixture f;
    setup(&f);
    mt_cli_result r;
    mt_cli_run(&r, 60, "train", MT_TINY_STEP, "--data", f.data, "--steps", "4", "--ckpt-every", "1",
               "--keep", "1", "--continue-on-save-error", "--out", f.run, NULL);
    cr_expect_eq(r.signal, 0, "died of signal %d", r.signal);
    cr_expect(strstr(r.err, "checkpoint NOT saved") != NULL, "no report of the failed checkpoint:\n%s", r.err);
    cr_expect(strstr(r.err, "step 4/4") != NULL || strstr(r.err, "step 4:") != NULL ||
                  strstr(r.err, "at step 4") != NULL,
              "training did not reach step 4:\n%s", r.err);
    /* The final checkpoint cannot be written either: the run ends with that error. */
    cr_expect_neq(r.exit_code, 0, "a run whose last checkpoint failed reported success");
    expect_first_checkpoint_intact(&f);
    mt_cli_result_free(&r);
    teardown(&f);
}

/* ulimit -f below a checkpoint's blob (tests/file_size_limit.sh): EFBIG, handled as a full disk,
 * never a death by SIGXFSZ. A script, since the limit is the shell's. */
Test(disk, a_file_size_limit_fails_the_save_as_a_full_disk) {
    const char *bin = getenv("MT_BIN");
    cr_assert_not_null(bin, "MT_BIN is not set");
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "bash tests/file_size_limit.sh '%s' >&2", bin);
    int status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "tests/file_size_limit.sh failed (see above)");
}
