/* Every use the engine makes of an event or a flag (protocol.h), in one place, so that a test can
 * trace them all and hold them to the protocol table. */
#include "engine/engine_internal.h"

/* Set on the optimizer thread: traced host-side uses name the thread that made them. */
static _Thread_local int on_optimizer_thread;

void mt_engine_on_optimizer_thread(void) { on_optimizer_thread = 1; }

static unsigned this_thread(void) { return on_optimizer_thread ? MT_BY_OPTIMIZER : MT_BY_ISSUER; }

static unsigned stream_of(const mt_engine *e, mt_stream *s) {
    return s == e->h2d ? MT_BY_H2D : s == e->compute ? MT_BY_COMPUTE : MT_BY_D2H;
}

static void trace(const mt_engine *e, int flag, int id, int i, mt_use_kind kind, unsigned by, int gen) {
    if (e->trace)
        mt_protocol_trace_add(e->trace, (mt_protocol_use){.flag = flag, .id = id, .index = i, .kind = kind,
                                                          .by = by, .gen = gen});
}

void mt_engine_record(mt_engine *e, mt_ev id, int i, mt_stream *s) {
    trace(e, 0, id, i, MT_USE_RECORD, stream_of(e, s), 0);
    mt_event_record(e->be, e->ev[id][i], s);
}

void mt_engine_wait(mt_engine *e, mt_stream *s, mt_ev id, int i) {
    trace(e, 0, id, i, MT_USE_WAIT, stream_of(e, s), 0);
    mt_stream_wait(e->be, s, e->ev[id][i]);
}

void mt_engine_sync(mt_engine *e, mt_ev id, int i) {
    trace(e, 0, id, i, MT_USE_WAIT, this_thread(), 0);
    mt_event_sync(e->be, e->ev[id][i]);
}

int mt_engine_done(mt_engine *e, mt_ev id, int i) {
    trace(e, 0, id, i, MT_USE_WAIT, this_thread(), 0);
    return mt_event_done(e->be, e->ev[id][i]);
}

double mt_engine_elapsed(mt_engine *e, mt_ev from, int i, mt_ev to, int j) {
    trace(e, 0, from, i, MT_USE_WAIT, this_thread(), 0);
    trace(e, 0, to, j, MT_USE_WAIT, this_thread(), 0);
    return mt_event_elapsed(e->be, e->ev[from][i], e->ev[to][j]);
}

void mt_engine_raise(mt_engine *e, mt_fl id, int i, int64_t g) {
    trace(e, 1, id, i, MT_USE_RECORD, this_thread(), 0);
    mt_flag_set(&e->fl[id][i], g + 1);
}

/* The flag a wait reads: a follower rank waits on its leader's optimizer (ranks.c), whose host
 * gradients its slices land in. */
static mt_flag *flag_of(mt_engine *e, mt_fl id, int i) {
    int optimizers = id == MT_FL_UPDATED || id == MT_FL_GRADS_TAKEN || id == MT_FL_CHUNK_DONE;
    return optimizers && e->leader ? &e->leader->fl[id][i] : &e->fl[id][i];
}

static int64_t target(int64_t g, int gen) { return gen == MT_GEN_NEXT ? g + 1 : g; }

double mt_engine_await(mt_engine *e, mt_fl id, int i, int64_t g, int gen) {
    trace(e, 1, id, i, MT_USE_WAIT, this_thread(), gen);
    return mt_flag_wait(flag_of(e, id, i), target(g, gen));
}

int mt_engine_reached(mt_engine *e, mt_fl id, int i, int64_t g, int gen) {
    trace(e, 1, id, i, MT_USE_WAIT, this_thread(), gen);
    return mt_flag_peek(flag_of(e, id, i)) >= target(g, gen);
}

int mt_engine_instances(const mt_engine *e, mt_per per) {
    switch (per) {
    case MT_PER_ENGINE: return 1;
    case MT_PER_SLOT: return e->K;
    case MT_PER_GRAD_SLOT: return 2;
    case MT_PER_UNIT: return e->U;
    case MT_PER_STAGE: return e->o.ckpt_on_host > 0 ? CKPT_STAGES : 0;
    case MT_PER_DEVICE: return mt_engine_any_on_device(e) ? 1 : 0;
    case MT_PER_STALL: return e->max_stalls;
    case MT_PER_JOB: return e->max_jobs;
    case MT_PER_CHUNK: return mt_engine_buffered_chunks(e);
    }
    return 0;
}

unsigned mt_engine_modes(const mt_engine *e) {
    return (e->o.max_grad_norm > 0 ? MT_MODE_CLIPPED : MT_MODE_OVERLAPPED) | (e->grad_ring ? MT_MODE_RING : 0) |
           (e->o.ends_on_device ? MT_MODE_ENDS_DEVICE : 0) | (e->o.ckpt_on_host > 0 ? MT_MODE_CKPT_HOST : 0) |
           (mt_engine_any_on_device(e) ? MT_MODE_DEVICE_STATE : 0) | (mt_engine_embed_grad_late(e) ? MT_MODE_EMBED_LATE : 0) |
           (e->o.max_grad_norm > 0 && e->store->moments.format == MT_MOMENTS_F32 ? MT_MODE_SPECULATIVE : 0) |
           (e->chunk_buffers ? MT_MODE_CHUNK_BUFFERS : 0) | (e->any_pass_state ? MT_MODE_MOE : 0) |
           (e->routed_reload ? MT_MODE_ROUTED : 0);
}
