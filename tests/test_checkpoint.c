/* Crash-safe checkpoint directories: round trip, corruption refused naming the file, failed
 * writes leaving the previous checkpoint whole, listing and rotation. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"

static char run[64];

static void make_run(void) {
    snprintf(run, sizeof run, "/tmp/mt-ckpt-XXXXXX");
    cr_assert_not_null(mkdtemp(run));
}

static void remove_run(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", run);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(checkpoint, .init = make_run, .fini = remove_run);

static float weights[1000];
static double moments[257];

/* Writes run/<name> holding "weights", "moments" and an empty "nothing", meta {"step": step}. */
static const char *write_ckpt(const char *name, int step) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", run, name);
    for (int i = 0; i < 1000; i++) weights[i] = (float)(i * step) * 0.5f;
    for (int i = 0; i < 257; i++) moments[i] = 1.0 / (i + step);
    mt_ckpt_blob blobs[] = {{"weights", weights, sizeof weights},
                            {"moments", moments, sizeof moments},
                            {"nothing", NULL, 0}};
    json_t *meta = json_pack("{s:i}", "step", step);
    cr_assert_eq(mt_checkpoint_write(path, blobs, 3, meta), MT_OK, "%s", mt_error());
    json_decref(meta);
    return path;
}

/* Names in run/ other than the checkpoints themselves (temp or aside dirs). */
static int stray_entries(void) {
    DIR *d = opendir(run);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp-") != NULL || strstr(e->d_name, ".old-") != NULL;
    closedir(d);
    return n;
}

static void assert_reads_back(const char *path, int step) {
    float w[1000];
    double m[257];
    cr_assert_eq(mt_checkpoint_read(path, "weights", w, sizeof w), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_read(path, "moments", m, sizeof m), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_read(path, "nothing", NULL, 0), MT_OK, "%s", mt_error());
    for (int i = 0; i < 1000; i++) cr_assert_eq(w[i], (float)(i * step) * 0.5f);
    for (int i = 0; i < 257; i++) cr_assert_eq(m[i], 1.0 / (i + step));
    json_t *meta;
    cr_assert_eq(mt_checkpoint_read_meta(path, &meta), MT_OK, "%s", mt_error());
    cr_assert_eq(json_integer_value(json_object_get(meta, "step")), step);
    json_decref(meta);
}

Test(checkpoint, round_trip_and_replace) {
    const char *path = write_ckpt("ckpt-000005", 5);
    assert_reads_back(path, 5);
    write_ckpt("ckpt-000005", 6); /* overwrite in place */
    assert_reads_back(path, 6);
    cr_assert_eq(stray_entries(), 0, "no temp or aside dir left behind");
}

/* Reading blob `name` of `bytes` from `path` fails and the message names `file` and `why`. */
static void assert_refused(const char *path, const char *name, size_t bytes, const char *file,
                           const char *why) {
    static char buf[8192];
    cr_assert_neq(mt_checkpoint_read(path, name, buf, bytes), MT_OK);
    cr_assert_not_null(strstr(mt_error(), file), "names %s: %s", file, mt_error());
    cr_assert_not_null(strstr(mt_error(), why), "says %s: %s", why, mt_error());
}

Test(checkpoint, truncated_blob_is_refused) {
    const char *path = write_ckpt("ckpt-000001", 1);
    char file[160];
    snprintf(file, sizeof file, "%s/weights.bin", path);
    cr_assert_eq(truncate(file, 24 + 3000), 0);
    assert_refused(path, "weights", 4000, "weights.bin", "truncated");
}

