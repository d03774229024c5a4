/* The streaming engine (see engine.h for the schedule, docs/engine.md for the guide): creation and
 * destruction. The issuing thread (the caller's) enqueues copies, compute and events on three
 * streams (engine_schedule.c); compute runs in mt_launch()ed jobs (engine_jobs.c) so that the cpu
 * backend executes them on its compute worker. A separate optimizer thread applies AdamW unit by
 * unit (engine_optimizer.c). Buffers come from one walk (engine_buffers.c); events and flags from
 * the protocol table (protocol.c). */
#include "engine/engine_internal.h"

#include <stdlib.h>

#include "model/families.h"

mt_engine_options mt_engine_defaults(void) {
    return (mt_engine_options){.batch = 4, .seq = 256, .micro_batches = 1, .slots = 2,
                               .opt_threads = 0, .lm_chunk = 512, .chunk = MT_ENGINE_CHUNK, .attn_tile = MT_ENGINE_ATTN_TILE,
                               .head_vocab_chunk = MT_ENGINE_HEAD_VOCAB_CHUNK, .max_grad_norm = 1.0f,
                               .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
}

/* Creates every event and flag protocol.h lists, as many of each as this engine has. */
static mt_status create_sync_points(mt_engine *e) {
    for (int id = 0; id < MT_EV_COUNT; id++) {
        int n = mt_engine_instances(e, mt_events[id].per);
        e->ev[id] = calloc(n ? (size_t)n : 1, sizeof *e->ev[id]);
        if (!e->ev[id]) return mt_fail(MT_ERR_NOMEM, "cannot allocate the engine's events");
        for (e->n_ev[id] = 0; e->n_ev[id] < n; e->n_ev[id]++)
            if (!(e->ev[id][e->n_ev[id]] = mt_event_create(e->be))) return mt_fail_context(MT_ERR_NOMEM, "engine events");
    }
    for (int id = 0; id < MT_FL_COUNT; id++) {
        int n = mt_engine_instances(e, mt_flags[id].per);
        e->fl[id] = calloc(n ? (size_t)n : 1, sizeof *e->fl[id]);
        if (!e->fl[id]) return mt_fail(MT_ERR_NOMEM, "cannot allocate the engine's flags");
        for (e->n_fl[id] = 0; e->n_fl[id] < n; e->n_fl[id]++) mt_flag_init(&e->fl[id][e->n_fl[id]], 0);
    }
    return MT_OK;
}

static void destroy_sync_points(mt_engine *e) {
    for (int id = 0; id < MT_EV_COUNT; id++) {
        for (int i = 0; i < e->n_ev[id]; i++) mt_event_destroy(e->be, e->ev[id][i]);
        free(e->ev[id]);
    }
    for (int id = 0; id < MT_FL_COUNT; id++) {
        for (int i = 0; i < e->n_fl[id]; i++) mt_flag_destroy(&e->fl[id][i]);
        free(e->fl[id]);
    }
}

/* What data parallelism asks of the backend. */
static mt_status check_ranks(const mt_backend *be, int ranks) {
    if (ranks == 1) return MT_OK;
    if (!mt_backend_has_collectives(be))
        return mt_fail(MT_ERR_INVALID, "the %s backend has no collectives: it cannot train on %d devices at once",
                       be->ops->name, ranks);
    return MT_OK;
}

static mt_status create(mt_engine **out, mt_backend *be, mt_store *store, const mt_engine_options *o,
                        int64_t adam_step, mt_protocol_trace *trace, mt_engine *leader, int rank, int ranks, int group) {
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
    if (o->head_vocab_chunk < 0)
        return mt_fail(MT_ERR_INVALID, "the head's vocabulary chunk must be 0 (none) or positive, got %d",
                       o->head_vocab_chunk);
    if (o->chunk < 0) return mt_fail(MT_ERR_INVALID, "the block chunk must be 0 (none) or positive, got %d", o->chunk);
    if (o->attn_tile < 0)
        return mt_fail(MT_ERR_INVALID, "the attention tile must be 0 (none) or positive, got %d", o->attn_tile);
    MT_TRY(check_ranks(be, group));
    if (c->num_experts > 0 && !mt_backend_has_moe(be))
        return mt_fail(MT_ERR_INVALID, "the %s backend has no mixture-of-experts ops (backend.h's moe group): it "
                       "cannot run this %d-expert model", be->ops->name, c->num_experts);
    for (int l = 0; l < c->num_layers; l++)
        if (mt_layer_spec_of(c, l).mixer == MT_MIXER_GDN && !mt_backend_has_gdn(be))
            return mt_fail(MT_ERR_INVALID, "the %s backend has no Gated DeltaNet ops (backend.h's gdn group): it "
                           "cannot run block %d's mixer", be->ops->name, l);
    if (o->device_blocks < 0 || o->device_blocks > c->num_layers)
        return mt_fail(MT_ERR_INVALID, "blocks updated on the device: %d is outside 0..%d (the blocks)",
                       o->device_blocks, c->num_layers);
    int on_device = o->ends_on_device || o->device_blocks > 0;
    if (on_device && o->forward_only)
        return mt_fail(MT_ERR_INVALID, "a forward-only engine keeps no optimizer state on the device: set "
                       "ends_on_device and device_blocks to 0");
    if (on_device && !mt_backend_has_device_optimizer(be))
        return mt_fail(MT_ERR_INVALID, "the %s backend has no optimizer ops (clip_scale, adamw): it cannot update "
                       "units on the device; set --ends-on-device off and --device-blocks 0", be->ops->name);
    if (on_device && store->moments.format != MT_MOMENTS_F32)
        return mt_fail(MT_ERR_INVALID, "units updated on the device (the embedding and head, or blocks) need fp32 "
                       "Adam moments, not %s: drop --moments, or set --ends-on-device off and --device-blocks 0",
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
    e->device_blocks = o->device_blocks;
    e->K = o->slots < e->L - e->device_blocks ? o->slots : e->L - e->device_blocks; /* the streamed blocks' slots */
    e->adam_step = adam_step;
    e->dev_step = adam_step;
    e->trace = trace;
    e->rank = rank;
    e->ranks = ranks;
    e->reduce = group > 1;
    e->group_rank = rank;
    e->group_size = group;
    e->ordered = e->reduce && mt_backend_accumulates_in_turns(be);
    /* Processes split the host-updated units unless 8-bit moments' blocks would straddle slices. */
    e->shard = e->reduce && ranks == 1 && !e->ordered && !o->forward_only &&
               store->moments.format != MT_MOMENTS_8BIT;
    e->leader = leader;
    mt_flag_init(&e->pass_done, 0);
    e->max_stalls = 4 * e->L + 4;
    int vocab_chunks = mt_engine_ends_chunked_for(c, o) ? (c->vocab_size + o->head_vocab_chunk - 1) / o->head_vocab_chunk : 0;
    e->max_jobs = 2 * e->L + 5 + 2 * vocab_chunks; /* the head's and the embedding's chunks: a job each */
    e->grad_home = calloc((size_t)e->U, sizeof *e->grad_home);
    e->slot = calloc(e->K ? (size_t)e->K : 1, sizeof *e->slot);
    e->gather_due = calloc((size_t)e->K + 2, sizeof *e->gather_due);
    if (!e->grad_home || !e->slot || !e->gather_due) {
        mt_engine_destroy(e);
        return mt_fail(MT_ERR_NOMEM, "cannot allocate the engine's tables");
    }
    e->h2d = mt_stream_create(be);
    e->compute = e->h2d ? mt_stream_create(be) : NULL;
    e->d2h = e->compute ? mt_stream_create(be) : NULL;
    mt_status rc = e->d2h ? mt_engine_allocate(e) : MT_ERR_NOMEM;
    /* Reloads of routed experts alone: where a backward reloads blocks and every rank holds whole
     * blocks (a sharded replica's slices are gathered whole). */
    e->routed_reload = rc == MT_OK && e->any_pass_state && !o->all_experts && !o->forward_only && !e->shard &&
                       e->L - e->device_blocks > e->K;
    if (e->routed_reload && !(e->unrouted = calloc((size_t)c->num_experts, 1)))
        rc = mt_fail(MT_ERR_NOMEM, "cannot allocate the engine's tables");
    if (rc == MT_OK) rc = create_sync_points(e);
    if (rc == MT_OK && mt_engine_any_on_device(e)) rc = mt_engine_device_upload(e);
    if (rc == MT_OK && !leader && !o->forward_only) rc = mt_engine_optimizer_start(e);
    if (rc != MT_OK) {
        mt_engine_destroy(e);
        return rc;
    }
    *out = e;
    return MT_OK;
}

mt_status mt_engine_create(mt_engine **out, mt_backend *be, mt_store *store,
                           const mt_engine_options *o, int64_t adam_step) {
    return mt_engine_create_traced(out, be, store, o, adam_step, NULL);
}

mt_status mt_engine_create_traced(mt_engine **out, mt_backend *be, mt_store *store, const mt_engine_options *o,
                                  int64_t adam_step, mt_protocol_trace *trace) {
    return create(out, be, store, o, adam_step, trace, NULL, 0, 1, 1);
}

mt_status mt_engine_create_rank(mt_engine **out, mt_backend *be, mt_store *store, const mt_engine_options *o,
                                int64_t adam_step, mt_engine *leader, int rank, int ranks, int group) {
    return create(out, be, store, o, adam_step, NULL, leader, rank, ranks, group);
}

void mt_engine_destroy(mt_engine *e) {
    if (!e) return;
    mt_engine_optimizer_stop(e);
    if (e->compute && e->n_ev[MT_EV_DONE]) mt_engine_sync(e, MT_EV_DONE, 0);
    mt_stream *streams[3] = {e->h2d, e->compute, e->d2h};
    for (int i = 0; i < 3; i++)
        if (streams[i]) mt_stream_destroy(e->be, streams[i]);
    destroy_sync_points(e);
    mt_flag_destroy(&e->pass_done);
    free(e->peers);
    for (int i = 0; i < e->num_allocs; i++) mt_dev_free(e->be, e->allocs[i]);
    for (int i = 0; i < e->num_host_allocs; i++) mt_host_free(e->be, e->host_allocs[i]);
    free(e->grad_home);
    free(e->slot);
    free(e->gather_due);
    free(e->unrouted);
    free(e->allocs);
    free(e->host_allocs);
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
