#include "util/size.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static const struct {
    const char *suffix;
    double scale;
} units[] = {{"", 1},         {"B", 1},           {"KB", 1e3},           {"MB", 1e6},
             {"GB", 1e9},     {"TB", 1e12},       {"PB", 1e15},          {"KiB", 1024.0},
             {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
             {"PiB", 1125899906842624.0}};

mt_status mt_size_parse(const char *what, const char *text, int64_t min, int64_t *bytes) {
    char min_text[32], max_text[32];
    mt_size_format(min, min_text, sizeof min_text);
    mt_size_format(MT_SIZE_MAX, max_text, sizeof max_text);
    char *end;
    double v = strtod(text, &end);
    while (isspace((unsigned char)*end)) end++;
    double scale = -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0] && end != text; i++)
        if (!strcasecmp(end, units[i].suffix)) scale = units[i].scale;
    if (end == text || scale < 0 || !isfinite(v))
        return mt_fail(MT_ERR_INVALID, "%s '%s': not a size; write a number and a unit such as 24GiB, 512MB "
                       "or 1e9 (bytes)", what, text);
    double b = floor(v * scale);
    if (!(b >= (double)min && b <= (double)MT_SIZE_MAX))
        return mt_fail(MT_ERR_INVALID, "%s '%s': must be a size from %s to %s", what, text, min_text, max_text);
    *bytes = (int64_t)b;
    return MT_OK;
}

const char *mt_size_format(int64_t bytes, char *buf, size_t cap) {
    static const char *const names[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    int unit = -1;
    while (unit + 1 < 5 && bytes > 0 && bytes % ((int64_t)1024 << (10 * (unit + 1))) == 0) unit++;
    if (unit < 0) snprintf(buf, cap, "%lld byte%s", (long long)bytes, bytes == 1 ? "" : "s");
    else snprintf(buf, cap, "%lld %s", (long long)(bytes >> (10 * (unit + 1))), names[unit]);
    return buf;
}

const char *mt_size_gib_text(int64_t bytes, char *buf, size_t cap) {
    double b = (double)bytes;
    if (b >= 0.01 * 1073741824.0) snprintf(buf, cap, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, cap, "%.1f MiB", b / 1048576.0);
    else if (b >= 1024.0) snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else snprintf(buf, cap, "%lld byte%s", (long long)bytes, bytes == 1 ? "" : "s");
    return buf;
}

const char *mt_size_text(int64_t bytes, char *buf, size_t cap) {
    double b = (double)bytes;
    if (bytes >= 1000000000) snprintf(buf, cap, "%.2f GB", b / 1e9);
    else if (bytes >= 1000000) snprintf(buf, cap, "%.1f MB", b / 1e6);
    else if (bytes >= 1000) snprintf(buf, cap, "%.0f kB", b / 1e3);
    else snprintf(buf, cap, "%lld bytes", (long long)bytes);
    return buf;
}
