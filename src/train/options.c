#include "train/options.h"

#include "engine/budget.h"
#include "io/hf_config.h"
#include "io/hf_model.h"

mt_status mt_train_model_config(const mt_train_options *o, mt_config *cfg) {
    if (o->init_from) return mt_hf_load_config(o->init_from, cfg);
    if (o->config_path) return mt_hf_config_read(o->config_path, cfg);
    return mt_config_preset(o->preset ? o->preset : "demo", cfg);
}

mt_status mt_train_engine_options(const mt_train_options *o, mt_backend *be, const mt_config *cfg,
                                  mt_engine_options *out) {
    mt_engine_options eo = mt_engine_defaults();
    eo.batch = o->batch;
    eo.seq = o->seq_len;
    eo.micro_batches = o->micro_batches;
    eo.slots = o->slots;
    eo.opt_threads = o->opt_threads;
    eo.opt_cores = o->opt_cores;
    eo.lm_chunk = o->lm_chunk;
    eo.max_grad_norm = o->max_grad_norm;
    eo.beta1 = o->beta1;
    eo.beta2 = o->beta2;
    eo.eps = o->eps;
    eo.weight_decay = o->weight_decay;
    *out = eo;
    return mt_engine_fit_budget(be, cfg, out, o->gpu_mem);
}
