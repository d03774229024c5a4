/* What runs where and when: the issue order of one pass's copies, compute jobs, events and flags,
 * phase by phase: forward, head, backward, ends. protocol.c's table lists every event and flag
 * used here; docs/engine.md walks through a step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "optim/clip.h"
#include "util/clock.h"

/* ---- copies ---- */

/* The compute stream waits for event (id, i), bracketed by two timing events so that the step can
 * report how long the device sat idle waiting for copies (and, through them, for the optimizer);
 * `what` it waits for names the profile's span of it. */
static void compute_wait(mt_engine *e, mt_ev id, int i, const char *what) {
    int timed = e->num_stalls < e->max_stalls;
    mt_span_begin(e->be, e->compute, "wait", what, 0);
    if (timed) mt_engine_record(e, MT_EV_STALL_BEGIN, e->num_stalls, e->compute);
    mt_engine_wait(e, e->compute, id, i);
    if (timed) mt_engine_record(e, MT_EV_STALL_END, e->num_stalls++, e->compute);
    mt_span_end(e->be, e->compute);
}

/* Forward loads in use order: the streamed blocks D..L-1 (index 0..L-D-1), then the head (index
 * L - D); the resident blocks 0..D-1 never move. Each first waits until the optimizer has written
 * that unit's weights for this step. Returns the seconds waited. */
static double load_forward(mt_engine *e, int index) {
    int streamed = e->L - e->device_blocks;
    int u = index < streamed ? mt_unit_block(e->device_blocks + index) : e->U - 1;
    double waited = mt_engine_await(e, MT_FL_UPDATED, u, e->generation, MT_GEN_G);
    if (index < streamed) mt_engine_load_slot(e, e->device_blocks + index, index % e->K);
    else if (!mt_engine_unit_on_device(e, u))
        mt_engine_load_unit(e, u, e->head_w, MT_EV_HEAD_FREE, MT_EV_HEAD_LOADED, 0, mt_engine_where_head(e), NULL);
    return waited;
}

/* Copies unit u's gradients home (this rank's slice of them, over its own link, when several ranks
 * share the store) once compute has recorded (ready_id, i); a block's (gradient slot i) records
 * grad_free when its slot may be reused. `publish`: tell an overlapped optimizer that the copy is
 * issued. grads NULL: compute copied them home itself (the ends a vocabulary chunk at a time),
 * d2h only marks them home behind it. */
static void send_home(mt_engine *e, int u, const float *grads, mt_ev ready_id, int i, int publish) {
    size_t lo, hi;
    mt_engine_slice(e, u, &lo, &hi);
    mt_engine_record(e, ready_id, i, e->compute);
    mt_engine_wait(e, e->d2h, ready_id, i);
    if (grads) mt_copy_async(e->be, e->grad_home[u] + lo, grads + lo, (hi - lo) * 4, e->d2h);
    if (ready_id == MT_EV_GRAD_READY) mt_engine_record(e, MT_EV_GRAD_FREE, i, e->d2h);
    mt_engine_record(e, MT_EV_GRADS_HOME, u, e->d2h);
    if (publish) mt_engine_raise(e, MT_FL_GRADS_ISSUED, u, e->generation);
}

/* Sequence p's rows before its padding: its last segment, when every input of it is token 0 and
 * every target ignored, is padding (engine.h). */
static int real_rows(const int32_t *pos, const int32_t *inputs, const int32_t *targets, int seq) {
    int last = seq - 1;
    while (last > 0 && pos[last] != 0) last--;
    for (int i = last; i < seq; i++)
        if (inputs[i] != 0 || targets[i] >= 0) return seq;
    return last;
}

/* Validates and stages positions [M][batch * seq] (engine.h's rules), each micro-batch's segment
 * starts and count, for the ops (backend.h's mt_segments), and each sequence's rows before its
 * padding; the copy goes with the tokens'. */
static mt_status stage_positions(mt_engine *e, const int32_t *positions, const int32_t *inputs,
                                 const int32_t *targets, int batch, int seq, int M) {
    if (!e->o.packed)
        return mt_fail(MT_ERR_INVALID, "positions given to an engine made without packed windows (engine options)");
    size_t n_max = mt_engine_rows(e), n = (size_t)batch * seq;
    int32_t *pos = e->host_segments, *starts = e->host_segments + (size_t)e->o.micro_batches * n_max;
    for (int m = 0; m < M; m++) {
        const int32_t *p = positions + m * n;
        int32_t *first = starts + m * (n_max + 1);
        int count = 0;
        for (size_t i = 0; i < n; i++) {
            int starts_sequence = i % (size_t)seq == 0;
            if (p[i] != 0 && (starts_sequence || p[i] != p[i - 1] + 1))
                return mt_fail(MT_ERR_INVALID, "position %d at micro-batch %d, sequence %zu, token %zu: a position "
                               "is 0 (a segment starts) or the one before it plus one, and 0 on a sequence's first "
                               "token", p[i], m, i / seq, i % seq);
            if (p[i] == 0) first[count++] = (int32_t)i;
            pos[m * n_max + i] = p[i];
        }
        first[count] = (int32_t)n;
        e->seg_count[m] = count;
        for (int b = 0; b < batch; b++) {
            size_t at = m * n + (size_t)b * seq;
            e->real_rows[m * e->o.batch + b] = real_rows(positions + at, inputs + at, targets + at, seq);
        }
    }
    return MT_OK;
}

