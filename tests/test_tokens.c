/* Token files (llm.c shards, .npy, text) and the dataset sampler built on them. Fixtures are
 * written at run time into a temp dir. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/dataset.h"
#include "io/tokens.h"

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/mt-tokens-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(tokens, .init = make_dir, .fini = remove_dir);

/* Writes `bytes` to dir/name and returns the full path (static buffer). */
static const char *fixture(const char *name, const void *data, size_t bytes) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, bytes, f), bytes);
    fclose(f);
    return path;
}

/* An llm.c shard: 256 int32 header then `count` tokens of `width` bytes; `promised` goes in the
 * header's count field so that tests can make it disagree with the payload. */
static const char *llmc_shard(const char *name, int32_t magic, int32_t version, int32_t promised,
                              const uint32_t *ids, int count, int width) {
    size_t bytes = 1024 + (size_t)count * (size_t)width;
    unsigned char *buf = calloc(1, bytes);
    int32_t header[3] = {magic, version, promised};
    memcpy(buf, header, sizeof header);
    for (int i = 0; i < count; i++) {
        uint16_t u16 = (uint16_t)ids[i];
        memcpy(buf + 1024 + (size_t)i * width, width == 2 ? (void *)&u16 : (void *)&ids[i], width);
    }
    const char *path = fixture(name, buf, bytes);
    free(buf);
    return path;
}

/* An .npy file as numpy writes it: preamble, dict header padded with spaces to 64 bytes and
 * ended by '\n', then the payload. */
static const char *npy_file(const char *name, const char *dict, const void *payload, size_t bytes) {
    char buf[4096];
    size_t len = strlen(dict), header_len = (10 + len + 1 + 63) / 64 * 64 - 10;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(header_len & 0xff);
    buf[9] = (char)(header_len >> 8);
    memcpy(buf + 10, dict, len);
    memset(buf + 10 + len, ' ', header_len - len - 1);
    buf[10 + header_len - 1] = '\n';
    memcpy(buf + 10 + header_len, payload, bytes);
    return fixture(name, buf, 10 + header_len + bytes);
}

static const uint32_t ids[6] = {7, 0, 65535, 3, 1000, 42};

Test(tokens, llmc_uint16_shard) {
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(llmc_shard("a.bin", 20240520, 1, 6, ids, 6, 2), &t), MT_OK, "%s",
                 mt_error());
    cr_assert_eq(t.format, MT_TOKENS_LLMC);
    cr_assert_eq(t.count, 6);
    cr_assert_eq(t.width, 2);
    for (int i = 0; i < 6; i++) cr_assert_eq(mt_tokens_get(&t, i), ids[i]);
    int32_t copy[3];
    mt_tokens_copy(&t, 2, 3, copy);
    cr_assert(copy[0] == 65535 && copy[1] == 3 && copy[2] == 1000);
    mt_tokens_close(&t);
}

Test(tokens, llmc_uint32_shard) {
    const uint32_t big[3] = {70000, 1, 151000};
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(llmc_shard("b.bin", 20240520, 2, 3, big, 3, 4), &t), MT_OK, "%s",
                 mt_error());
    cr_assert_eq(t.width, 4);
    cr_assert_eq(mt_tokens_get(&t, 0), 70000);
    cr_assert_eq(mt_tokens_get(&t, 2), 151000);
    mt_tokens_close(&t);
}

static void assert_refused(const char *path, const char *why) {
    mt_tokens t;
    cr_assert_neq(mt_tokens_open(path, &t), MT_OK, "%s opened", path);
    cr_assert_not_null(strstr(mt_error(), path), "message names the file: %s", mt_error());
    cr_assert_not_null(strstr(mt_error(), why), "message says '%s': %s", why, mt_error());
}

Test(tokens, llmc_bad_inputs_are_refused) {
    assert_refused(llmc_shard("magic.bin", 1234, 1, 6, ids, 6, 2), "magic");
    assert_refused(llmc_shard("version.bin", 20240520, 3, 6, ids, 6, 2), "version 3");
    /* Header promises 7 tokens, payload holds 6: both sizes in the message. */
    assert_refused(llmc_shard("short.bin", 20240520, 1, 7, ids, 6, 2), "1036 bytes");
    assert_refused(llmc_shard("short.bin", 20240520, 1, 7, ids, 6, 2), "1038");
    assert_refused(llmc_shard("long.bin", 20240520, 1, 5, ids, 6, 2), "promises");
    int32_t header[10] = {20240520, 1, 6};
    assert_refused(fixture("truncated.bin", header, sizeof header), "truncated");
    assert_refused(fixture("empty.bin", "", 0), "empty");
    char missing[128];
    snprintf(missing, sizeof missing, "%s/no-such-file.bin", dir);
    assert_refused(missing, "cannot open");
}

