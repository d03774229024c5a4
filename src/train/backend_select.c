#include "train/backend_select.h"

#include <string.h>

#include "backend/gpu_model.h"
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

mt_status mt_backend_open_for_plan(const char *name, int threads, int64_t gpu_mem, mt_backend **out) {
    if (!name || strcmp(name, "cuda") || mt_backend_cuda_create(out, 0) == MT_OK) return mt_backend_open(name, threads, out);
    if (gpu_mem <= 0)
        return mt_fail_context(MT_ERR_DEVICE, "no GPU to plan with (give --gpu-mem to plan for a GPU of that "
                               "memory elsewhere)");
    mt_log_info("no GPU here (%s): planning for a CUDA GPU of --gpu-mem", mt_error());
    return mt_backend_gpu_model_create(out, gpu_mem);
}
