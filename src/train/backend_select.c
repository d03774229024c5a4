#include "train/backend_select.h"

#include <string.h>

#include "util/log.h"

mt_status mt_backend_open(const char *name, int threads, mt_backend **out) {
    if (!name || !strcmp(name, "auto")) {
        if (mt_backend_cuda_create(out, 0) == MT_OK) return MT_OK;
        mt_log_info("no usable GPU (%s); training on the cpu backend", mt_error());
        return mt_backend_cpu_create(out, threads);
    }
    if (!strcmp(name, "cpu")) return mt_backend_cpu_create(out, threads);
    if (!strcmp(name, "cuda")) return mt_backend_cuda_create(out, 0);
    return mt_fail(MT_ERR_INVALID, "unknown backend '%s' (known: auto, cpu, cuda)", name);
}
