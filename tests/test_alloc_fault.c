/* An allocation that fails (injected through MT_TEST_ALLOC_FAIL=pinned:N or device:N, the N-th
 * host_alloc or dev_alloc failing as the real allocator would) while a run resumes ends the run
 * with a message naming what could not be allocated, writes nothing into the run directory, and
 * leaves the last checkpoint good: a plain --resume afterwards gives exactly the weights of a run
 * that never failed. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "run_fixture.h"

/* Each run is a few tiny steps (well under a second); CI machines are slow and shared. */
#define TIMEOUT_S 60.0

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

/* A constant learning rate, so that a 4-step run resumed to 6 steps takes the steps a 6-step run
 * takes (a cosine schedule depends on --steps). */
static void train(const char *out, const char *steps, int resume, mt_cli_result *r) {
#define ARGS "train", MT_TINY_STEP, "--steps", steps, "--schedule", "constant", "--warmup", "0", \
             "--ckpt-every", "2", "--keep", "0", "--data", corpus, "--out", out
    if (resume) mt_cli_run(r, TIMEOUT_S, ARGS, "--resume", NULL);
    else mt_cli_run(r, TIMEOUT_S, ARGS, NULL);
#undef ARGS
}

static XXH64_hash_t file_hash(const char *path, long long *size) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    XXH64_state_t *state = XXH64_createState();
    XXH64_reset(state, 0);
    char buf[1 << 16];
    size_t got;
    *size = 0;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        XXH64_update(state, buf, got);
        *size += (long long)got;
    }
    fclose(f);
    XXH64_hash_t h = XXH64_digest(state);
    XXH64_freeState(state);
    return h;
}

/* Appends "path size hash" for every file under `path`, in name order, to fp: two equal
 * fingerprints mean nothing was added, removed or changed. */
static void fingerprint_tree(FILE *fp, const char *path) {
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    cr_assert(n >= 0, "cannot list %s", path);
    for (int i = 0; i < n; i++) {
        char child[PATH_MAX];
        struct stat st;
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
            snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
            cr_assert_eq(stat(child, &st), 0, "cannot stat %s", child);
            if (S_ISDIR(st.st_mode)) {
                fingerprint_tree(fp, child);
            } else {
                long long size;
                XXH64_hash_t h = file_hash(child, &size);
                fprintf(fp, "%s %lld %016llx\n", child, size, (unsigned long long)h);
            }
        }
        free(names[i]);
    }
    free(names);
}

static char *fingerprint(const char *path) {
    char *text;
    size_t len;
    FILE *fp = open_memstream(&text, &len);
    cr_assert_not_null(fp);
    fingerprint_tree(fp, path);
    fclose(fp);
    return text;
}

/* Resumes the 4-step run towards 6 steps with the hook set to `spec`: the run must fail cleanly
 * and leave the run directory exactly as it was. */
static void resume_fails_cleanly(const char *spec) {
    char *before = fingerprint(run);
    setenv("MT_TEST_ALLOC_FAIL", spec, 1);
    mt_cli_result r;
    train(run, "6", 1, &r);
    unsetenv("MT_TEST_ALLOC_FAIL");
    cr_assert_eq(r.signal, 0, "%s: died of signal %d:\n%s", spec, r.signal, r.err);
    cr_expect_eq(r.exit_code, 1, "%s: exit %d:\n%s", spec, r.exit_code, r.err);
    /* "cannot allocate <bytes> bytes of <kind> memory for <what>" names what failed. */
    cr_expect(strstr(r.err, "cannot allocate") && strstr(r.err, "memory for "),
              "%s: stderr does not say what could not be allocated:\n%s", spec, r.err);
    cr_expect(strstr(r.err, "(test hook MT_TEST_ALLOC_FAIL)"), "%s: the injected failure is not marked:\n%s",
              spec, r.err);
    char *after = fingerprint(run);
    cr_expect_str_eq(after, before, "%s: the failed resume changed the run directory", spec);
    free(before);
    free(after);
    char ckpt[PATH_MAX + 32];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-000004", run);
    cr_expect_eq(mt_checkpoint_verify(ckpt), MT_OK, "%s: the last checkpoint is damaged: %s", spec, mt_error());
    mt_cli_result_free(&r);
}

Test(faults, failed_allocations_stop_a_resume_and_keep_the_last_checkpoint, .init = make_fixtures,
     .fini = remove_fixtures) {
    mt_cli_result r;
    train(run, "4", 0, &r);
    cr_assert_eq(r.exit_code, 0, "the first run failed:\n%s", r.err);
    mt_cli_result_free(&r);

    /* The first pinned allocation (the store's working weights), one of the engine's, and two of
     * the engine's device allocations: failures at different depths of the setup. */
    static const char *const specs[] = {"pinned:1", "pinned:3", "device:2", "device:5"};
    for (int i = 0; i < 4; i++) resume_fails_cleanly(specs[i]);

    train(run, "6", 1, &r);
    cr_assert_eq(r.exit_code, 0, "resuming without the hook failed:\n%s", r.err);
    mt_cli_result_free(&r);
    char straight[PATH_MAX + 32];
    snprintf(straight, sizeof straight, "%s/straight", dir);
    train(straight, "6", 0, &r);
    cr_assert_eq(r.exit_code, 0, "the uninterrupted run failed:\n%s", r.err);
    mt_cli_result_free(&r);
    const char *differs = mt_test_state_differs(run, straight, 6);
    cr_expect_null(differs, "%s after the failures and resume differs from the straight run's", differs);
}

Test(faults, a_hook_numbered_past_the_last_allocation_never_fires, .init = make_fixtures,
     .fini = remove_fixtures) {
    /* The hook counts allocations: one numbered past the last never fires, and the run succeeds. */
    setenv("MT_TEST_ALLOC_FAIL", "device:100000", 1);
    mt_cli_result r;
    train(run, "2", 0, &r);
    unsetenv("MT_TEST_ALLOC_FAIL");
    cr_expect_eq(r.exit_code, 0, "a hook that never fires failed the run:\n%s", r.err);
    mt_cli_result_free(&r);
}