Test(tokens, npy_arrays) {
    const uint16_t u2[4] = {1, 2, 60000, 4};
    const uint32_t u4[2] = {100000, 5};
    mt_tokens t;
    const char *p = npy_file("u2.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }",
                             u2, sizeof u2);
    cr_assert_eq(mt_tokens_open(p, &t), MT_OK, "%s", mt_error());
    cr_assert(t.format == MT_TOKENS_NPY && t.count == 4 && t.width == 2);
    cr_assert_eq(mt_tokens_get(&t, 2), 60000);
    mt_tokens_close(&t);
    /* Keys in another order, double quotes, no trailing commas: still a valid dict. */
    p = npy_file("u4.npy", "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<u4\"}", u4,
                 sizeof u4);
    cr_assert_eq(mt_tokens_open(p, &t), MT_OK, "%s", mt_error());
    cr_assert(t.count == 2 && t.width == 4 && mt_tokens_get(&t, 0) == 100000);
    mt_tokens_close(&t);
}

Test(tokens, npy_bad_inputs_are_refused) {
    const uint16_t u2[6] = {0};
    assert_refused(npy_file("i4.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
                            u2, 12), "'<i4' not supported");
    assert_refused(npy_file("be.npy", "{'descr': '>u2', 'fortran_order': False, 'shape': (6,), }",
                            u2, 12), "not supported");
    assert_refused(npy_file("2d.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }",
                            u2, 12), "2 dimensions");
    assert_refused(npy_file("f.npy", "{'descr': '<u2', 'fortran_order': True, 'shape': (6,), }",
                            u2, 12), "Fortran");
    assert_refused(npy_file("size.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (7,), }",
                            u2, 12), "promises 7 tokens");
    assert_refused(npy_file("open.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (6,), ",
                            u2, 12), "malformed npy header");
    assert_refused(npy_file("key.npy", "{'descr': '<u2', 'order': False, 'shape': (6,), }", u2,
                            12), "malformed npy header");
    assert_refused(npy_file("dup.npy", "{'descr': '<u2', 'descr': '<u2', 'shape': (6,), }", u2,
                            12), "malformed npy header");
    const char preamble[12] = "\x93NUMPY\x01\x00\xff\x00{'";
    assert_refused(fixture("cut.npy", preamble, sizeof preamble), "truncated npy header");
    assert_refused(fixture("v2.npy", "\x93NUMPY\x02\x00\x10", 9), "truncated npy preamble");
    assert_refused(fixture("v9.npy", "\x93NUMPY\x09\x00\x10\x00", 10), "version 9.0");
    assert_refused(fixture("magic.npy", "hello", 5), "bad magic");
}

Test(tokens, text_bytes_are_tokens) {
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(fixture("a.txt", "In \xc3\xa9", 5), &t), MT_OK, "%s", mt_error());
    cr_assert(t.format == MT_TOKENS_TEXT && t.count == 5 && t.width == 1);
    cr_assert_eq(mt_tokens_get(&t, 0), 'I');
    cr_assert_eq(mt_tokens_get(&t, 3), 0xc3);
    cr_assert_eq(mt_tokens_validate(&t, 256, "a.txt"), MT_OK);
    mt_tokens_close(&t);
}

Test(tokens, validate_names_first_bad_id) {
    mt_tokens t;
    cr_assert_eq(mt_tokens_open(llmc_shard("v.bin", 20240520, 1, 6, ids, 6, 2), &t), MT_OK);
    cr_assert_eq(mt_tokens_validate(&t, 65536, "v.bin"), MT_OK);
    cr_assert_eq(mt_tokens_validate(&t, 1000, "v.bin"), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "token 65535 at position 2"), "%s", mt_error());
    cr_assert_not_null(strstr(mt_error(), "v.bin"), "%s", mt_error());
    mt_tokens_close(&t);
}

/* ---- the dataset sampler ---- */

/* A text corpus whose byte at position i is i % 251, so a window's first byte gives its start. */
static void open_ramp(mt_tokens *t, size_t n) {
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i % 251);
    cr_assert_eq(mt_tokens_open(fixture("ramp.txt", buf, n), t), MT_OK, "%s", mt_error());
    free(buf);
}

Test(tokens, dataset_split_and_sequential_windows) {
    mt_tokens t;
    open_ramp(&t, 1000);
    mt_dataset ds;
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.1, 16, MT_SAMPLE_SEQUENTIAL, 1), MT_OK, "%s", mt_error());
    cr_assert_eq(ds.val_tokens, 100);
    cr_assert_eq(ds.train_tokens, 900);
    int32_t in[2 * 16], tg[2 * 16];
    mt_dataset_train_batch(&ds, 2, in, tg, NULL);
    for (int i = 0; i < 32; i++) {
        cr_assert_eq(in[i], i % 251, "windows follow each other");
        cr_assert_eq(tg[i], (i + 1) % 251, "targets are inputs shifted by one");
    }
    /* 900 training tokens hold 56 windows of 16 (+1): the pass completes with the 56th and the
     * 57th wraps to the start. */
    for (int i = 2; i < 55; i++) mt_dataset_train_batch(&ds, 1, in, tg, NULL);
    cr_assert_eq(ds.state.epoch, 0);
    mt_dataset_train_batch(&ds, 1, in, tg, NULL);
    cr_assert_eq(in[0], (55 * 16) % 251);
    cr_assert_eq(ds.state.epoch, 1);
    mt_dataset_train_batch(&ds, 1, in, tg, NULL);
    cr_assert_eq(in[0], 0);
    mt_tokens_close(&t);
}

