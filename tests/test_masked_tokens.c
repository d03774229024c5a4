/* Masked token shards (io/masked_tokens.h): the writer, the reader through mt_tokens_open, the
 * dataset's masked targets, and every way a file can be wrong. */
#include <criterion/criterion.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/dataset.h"
#include "io/masked_tokens.h"

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/mt-masked-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(masked_tokens, .init = make_dir, .fini = remove_dir);

static const char *path_of(const char *name) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Files in the directory, temporary ones included. */
static size_t files_in_dir(void) {
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/*", dir);
    glob_t g;
    size_t n = glob(pattern, 0, NULL, &g) == 0 ? g.gl_pathc : 0;
    globfree(&g);
    return n;
}

static void write_shard(const char *path, int width, const uint32_t *ids, const uint8_t *mask, size_t n) {
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, path, width), MT_OK, "%s", mt_error());
    /* Two calls, so that appending is exercised. */
    cr_assert_eq(mt_masked_writer_add(w, ids, mask, n / 2, 1), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_add(w, ids + n / 2, mask + n / 2, n - n / 2, 0), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_count(w), n);
    cr_assert_eq(mt_masked_writer_finish(w), MT_OK, "%s", mt_error());
}

static const uint32_t ids[10] = {5, 70000, 9, 0, 65535, 3, 12, 7, 100000, 1};
static const uint8_t mask[10] = {0, 0, 1, 1, 0, 1, 1, 0, 1, 1};

static void check_round_trip(int width) {
    uint32_t want[10];
    for (int i = 0; i < 10; i++) want[i] = width == 2 ? ids[i] % 65536 : ids[i];
    const char *path = path_of("chat.bin");
    write_shard(path, width, want, mask, 10);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq((size_t)st.st_size, 1024 + 10 * (size_t)(width + 1));
    cr_assert_eq(files_in_dir(), 1, "the temporary file was left beside the shard");
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path, &t), MT_OK, "%s", mt_error());
    cr_assert_eq(t.format, MT_TOKENS_MASKED);
    cr_assert_eq(t.width, width);
    cr_assert_eq(t.count, 10);
    uint8_t got[10];
    mt_tokens_copy_mask(&t, 0, 10, got);
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(mt_tokens_get(&t, i), want[i], "id %d", i);
        cr_assert_eq(got[i], mask[i], "mask %d", i);
    }
    cr_assert_eq(mt_tokens_loss_count(&t), 6);
    cr_assert_eq(mt_tokens_status(&t), MT_OK, "%s", mt_error());
    mt_tokens_close(&t);
}

/* The mask is read through the same reader as the ids: a shard cut short while open is
 * reported, not read past (no SIGBUS, no stale bytes taken as a mask). */
Test(masked_tokens, mask_of_a_shard_cut_short_is_an_error) {
    uint32_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    uint8_t mask[10] = {0, 1, 1, 0, 1, 1, 0, 1, 1, 0};
    const char *path = path_of("cut.bin");
    write_shard(path, 2, ids, mask, 10);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path, &t), MT_OK, "%s", mt_error());
    cr_assert_eq(truncate(path, 1024 + 10 * 2 + 4), 0);
    uint8_t got[10];
    mt_tokens_copy_mask(&t, 0, 10, got);
    cr_assert_neq(mt_tokens_status(&t), MT_OK);
    cr_expect(strstr(mt_error(), "cut.bin") != NULL, "%s", mt_error());
    for (int i = 0; i < 10; i++) cr_expect_eq(got[i], 0, "mask %d after a failed read", i);
    mt_tokens_close(&t);
}

Test(masked_tokens, round_trip_uint16) { check_round_trip(2); }

Test(masked_tokens, round_trip_uint32) { check_round_trip(4); }

