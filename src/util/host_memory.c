#include "util/host_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/size.h"

/* cgroup v1 writes "no limit" as the largest page count in bytes (9223372036854771712). */
#define CGROUP_V1_NO_LIMIT ((int64_t)1 << 62)

static int64_t given; /* --host-mem; 0: none */

void mt_host_memory_give(int64_t bytes) { given = bytes > 0 ? bytes : 0; }

int64_t mt_host_memory_proc_field(const char *path, const char *name) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    size_t len = strlen(name);
    long long v = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, name, len) != 0 || (line[len] != ':' && line[len] != ' ')) continue;
        if (sscanf(line + len + 1, " %lld", &v) != 1) v = -1;
        break;
    }
    fclose(f);
    return v;
}

int64_t mt_host_memory_peak(void) {
    int64_t kib = mt_host_memory_proc_field("/proc/self/status", "VmHWM");
    return kib < 0 ? -1 : kib * 1024;
}

/* A one-number file; -1 when absent or not a number ("max": no limit). */
static int64_t file_value(const char *dir, const char *file) {
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* The least limit - usage from `dir` up to `top`, or -1 where no level sets a limit. */
static int64_t least_room(char *dir, size_t top, const char *limit_file, const char *usage_file) {
    int64_t least = -1;
    for (;;) {
        int64_t limit = file_value(dir, limit_file), used = file_value(dir, usage_file);
        if (limit >= 0 && limit < CGROUP_V1_NO_LIMIT) {
            int64_t room = used < 0 ? limit : used < limit ? limit - used : 0;
            if (least < 0 || room < least) least = room;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < top) break;
        *slash = '\0';
    }
    return least;
}

/* Whether a v1 line's controller list ("4:memory:/x", "3:cpu,memory:/x") holds memory. */
static int lists_memory(const char *controllers, size_t len) {
    for (const char *p = controllers; p < controllers + len;) {
        const char *comma = memchr(p, ',', (size_t)(controllers + len - p));
        size_t n = comma ? (size_t)(comma - p) : (size_t)(controllers + len - p);
        if (n == 6 && !strncmp(p, "memory", 6)) return 1;
        p += n + 1;
    }
    return 0;
}

static int64_t smaller(int64_t a, int64_t b) { return a < 0 ? b : b < 0 || a < b ? a : b; }

int64_t mt_host_memory_cgroup_room(const char *proc_cgroup, const char *cgroup_root) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return -1;
    char line[4096], dir[8192];
    int64_t least = -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *first = strchr(line, ':'), *second = first ? strchr(first + 1, ':') : NULL;
        if (!second) continue;
        const char *path = strcmp(second + 1, "/") ? second + 1 : "";
        size_t top;
        int64_t room;
        if (second == first + 1) { /* v2: "0::/path" */
            top = (size_t)snprintf(dir, sizeof dir, "%s", cgroup_root);
            snprintf(dir + top, sizeof dir - top, "%s", path);
            room = least_room(dir, top, "memory.max", "memory.current");
        } else if (lists_memory(first + 1, (size_t)(second - first - 1))) {
            top = (size_t)snprintf(dir, sizeof dir, "%s/memory", cgroup_root);
            snprintf(dir + top, sizeof dir - top, "%s", path);
            room = least_room(dir, top, "memory.limit_in_bytes", "memory.usage_in_bytes");
        } else {
            continue;
        }
        least = smaller(least, room);
    }
    fclose(f);
    return least;
}

int64_t mt_host_memory_combine(int64_t mem_available, int64_t balloon, int64_t cgroup_room) {
    int64_t machine = mem_available < 0 ? -1 : mem_available + (balloon > 0 ? balloon : 0);
    return smaller(machine, cgroup_room);
}

static double gb(int64_t bytes) { return (double)bytes / 1e9; }

mt_host_memory mt_host_memory_available(void) {
    mt_host_memory m = {.bytes = -1};
    if (given > 0) { /* a total for the process: less what it holds already (a save's staging asks late) */
        int64_t kib = mt_host_memory_proc_field("/proc/self/status", "VmRSS");
        int64_t held = kib > 0 ? kib * 1024 : 0;
        m.bytes = held < given ? given - held : 0;
        snprintf(m.source, sizeof m.source, "--host-mem, less %.2f GB this process holds", gb(held));
        return m;
    }
    const char *fake = getenv("MT_TEST_HOST_AVAILABLE");
    if (fake && mt_size_parse("MT_TEST_HOST_AVAILABLE", fake, 0, &m.bytes) == MT_OK) {
        snprintf(m.source, sizeof m.source, "MT_TEST_HOST_AVAILABLE");
        return m;
    }
    if (fake) mt_log_warn("%s: ignored", mt_error());
    int64_t kib = mt_host_memory_proc_field("/proc/meminfo", "MemAvailable");
    int64_t pages = mt_host_memory_proc_field("/proc/vmstat", "nr_balloon_pages");
    int64_t mem = kib < 0 ? -1 : kib * 1024, balloon = pages > 0 ? pages * sysconf(_SC_PAGESIZE) : 0;
    int64_t cg = mt_host_memory_cgroup_room("/proc/self/cgroup", "/sys/fs/cgroup");
    m.bytes = mt_host_memory_combine(mem, balloon, cg);
    int at = snprintf(m.source, sizeof m.source, "MemAvailable %.2f GB", gb(mem));
    if (balloon > 0) at += snprintf(m.source + at, sizeof m.source - at, " + balloon %.2f GB", gb(balloon));
    if (cg >= 0) snprintf(m.source + at, sizeof m.source - at, ", cgroup room %.2f GB", gb(cg));
    return m;
}
