/* One error-handling style for the whole library.
 *
 * A library function returns mt_status (MT_OK is 0) and, on failure, leaves a message in a
 * thread-local buffer (mt_error()) that names the file, tensor or field at fault. Only the CLI
 * prints errors and exits. Each error domain has one check macro that records the failed
 * expression, the source file and the line. */
#ifndef MT_UTIL_STATUS_H
#define MT_UTIL_STATUS_H

#include <errno.h>
#include <stddef.h>

#include "megatrain.h"

/* The longest message kept, in bytes: room for several paths of PATH_MAX and the reason after
 * them, which a message must never lose. */
#define MT_ERROR_MAX 16384

/* Sets the thread's error message (printf-style) and returns `status`. */
mt_status mt_fail(mt_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the thread's current error message: "context: old message". Returns `status`. */
mt_status mt_fail_context(mt_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The thread's message, kept across work whose own failures must not replace it: what a command
 * does after an error (redrawing a picture, closing files) would otherwise report itself in place
 * of the error. */
typedef struct {
    char text[MT_ERROR_MAX];
} mt_error_kept;
void mt_error_keep(mt_error_kept *kept);
void mt_error_restore(const mt_error_kept *kept);

/* Propagate a failed status unchanged. */
#define MT_TRY(expr)                          \
    do {                                      \
        mt_status mt_try_ = (expr);           \
        if (mt_try_ != MT_OK) return mt_try_; \
    } while (0)

/* libc calls that return -1 (or NULL for pointer variants) and set errno. `what` names the
 * file or object the call was about, so the message says which. */
#define MT_CHECK_IO(expr, what)                                                             \
    do {                                                                                    \
        if ((expr) == -1)                                                                   \
            return mt_fail(MT_ERR_IO, "%s: %s failed: %s (%s:%d)", (what), #expr,            \
                           strerror(errno), __FILE__, __LINE__);                            \
    } while (0)

/* Host allocation that reports what it was for. */
void *mt_malloc(size_t bytes, const char *what);
void *mt_calloc(size_t count, size_t size, const char *what);

#endif
