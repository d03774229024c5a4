#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/status.h"

static int threshold(void) {
    static int level = -1;
    if (level < 0) {
        const char *env = getenv("MT_LOG_LEVEL");
        level = MT_LOG_INFO;
        if (env && !strcmp(env, "error")) level = MT_LOG_ERROR;
        if (env && !strcmp(env, "warn")) level = MT_LOG_WARN;
        if (env && !strcmp(env, "debug")) level = MT_LOG_DEBUG;
    }
    return level;
}

int mt_log_enabled(mt_log_level level) { return (int)level <= threshold(); }

void mt_log(mt_log_level level, const char *fmt, ...) {
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (!mt_log_enabled(level)) return;
    char line[MT_ERROR_MAX + 1024]; /* an error message and words around it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "megatrain: %s: %s\n", names[level], line);
}