/* The dataset's windows: inputs are the ids, targets -1 wherever the target's mask is 0. */
Test(masked_tokens, dataset_targets_follow_the_mask) {
    uint32_t stream[40];
    uint8_t m[40];
    for (int i = 0; i < 40; i++) {
        stream[i] = (uint32_t)(100 + i);
        m[i] = (i / 3) % 2;
    }
    write_shard(path_of("d.bin"), 2, stream, m, 40);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path_of("d.bin"), &t), MT_OK, "%s", mt_error());
    mt_dataset ds;
    enum { SEQ = 6 };
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.25, SEQ, MT_SAMPLE_SEQUENTIAL, 1), MT_OK, "%s", mt_error());
    int32_t in[SEQ], tg[SEQ];
    for (int window = 0; window < 6; window++) { /* past the end of the split: it wraps */
        size_t first = ds.state.cursor;
        mt_dataset_train_batch(&ds, 1, in, tg, NULL);
        for (int k = 0; k < SEQ; k++) {
            cr_assert_eq(in[k], (int32_t)stream[first + k]);
            int32_t want = m[first + k + 1] ? (int32_t)stream[first + k + 1] : -1;
            cr_assert_eq(tg[k], want, "window %d target %d", window, k);
        }
    }
    /* Validation windows are masked the same way. */
    mt_dataset_val_batch(&ds, 0, 1, in, tg, NULL);
    for (int k = 0; k < SEQ; k++) {
        size_t pos = ds.train_tokens + (size_t)k + 1;
        cr_assert_eq(tg[k], m[pos] ? (int32_t)stream[pos] : -1, "validation target %d", k);
    }
    mt_tokens_close(&t);
}

/* ---- bad files ---- */

/* A valid 4-token uint16 shard's bytes, for tests to damage. */
static size_t valid_bytes(unsigned char *buf) {
    memset(buf, 0, 1024 + 12);
    int32_t h[7] = {MT_MASKED_MAGIC, 1, 1024, 2, 4, 0, 1};
    memcpy(buf, h, sizeof h);
    uint16_t tok[4] = {1, 2, 3, 4};
    memcpy(buf + 1024, tok, sizeof tok);
    uint8_t m[4] = {0, 1, 1, 0};
    memcpy(buf + 1032, m, sizeof m);
    return 1024 + 12;
}

static void expect_refused(const unsigned char *buf, size_t bytes, const char *needle) {
    const char *path = path_of("bad.bin");
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, bytes, f), bytes);
    fclose(f);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path, &t), MT_ERR_INVALID, "accepted a shard that should fail with '%s'", needle);
    cr_expect(strstr(mt_error(), path) != NULL, "message does not name the file: %s", mt_error());
    cr_expect(strstr(mt_error(), needle) != NULL, "message '%s' lacks '%s'", mt_error(), needle);
}

static void set_word(unsigned char *buf, int word, int32_t value) { memcpy(buf + 4 * word, &value, 4); }

Test(masked_tokens, the_valid_fixture_opens) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    FILE *f = fopen(path_of("ok.bin"), "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path_of("ok.bin"), &t), MT_OK, "%s", mt_error());
    cr_assert_eq(t.count, 4);
    mt_tokens_close(&t);
}

Test(masked_tokens, refuses_a_truncated_header) {
    unsigned char buf[1036];
    valid_bytes(buf);
    expect_refused(buf, 600, "truncated masked shard header");
}

Test(masked_tokens, refuses_another_version) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 1, 2);
    expect_refused(buf, n, "version 2");
}

Test(masked_tokens, refuses_another_header_size) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 2, 512);
    expect_refused(buf, n, "header size 512");
}

Test(masked_tokens, refuses_an_id_width_of_three) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 3, 3);
    expect_refused(buf, n, "id width 3");
}

Test(masked_tokens, refuses_an_unknown_mask_encoding) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 6, 8);
    expect_refused(buf, n, "mask encoding 8");
}

Test(masked_tokens, refuses_a_reserved_word_set) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 200, 7);
    expect_refused(buf, n, "word 200");
}

Test(masked_tokens, refuses_no_tokens) {
    unsigned char buf[1036];
    valid_bytes(buf);
    set_word(buf, 4, 0);
    expect_refused(buf, 1024, "no tokens");
}

