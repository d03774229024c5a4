#include "util/memory.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "util/status.h"

/* Large enough that a thread's share of the work is cheap beside its faults. */
enum { CHUNK = 1 << 22, PAGE = 4096 };

void *mt_pages_alloc(size_t bytes, const char *what) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        mt_fail(MT_ERR_NOMEM, "cannot allocate %zu bytes of host memory for %s: %s", bytes, what, strerror(errno));
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(p, bytes ? bytes : 1, MADV_HUGEPAGE); /* a hint: without it the pages are just smaller */
#endif
    return p;
}

void *mt_pages_alloc_touched(size_t bytes, const char *what) {
    char *p = mt_pages_alloc(bytes, what);
    if (!p) return NULL;
    size_t chunks = (bytes + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        size_t end = (c + 1) * CHUNK < bytes ? (c + 1) * CHUNK : bytes;
        for (size_t at = c * CHUNK; at < end; at += PAGE) ((volatile char *)p)[at] = 0;
    }
    return p;
}

void mt_pages_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}

void mt_copy_parallel(void *dst, const void *src, size_t bytes) {
    size_t chunks = (bytes + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        size_t at = c * CHUNK, n = bytes - at < CHUNK ? bytes - at : CHUNK;
        memcpy((char *)dst + at, (const char *)src + at, n);
    }
}

void mt_zero_parallel(void *p, size_t bytes) {
    char *base = p;
    size_t chunks = (bytes + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        size_t at = c * CHUNK, n = bytes - at < CHUNK ? bytes - at : CHUNK;
        memset(base + at, 0, n);
    }
}
