/* Wall-clock seconds for timing, from the monotonic clock. */
#ifndef MT_UTIL_CLOCK_H
#define MT_UTIL_CLOCK_H

#include <stdlib.h>
#include <time.h>

static inline double mt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Test hook: sleeps the milliseconds the environment variable `name` gives (none when unset), so
 * that a test can interrupt the work this paces (MT_TEST_WRITE_PAUSE_MS: each batch tokenize
 * writes, each tensor export writes). */
static inline void mt_test_pause(const char *name) {
    const char *ms = getenv(name);
    double s = ms ? strtod(ms, NULL) / 1e3 : 0;
    if (s > 0) nanosleep(&(struct timespec){.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)}, NULL);
}

#endif
