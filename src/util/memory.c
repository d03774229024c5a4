#include "util/memory.h"

#include <stdint.h>
#include <string.h>

#include "util/status.h"

/* Large enough that a thread's memset call is cheap beside its faults. */
enum { ZERO_CHUNK = 1 << 22 };

void mt_zero_parallel(void *p, size_t bytes) {
    char *base = p;
    size_t chunks = (bytes + ZERO_CHUNK - 1) / ZERO_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        size_t at = c * ZERO_CHUNK, n = bytes - at < ZERO_CHUNK ? bytes - at : ZERO_CHUNK;
        memset(base + at, 0, n);
    }
}

void *mt_calloc_touched(size_t count, size_t size, const char *what) {
    if (size && count > SIZE_MAX / size) {
        mt_fail(MT_ERR_NOMEM, "cannot allocate %zu x %zu bytes of host memory for %s: too large", count, size, what);
        return NULL;
    }
    void *p = mt_malloc(count * size, what);
    if (p) mt_zero_parallel(p, count * size);
    return p;
}
