/* Big host arrays touched by every thread at once. On a VM whose memory grows as it is used, a
 * page's first touch is slow; one thread faulting in tens of GB took most of a minute at 8B. */
#ifndef MT_UTIL_MEMORY_H
#define MT_UTIL_MEMORY_H

#include <stddef.h>

/* memset(p, 0, bytes), split across the OpenMP threads. */
void mt_zero_parallel(void *p, size_t bytes);

/* mt_calloc whose pages are faulted in now, in parallel, rather than on first use. */
void *mt_calloc_touched(size_t count, size_t size, const char *what);

#endif