/* Validates and stages inputs and targets [M][batch * seq] (and positions, when given) and sends
 * them; counts the targets that take part in the loss (negative ones are ignored). */
static mt_status stage_tokens(mt_engine *e, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                              int batch, int seq, int M, int64_t *counted) {
    size_t n_max = mt_engine_rows(e), n = (size_t)batch * seq;
    int32_t *in = e->host_tokens, *tg = e->host_tokens + (size_t)e->o.micro_batches * n_max;
    int V = e->cfg->vocab_size;
    *counted = 0;
    for (int m = 0; m < M; m++)
        for (size_t i = 0; i < n; i++) {
            int32_t id = inputs[m * n + i], target = targets[m * n + i];
            if (id < 0 || id >= V || target >= V)
                return mt_fail(MT_ERR_INVALID, "token id %d at micro-batch %d, sequence %zu, position %zu "
                               "is outside the vocabulary (vocab_size %d)", id < 0 || id >= V ? id : target,
                               m, i / seq, i % seq, V);
            in[m * n_max + i] = id;
            tg[m * n_max + i] = target;
            *counted += target >= 0;
        }
    uint8_t *rows = e->input_rows[e->generation % 2];
    memset(rows, 0, (size_t)V);
    for (int m = 0; m < M; m++)
        for (size_t i = 0; i < n; i++) rows[inputs[m * n + i]] = 1;
    if (positions) {
        MT_TRY(stage_positions(e, positions, inputs, targets, batch, seq, M));
        mt_copy_async(e->be, e->dev_pos, e->host_segments,
                      (size_t)e->o.micro_batches * (2 * n_max + 1) * sizeof(int32_t), e->h2d);
    }
    mt_copy_async(e->be, e->dev_inputs, e->host_tokens, 2 * (size_t)e->o.micro_batches * n_max * sizeof(int32_t), e->h2d);
    mt_engine_record(e, MT_EV_TOKENS_READY, 0, e->h2d);
    return MT_OK;
}

/* ---- one pass, in phases ---- */

typedef struct {
    int64_t targets; /* targets that count in the loss */
    double loss, grad_norm, waited;
    double aux_loss, load_max, load_min; /* a mixture of experts' (mt_step_result) */
    double bytes_in, experts_unrouted;    /* mt_step_result's weight_bytes_in, experts_unrouted */
    double stalled;  /* seconds the compute stream waited on copies */
    double busy;     /* seconds the compute stream spent in the pass's jobs */
    double idle_forward, idle_backward; /* gaps between jobs in the forward, in the backward */
} pass_result;

/* What a pass is, decided once at its start. */
typedef struct {
    mt_run_mode mode;
    int train;                 /* a backward runs (MT_RUN_TRAIN, MT_RUN_GRADS) */
    const mt_opt_job *step;    /* MT_RUN_TRAIN: the step's optimizer job */
    const mt_opt_job *early;   /* the same when the optimizer works during the backward (posted as it
                                * starts; the copies home tell it when each unit's gradients are issued) */
    const mt_opt_job *overlap; /* the same when that work is the whole update (no clipping) */
    int device_update;         /* the device updates the units whose state it keeps at the end of the
                                * pass */
    int ends_home;             /* the embedding's and head's gradients go home: unless the device
                                * updates them (and no one asked to keep every gradient on the host) */
    int resident_home;         /* the resident blocks' gradients go home: only when no step updates
                                * them (gradients only) or every gradient is kept on the host */
    mt_compute_job base;       /* what every job of the pass shares */
    pass_result *r;
} pass;

static mt_compute_job job_of(const pass *p, mt_job_kind kind) {
    mt_compute_job j = p->base;
    j.kind = kind;
    return j;
}

/* Stages the tokens and zeroes the accumulators: the loss, the norms and, for training, the
 * embedding's gradient (once its previous copy home is done). */
