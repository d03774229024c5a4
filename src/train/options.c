#include "train/options.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"
#include "io/hf_model.h"
#include "optim/moments.h"
#include "train/memory_check.h"
#include "train/option_table.h"
#include "train/settings.h"

mt_status mt_train_options_fresh(const mt_train_options *given, mt_train_options *out) {
    MT_TRY(mt_train_options_check(given));
    MT_TRY(mt_settings_resolve(given, NULL, NULL, out));
    return mt_train_options_check(out);
}

int mt_train_model_changed(const mt_train_options *o) {
    return o->max_positions != MT_UNSET || !isnan(o->rope_theta);
}

void mt_train_model_change(const mt_train_options *o, mt_config *cfg) {
    if (o->max_positions != MT_UNSET) cfg->max_position = o->max_positions;
    if (!isnan(o->rope_theta)) cfg->rope_theta = o->rope_theta;
}

mt_status mt_train_model_config(const mt_train_options *o, mt_config *cfg) {
    if (o->init_from) MT_TRY(mt_hf_load_config(o->init_from, cfg));
    else if (o->config_path) MT_TRY(mt_hf_config_read(o->config_path, cfg));
    else MT_TRY(mt_config_preset(o->preset ? o->preset : "demo", cfg));
    mt_train_model_change(o, cfg);
    return MT_OK;
}

/* Pinned to the cores but the first by default where a GPU computes; the cpu backend's compute
 * takes every core, so there the optimizer's threads are left to the scheduler. */
static const char *default_opt_cores(const mt_train_options *o, mt_backend *be) {
    if (o->opt_cores) return strcmp(o->opt_cores, "none") ? o->opt_cores : NULL;
    return mt_backend_has_own_memory(be) ? MT_OPT_CORES_AUTO : NULL;
}

/* --ends-on-device: auto, on or off. */
static mt_status parse_ends_mode(const mt_train_options *o, int *mode) {
    const char *name = o->ends_on_device ? o->ends_on_device : "auto";
    *mode = !strcmp(name, "auto") ? MT_PLACE_AUTO : !strcmp(name, "on") ? 1 : 0;
    if (*mode == 0 && strcmp(name, "off"))
        return mt_fail(MT_ERR_INVALID, "--ends-on-device '%s': expected auto, on or off", name);
    return MT_OK;
}

/* --device-blocks: auto, all or a count of blocks. */
static mt_status parse_device_blocks(const mt_train_options *o, const mt_config *cfg, int *blocks) {
    const char *v = o->device_blocks ? o->device_blocks : "auto";
    if (!strcmp(v, "auto")) *blocks = MT_PLACE_AUTO;
    else if (!strcmp(v, "all")) *blocks = cfg->num_layers;
    else {
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 0 || n > cfg->num_layers)
            return mt_fail(MT_ERR_INVALID, "--device-blocks '%s': expected auto, all or a count from 0 to %d (the "
                           "model's blocks)", v, cfg->num_layers);
        *blocks = (int)n;
    }
    return MT_OK;
}

/* What --gpu-mem leaves the engine: the budget is the device memory the driver counts in use, so
 * what is in use already (the CUDA context, the libraries' handles) is spent. The engine
 * allocates every workspace it uses itself (cuBLASLt's and cuDNN's included). */
static int64_t engine_budget(const mt_train_options *o, mt_backend *be) {
    if (o->gpu_mem <= 0 || !mt_backend_has_own_memory(be)) return o->gpu_mem;
    int64_t left = o->gpu_mem - (int64_t)mt_dev_in_use(be);
    return left > 0 ? left : 1; /* 1 byte: refused by the fit, naming the classes */
}

mt_status mt_train_placement(const mt_train_options *o, mt_backend *be, const mt_config *cfg, mt_placement *out,
                             mt_machine_rates *rates) {
    mt_placement_request rq = {.eo = mt_engine_defaults(), .gpu_mem = engine_budget(o, be),
                               .device_memory = mt_backend_has_own_memory(be),
                               .device_optimizer = mt_backend_has_device_optimizer(be),
                               .device_free = -1, .host_available = mt_host_available()};
    mt_engine_options *eo = &rq.eo;
    eo->batch = o->batch;
    eo->seq = o->seq_len;
    eo->micro_batches = o->micro_batches;
    eo->slots = o->slots;
    eo->grad_ring = o->grad_ring;
    eo->all_experts = o->all_experts;
    eo->opt_threads = o->opt_threads;
    eo->opt_cores = default_opt_cores(o, be);
    eo->lm_chunk = o->lm_chunk;
    eo->chunk = o->chunk;
    eo->attn_tile = o->attn_tile;
    eo->packed = mt_train_segmented(o);
    eo->max_grad_norm = o->max_grad_norm;
    eo->beta1 = o->beta1;
    eo->beta2 = o->beta2;
    eo->eps = o->eps;
    eo->weight_decay = o->weight_decay;
    MT_TRY(mt_moments_format_parse(o->moments, &rq.moments));
    MT_TRY(parse_ends_mode(o, &rq.ends));
    MT_TRY(parse_device_blocks(o, cfg, &rq.device_blocks));
    if (rq.device_memory) rq.device_free = (int64_t)mt_dev_available(be);
    mt_machine_rates machine;
    MT_TRY(mt_machine_rates_of(o, be, eo, &machine));
    rq.rates = (mt_rates){.gemm_flop_per_s = machine.gemm_flop_per_s,
                          .pcie_bytes_per_s = machine.pcie_h2d_bytes_per_s,
                          .pcie_d2h_bytes_per_s = machine.pcie_d2h_bytes_per_s,
                          .host_bytes_per_s = machine.host_bytes_per_s};
    if (rates) *rates = machine;
    return mt_placement_resolve(be, cfg, &rq, out);
}
