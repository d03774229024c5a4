/* libFuzzer harness: the safetensors reader (header length, JSON header, offsets, tiling) on an
 * arbitrary file, then every tensor it accepts converted to fp32, so that any offset the
 * validation lets through is actually read. */
#include <stdlib.h>

#include "io/safetensors.h"
#include "tmp_file.h"

/* Conversions of tensors larger than this are skipped: the harness hunts parser bugs, not
 * memory limits (a valid header may promise a large tensor only if the file holds its bytes). */
#define MAX_CONVERT_ELEMS (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = mt_fuzz_write("model.safetensors", data, size);
    mt_safetensors *set;
    if (mt_safetensors_open_file(path, &set) != MT_OK) return 0;
    for (int i = 0; i < mt_safetensors_count(set); i++) {
        const mt_st_tensor *t = mt_safetensors_at(set, i);
        if (t->numel > MAX_CONVERT_ELEMS) continue;
        float *dst = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *dst);
        if (!dst) abort();
        mt_st_tensor_to_f32(t, dst);
        free(dst);
        if (mt_safetensors_find(set, t->name) != t) abort(); /* the index must find what it lists */
    }
    mt_safetensors_close(set);
    return 0;
}
