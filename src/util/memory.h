/* Host arrays of gigabytes. On a VM whose memory grows as it is used, a page's first touch is a
 * fault into the hypervisor: one thread faulting in tens of GB of 4 KiB pages took most of a
 * minute at 8B. These arrays are mapped on their own, in transparent huge pages where the kernel
 * offers them (2 MiB: 512 times fewer faults), and can be faulted in up front by every thread. */
#ifndef MT_UTIL_MEMORY_H
#define MT_UTIL_MEMORY_H

#include <stddef.h>

/* `bytes` of zeroed memory, faulted in on first use; NULL (with mt_fail) when none. */
void *mt_pages_alloc(size_t bytes, const char *what);
/* The same, faulted in now by all the OpenMP threads. */
void *mt_pages_alloc_touched(size_t bytes, const char *what);
/* Frees what mt_pages_alloc* returned for the same `bytes`; NULL is ignored. */
void mt_pages_free(void *p, size_t bytes);

/* memcpy(dst, src, bytes), split across the OpenMP threads. */
void mt_copy_parallel(void *dst, const void *src, size_t bytes);

/* memset(p, 0, bytes), split across the OpenMP threads. */
void mt_zero_parallel(void *p, size_t bytes);

#endif
