/* The streaming engine (see engine.h for the schedule). The issuing thread (the caller's)
 * enqueues copies, compute and events on three streams; compute runs in launch()ed jobs so
 * that the cpu backend executes them on its compute worker. A separate optimizer thread applies
 * AdamW unit by unit (engine_optimizer.c). */
#include "engine/engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

mt_engine_options mt_engine_defaults(void) {
    return (mt_engine_options){.batch = 4, .seq = 256, .micro_batches = 1, .slots = 2,
                               .opt_threads = 0, .lm_chunk = 512, .max_grad_norm = 1.0f,
                               .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
}

static int64_t unit_bytes(const mt_engine *e, int u, size_t elem) {
    return e->lay->units[u].numel * (int64_t)elem;
}

/* ---- buffers ---- */

static size_t rows(const mt_engine_options *o) { return (size_t)o->batch * o->seq; }

int mt_engine_grad_ring(const mt_config *c, const mt_engine_options *o) {
    int ring = o->grad_ring > 0 ? o->grad_ring : MT_ENGINE_GRAD_RING;
    return c->num_layers < ring ? c->num_layers : ring;
}

mt_engine_bytes mt_engine_size(mt_backend *be, const mt_config *cfg, const mt_engine_options *o) {
    mt_layout lay;
    mt_engine_bytes b = {0};
    if (mt_layout_init(&lay, cfg) != MT_OK) return b;
    size_t w = mt_dtype_size(be->ops->weight_dtype), act = mt_dtype_size(be->ops->act_dtype);
    int K = o->slots < cfg->num_layers ? o->slots : cfg->num_layers;
    int64_t embed = lay.units[0].numel, head = lay.units[lay.num_units - 1].numel;
    b.weight_slots = (int64_t)K * lay.max_block_numel * w;
    b.embed_head = (embed + head) * (int64_t)w;
    b.ends_state = o->ends_on_device ? (embed + head) * 12 + 4 : 0;
    b.grads = (2 * lay.max_block_numel + embed + head) * 4;
    int64_t ckpt = (int64_t)o->micro_batches * rows(o) * cfg->hidden_size * act;
    int host_ckpts = o->ckpt_on_host > 0 ? o->ckpt_on_host : 0;
    b.checkpoints = (cfg->num_layers + 1 - host_ckpts + (host_ckpts ? CKPT_STAGES : 0)) * ckpt;
    b.host_checkpoints = host_ckpts * ckpt;
    /* The blocks' and LM head's scratch, the gradient flowing back ([M][n, D]), token ids, logits,
     * and the small things: RoPE frequencies, per-unit norms, the loss. */
    b.workspace = mt_block_ws_bytes(be, cfg, o->batch, o->seq) +
                  be->ops->op.lmhead_workspace(be, o->lm_chunk, cfg->vocab_size) +
                  (int64_t)o->micro_batches * rows(o) * cfg->hidden_size * act +
                  (int64_t)2 * o->micro_batches * rows(o) * 4 + (int64_t)cfg->vocab_size * 4 +
                  ((int64_t)cfg->head_dim / 2 + lay.num_units + 1) * 4;
    b.total = b.weight_slots + b.embed_head + b.ends_state + b.grads + b.checkpoints + b.workspace;
    int64_t ends_home = o->ends_on_device ? 0 : embed + head;
    b.host_grads = o->max_grad_norm > 0 || o->keep_grads
                       ? lay.total_numel * 4
                       : (ends_home + (int64_t)mt_engine_grad_ring(cfg, o) * lay.max_block_numel) * 4;
    b.host_staging = (int64_t)2 * o->micro_batches * rows(o) * 4 +
                     ((int64_t)lay.num_units + 1 + cfg->vocab_size + cfg->head_dim / 2) * 4;
    mt_layout_free(&lay);
    return b;
}

static void *dev_alloc(mt_engine *e, size_t bytes, const char *what) {
    if (e->failed) return NULL;
    void *p = mt_dev_alloc(e->be, bytes, what);
    if (!p) e->failed = 1;
    else e->allocs[e->num_allocs++] = p;
    return p;
}

static void *host_alloc(mt_engine *e, size_t bytes, const char *what) {
    if (e->failed) return NULL;
    void *p = mt_host_alloc(e->be, bytes, what);
    if (!p) e->failed = 1;
    else e->host_allocs[e->num_host_allocs++] = p;
    return p;
}

static mt_event *new_event(mt_engine *e) {
    if (e->failed) return NULL;
    mt_event *ev = mt_event_create(e->be);
    if (!ev) e->failed = 1;
    else e->events[e->num_events++] = ev;
    return ev;
}

/* Where each unit's gradient lands on the host: all units (exact clipping needs every gradient
 * until the norm is known; tests read them), or the blocks in a ring by backward order and the
 * embedding and head each in their own buffer (none when the device updates them). */
static void place_host_grads(mt_engine *e) {
    const mt_layout *lay = e->lay;
    if (e->o.max_grad_norm > 0 || e->o.keep_grads) {
        e->grads_full = host_alloc(e, (size_t)lay->total_numel * 4, "the gradients of every unit");
        for (int u = 0; u < e->U && e->grads_full; u++) e->grad_home[u] = e->grads_full + lay->units[u].offset;
        return;
    }
    e->grad_ring = mt_engine_grad_ring(e->cfg, &e->o);
    if (!e->o.ends_on_device) {
        e->grad_home[0] = host_alloc(e, (size_t)unit_bytes(e, 0, 4), "the embedding's gradients");
        e->grad_home[e->U - 1] = host_alloc(e, (size_t)unit_bytes(e, e->U - 1, 4), "the head's gradients");
    }
    float *ring = host_alloc(e, (size_t)e->grad_ring * lay->max_block_numel * 4, "the block gradient ring");
    for (int l = 0; l < e->L && ring; l++)
        e->grad_home[mt_unit_block(l)] = ring + (size_t)((e->L - 1 - l) % e->grad_ring) * lay->max_block_numel;
}


static mt_status allocate(mt_engine *e) {
    const mt_config *c = e->cfg;
    size_t w = mt_dtype_size(e->be->ops->weight_dtype), act = mt_dtype_size(e->be->ops->act_dtype);
    size_t n = rows(&e->o), M = (size_t)e->o.micro_batches, D = (size_t)c->hidden_size;
    for (int k = 0; k < e->K; k++) e->slot[k] = dev_alloc(e, e->lay->max_block_numel * w, "a block weight slot");
    for (int g = 0; g < 2; g++) e->grad_slot[g] = dev_alloc(e, e->lay->max_block_numel * 4, "a block gradient slot");
    e->embed_w = dev_alloc(e, unit_bytes(e, 0, w), "the embedding weights");
    e->head_w = dev_alloc(e, unit_bytes(e, e->U - 1, w), "the head weights");
    e->embed_grad = dev_alloc(e, unit_bytes(e, 0, 4), "the embedding gradients");
    e->head_grad = dev_alloc(e, unit_bytes(e, e->U - 1, 4), "the head gradients");
    int P = e->o.ckpt_on_host;
    e->ckpt = dev_alloc(e, (size_t)(c->num_layers + 1 - P) * M * n * D * act, "activation checkpoints");
    if (P > 0) {
        e->host_ckpt = host_alloc(e, (size_t)P * M * n * D * act, "activation checkpoints kept on the host");
        for (int s = 0; s < CKPT_STAGES; s++) {
            e->ckpt_stage[s] = dev_alloc(e, M * n * D * act, "a checkpoint staging buffer");
            e->stage_filled[s] = new_event(e);
            e->stage_drained[s] = new_event(e);
            e->stage_released[s] = new_event(e);
        }
    }
    e->dy = dev_alloc(e, M * n * D * act, "activation gradients");
    e->ws_base = dev_alloc(e, mt_block_ws_bytes(e->be, c, e->o.batch, e->o.seq), "the block workspace");
    e->lm_ws = dev_alloc(e, e->op->lmhead_workspace(e->be, e->o.lm_chunk, c->vocab_size), "the LM head workspace");
    e->dev_inputs = dev_alloc(e, 2 * M * n * sizeof(int32_t), "token ids");
    e->dev_inv_freq = dev_alloc(e, (size_t)c->head_dim / 2 * 4, "RoPE frequencies");
    e->dev_norms = dev_alloc(e, (size_t)e->U * 4, "gradient norms");
    e->dev_loss = dev_alloc(e, 4, "the loss");
    e->dev_logits = dev_alloc(e, (size_t)c->vocab_size * 4, "logits");
    if (e->o.ends_on_device) {
        size_t ends = (size_t)(unit_bytes(e, 0, 4) + unit_bytes(e, e->U - 1, 4));
        e->ends_master = dev_alloc(e, ends, "the embedding's and head's master weights");
        e->ends_m = dev_alloc(e, ends, "the embedding's and head's first moments");
        e->ends_v = dev_alloc(e, ends, "the embedding's and head's second moments");
        e->dev_clip_scale = dev_alloc(e, 4, "the clip coefficient");
        e->ends_updated = new_event(e);
    }
    e->host_tokens = host_alloc(e, 2 * M * n * sizeof(int32_t), "token staging");
    e->host_norms = host_alloc(e, (size_t)e->U * 4, "gradient norms");
    e->host_loss = host_alloc(e, 4, "the loss");
    e->host_logits = host_alloc(e, (size_t)c->vocab_size * 4, "logits");
    e->host_inv_freq = host_alloc(e, (size_t)c->head_dim / 2 * 4, "RoPE frequencies");
    for (int i = 0; i < 2; i++) {
        e->input_rows[i] = host_alloc(e, (size_t)c->vocab_size, "the input-token row masks");
        if (e->input_rows[i]) memset(e->input_rows[i], 0, (size_t)c->vocab_size);
    }
    place_host_grads(e);
    for (int k = 0; k < e->K; k++) {
        e->slot_loaded[k] = new_event(e);
        e->slot_free[k] = new_event(e);
    }
    for (int g = 0; g < 2; g++) {
        e->grad_ready[g] = new_event(e);
        e->grad_free[g] = new_event(e);
    }
    e->embed_early_home = new_event(e);
    e->embed_loaded = new_event(e);
    e->embed_free = new_event(e);
    e->head_loaded = new_event(e);
    e->head_free = new_event(e);
    e->tokens_ready = new_event(e);
    e->unit_ready = new_event(e);
    e->done = new_event(e);
    for (int u = 0; u < e->U; u++) e->grads_home[u] = new_event(e);
    for (int i = 0; i < e->max_stalls; i++) {
        e->stall_begin[i] = new_event(e);
        e->stall_end[i] = new_event(e);
    }
    for (int i = 0; i < e->max_jobs; i++) {
        e->job_begin[i] = new_event(e);
        e->job_end[i] = new_event(e);
    }
    if (e->failed) return mt_fail_context(MT_ERR_NOMEM, "engine buffers");
    e->dev_targets = e->dev_inputs + M * n;
    mt_block_ws_carve(&e->ws, e->ws_base, e->be, c, e->o.batch, e->o.seq);
    mt_config_rope_inv_freq(c, e->host_inv_freq);
    mt_copy_async(e->be, e->dev_inv_freq, e->host_inv_freq, (size_t)c->head_dim / 2 * 4, e->h2d);
    return MT_OK;
}

mt_status mt_engine_create(mt_engine **out, mt_backend *be, mt_store *store,
                           const mt_engine_options *o, int64_t adam_step) {
    const mt_config *c = &store->layout->cfg;
    if (o->batch < 1 || o->seq < 1 || o->micro_batches < 1)
        return mt_fail(MT_ERR_INVALID, "batch, sequence length and micro-batches must be positive");
    if (o->seq > c->max_position)
        return mt_fail(MT_ERR_INVALID, "sequence length %d is past the model's max_position_embeddings (%d)",
                       o->seq, c->max_position);
    if (o->slots < 2) return mt_fail(MT_ERR_INVALID, "--slots must be at least 2, got %d", o->slots);
    if (o->ckpt_on_host < 0 || o->ckpt_on_host > c->num_layers)
        return mt_fail(MT_ERR_INVALID, "checkpoints on the host: %d is outside 0..%d (the blocks)", o->ckpt_on_host,
                       c->num_layers);
    if (o->lm_chunk < 1) return mt_fail(MT_ERR_INVALID, "the LM head chunk must be positive");
    if (o->ends_on_device && !mt_backend_has_device_optimizer(be))
        return mt_fail(MT_ERR_INVALID, "the %s backend has no optimizer ops (clip_scale, adamw): it cannot keep the "
                       "embedding and head on the device; set --ends-on-device off", be->ops->name);
    if (o->ends_on_device && store->moments.format != MT_MOMENTS_F32)
        return mt_fail(MT_ERR_INVALID, "the embedding and head updated on the device need fp32 Adam moments, "
                       "not %s: drop --moments or set --ends-on-device off",
                       mt_moments_format_name(store->moments.format));
    mt_engine *e = calloc(1, sizeof *e);
    if (!e) return mt_fail(MT_ERR_NOMEM, "cannot allocate the engine");
    e->be = be;
    e->op = &be->ops->op;
    e->store = store;
    e->lay = store->layout;
    e->cfg = c;
    e->o = *o;
    e->L = c->num_layers;
    e->U = e->lay->num_units;
    e->K = o->slots < e->L ? o->slots : e->L;
    e->adam_step = adam_step;
    e->ends_step = adam_step;
    e->updated = calloc((size_t)e->U, sizeof *e->updated);
    e->grad_home = calloc((size_t)e->U, sizeof *e->grad_home);
    e->grads_issued = calloc((size_t)e->U, sizeof *e->grads_issued);
    e->grads_home = calloc((size_t)e->U, sizeof *e->grads_home);
    e->slot = calloc((size_t)e->K, sizeof *e->slot);
    e->slot_loaded = calloc((size_t)e->K, sizeof *e->slot_loaded);
    e->slot_free = calloc((size_t)e->K, sizeof *e->slot_free);
    e->max_stalls = 4 * e->L + 4;
    e->stall_begin = calloc((size_t)e->max_stalls, sizeof *e->stall_begin);
    e->stall_end = calloc((size_t)e->max_stalls, sizeof *e->stall_end);
    e->max_jobs = 2 * e->L + 4;
    e->job_begin = calloc((size_t)e->max_jobs, sizeof *e->job_begin);
    e->job_end = calloc((size_t)e->max_jobs, sizeof *e->job_end);
    size_t max_objects = 64 + 3 * CKPT_STAGES + 3 * (size_t)e->K + (size_t)e->U + 2 * (size_t)e->max_stalls + 2 * (size_t)e->max_jobs;
    e->allocs = calloc(max_objects, sizeof *e->allocs);
    e->host_allocs = calloc(max_objects, sizeof *e->host_allocs);
    e->events = calloc(max_objects, sizeof *e->events);
    if (!e->updated || !e->grad_home || !e->grads_issued || !e->grads_home || !e->slot || !e->slot_loaded || !e->slot_free ||
        !e->stall_begin || !e->stall_end || !e->job_begin || !e->job_end ||
        !e->allocs || !e->host_allocs || !e->events) {
        mt_engine_destroy(e);
        return mt_fail(MT_ERR_NOMEM, "cannot allocate the engine's tables");
    }
    for (int u = 0; u < e->U; u++) {
        mt_flag_init(&e->updated[u], 0);
        mt_flag_init(&e->grads_issued[u], 0);
    }
    mt_flag_init(&e->embed_early_issued, 0);
    mt_flag_init(&e->embed_early_done, 0);
    e->flags_ready = 1;
    e->h2d = mt_stream_create(be);
    e->compute = e->h2d ? mt_stream_create(be) : NULL;
    e->d2h = e->compute ? mt_stream_create(be) : NULL;
    mt_status rc = e->d2h ? allocate(e) : MT_ERR_NOMEM;
    if (rc == MT_OK && e->o.ends_on_device) rc = mt_engine_ends_upload(e);
    if (rc == MT_OK) rc = mt_engine_optimizer_start(e);
    if (rc != MT_OK) {
        mt_engine_destroy(e);
        return rc;
    }
    *out = e;
    return MT_OK;
}

void mt_engine_destroy(mt_engine *e) {
    if (!e) return;
    mt_engine_optimizer_stop(e);
    if (e->compute && e->done) mt_event_sync(e->be, e->done);
    mt_stream *streams[3] = {e->h2d, e->compute, e->d2h};
    for (int i = 0; i < 3; i++)
        if (streams[i]) mt_stream_destroy(e->be, streams[i]);
    for (int i = 0; i < e->num_events; i++) mt_event_destroy(e->be, e->events[i]);
    for (int i = 0; i < e->num_allocs; i++) mt_dev_free(e->be, e->allocs[i]);
    for (int i = 0; i < e->num_host_allocs; i++) mt_host_free(e->be, e->host_allocs[i]);
    if (e->flags_ready) {
        for (int u = 0; u < e->U; u++) {
            mt_flag_destroy(&e->updated[u]);
            mt_flag_destroy(&e->grads_issued[u]);
        }
        mt_flag_destroy(&e->embed_early_issued);
        mt_flag_destroy(&e->embed_early_done);
    }
    free(e->updated);
    free(e->grad_home);
    free(e->grads_issued);
    free(e->grads_home);
    free(e->stall_begin);
    free(e->stall_end);
    free(e->job_begin);
    free(e->job_end);
    free(e->slot);
    free(e->slot_loaded);
    free(e->slot_free);
    free(e->allocs);
    free(e->host_allocs);
    free(e->events);
    free(e);
}

/* The optimizer thread reads the guard without the lock: it takes opt_lock to pick up each job,
 * and the guard only changes between jobs. */
void mt_engine_set_update_guard(mt_engine *e, void (*before_update)(void *ctx, int unit), void *ctx) {
    pthread_mutex_lock(&e->opt_lock);
    e->guard = before_update;
    e->guard_ctx = ctx;
    pthread_mutex_unlock(&e->opt_lock);
}

int mt_engine_updates_on_host(const mt_engine *e, int u) { return !mt_engine_unit_on_device(e, u); }

void mt_engine_guard_unit(mt_engine *e, int u) {
    if (e->guard) e->guard(e->guard_ctx, u);
}