static mt_status begin_pass(mt_engine *e, pass *p, const int32_t *inputs, const int32_t *targets,
                            const int32_t *positions, int batch, int seq, int M, int last_row) {
    e->num_stalls = 0;
    e->num_jobs = 0;
    e->first_backward_job = e->max_jobs;
    e->bytes_in = 0;
    e->experts_seen = e->experts_skipped = 0;
    e->routing_known = 0;
    p->r->waited = 0;
    MT_TRY(stage_tokens(e, inputs, targets, positions, batch, seq, M, &p->r->targets));
    if (e->step_targets) { /* one rank of several: the mean is over every rank's targets */
        p->r->targets = e->step_targets;
        e->step_targets = 0;
    }
    p->base = (mt_compute_job){.mode = p->mode, .batch = batch, .seq = seq, .micro_batches = M,
                               .last_row = last_row, .segmented = positions != NULL,
                               .scale = p->r->targets ? 1.0f / (float)p->r->targets : 0.0f};
    mt_zero_async(e->be, e->dev_loss, 4, e->compute);
    mt_zero_async(e->be, e->dev_norms, (size_t)e->U * 4, e->compute);
    if (e->any_pass_state) { /* the blocks' forwards add their routing statistics, the head the aux loss */
        mt_block_pass_begin(e->pass, e->compute);
        mt_zero_async(e->be, e->dev_aux_loss, 4, e->compute);
    }
    if (p->train) {
        mt_engine_wait(e, e->compute, MT_EV_GRADS_HOME, 0);
        mt_zero_async(e->be, e->embed_grad, mt_engine_embed_grad_numel(e) * 4, e->compute);
    }
    return MT_OK;
}

/* Block l's forward: a resident block's weights are there; a streamed one's once they are in its
 * slot, which then may take the streamed block K further (or the head). */
static mt_status block_forward(mt_engine *e, pass *p, int l) {
    int K = e->K, resident = l < e->device_blocks, index = l - e->device_blocks;
    if (!resident) compute_wait(e, MT_EV_SLOT_LOADED, mt_engine_slot_of(e, l), "block weights in (forward)");
    mt_engine_ckpt_before_write(e, l + 1);
    mt_compute_job j = job_of(p, MT_JOB_BLOCK_FWD);
    j.block = l;
    j.x_in = mt_engine_ckpt(e, l);
    j.x_out = mt_engine_ckpt(e, l + 1);
    if (!resident) mt_engine_take_gather(e, &j, mt_engine_where_slot(mt_engine_slot_of(e, l)));
    MT_TRY(mt_engine_launch(e, j));
    if (!resident) mt_engine_record(e, MT_EV_SLOT_FREE, mt_engine_slot_of(e, l), e->compute);
    mt_engine_ckpt_written(e, l + 1, p->train);
    mt_engine_ckpt_read(e, l);
    if (!resident && index + K <= e->L - e->device_blocks) p->r->waited += load_forward(e, index + K);
    return MT_OK;
}

/* Forward: the embedding, the resident blocks, then the streamed blocks with K - 1 loads in
 * flight. The last K streamed blocks stay in their slots for the backward. */
static mt_status forward(mt_engine *e, pass *p) {
    int embed_moves = !mt_engine_unit_on_device(e, 0);
    p->r->waited += mt_engine_await(e, MT_FL_UPDATED, 0, e->generation, MT_GEN_G);
    if (embed_moves)
        mt_engine_load_unit(e, 0, e->embed_w, MT_EV_EMBED_FREE, MT_EV_EMBED_LOADED, 0, mt_engine_where_embed(e), NULL);
    mt_engine_wait(e, e->compute, MT_EV_TOKENS_READY, 0);
    compute_wait(e, MT_EV_EMBED_LOADED, 0, "embedding in");
    mt_engine_ckpt_before_write(e, 0);
    mt_compute_job j = job_of(p, MT_JOB_EMBED_FWD);
    mt_engine_take_gather(e, &j, mt_engine_where_embed(e));
    j.x_out = mt_engine_ckpt(e, 0);
    MT_TRY(mt_engine_launch(e, j));
    mt_engine_ckpt_written(e, 0, p->train);
    if (embed_moves && !e->cfg->tie_embeddings) mt_engine_record(e, MT_EV_EMBED_FREE, 0, e->compute);
    /* The first K streamed blocks' loads (each waiting for the host optimizer's update of its
     * block) are issued once the resident blocks' jobs are queued, which compute runs meanwhile. */
    for (int l = 0; l < e->L; l++) {
        if (l == e->device_blocks)
            for (int i = 0; i < e->K; i++) p->r->waited += load_forward(e, i);
        MT_TRY(block_forward(e, p, l));
    }
    if (e->K == 0) p->r->waited += load_forward(e, 0); /* every block resident: the head is next */
    return MT_OK;
}