Test(masked_tokens, refuses_a_count_the_file_does_not_hold) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 4, 5);
    expect_refused(buf, n, "promises 5 tokens");
    set_word(buf, 4, 3);
    expect_refused(buf, n, "promises 3 tokens");
    set_word(buf, 4, 4);
    expect_refused(buf, n - 1, "promises 4 tokens"); /* the mask cut short */
}

Test(masked_tokens, refuses_a_count_that_would_wrap) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 4, -1);
    set_word(buf, 5, -1);
    expect_refused(buf, n, "promises 18446744073709551615 tokens");
}

Test(masked_tokens, refuses_a_mask_byte_other_than_0_or_1) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    buf[1034] = 2;
    expect_refused(buf, n, "mask byte of token 2 is 2");
}

/* Encoding 2 (what the writer writes): bit 1 marks an example's first token, which the file's first
 * token must be; bytes above 3 are refused. */
Test(masked_tokens, refuses_a_first_token_that_starts_no_example) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 6, 2);
    expect_refused(buf, n, "the first token does not start an example");
}

Test(masked_tokens, refuses_a_mask_byte_above_3_with_example_starts) {
    unsigned char buf[1036];
    size_t n = valid_bytes(buf);
    set_word(buf, 6, 2);
    buf[1032] = 2;
    buf[1034] = 4;
    expect_refused(buf, n, "mask byte of token 2 is 4");
}

/* The writer marks where each example starts; the reader finds them, and reads the loss bits
 * alone as the mask. */
Test(masked_tokens, examples_recorded_and_read_back) {
    const char *path = path_of("ex.bin");
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, path, 4), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_add(w, ids, mask, 3, 1), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_add(w, ids + 3, mask + 3, 2, 0), MT_OK, "%s", mt_error()); /* continues */
    cr_assert_eq(mt_masked_writer_add(w, ids + 5, mask + 5, 4, 1), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_add(w, ids + 9, mask + 9, 1, 1), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_finish(w), MT_OK, "%s", mt_error());
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(path, &t), MT_OK, "%s", mt_error());
    const uint64_t *starts;
    cr_assert_eq(mt_tokens_examples(&t, &starts), 3);
    cr_assert(starts[0] == 0 && starts[1] == 5 && starts[2] == 9, "starts %llu %llu %llu",
              (unsigned long long)starts[0], (unsigned long long)starts[1], (unsigned long long)starts[2]);
    uint8_t got[10];
    mt_tokens_copy_mask(&t, 0, 10, got);
    for (int i = 0; i < 10; i++) cr_assert_eq(got[i], mask[i], "mask %d", i);
    mt_tokens_close(&t);
}

/* ---- the writer's refusals leave nothing behind ---- */

Test(masked_tokens, writer_refuses_an_id_past_16_bits_and_leaves_nothing) {
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, path_of("x.bin"), 2), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_add(w, ids, mask, 3, 1), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "70000") != NULL, "%s", mt_error());
    mt_masked_writer_abort(w);
    cr_assert_eq(files_in_dir(), 0, "a partial shard was left behind");
}

Test(masked_tokens, writer_refuses_an_empty_shard_and_leaves_nothing) {
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, path_of("x.bin"), 4), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_masked_writer_finish(w), MT_ERR_INVALID);
    cr_assert_eq(files_in_dir(), 0, "a partial shard was left behind");
}

Test(masked_tokens, writer_refuses_a_bad_width) {
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, path_of("x.bin"), 3), MT_ERR_INVALID);
    cr_assert_eq(files_in_dir(), 0);
}

Test(masked_tokens, writer_names_a_directory_it_cannot_write) {
    mt_masked_writer *w;
    cr_assert_eq(mt_masked_writer_open(&w, "/nonexistent-dir/x.bin", 2), MT_ERR_IO);
    cr_expect(strstr(mt_error(), "/nonexistent-dir/x.bin") != NULL, "%s", mt_error());
}
