#include "util/cpu_list.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mt_status check_core(long core, const char *what, const cpu_set_t *allowed, long cpus) {
    if (core >= cpus)
        return mt_fail(MT_ERR_INVALID, "%s: core %ld is past this machine's %ld CPUs (0-%ld)", what, core, cpus, cpus - 1);
    if (!CPU_ISSET((int)core, allowed))
        return mt_fail(MT_ERR_INVALID, "%s: core %ld is not in the CPU set this process may run on", what, core);
    return MT_OK;
}

mt_status mt_cpu_list_parse(const char *text, const char *what, int **cores, int *count) {
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    cpu_set_t allowed, seen;
    CPU_ZERO(&seen);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return mt_fail(MT_ERR_IO, "%s: cannot read this process's CPU set: %s", what, strerror(errno));
    if (cpus > CPU_SETSIZE) cpus = CPU_SETSIZE;
    int *list = mt_malloc((size_t)cpus * sizeof *list, "a CPU list");
    if (!list) return MT_ERR_NOMEM;
    int n = 0;
    mt_status rc = MT_OK;
    for (const char *p = text; rc == MT_OK;) {
        char *end;
        long first = strtol(p, &end, 10), last = first;
        if (end == p || first < 0) rc = mt_fail(MT_ERR_INVALID, "%s: '%s' is not a list of cores such as 2-15 or 4,5,6", what, text);
        if (rc == MT_OK && *end == '-') {
            p = end + 1;
            last = strtol(p, &end, 10);
            if (end == p || last < first) rc = mt_fail(MT_ERR_INVALID, "%s: bad range in '%s'", what, text);
        }
        for (long c = first; rc == MT_OK && c <= last; c++) {
            rc = check_core(c, what, &allowed, cpus);
            if (rc == MT_OK && CPU_ISSET((int)c, &seen)) rc = mt_fail(MT_ERR_INVALID, "%s: core %ld is listed twice", what, c);
            if (rc == MT_OK) CPU_SET((int)c, &seen), list[n++] = (int)c;
        }
        if (rc != MT_OK || *end == '\0') break;
        if (*end != ',') rc = mt_fail(MT_ERR_INVALID, "%s: '%s' is not a list of cores such as 2-15 or 4,5,6", what, text);
        p = end + 1;
    }
    if (rc != MT_OK) {
        free(list);
        return rc;
    }
    *cores = list;
    *count = n;
    return MT_OK;
}

mt_status mt_cpu_list_all_but_first_of(const cpu_set_t *allowed, int **cores, int *count) {
    *cores = NULL;
    *count = 0;
    int n = CPU_COUNT(allowed);
    if (n < 3) return MT_OK;
    int *list = mt_malloc((size_t)n * sizeof *list, "a CPU list");
    if (!list) return MT_ERR_NOMEM;
    int k = 0, skipped = 0;
    for (int c = 0; c < CPU_SETSIZE && k < n - 1; c++) {
        if (!CPU_ISSET(c, allowed)) continue;
        if (!skipped) skipped = 1;
        else list[k++] = c;
    }
    *cores = list;
    *count = k;
    return MT_OK;
}

mt_status mt_cpu_list_all_but_first(int **cores, int *count) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return mt_fail(MT_ERR_IO, "cannot read this process's CPU set: %s", strerror(errno));
    return mt_cpu_list_all_but_first_of(&allowed, cores, count);
}

int mt_numa_node_count(const char *path) {
    int nodes = mt_list_file_count(path);
    return nodes > 0 ? nodes : 1;
}

int mt_list_file_count(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char text[4096];
    int nodes = 0;
    if (fgets(text, sizeof text, f)) {
        for (char *p = text, *end; *p && *p != '\n'; p = *end == ',' ? end + 1 : end) {
            long first = strtol(p, &end, 10), last = first;
            if (end == p) break;
            if (*end == '-') last = strtol(end + 1, &end, 10);
            if (last >= first) nodes += (int)(last - first + 1);
            if (*end != ',') break;
        }
    }
    fclose(f);
    return nodes;
}

mt_status mt_cpu_pin_self(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    return err ? mt_fail(MT_ERR_IO, "cannot pin a thread to core %d: %s", core, strerror(err)) : MT_OK;
}