/* The head's weights (the embedding's too when tied) may be replaced: compute is done reading them. */
static void free_head_weights(mt_engine *e) {
    if (!mt_engine_unit_on_device(e, e->U - 1)) mt_engine_record(e, MT_EV_HEAD_FREE, 0, e->compute);
    if (e->cfg->tie_embeddings && !mt_engine_unit_on_device(e, 0)) mt_engine_record(e, MT_EV_EMBED_FREE, 0, e->compute);
}

/* The head: the loss, and for training its backward, fused; then the weights it read are free
 * (chunked, after the head matrix's chunks, or tied after the embedding's backward, which makes the
 * head's weight gradient). */
static mt_status head(mt_engine *e, pass *p) {
    compute_wait(e, MT_EV_HEAD_LOADED, 0, "head in");
    if (p->train) {
        if (p->ends_home) p->r->waited += mt_engine_await_grads_taken(e, e->U - 1);
        mt_engine_wait(e, e->compute, MT_EV_GRADS_HOME, e->U - 1);
        mt_zero_async(e->be, e->head_grad, mt_engine_head_grad_numel(e) * 4, e->compute);
    }
    mt_compute_job j = job_of(p, MT_JOB_HEAD);
    mt_engine_take_gather(e, &j, mt_engine_where_head(e));
    MT_TRY(mt_engine_launch(e, j));
    if (!(p->train && mt_engine_ends_chunked(e))) free_head_weights(e);
    return MT_OK;
}

/* The ends chunked: a compute job for each vocabulary chunk of the head matrix's gradient
 * (MT_JOB_HEAD_CHUNK) or the embedding's (MT_JOB_EMBED_BWD), each copying its chunk home as it
 * ends: to its place in the unit's host gradient, or through the chunk buffers, the step's chunk k
 * (`first` for the first of these) into buffer k mod B once the optimizer is done with chunk k - B
 * (the first B take buffers the previous step's chunks left before its forward could load the
 * ends), then telling the optimizer it is on its way (chunk_issued) and when it landed
 * (chunk_home). */
static mt_status vocab_chunks(mt_engine *e, pass *p, mt_job_kind kind, int first) {
    int u = kind == MT_JOB_HEAD_CHUNK ? e->U - 1 : 0, B = e->chunk_buffers, D = e->cfg->hidden_size;
    size_t matrix = u ? mt_engine_head_rest_numel_for(e->lay) : 0; /* where the unit's matrix starts */
    for (int v0 = 0, k = first; v0 < e->cfg->vocab_size; v0 += e->o.head_vocab_chunk, k++) {
        mt_compute_job j = job_of(p, kind);
        j.v0 = v0;
        if (B && k >= B) p->r->waited += mt_engine_await(e, MT_FL_CHUNK_DONE, k - B, e->generation, MT_GEN_NEXT);
        j.home = B ? mt_engine_chunk_buffer(e, k) : e->grad_home[u] + matrix + (size_t)v0 * D;
        MT_TRY(mt_engine_launch(e, j));
        if (B) {
            mt_engine_record(e, MT_EV_CHUNK_HOME, k, e->compute);
            mt_engine_raise(e, MT_FL_CHUNK_ISSUED, k, e->generation);
        }
    }
    return MT_OK;
}

/* Without clipping the optimizer starts with the head: a first copy of the embedding's gradient
 * (the head's part when tied, zeros otherwise) goes home, whose rows that no input token touches are
 * final already (where there is one: mt_engine_embed_early_copy). */
static int embed_early(const mt_engine *e, const pass *p) {
    return p->overlap && !e->o.ends_on_device && !e->chunk_buffers && mt_engine_embed_early_copy(e);
}

static void send_embedding_early(mt_engine *e) {
    mt_engine_record(e, MT_EV_UNIT_READY, 0, e->compute);
    mt_engine_wait(e, e->d2h, MT_EV_UNIT_READY, 0);
    if (mt_engine_ends_chunked(e)) { /* untied: zeros, from the chunk buffer (zeroed by begin_pass) to every chunk */
        size_t chunk = mt_engine_embed_grad_numel(e), numel = (size_t)mt_engine_numel(e, 0);
        for (size_t at = 0; at < numel; at += chunk)
            mt_copy_async(e->be, e->grad_home[0] + at, e->embed_grad, (numel - at < chunk ? numel - at : chunk) * 4, e->d2h);
    } else {
        mt_copy_async(e->be, e->grad_home[0], e->embed_grad, (size_t)mt_engine_numel(e, 0) * 4, e->d2h);
    }
    mt_engine_record(e, MT_EV_EMBED_EARLY_HOME, 0, e->d2h);
    mt_engine_raise(e, MT_FL_EMBED_EARLY_ISSUED, 0, e->generation);
}

