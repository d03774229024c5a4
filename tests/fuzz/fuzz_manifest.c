/* libFuzzer harness: a checkpoint's manifest.json. The input becomes the manifest of a checkpoint
 * directory holding one genuine 16-byte blob "master.bin"; the metadata is read, and the blobs
 * verified and read, through the manifest's claims (names, sizes, checksums). */
#include <stdio.h>
#include <stdlib.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = checkpoint_dir();
    mt_fuzz_write("ckpt-000001/manifest.json", data, size);
    json_t *meta;
    if (mt_checkpoint_read_meta(dir, &meta) == MT_OK) json_decref(meta);
    mt_checkpoint_verify(dir);
    float dst[4];
    mt_checkpoint_read(dir, "master", dst, sizeof dst);
    return 0;
}
