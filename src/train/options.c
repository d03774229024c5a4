#include "train/options.h"

#include <stdint.h>
#include <string.h>

#include "engine/budget.h"
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

mt_status mt_train_model_config(const mt_train_options *o, mt_config *cfg) {
    if (o->init_from) return mt_hf_load_config(o->init_from, cfg);
    if (o->config_path) return mt_hf_config_read(o->config_path, cfg);
    return mt_config_preset(o->preset ? o->preset : "demo", cfg);
}

/* Without clipping, block gradients come home through a ring of host buffers, and the backward
 * runs at most the ring's length ahead of the optimizer. Where the optimizer is the slower (up to
 * a few billion parameters), a short ring holds the backward back to the optimizer's pace, and
 * the optimizer's backlog can no longer drain behind the next forward. So the ring grows to
 * every block where the host can spare it: at most half of what the run leaves available. */
static mt_status choose_grad_ring(mt_backend *be, const mt_config *cfg, mt_moments_format moments,
                                  mt_engine_options *eo) {
    if (eo->max_grad_norm > 0 || eo->keep_grads) return MT_OK;
    mt_layout lay;
    MT_TRY(mt_layout_init(&lay, cfg));
    mt_memory_fit fit = mt_memory_fit_of(&lay, be, eo, moments);
    int64_t spare = fit.host_available - fit.host_needed, block = lay.max_block_numel * 4;
    mt_layout_free(&lay);
    if (fit.host_available < 0 || spare <= 0 || block <= 0) return MT_OK;
    int64_t ring = MT_ENGINE_GRAD_RING + spare / 2 / block;
    eo->grad_ring = ring < cfg->num_layers ? (int)ring : cfg->num_layers;
    return MT_OK;
}

/* Pinned to the cores but the first by default where a GPU computes; the cpu backend's compute
 * takes every core, so there the optimizer's threads are left to the scheduler. */
static const char *default_opt_cores(const mt_train_options *o, mt_backend *be) {
    if (o->opt_cores) return strcmp(o->opt_cores, "none") ? o->opt_cores : NULL;
    return mt_backend_has_own_memory(be) ? MT_OPT_CORES_AUTO : NULL;
}

/* --ends-on-device: the embedding and head updated on the device (engine/engine_ends.c). */
typedef enum { ENDS_AUTO, ENDS_ON, ENDS_OFF } ends_mode;

static mt_status parse_ends_mode(const mt_train_options *o, mt_moments_format moments, ends_mode *mode) {
    const char *name = o->ends_on_device ? o->ends_on_device : "auto";
    *mode = !strcmp(name, "auto") ? ENDS_AUTO : !strcmp(name, "on") ? ENDS_ON : ENDS_OFF;
    if (*mode == ENDS_OFF && strcmp(name, "off"))
        return mt_fail(MT_ERR_INVALID, "--ends-on-device '%s': expected auto, on or off", name);
    if (*mode == ENDS_ON && moments != MT_MOMENTS_F32)
        return mt_fail(MT_ERR_INVALID, "--ends-on-device on needs fp32 Adam moments, not --moments %s", o->moments);
    return MT_OK;
}

/* "auto": on where the device is memory of its own, the moments are fp32, and the state fits
 * beside what the budget (or the free memory) already holds, so that it costs no weight slot,
 * batch size or LM-head chunk. */
static void ends_where_they_fit(const mt_train_options *o, mt_backend *be, const mt_config *cfg,
                                mt_moments_format moments, mt_engine_options *eo) {
    if (!mt_backend_has_own_memory(be) || !mt_backend_has_device_optimizer(be) || moments != MT_MOMENTS_F32)
        return;
    size_t dev_free = mt_dev_available(be);
    mt_engine_options with = *eo;
    with.ends_on_device = 1;
    /* Without a budget a tenth of the free memory stays for the libraries' own allocations. */
    int64_t limit = o->gpu_mem > 0 ? o->gpu_mem : (int64_t)(dev_free / 10 * 9);
    if (mt_engine_size(be, cfg, &with).total <= limit) eo->ends_on_device = 1;
}

/* What --gpu-mem leaves the engine: the budget is the device memory the driver counts in use, so
 * what is in use already (the CUDA context, the libraries' handles) is spent. The engine
 * allocates every workspace it uses itself (cuBLASLt's and cuDNN's included). */
static int64_t engine_budget(const mt_train_options *o, mt_backend *be) {
    if (o->gpu_mem <= 0 || !mt_backend_has_own_memory(be)) return o->gpu_mem;
    int64_t left = o->gpu_mem - (int64_t)mt_dev_in_use(be);
    return left > 0 ? left : 1; /* 1 byte: refused by the fit, naming the classes */
}

mt_status mt_train_engine_options(const mt_train_options *o, mt_backend *be, const mt_config *cfg,
                                  mt_engine_options *out) {
    mt_engine_options eo = mt_engine_defaults();
    eo.batch = o->batch;
    eo.seq = o->seq_len;
    eo.micro_batches = o->micro_batches;
    eo.slots = o->slots;
    eo.opt_threads = o->opt_threads;
    eo.opt_cores = default_opt_cores(o, be);
    eo.lm_chunk = o->lm_chunk;
    eo.chunk = o->chunk;
    eo.max_grad_norm = o->max_grad_norm;
    eo.beta1 = o->beta1;
    eo.beta2 = o->beta2;
    eo.eps = o->eps;
    eo.weight_decay = o->weight_decay;
    mt_moments_format moments;
    MT_TRY(mt_moments_format_parse(o->moments, &moments));
    ends_mode ends;
    MT_TRY(parse_ends_mode(o, moments, &ends));
    eo.ends_on_device = ends == ENDS_ON;
    *out = eo;
    MT_TRY(mt_engine_fit_budget(be, cfg, out, engine_budget(o, be)));
    if (ends == ENDS_AUTO) ends_where_they_fit(o, be, cfg, moments, out);
    return choose_grad_ring(be, cfg, moments, out);
}