/* A resident block's backward: its gradients stay in its own buffer for the device's update (they
 * go home only when the pass keeps every gradient on the host). */
static mt_status resident_backward(mt_engine *e, pass *p, int l) {
    int u = mt_unit_block(l), stage = mt_engine_ckpt_fetched(e, l), gs = mt_engine_resident_grad_slot(e, l);
    float *grads = mt_engine_block_grads(e, l, 0);
    if (stage >= 0) compute_wait(e, MT_EV_STAGE_FILLED, stage, "checkpoint in from the host");
    if (gs >= 0) compute_wait(e, MT_EV_GRAD_FREE, gs, "gradient slot free"); /* the streamed block's there is home */
    mt_engine_wait(e, e->compute, MT_EV_GRADS_HOME, u); /* a previous copy home is done */
    mt_zero_async(e->be, grads, (size_t)mt_engine_numel(e, u) * 4, e->compute);
    mt_compute_job j = job_of(p, MT_JOB_BLOCK_BWD);
    j.block = l;
    j.x_in = mt_engine_ckpt(e, l);
    MT_TRY(mt_engine_launch(e, j));
    mt_engine_ckpt_read(e, l);
    mt_engine_ckpt_fetch(e, l - 1);
    if (p->resident_home) { /* from a gradient slot, its copy frees the slot as a streamed block's does */
        p->r->waited += mt_engine_await_grads_taken(e, u);
        send_home(e, u, grads, gs >= 0 ? MT_EV_GRAD_READY : MT_EV_UNIT_READY, gs >= 0 ? gs : 0, p->early != NULL);
    }
    return MT_OK;
}

/* Block l's backward: it reads its input checkpoint (fetched a block ahead when it lives on the
 * host) and its weights (resident; or in its slot: still there for the last K streamed blocks,
 * reloaded for the others), and a streamed block's gradients go home from one of two gradient
 * slots. */
static mt_status block_backward(mt_engine *e, pass *p, int l) {
    if (l < e->device_blocks) return resident_backward(e, p, l);
    int L = e->L, K = e->K, k = mt_engine_slot_of(e, l), gs = (L - 1 - l) % 2, stage = mt_engine_ckpt_fetched(e, l);
    if (stage >= 0) compute_wait(e, MT_EV_STAGE_FILLED, stage, "checkpoint in from the host");
    compute_wait(e, MT_EV_SLOT_LOADED, k, "block weights in (backward)");
    compute_wait(e, MT_EV_GRAD_FREE, gs, "gradient slot free");
    mt_zero_async(e->be, e->grad_slot[gs], (size_t)mt_engine_numel(e, mt_unit_block(l)) * 4, e->compute);
    mt_compute_job j = job_of(p, MT_JOB_BLOCK_BWD);
    j.block = l;
    j.grad_slot = gs;
    j.x_in = mt_engine_ckpt(e, l);
    mt_engine_take_gather(e, &j, mt_engine_where_slot(k));
    MT_TRY(mt_engine_launch(e, j));
    mt_engine_record(e, MT_EV_SLOT_FREE, k, e->compute);
    mt_engine_ckpt_read(e, l);
    mt_engine_ckpt_fetch(e, l - 1); /* while this block's backward runs */
    /* In ring mode the buffer was last used by block l + ring: the optimizer must be done with it. */
    if (e->grad_ring && l + e->grad_ring < L)
        p->r->waited += mt_engine_await(e, MT_FL_UPDATED, mt_unit_block(l + e->grad_ring), e->generation,
                                        MT_GEN_NEXT);
    p->r->waited += mt_engine_await_grads_taken(e, mt_unit_block(l));
    send_home(e, mt_unit_block(l), e->grad_slot[gs], MT_EV_GRAD_READY, gs, p->early != NULL);
    if (l - K >= e->device_blocks) mt_engine_reload_slot(e, l - K, k);
    return MT_OK;
}

/* Backward: the head's gradients go home (the optimizer starts now, unless its job waits for the
 * norm: deferred), the head matrix's in vocabulary chunks where the ends are chunked (before the
 * head's marker, which then says all of it is home; through the chunk buffers after it, in the
 * order they come home), blocks L-1..0, then the embedding. */
