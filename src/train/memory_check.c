#include "train/memory_check.h"

#include <stdio.h>
#include <string.h>

#include "engine/store.h"

static double gb(int64_t bytes) { return (double)bytes / 1e9; }

/* MemAvailable from /proc/meminfo in bytes, or -1. */
static int64_t meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    fclose(f);
    return kib < 0 ? -1 : (int64_t)kib * 1024;
}

/* A one-number file under the process's cgroup v2 directory; -1 when absent or "max". */
static int64_t cgroup_value(const char *cgroup, const char *file) {
    char path[4096 + 64];
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", cgroup, file);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1; /* "max": no limit */
    fclose(f);
    return v;
}

/* What the process's cgroup v2 memory.max still allows (limit - current), or -1 with no limit. */
static int64_t cgroup_headroom(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[4096], cgroup[4096] = "";
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
            snprintf(cgroup, sizeof cgroup, "%s", line + 3);
            cgroup[strcspn(cgroup, "\n")] = '\0';
        }
    fclose(f);
    if (!cgroup[0]) return -1;
    if (!strcmp(cgroup, "/")) cgroup[0] = '\0';
    int64_t limit = cgroup_value(cgroup, "memory.max"), used = cgroup_value(cgroup, "memory.current");
    if (limit < 0) return -1;
    if (used < 0) return limit;
    return used < limit ? limit - used : 0;
}

int64_t mt_host_available(void) {
    int64_t mem = meminfo_available(), cg = cgroup_headroom();
    if (mem < 0) return cg;
    return cg >= 0 && cg < mem ? cg : mem;
}

mt_memory_fit mt_memory_fit_of(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                               mt_moments_format moments) {
    mt_store_bytes s = mt_store_size(layout, be->ops->weight_dtype, moments);
    mt_engine_bytes d = mt_engine_size(be, &layout->cfg, eo);
    mt_memory_fit fit = {.host_needed = s.weights + s.master + s.moments + d.host_grads + d.host_staging +
                                        d.host_checkpoints,
                         .host_available = mt_host_available(), .device_available = -1};
    if (mt_backend_has_own_memory(be)) {
        fit.device_needed = d.total;
        fit.device_available = (int64_t)mt_dev_available(be);
    } else {
        fit.host_needed += d.total;
    }
    return fit;
}

mt_status mt_memory_check(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                          mt_moments_format moments) {
    mt_memory_fit fit = mt_memory_fit_of(layout, be, eo, moments);
    const mt_memory_fit *f = &fit;
    if (f->host_available >= 0 && f->host_needed > f->host_available)
        return mt_fail(MT_ERR_NOMEM, "the run needs %.1f GB of host memory, %.1f GB available; choose a "
                       "smaller model or a machine with more memory", gb(f->host_needed),
                       gb(f->host_available));
    if (f->device_available >= 0 && f->device_needed > f->device_available)
        return mt_fail(MT_ERR_NOMEM, "the run needs %.1f GB of device memory, %.1f GB free; lower --batch, "
                       "--seq, --micro-batches or --slots", gb(f->device_needed), gb(f->device_available));
    return MT_OK;
}

static void print_one(FILE *out, const char *label, const char *what, int64_t needed, int64_t available) {
    fprintf(out, "%-9s %s needs %.2f GB", label, what, gb(needed));
    if (available < 0) fprintf(out, ", available unknown\n");
    else fprintf(out, ", %.2f GB available: %s\n", gb(available), needed <= available ? "fits" : "does NOT fit");
}

void mt_memory_fit_print(const mt_memory_fit *f, FILE *out) {
    print_one(out, "fit", "host", f->host_needed, f->host_available);
    if (f->device_available >= 0) print_one(out, "", "device", f->device_needed, f->device_available);
}
