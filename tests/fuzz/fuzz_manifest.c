/* libFuzzer harness: a checkpoint's manifest.json. The input becomes the manifest of a checkpoint
 * directory holding one genuine 16-byte blob "master.bin"; the metadata is read, and the blobs
 * verified and read, through the manifest's claims (names, sizes, checksums). The first input
 * byte picks the file: the rest as it is (the seal at its end checked like any other bytes), or
 * the rest sealed as a writer seals it (its checksum appended), so that what lies behind the seal
 * is fuzzed too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "io/checkpoint.h"
#include "tmp_file.h"

static const char *checkpoint_dir(void) {
    static char dir[4096];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "%s/ckpt-000001", mt_fuzz_dir());
    const float payload[4] = {1, 2, 3, 4};
    mt_ckpt_blob blob = {"master", payload, sizeof payload};
    if (mt_checkpoint_write(dir, &blob, 1, NULL) != MT_OK) abort();
    return dir;
}

/* The seal of io/checkpoint.c: a last member holding the XXH64 of every byte before it. */
static uint8_t *sealed(const uint8_t *body, size_t size, size_t *out_size) {
    char seal[64];
    int n = snprintf(seal, sizeof seal, ",\n \"manifest_xxh64\": \"%016llx\"\n}\n",
                     (unsigned long long)XXH64(body, size, 0));
    uint8_t *text = malloc(size + (size_t)n);
    if (!text) abort();
    memcpy(text, body, size);
    memcpy(text + size, seal, (size_t)n);
    *out_size = size + (size_t)n;
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *dir = checkpoint_dir();
    size_t n = size - 1;
    uint8_t *text = data[0] % 2 ? sealed(data + 1, size - 1, &n) : NULL;
    mt_fuzz_write("ckpt-000001/manifest.json", text ? text : data + 1, n);
    free(text);
    json_t *meta;
    if (mt_checkpoint_read_meta(dir, &meta) == MT_OK) json_decref(meta);
    mt_checkpoint_verify(dir);
    float dst[4];
    mt_checkpoint_read(dir, "master", dst, sizeof dst);
    return 0;
}