static mt_status backward(mt_engine *e, pass *p) {
    if (p->early && !e->leader) mt_engine_optimizer_post(e, p->early); /* a follower has no optimizer */
    int chunked = mt_engine_ends_chunked(e), head_chunks = chunked && !e->cfg->tie_embeddings;
    if (head_chunks && !e->chunk_buffers) MT_TRY(vocab_chunks(e, p, MT_JOB_HEAD_CHUNK, 0));
    if (p->ends_home) send_home(e, e->U - 1, chunked ? NULL : e->head_grad, MT_EV_UNIT_READY, 0, p->early != NULL);
    if (head_chunks && e->chunk_buffers) MT_TRY(vocab_chunks(e, p, MT_JOB_HEAD_CHUNK, 0));
    if (head_chunks) free_head_weights(e);
    if (embed_early(e, p)) send_embedding_early(e);
    e->first_backward_job = e->num_jobs;
    mt_engine_ckpt_fetch(e, e->L - 1);
    for (int l = e->L - 1; l >= 0; l--) MT_TRY(block_backward(e, p, l));
    /* Chunked, the embedding's backward writes its gradient home itself: the optimizer must be done
     * with the early copy there (which then also landed, so the chunk buffer may change). */
    if (embed_early(e, p) && mt_engine_ends_chunked(e))
        p->r->waited += mt_engine_await(e, MT_FL_EMBED_EARLY_DONE, 0, e->generation, MT_GEN_NEXT);
    if (p->ends_home) p->r->waited += mt_engine_await_grads_taken(e, 0); /* chunked, the jobs copy it home */
    if (chunked) MT_TRY(vocab_chunks(e, p, MT_JOB_EMBED_BWD, head_chunks ? mt_engine_vocab_chunks(e) : 0));
    else MT_TRY(mt_engine_launch(e, job_of(p, MT_JOB_EMBED_BWD)));
    if (mt_engine_embed_grad_late(e)) free_head_weights(e);
    return MT_OK;
}

/* The ends: the embedding's gradient goes home (once the optimizer is done with its early copy,
 * which lies where it lands) unless the device updates it; the device updates the units whose
 * state it keeps (the ends, the resident blocks); then the norms go home. */
static mt_status ends(mt_engine *e, pass *p) {
    if (p->step && e->poison_next) { /* as a NaN in the gradient would, for the host and the device alike */
        static const float nan_norm = NAN;
        mt_copy_async(e->be, e->dev_norms, &nan_norm, 4, e->compute);
    }
    if (e->reduce && !e->ordered) MT_TRY(mt_engine_launch(e, job_of(p, MT_JOB_NORMS))); /* the slices' norms */
    int chunked = mt_engine_ends_chunked(e);
    if (embed_early(e, p) && !chunked)
        p->r->waited += mt_engine_await(e, MT_FL_EMBED_EARLY_DONE, 0, e->generation, MT_GEN_NEXT);
    /* (chunked, a marker behind its jobs, which the norms' copy home follows too) */
    if (p->ends_home) send_home(e, 0, chunked ? NULL : e->embed_grad, MT_EV_UNIT_READY, 0, p->early != NULL);
    if (p->device_update) {
        mt_compute_job j = job_of(p, MT_JOB_DEVICE_UPDATE);
        j.adam = mt_engine_adamw_params(e, p->step->lr, e->dev_step + 1, 1.0f);
        j.clip = p->step->mode != MT_OPT_OVERLAPPED;
        MT_TRY(mt_engine_launch(e, j));
        mt_engine_record(e, MT_EV_DEVICE_UPDATED, 0, e->compute);
        mt_engine_wait(e, e->d2h, MT_EV_DEVICE_UPDATED, 0);
    }
    mt_copy_async(e->be, e->host_norms, e->dev_norms, (size_t)e->U * 4, e->d2h);
    return MT_OK;
}

/* The pass's outputs go home (evaluation and sampling: once compute wrote them) and `done` marks
 * its end. */
static void end_pass(mt_engine *e, pass *p) {
    if (!p->train) {
        mt_engine_record(e, MT_EV_UNIT_READY, 0, e->compute);
        mt_engine_wait(e, e->d2h, MT_EV_UNIT_READY, 0);
        if (p->mode == MT_RUN_LOGITS)
            mt_copy_async(e->be, e->host_logits, e->dev_logits, (size_t)e->cfg->vocab_size * 4, e->d2h);
    }
    mt_copy_async(e->be, e->host_loss, e->dev_loss, 4, e->d2h);
    if (e->any_pass_state) {
        mt_engine_wait(e, e->d2h, MT_EV_ROUTED_HOME, 0);
        mt_copy_async(e->be, e->host_aux_loss, e->dev_aux_loss, 4, e->d2h);
    }
    mt_engine_record(e, MT_EV_DONE, 0, e->d2h);
}