Test(checkpoint, flipped_byte_is_refused) {
    const char *path = write_ckpt("ckpt-000001", 1);
    char file[160];
    snprintf(file, sizeof file, "%s/moments.bin", path);
    FILE *f = fopen(file, "r+b");
    cr_assert_not_null(f);
    fseek(f, 24 + 100, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 24 + 100, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    assert_refused(path, "moments", sizeof moments, "moments.bin", "checksum");
}

Test(checkpoint, missing_manifest_or_wrong_size_is_refused) {
    const char *path = write_ckpt("ckpt-000001", 1);
    assert_refused(path, "weights", 3996, "weights.bin", "expected 3996");
    assert_refused(path, "biases", 4, "manifest.json", "no blob named 'biases'");
    char file[160];
    snprintf(file, sizeof file, "%s/manifest.json", path);
    cr_assert_eq(unlink(file), 0);
    assert_refused(path, "weights", sizeof weights, "manifest.json", "missing");
    json_t *meta;
    cr_assert_neq(mt_checkpoint_read_meta(path, &meta), MT_OK);
}

Test(checkpoint, unwritable_dir_fails_cleanly) {
    /* A regular file as the parent fails for root too, where permissions would not. */
    char parent[128], path[160];
    snprintf(parent, sizeof parent, "%s/not-a-dir", run);
    fclose(fopen(parent, "w"));
    snprintf(path, sizeof path, "%s/ckpt-000001", parent);
    mt_ckpt_blob blob = {"weights", weights, sizeof weights};
    cr_assert_eq(mt_checkpoint_write(path, &blob, 1, NULL), MT_ERR_IO);
    cr_assert_not_null(strstr(mt_error(), path), "%s", mt_error());
    cr_assert_eq(mt_checkpoint_write(run, &(mt_ckpt_blob){"../escape", weights, 4}, 1, NULL),
                 MT_ERR_INVALID, "blob names cannot leave the directory");
}

Test(checkpoint, full_disk_keeps_the_previous_checkpoint) {
    const char *path = write_ckpt("ckpt-000002", 2);
    /* A file size limit makes write() fail mid-blob as a full disk would (EFBIG, not ENOSPC). */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, small = {.rlim_cur = 2048, .rlim_max = RLIM_INFINITY};
    getrlimit(RLIMIT_FSIZE, &old);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    mt_ckpt_blob blob = {"weights", weights, sizeof weights};
    mt_status st = mt_checkpoint_write(path, &blob, 1, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    cr_assert_eq(st, MT_ERR_IO);
    cr_assert_not_null(strstr(mt_error(), "weights.bin: write failed"), "%s", mt_error());
    assert_reads_back(path, 2);
    cr_assert_eq(stray_entries(), 0, "the temp dir is removed");
}

Test(checkpoint, list_newest_first_and_keep) {
    write_ckpt("ckpt-000002", 2);
    write_ckpt("ckpt-000010", 10);
    write_ckpt("ckpt-000001", 1);
    write_ckpt("ckpt-000003", 3);
    char junk[160];
    snprintf(junk, sizeof junk, "%s/ckpt-000011.tmp-abcdef", run); /* a crashed write */
    mkdir(junk, 0755);
    snprintf(junk, sizeof junk, "%s/ckpt-000012", run); /* no manifest: incomplete */
    mkdir(junk, 0755);
    mt_ckpt_entry *list;
    int n;
    cr_assert_eq(mt_checkpoint_list(run, &list, &n), MT_OK, "%s", mt_error());
    cr_assert_eq(n, 4);
    int64_t want[] = {10, 3, 2, 1};
    for (int i = 0; i < 4; i++) cr_assert_eq(list[i].step, want[i]);
    char expect[160];
    cr_assert_eq(mt_checkpoint_path(expect, sizeof expect, run, 10), MT_OK);
    cr_assert_str_eq(list[0].path, expect);
    mt_checkpoint_list_free(list, n);

    cr_assert_eq(mt_checkpoint_keep(run, 2), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_list(run, &list, &n), MT_OK);
    cr_assert_eq(n, 2);
    cr_assert(list[0].step == 10 && list[1].step == 3);
    mt_checkpoint_list_free(list, n);
    cr_assert_eq(mt_checkpoint_keep(run, 0), MT_ERR_INVALID);
}

Test(checkpoint, missing_run_dir_has_no_checkpoints) {
    char missing[128];
    snprintf(missing, sizeof missing, "%s/nothing-here", run);
    mt_ckpt_entry *list;
    int n = -1;
    cr_assert_eq(mt_checkpoint_list(missing, &list, &n), MT_OK);
    cr_assert_eq(n, 0);
    mt_checkpoint_list_free(list, n);
}

/* What a crash mid-write leaves: an unfinished temp dir, an old checkpoint moved aside whose
 * replacement landed, and one whose replacement never did. Tidying removes the first two and
 * puts the third back. */
Test(checkpoint, tidy_after_a_crash_mid_write) {
    char path[160], aside[160];
    write_ckpt("ckpt-000001", 1);
    write_ckpt("ckpt-000002.tmp-a1b2c3", 2);
    write_ckpt("ckpt-000001.old-d4e5f6", 1);
    const char *third = write_ckpt("ckpt-000003", 3);
    snprintf(aside, sizeof aside, "%s.old-g7h8i9", third);
    cr_assert_eq(rename(third, aside), 0);
    cr_assert_eq(stray_entries(), 3);

    cr_assert_eq(mt_checkpoint_tidy(run), MT_OK, "%s", mt_error());
    cr_expect_eq(stray_entries(), 0, "leftovers remain");
    mt_ckpt_entry *entries;
    int count;
    cr_assert_eq(mt_checkpoint_list(run, &entries, &count), MT_OK);
    cr_expect_eq(count, 2);
    cr_expect_eq(entries[0].step, 3, "the checkpoint moved aside was not restored");
    cr_expect_eq(entries[1].step, 1);
    mt_checkpoint_list_free(entries, count);
    snprintf(path, sizeof path, "%s/ckpt-000003", run);
    assert_reads_back(path, 3);
}

/* A prune killed midway: the manifest goes first, so what is left is an incomplete directory,
 * which listing ignores and tidying removes; here, blobs whose manifest is already gone. */
Test(checkpoint, tidy_removes_a_delete_cut_short) {
    const char *pruned = write_ckpt("ckpt-000004", 4);
    char manifest[200];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", pruned);
    cr_assert_eq(unlink(manifest), 0);
    write_ckpt("ckpt-000005", 5);
    mt_ckpt_entry *entries;
    int count;
    cr_assert_eq(mt_checkpoint_list(run, &entries, &count), MT_OK);
    cr_expect_eq(count, 1, "a directory without its manifest was listed as a checkpoint");
    mt_checkpoint_list_free(entries, count);

    cr_assert_eq(mt_checkpoint_tidy(run), MT_OK, "%s", mt_error());
    char path[160];
    snprintf(path, sizeof path, "%s/ckpt-000004", run);
    cr_expect_neq(access(path, F_OK), 0, "the incomplete checkpoint directory is still there");
    snprintf(path, sizeof path, "%s/ckpt-000005", run);
    assert_reads_back(path, 5);
}
