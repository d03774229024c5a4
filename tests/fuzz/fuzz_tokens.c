/* libFuzzer harness: token files (llm.c .bin header, masked shard header, .npy header, raw
 * text). The first input byte picks the file name's extension, since the reader also dispatches
 * on it; every id (and mask byte) of an accepted file is then read. */
#include <stdlib.h>

#include "io/tokens.h"
#include "tmp_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *names[] = {"shard.bin", "tokens.npy", "corpus.txt"};
    if (size < 1) return 0;
    const char *path = mt_fuzz_write(names[data[0] % 3], data + 1, size - 1);
    mt_tokens t;
    if (mt_tokens_open(path, &t) != MT_OK) return 0;
    uint64_t sum = 0;
    int32_t ids[256];
    for (size_t at = 0; at < t.count; at += 256) {
        size_t n = t.count - at < 256 ? t.count - at : 256;
        mt_tokens_copy(&t, at, n, ids);
        for (size_t k = 0; k < n; k++) sum += (uint32_t)ids[k];
        uint8_t mask[256];
        mt_tokens_copy_mask(&t, at, n, mask);
        for (size_t k = 0; k < n; k++) sum += mask[k];
    }
    if (mt_tokens_status(&t) != MT_OK) abort(); /* the file did not change: every read succeeds */
    mt_tokens_validate(&t, (uint32_t)(sum | 1), path);
    mt_tokens_close(&t);
    return 0;
}