/* `step`: the optimizer job of a training pass (MT_RUN_TRAIN), else NULL. */
static mt_status run_pass(mt_engine *e, mt_run_mode mode, const int32_t *inputs, const int32_t *targets,
                          const int32_t *positions, int batch, int seq, int M, int last_row, const mt_opt_job *step,
                          pass_result *r) {
    pass p = {.mode = mode, .train = mode == MT_RUN_TRAIN || mode == MT_RUN_GRADS, .step = step,
              .early = step && step->mode != MT_OPT_DEFERRED ? step : NULL,
              .overlap = step && step->mode == MT_OPT_OVERLAPPED ? step : NULL,
              .device_update = step && mt_engine_any_on_device(e),
              .ends_home = !(step && e->o.ends_on_device) || e->o.keep_grads,
              .resident_home = !step || e->o.keep_grads, .r = r};
    MT_TRY(begin_pass(e, &p, inputs, targets, positions, batch, seq, M, last_row));
    MT_TRY(forward(e, &p));
    if (e->any_pass_state) { /* the forward's routing statistics: the report's, and the reloads' */
        mt_block_pass_home(e->pass, e->compute);
        mt_engine_record(e, MT_EV_ROUTED_HOME, 0, e->compute);
    }
    MT_TRY(head(e, &p));
    if (p.train) {
        MT_TRY(backward(e, &p));
        MT_TRY(ends(e, &p));
    }
    end_pass(e, &p);
    return MT_OK;
}

/* The auxiliary (load-balancing) loss, and what the kinds report of their pass state: the largest
 * and smallest share of a layer's routed tokens an expert got (this rank's tokens). */
static void pass_state_results(const mt_engine *e, pass_result *r) {
    mt_pass_report report = {.load_max = 0, .load_min = 1};
    mt_block_pass_report(e->pass, &report);
    r->aux_loss = *e->host_aux_loss;
    r->load_max = report.load_max;
    r->load_min = report.load_min;
}

/* Waits for the pass to finish and reads its loss and gradient norm. */
static mt_status finish_pass(mt_engine *e, pass_result *r) {
    mt_engine_sync(e, MT_EV_DONE, 0);
    MT_TRY(mt_backend_check(e->be));
    r->loss = r->targets > 0 ? *e->host_loss / (double)r->targets : 0;
    if (e->any_pass_state) pass_state_results(e, r);
    r->grad_norm = mt_global_norm(e->host_norms, e->U);
    r->bytes_in = e->bytes_in;
    r->experts_unrouted = e->experts_seen ? (double)e->experts_skipped / (double)e->experts_seen : 0;
    r->stalled = 0;
    for (int i = 0; i < e->num_stalls; i++) r->stalled += mt_engine_elapsed(e, MT_EV_STALL_BEGIN, i, MT_EV_STALL_END, i);
    r->busy = r->idle_forward = r->idle_backward = 0;
    for (int i = 0; i < e->num_jobs; i++) {
        r->busy += mt_engine_elapsed(e, MT_EV_JOB_BEGIN, i, MT_EV_JOB_END, i);
        if (i == 0) continue;
        double gap = mt_engine_elapsed(e, MT_EV_JOB_END, i - 1, MT_EV_JOB_BEGIN, i);
        if (i < e->first_backward_job) r->idle_forward += gap;
        else r->idle_backward += gap;
    }
    return MT_OK;
}

/* A forward-only engine has no gradient buffers to run a backward into. */
static mt_status backward_possible(const mt_engine *e) {
    return e->o.forward_only ? mt_fail(MT_ERR_INVALID, "the engine was made forward-only (sampling): it cannot train")
                             : MT_OK;
}

/* How the optimizer takes this engine's steps (engine_internal.h). */
static mt_opt_mode opt_mode(const mt_engine *e) {
    if (e->o.max_grad_norm <= 0) return MT_OPT_OVERLAPPED;
    return e->store->moments.format == MT_MOMENTS_F32 ? MT_OPT_SPECULATIVE : MT_OPT_DEFERRED;
}