Test(tokens, dataset_random_resumes_exactly) {
    mt_tokens t;
    open_ramp(&t, 5000);
    mt_dataset a, b;
    cr_assert_eq(mt_dataset_init(&a, &t, 0.05, 32, MT_SAMPLE_RANDOM, 1234), MT_OK);
    cr_assert_eq(mt_dataset_init(&b, &t, 0.05, 32, MT_SAMPLE_RANDOM, 999), MT_OK);
    int32_t in[4 * 32], tg[4 * 32], in2[4 * 32], tg2[4 * 32];
    for (int i = 0; i < 10; i++) mt_dataset_train_batch(&a, 4, in, tg, NULL);
    /* Save through JSON as a checkpoint would, restore into a dataset seeded differently. */
    json_t *saved = mt_sampler_state_to_json(&a.state);
    mt_sampler_state restored;
    cr_assert_eq(mt_sampler_state_from_json(saved, &restored), MT_OK, "%s", mt_error());
    json_decref(saved);
    cr_assert_eq(mt_dataset_set_state(&b, &restored), MT_OK);
    int differs = 0;
    for (int step = 0; step < 20; step++) {
        mt_dataset_train_batch(&a, 4, in, tg, NULL);
        mt_dataset_train_batch(&b, 4, in2, tg2, NULL);
        cr_assert_arr_eq(in, in2, sizeof in);
        cr_assert_arr_eq(tg, tg2, sizeof tg);
        for (int w = 0; w < 4; w++) {
            int32_t start = in[w * 32];
            for (int k = 1; k < 32; k++) cr_assert_eq(in[w * 32 + k], (start + k) % 251);
            cr_assert_eq(tg[w * 32 + 31], (start + 32) % 251, "window is contiguous");
        }
        differs += in[0] != in[32];
    }
    cr_assert_gt(differs, 10, "random windows start at different places");
    cr_assert_eq(a.state.epoch, 30 * 4 * 32 / a.train_tokens, "epochs count tokens drawn");
    mt_tokens_close(&t);
}

Test(tokens, dataset_validation_batches_are_fixed_and_held_out) {
    mt_tokens t;
    open_ramp(&t, 2000);
    mt_dataset ds;
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.1, 8, MT_SAMPLE_RANDOM, 7), MT_OK);
    /* 200 held-out tokens, 199 targets: 24 whole windows and one of 7 targets, in 7 batches of 4 (the
     * last partial: its other windows are padding). */
    cr_assert_eq(mt_dataset_val_windows(&ds), 25);
    cr_assert_eq(mt_dataset_val_batches(&ds, 4), 7);
    int32_t in[32], tg[32];
    mt_dataset_val_batch(&ds, 5, 4, in, tg, NULL);
    cr_assert_eq(in[0], (1800 + 20 * 8) % 251);
    cr_assert_eq(tg[31], (1800 + 24 * 8) % 251, "window 23 ends at target 24 * 8");
    mt_dataset_val_batch(&ds, 6, 4, in, tg, NULL);
    cr_assert_eq(in[0], (1800 + 24 * 8) % 251);
    cr_assert_eq(tg[6], 1999 % 251, "the short window's last target is the split's last token");
    for (int k = 7; k < 32; k++) cr_assert_eq(tg[k], -1, "target %d past the split is padding", k);
    mt_sampler_state before = ds.state;
    mt_dataset_val_batch(&ds, 0, 4, in, tg, NULL);
    cr_assert_eq(in[0], 1800 % 251);
    cr_assert_eq(ds.state.rng.state, before.rng.state, "validation does not move the training sampler");
    mt_tokens_close(&t);
}

Test(tokens, dataset_refuses_splits_too_short) {
    mt_tokens t;
    open_ramp(&t, 100);
    mt_dataset ds;
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.01, 16, MT_SAMPLE_RANDOM, 1), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "validation split"), "%s", mt_error());
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.05, 16, MT_SAMPLE_RANDOM, 1), MT_OK, "5 tokens validate, in a short window");
    cr_assert_eq(mt_dataset_val_windows(&ds), 1);
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.0, 100, MT_SAMPLE_RANDOM, 1), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "training split"), "%s", mt_error());
    cr_assert_eq(mt_dataset_init(&ds, &t, 0.0, 99, MT_SAMPLE_RANDOM, 1), MT_OK);
    mt_sampler_state bad = {.cursor = 5000};
    cr_assert_eq(mt_dataset_set_state(&ds, &bad), MT_ERR_INVALID);
    json_t *junk = json_pack("{s:s, s:i, s:i}", "rng", "zz", "cursor", 0, "epoch", 0);
    cr_assert_eq(mt_sampler_state_from_json(junk, &bad), MT_ERR_INVALID);
    json_decref(junk);
    mt_tokens_close(&t);
}
