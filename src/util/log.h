/* One logging style: leveled lines on stderr, "megatrain: <level>: message". MT_LOG_LEVEL
 * (error, warn, info, debug) in the environment sets the threshold; info by default. */
#ifndef MT_UTIL_LOG_H
#define MT_UTIL_LOG_H

typedef enum { MT_LOG_ERROR, MT_LOG_WARN, MT_LOG_INFO, MT_LOG_DEBUG } mt_log_level;

void mt_log(mt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int mt_log_enabled(mt_log_level level);

#define mt_log_error(...) mt_log(MT_LOG_ERROR, __VA_ARGS__)
#define mt_log_warn(...) mt_log(MT_LOG_WARN, __VA_ARGS__)
#define mt_log_info(...) mt_log(MT_LOG_INFO, __VA_ARGS__)
#define mt_log_debug(...) mt_log(MT_LOG_DEBUG, __VA_ARGS__)

#endif
