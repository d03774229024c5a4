#include "util/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_message[MT_ERROR_MAX];

mt_status mt_fail(mt_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return status;
}

mt_status mt_fail_context(mt_status status, const char *fmt, ...) {
    char context[MT_ERROR_MAX], old[sizeof error_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    memcpy(old, error_message, sizeof old);
    /* Truncation is acceptable for a message; the context comes first. */
    size_t used = (size_t)snprintf(error_message, sizeof error_message, "%s: ", context);
    if (used < sizeof error_message) snprintf(error_message + used, sizeof error_message - used, "%.*s",
                                              (int)(sizeof error_message - used - 1), old);
    return status;
}

_Static_assert(sizeof(((mt_error_kept *)0)->text) == sizeof error_message, "a kept message holds the whole message");

void mt_error_keep(mt_error_kept *kept) { memcpy(kept->text, error_message, sizeof kept->text); }

void mt_error_restore(const mt_error_kept *kept) { memcpy(error_message, kept->text, sizeof error_message); }

const char *mt_error(void) { return error_message[0] ? error_message : "no error recorded"; }

const char *mt_status_name(mt_status status) {
    switch (status) {
    case MT_OK: return "ok";
    case MT_ERR_INVALID: return "invalid input";
    case MT_ERR_IO: return "i/o error";
    case MT_ERR_NOMEM: return "out of memory";
    case MT_ERR_DEVICE: return "device error";
    case MT_ERR_NUMERIC: return "numeric error";
    case MT_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

void *mt_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) mt_fail(MT_ERR_NOMEM, "cannot allocate %zu bytes of host memory for %s", bytes, what);
    return p;
}

void *mt_calloc(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) mt_fail(MT_ERR_NOMEM, "cannot allocate %zu x %zu bytes of host memory for %s", count, size, what);
    return p;
}
