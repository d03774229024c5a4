/* Wall-clock seconds for timing, from the monotonic clock. */
#ifndef MT_UTIL_CLOCK_H
#define MT_UTIL_CLOCK_H

#include <time.h>

static inline double mt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