mt_status mt_engine_step(mt_engine *e, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                         float lr, mt_step_result *res) {
    MT_TRY(backward_possible(e));
    if (mt_engine_optimizer_halted(e->leader ? e->leader : e))
        return mt_fail(MT_ERR_DEVICE, "the engine failed in an earlier step; it takes no more steps");
    double t0 = mt_now();
    pass_result r;
    mt_opt_job job = {.generation = e->generation, .lr = lr, .mode = opt_mode(e), .grad_scale = 1.0f};
    mt_status rc = run_pass(e, MT_RUN_TRAIN, inputs, targets, positions, e->o.batch, e->o.seq, e->o.micro_batches, 0,
                            &job, &r);
    if (rc != MT_OK) {
        /* An optimizer already at work on this step would wait for gradients that never come. */
        if (job.mode != MT_OPT_DEFERRED && !e->leader) mt_engine_optimizer_halt(e);
        return rc;
    }
    rc = finish_pass(e, &r);
    if (e->fault_next) {
        rc = mt_fail(MT_ERR_DEVICE, "injected device fault at the end of a step (test hook)");
        e->fault_next = 0;
    }
    e->poison_next = 0;
    if (job.mode != MT_OPT_OVERLAPPED) {
        float scale = mt_clip_scale(r.grad_norm, e->o.max_grad_norm);
        if (e->ranks > 1) rc = mt_engine_ranks_settle(e, rc);
        job.skip = rc != MT_OK || !isfinite(scale);
        if (!job.skip) job.grad_scale = scale;
        if (!e->leader) {
            if (job.mode == MT_OPT_DEFERRED) mt_engine_optimizer_post(e, &job);
            else mt_engine_optimizer_norm(e, job.grad_scale, job.skip);
        }
    }
    if (!job.skip) e->dev_step++; /* the device's update of the units it keeps, if it makes one */
    e->generation++;
    MT_TRY(rc);
    *res = (mt_step_result){.loss = r.loss, .grad_norm = r.grad_norm, .skipped = job.skip,
                            .seconds = mt_now() - t0, .wait_opt_seconds = r.waited,
                            .stall_seconds = r.stalled, .compute_seconds = r.busy,
                            .idle_forward_seconds = r.idle_forward, .idle_backward_seconds = r.idle_backward,
                            .moe = e->any_pass_state, .aux_loss = r.aux_loss, .expert_load_max = r.load_max,
                            .expert_load_min = r.load_min, .weight_bytes_in = r.bytes_in,
                            .experts_unrouted = r.experts_unrouted};
    mt_engine *opt = e->leader ? e->leader : e;
    pthread_mutex_lock(&opt->opt_lock);
    res->opt_seconds = opt->opt_seconds;
    res->opt_seconds_per_block = opt->opt_seconds_per_block;
    res->opt_after_norm_seconds = opt->opt_after_norm_seconds;
    res->opt_backlog_units = opt->opt_backlog_units;
    pthread_mutex_unlock(&opt->opt_lock);
    return MT_OK;
}

void mt_engine_poison_next_step(mt_engine *e) { e->poison_next = 1; }

void mt_engine_fault_next_step(mt_engine *e) { e->fault_next = 1; }

const float *mt_engine_host_grads(const mt_engine *e) { return e->grads_full; }

mt_status mt_engine_grads(mt_engine *e, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                          double *loss) {
    MT_TRY(backward_possible(e));
    if (!e->grads_full)
        return mt_fail(MT_ERR_INVALID, "the engine keeps only some gradients on the host (a ring without clipping, "
                       "or only the host-updated units'): set keep_grads");
    pass_result r;
    MT_TRY(run_pass(e, MT_RUN_GRADS, inputs, targets, positions, e->o.batch, e->o.seq, e->o.micro_batches, 0, NULL,
                    &r));
    MT_TRY(finish_pass(e, &r));
    *loss = r.loss;
    return MT_OK;
}

mt_status mt_engine_eval(mt_engine *e, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                         double *loss) {
    pass_result r;
    MT_TRY(run_pass(e, MT_RUN_EVAL, inputs, targets, positions, e->o.batch, e->o.seq, e->o.micro_batches, 0, NULL,
                    &r));
    MT_TRY(finish_pass(e, &r));
    *loss = r.loss;
    return MT_OK;
}

mt_status mt_engine_next_logits(mt_engine *e, const int32_t *tokens, int len, float *logits) {
    if (len < 1 || len > e->o.seq)
        return mt_fail(MT_ERR_INVALID, "a context of %d tokens does not fit the engine's sequence length %d",
                       len, e->o.seq);
    /* The pass wants targets too; none counts. */
    int32_t *ignored = malloc((size_t)len * sizeof *ignored);
    if (!ignored) return mt_fail(MT_ERR_NOMEM, "cannot allocate the sampling context");
    for (int i = 0; i < len; i++) ignored[i] = -1;
    pass_result r;
    mt_status rc = run_pass(e, MT_RUN_LOGITS, tokens, ignored, NULL, 1, len, 1, len - 1, NULL, &r);
    free(ignored);
    MT_TRY(rc);
    MT_TRY(finish_pass(e, &r));
    for (int v = 0; v < e->cfg->vocab_size; v++) logits[v] = e->host_logits[v];
    return MT_OK;
}
