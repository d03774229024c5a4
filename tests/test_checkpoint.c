/* Crash-safe checkpoint directories: round trip, corruption refused naming the file, failed
 * writes leaving the previous checkpoint whole, listing and rotation. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include <jansson.h>

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

    cr_assert_eq(mt_checkpoint_keep(run, 2, -1, INT64_MAX), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_list(run, &list, &n), MT_OK);
    cr_assert_eq(n, 2);
    cr_assert(list[0].step == 10 && list[1].step == 3);
    mt_checkpoint_list_free(list, n);
    cr_assert_eq(mt_checkpoint_keep(run, 0, -1, INT64_MAX), MT_ERR_INVALID);
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

/* A deletion cut short: the checkpoint was renamed "<dir>.deleting-*" first (the marker), and part
 * of its files went. Tidying removes it; listing never showed it. */
Test(checkpoint, tidy_removes_a_delete_cut_short) {
    const char *pruned = write_ckpt("ckpt-000004", 4);
    char doomed[200], manifest[240], path[160];
    snprintf(doomed, sizeof doomed, "%s.deleting-a1b2c3", pruned);
    cr_assert_eq(rename(pruned, doomed), 0);
    snprintf(manifest, sizeof manifest, "%s/manifest.json", doomed);
    cr_assert_eq(unlink(manifest), 0);
    write_ckpt("ckpt-000005", 5);
    mt_ckpt_entry *entries;
    int count;
    cr_assert_eq(mt_checkpoint_list(run, &entries, &count), MT_OK);
    cr_expect_eq(count, 1, "a deletion in progress was listed as a checkpoint");
    mt_checkpoint_list_free(entries, count);

    cr_assert_eq(mt_checkpoint_tidy(run), MT_OK, "%s", mt_error());
    cr_expect_neq(access(doomed, F_OK), 0, "the deletion cut short is still there");
    snprintf(path, sizeof path, "%s/ckpt-000005", run);
    assert_reads_back(path, 5);
}

/* A checkpoint directory without a manifest and without the deletion marker is not one of ours to
 * delete (a copy in progress, a user's): tidying, listing and a write of the same step leave it
 * alone. */
Test(checkpoint, a_directory_without_manifest_is_left_alone) {
    const char *incomplete = write_ckpt("ckpt-000004", 4);
    char manifest[200], blob[200];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", incomplete);
    snprintf(blob, sizeof blob, "%s/weights.bin", incomplete);
    cr_assert_eq(unlink(manifest), 0);
    cr_assert_eq(mt_checkpoint_tidy(run), MT_OK, "%s", mt_error());
    cr_assert_eq(access(blob, F_OK), 0, "tidying deleted a directory it could not prove its own");
    mt_ckpt_blob b = {"weights", weights, sizeof weights};
    cr_assert_eq(mt_checkpoint_write(incomplete, &b, 1, NULL), MT_ERR_IO, "a write replaced it");
    cr_assert_not_null(strstr(mt_error(), "not a complete checkpoint"), "%s", mt_error());
    cr_assert_eq(access(blob, F_OK), 0, "the write deleted it");
    cr_assert_eq(stray_entries(), 0, "the refused write left its temp dir");
}

/* Retention renames a checkpoint before it deletes a file of it: a deletion that fails midway
 * (here on a subdirectory no checkpoint has) leaves the marked name, never "ckpt-N" half gone. */
Test(checkpoint, deletion_marks_the_directory_first) {
    write_ckpt("ckpt-000001", 1);
    write_ckpt("ckpt-000002", 2);
    char sub[160], name[64];
    snprintf(sub, sizeof sub, "%s/ckpt-000001/not-a-blob", run);
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_neq(mt_checkpoint_keep(run, 1, -1, INT64_MAX), MT_OK, "deleting a directory with a subdirectory");
    snprintf(sub, sizeof sub, "%s/ckpt-000001", run);
    cr_assert_neq(access(sub, F_OK), 0, "ckpt-000001 is still there under its name");
    DIR *d = opendir(run);
    int marked = 0;
    for (struct dirent *e; (e = readdir(d));) {
        snprintf(name, sizeof name, "%.63s", e->d_name);
        marked += !strncmp(name, "ckpt-000001.deleting-", 21);
    }
    closedir(d);
    cr_assert_eq(marked, 1, "no ckpt-000001.deleting-* marker");
}

/* Retention spares the checkpoint it is told to, however old. */
Test(checkpoint, keep_spares_the_step_it_is_told) {
    for (int step = 1; step <= 5; step++) {
        char name[32];
        snprintf(name, sizeof name, "ckpt-%06d", step);
        write_ckpt(name, step);
    }
    cr_assert_eq(mt_checkpoint_keep(run, 2, 2, INT64_MAX), MT_OK, "%s", mt_error());
    mt_ckpt_entry *entries;
    int count;
    cr_assert_eq(mt_checkpoint_list(run, &entries, &count), MT_OK);
    cr_assert_eq(count, 3);
    cr_assert(entries[0].step == 5 && entries[1].step == 4 && entries[2].step == 2);
    mt_checkpoint_list_free(entries, count);
    /* Kept as of step 4: ckpt-000005 lies past it (an abandoned stretch) and is neither counted
     * nor deleted. */
    cr_assert_eq(mt_checkpoint_keep(run, 1, -1, 4), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_list(run, &entries, &count), MT_OK);
    cr_assert_eq(count, 2);
    cr_assert(entries[0].step == 5 && entries[1].step == 4);
    mt_checkpoint_list_free(entries, count);
}

/* Replaces the first occurrence of `from` in the file with `to` (same length or not). */
static void edit_file(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *at = strstr(text, from);
    cr_assert_not_null(at, "%s does not hold %s", path, from);
    f = fopen(path, "wb");
    fwrite(text, 1, (size_t)(at - text), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
}

/* The manifest's own fields are under its checksum: a changed step in the metadata is refused. */
Test(checkpoint, manifest_fields_are_checksummed) {
    const char *path = write_ckpt("ckpt-000007", 7);
    char manifest[200];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", path);
    edit_file(manifest, "\"step\": 7", "\"step\": 9");
    json_t *meta;
    cr_assert_eq(mt_checkpoint_read_meta(path, &meta), MT_ERR_INVALID, "a tampered step was read");
    cr_assert(strstr(mt_error(), "manifest.json") && strstr(mt_error(), "checksum does not match"), "%s", mt_error());
    cr_assert_neq(mt_checkpoint_verify(path), MT_OK);
    edit_file(manifest, "\"step\": 9", "\"step\": 7");
    cr_assert_eq(mt_checkpoint_verify(path), MT_OK, "%s", mt_error());
    /* Cut short: the checksum at its end is missing. */
    cr_assert_eq(truncate(manifest, 40), 0);
    cr_assert_eq(mt_checkpoint_read_meta(path, &meta), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "does not end with its own checksum"), "%s", mt_error());
}

Test(checkpoint, update_meta_keeps_the_checkpoint_sealed) {
    const char *path = write_ckpt("ckpt-000003", 3);
    json_t *meta = json_pack("{s:i, s:s}", "step", 3, "note", "diverged");
    cr_assert_eq(mt_checkpoint_update_meta(path, meta), MT_OK, "%s", mt_error());
    json_decref(meta);
    cr_assert_eq(mt_checkpoint_verify(path), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_read_meta(path, &meta), MT_OK, "%s", mt_error());
    cr_assert_str_eq(json_string_value(json_object_get(meta, "note")), "diverged");
    json_decref(meta);
    assert_reads_back(path, 3);
    cr_assert_eq(stray_entries(), 0);
}
