/* What runs where and when: the issue order of one step's copies, compute and events. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "optim/clip.h"
#include "util/clock.h"

typedef enum { RUN_TRAIN, RUN_GRADS, RUN_EVAL, RUN_LOGITS } run_mode;
typedef enum { JOB_EMBED_FWD, JOB_BLOCK_FWD, JOB_HEAD, JOB_BLOCK_BWD, JOB_EMBED_BWD, JOB_ENDS_UPDATE } job_kind;

/* A compute job; freed by the job itself (on cpu it runs later, on the compute worker). */
typedef struct {
    mt_engine *e;
    job_kind kind;
    run_mode mode;
    int block, slot, grad_slot;
    int batch, seq, micro_batches, last_row;
    float scale;
    void *x_in, *x_out;   /* activation checkpoints read and written: [M][n, D] */
    mt_adamw_params adam; /* JOB_ENDS_UPDATE */
    int clip;
} compute_job;

static size_t act_size(const mt_engine *e) { return mt_dtype_size(e->be->ops->act_dtype); }
static size_t max_rows(const mt_engine *e) { return (size_t)e->o.batch * e->o.seq; }

/* Micro-batch m's rows of a checkpoint's device buffer. */
static void *micro(const mt_engine *e, void *ckpt, int m) {
    return (char *)ckpt + (size_t)m * max_rows(e) * e->cfg->hidden_size * act_size(e);
}
static void *ckpt_at(const mt_engine *e, int l, int m) { return micro(e, mt_engine_ckpt(e, l), m); }
static void *dy_at(const mt_engine *e, int m) {
    return (char *)e->dy + (size_t)m * max_rows(e) * e->cfg->hidden_size * act_size(e);
}
static void *row_of(const mt_engine *e, void *base, size_t row) {
    return (char *)base + row * e->cfg->hidden_size * act_size(e);
}
static int32_t *inputs_at(const mt_engine *e, int m) { return e->dev_inputs + (size_t)m * max_rows(e); }
static int32_t *targets_at(const mt_engine *e, int m) { return e->dev_targets + (size_t)m * max_rows(e); }

static int64_t unit_numel(const mt_engine *e, int u) { return e->lay->units[u].numel; }

/* The LM head's weight and its gradient: its own, or the embedding's when tied. */
static const void *lm_weight(const mt_engine *e) {
    int u = e->cfg->tie_embeddings ? 0 : e->U - 1;
    mt_unit_weights w = mt_bind_weights(e->lay, u, u ? e->head_w : e->embed_w, e->be->ops->weight_dtype);
    return w.t[u ? MT_T_LM_HEAD : MT_T_WTE];
}
static float *lm_grad(const mt_engine *e) {
    int u = e->cfg->tie_embeddings ? 0 : e->U - 1;
    mt_unit_grads g = mt_bind_grads(e->lay, u, u ? e->head_grad : e->embed_grad);
    return g.t[u ? MT_T_LM_HEAD : MT_T_WTE];
}

/* ---- compute jobs ---- */

static void run_head(const compute_job *j) {
    mt_engine *e = j->e;
    const mt_op_iface *op = e->op;
    int D = e->cfg->hidden_size, V = e->cfg->vocab_size, seq = j->seq;
    mt_unit_weights w = mt_bind_weights(e->lay, e->U - 1, e->head_w, e->be->ops->weight_dtype);
    mt_unit_grads g = mt_bind_grads(e->lay, e->U - 1, e->head_grad);
    const void *norm_w = w.t[MT_T_FINAL_NORM], *lm_w = lm_weight(e);
    if (j->mode == RUN_LOGITS) {
        op->rmsnorm(e->be, e->compute, e->ws.h1, e->ws.rstd1, row_of(e, ckpt_at(e, e->L, 0), j->last_row),
                    norm_w, 1, D, e->cfg->rms_norm_eps);
        op->logits(e->be, e->compute, e->dev_logits, e->ws.h1, lm_w, D, V);
        return;
    }
    /* One sequence at a time so that weight gradients accumulate in sequence order. */
    for (int m = 0; m < j->micro_batches; m++) {
        for (int b = 0; b < j->batch; b++) {
            size_t row = (size_t)b * seq;
            void *x = row_of(e, ckpt_at(e, e->L, m), row);
            op->rmsnorm(e->be, e->compute, e->ws.h1, e->ws.rstd1, x, norm_w, seq, D, e->cfg->rms_norm_eps);
            if (j->mode == RUN_EVAL) {
                op->lmhead_loss(e->be, e->compute, e->dev_loss, NULL, NULL, e->ws.h1, lm_w,
                                targets_at(e, m) + row, seq, D, V, j->scale, e->o.lm_chunk, e->lm_ws);
                continue;
            }
            op->lmhead_loss(e->be, e->compute, e->dev_loss, e->ws.tmp, lm_grad(e), e->ws.h1, lm_w,
                            targets_at(e, m) + row, seq, D, V, j->scale, e->o.lm_chunk, e->lm_ws);
            op->rmsnorm_dx(e->be, e->compute, row_of(e, dy_at(e, m), row), g.t[MT_T_FINAL_NORM],
                           e->ws.tmp, x, norm_w, e->ws.rstd1, seq, D, 0);
        }
    }
    if (j->mode != RUN_EVAL)
        op->sumsq(e->be, e->compute, e->dev_norms + e->U - 1, e->head_grad, (size_t)unit_numel(e, e->U - 1));
}

static void run_job(void *arg) {
    compute_job *j = arg;
    mt_engine *e = j->e;
    const mt_op_iface *op = e->op;
    int D = e->cfg->hidden_size, n = j->batch * j->seq;
    mt_block_ctx ctx = {e->be, e->compute, e->cfg, j->batch, j->seq, e->dev_inv_freq, &e->ws};
    switch (j->kind) {
    case JOB_EMBED_FWD: {
        mt_unit_weights w = mt_bind_weights(e->lay, 0, e->embed_w, e->be->ops->weight_dtype);
        for (int m = 0; m < j->micro_batches; m++)
            op->embedding(e->be, e->compute, micro(e, j->x_out, m), inputs_at(e, m), w.t[MT_T_WTE], n, D);
        break;
    }
    case JOB_BLOCK_FWD: {
        int u = mt_unit_block(j->block);
        mt_unit_weights w = mt_bind_weights(e->lay, u, e->slot[j->slot], e->be->ops->weight_dtype);
        for (int m = 0; m < j->micro_batches; m++)
            mt_block_forward(&ctx, &w, micro(e, j->x_in, m), micro(e, j->x_out, m));
        break;
    }
    case JOB_HEAD: run_head(j); break;
    case JOB_BLOCK_BWD: {
        int u = mt_unit_block(j->block);
        mt_unit_weights w = mt_bind_weights(e->lay, u, e->slot[j->slot], e->be->ops->weight_dtype);
        mt_unit_grads g = mt_bind_grads(e->lay, u, e->grad_slot[j->grad_slot]);
        for (int m = 0; m < j->micro_batches; m++)
            mt_block_backward(&ctx, &w, &g, micro(e, j->x_in, m), dy_at(e, m));
        op->sumsq(e->be, e->compute, e->dev_norms + u, e->grad_slot[j->grad_slot], (size_t)unit_numel(e, u));
        break;
    }
    case JOB_EMBED_BWD: {
        mt_unit_grads g = mt_bind_grads(e->lay, 0, e->embed_grad);
        for (int m = 0; m < j->micro_batches; m++)
            for (int b = 0; b < j->batch; b++) {
                size_t row = (size_t)b * j->seq;
                op->embedding_dw(e->be, e->compute, g.t[MT_T_WTE], inputs_at(e, m) + row,
                                 row_of(e, dy_at(e, m), row), j->seq, D);
            }
        op->sumsq(e->be, e->compute, e->dev_norms, e->embed_grad, (size_t)unit_numel(e, 0));
        break;
    }
    case JOB_ENDS_UPDATE: mt_engine_ends_update(e, &j->adam, j->clip); break;
    }
    free(j);
}

/* Issues a compute job between two timing events: their spans add up to the time the device
 * spent computing, the rest of a step is the time it sat idle. */
static mt_status launch(mt_engine *e, compute_job proto) {
    compute_job *j = malloc(sizeof *j);
    if (!j) return mt_fail(MT_ERR_NOMEM, "cannot allocate a compute job");
    *j = proto;
    j->e = e;
    int timed = e->num_jobs < e->max_jobs;
    if (timed) mt_event_record(e->be, e->job_begin[e->num_jobs], e->compute);
    mt_launch(e->be, e->compute, run_job, j);
    if (timed) mt_event_record(e->be, e->job_end[e->num_jobs++], e->compute);
    return MT_OK;
}

/* ---- copies ---- */

static void load_unit(mt_engine *e, int u, void *dst, mt_event *free_ev, mt_event *loaded_ev) {
    size_t bytes = (size_t)unit_numel(e, u) * mt_dtype_size(e->be->ops->weight_dtype);
    mt_stream_wait(e->be, e->h2d, free_ev);
    mt_copy_async(e->be, dst, mt_store_unit_weights(e->store, u), bytes, e->h2d);
    mt_event_record(e->be, loaded_ev, e->h2d);
}

/* The compute stream waits for `ev`, bracketed by two timing events so that the step can report
 * how long the device sat idle waiting for copies (and, through them, for the optimizer). */
static void compute_wait(mt_engine *e, mt_event *ev) {
    if (e->num_stalls < e->max_stalls) mt_event_record(e->be, e->stall_begin[e->num_stalls], e->compute);
    mt_stream_wait(e->be, e->compute, ev);
    if (e->num_stalls < e->max_stalls) mt_event_record(e->be, e->stall_end[e->num_stalls++], e->compute);
}

/* Forward loads in use order: blocks 0..L-1, then the head (index L). Each first waits until
 * the optimizer has written that unit's weights for this step. Returns the seconds waited. */
static double load_forward(mt_engine *e, int index) {
    int u = index < e->L ? mt_unit_block(index) : e->U - 1;
    double waited = mt_flag_wait(&e->updated[u], e->generation);
    if (index < e->L) {
        int k = index % e->K;
        load_unit(e, u, e->slot[k], e->slot_free[k], e->slot_loaded[k]);
    } else if (!mt_engine_unit_on_device(e, u)) {
        load_unit(e, u, e->head_w, e->head_free, e->head_loaded);
    }
    return waited;
}

/* Copies unit u's gradients home. `publish`: tell an overlapped optimizer the copy is issued. */
static void send_home(mt_engine *e, int u, const float *grads, mt_event *ready_ev, mt_event *free_ev,
                      int publish) {
    mt_event_record(e->be, ready_ev, e->compute);
    mt_stream_wait(e->be, e->d2h, ready_ev);
    mt_copy_async(e->be, e->grad_home[u], grads, (size_t)unit_numel(e, u) * 4, e->d2h);
    if (free_ev) mt_event_record(e->be, free_ev, e->d2h);
    mt_event_record(e->be, e->grads_home[u], e->d2h);
    if (publish) mt_flag_set(&e->grads_issued[u], e->generation + 1);
}

/* Validates and stages inputs and targets [M][batch * seq] and sends them; counts the targets
 * that take part in the loss (negative ones are ignored). */
static mt_status stage_tokens(mt_engine *e, const int32_t *inputs, const int32_t *targets, int batch,
                              int seq, int M, int64_t *counted) {
    size_t n_max = max_rows(e), n = (size_t)batch * seq;
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
    mt_copy_async(e->be, e->dev_inputs, e->host_tokens, 2 * (size_t)e->o.micro_batches * n_max * sizeof(int32_t), e->h2d);
    mt_event_record(e->be, e->tokens_ready, e->h2d);
    return MT_OK;
}

/* ---- one pass ---- */

typedef struct {
    int64_t targets; /* targets that count in the loss */
    double loss, grad_norm, waited;
    double stalled;  /* seconds the compute stream waited on copies */
    double busy;     /* seconds the compute stream spent in the pass's jobs */
    double idle_forward, idle_backward; /* gaps between jobs in the forward, in the backward */
} pass_result;

/* `step`: the optimizer job of a training pass (RUN_TRAIN), else NULL. Without clipping it starts
 * as the backward begins; with ends_on_device the pass itself updates the embedding and head. */
static mt_status run_pass(mt_engine *e, run_mode mode, const int32_t *inputs, const int32_t *targets,
                          int batch, int seq, int M, int last_row, const mt_opt_job *step, pass_result *r) {
    mt_backend *be = e->be;
    int L = e->L, K = e->K, U = e->U, train = mode == RUN_TRAIN || mode == RUN_GRADS;
    const mt_opt_job *overlap = step && step->overlapped ? step : NULL;
    /* The embedding's and head's gradients go home unless the device updates them (and no one asked
     * to keep every gradient on the host). */
    int ends_update = step && e->o.ends_on_device, ends_home = !ends_update || e->o.keep_grads;
    r->waited = 0;
    e->num_stalls = 0;
    e->num_jobs = 0;
    e->first_backward_job = e->max_jobs;
    MT_TRY(stage_tokens(e, inputs, targets, batch, seq, M, &r->targets));
    compute_job base = {.mode = mode, .batch = batch, .seq = seq, .micro_batches = M,
                        .last_row = last_row, .scale = r->targets ? 1.0f / (float)r->targets : 0.0f};

    mt_zero_async(be, e->dev_loss, 4, e->compute);
    mt_zero_async(be, e->dev_norms, (size_t)U * 4, e->compute);
    if (train) {
        mt_stream_wait(be, e->compute, e->grads_home[0]);
        mt_zero_async(be, e->embed_grad, (size_t)unit_numel(e, 0) * 4, e->compute);
    }

    /* Forward: the embedding, then the blocks with K - 1 loads in flight, then the head. */
    r->waited += mt_flag_wait(&e->updated[0], e->generation);
    if (!mt_engine_unit_on_device(e, 0)) load_unit(e, 0, e->embed_w, e->embed_free, e->embed_loaded);
    for (int i = 0; i < K; i++) r->waited += load_forward(e, i);
    mt_stream_wait(be, e->compute, e->tokens_ready);
    compute_wait(e, e->embed_loaded);
    mt_engine_ckpt_before_write(e, 0);
    compute_job j = base;
    j.kind = JOB_EMBED_FWD;
    j.x_out = mt_engine_ckpt(e, 0);
    MT_TRY(launch(e, j));
    mt_engine_ckpt_written(e, 0, train);
    if (!e->cfg->tie_embeddings) mt_event_record(be, e->embed_free, e->compute);
    for (int l = 0; l < L; l++) {
        int k = l % K;
        compute_wait(e, e->slot_loaded[k]);
        mt_engine_ckpt_before_write(e, l + 1);
        j = base;
        j.kind = JOB_BLOCK_FWD;
        j.block = l;
        j.slot = k;
        j.x_in = mt_engine_ckpt(e, l);
        j.x_out = mt_engine_ckpt(e, l + 1);
        MT_TRY(launch(e, j));
        mt_event_record(be, e->slot_free[k], e->compute);
        mt_engine_ckpt_written(e, l + 1, train);
        mt_engine_ckpt_read(e, l);
        if (l + K <= L) r->waited += load_forward(e, l + K);
    }

    /* The head: loss, and for training its backward, fused. */
    compute_wait(e, e->head_loaded);
    if (train) {
        mt_stream_wait(be, e->compute, e->grads_home[U - 1]);
        mt_zero_async(be, e->head_grad, (size_t)unit_numel(e, U - 1) * 4, e->compute);
    }
    j = base;
    j.kind = JOB_HEAD;
    MT_TRY(launch(e, j));
    mt_event_record(be, e->head_free, e->compute);
    if (e->cfg->tie_embeddings) mt_event_record(be, e->embed_free, e->compute);

    if (train) {
        int publish = overlap != NULL;
        if (overlap) mt_engine_optimizer_post(e, overlap);
        if (ends_home) send_home(e, U - 1, e->head_grad, e->unit_ready, NULL, publish);
        if (overlap && !ends_update) {
            /* The embedding's gradient so far: the head's part when tied, zeros otherwise. Its
             * rows that no input token touches are final already. */
            mt_event_record(be, e->unit_ready, e->compute);
            mt_stream_wait(be, e->d2h, e->unit_ready);
            mt_copy_async(be, e->grad_home[0], e->embed_grad, (size_t)unit_numel(e, 0) * 4, e->d2h);
            mt_event_record(be, e->embed_early_home, e->d2h);
            mt_flag_set(&e->embed_early_issued, e->generation + 1);
        }
        /* Backward: blocks L-1..0; the last K are still resident from the forward. */
        e->first_backward_job = e->num_jobs;
        mt_engine_ckpt_fetch(e, L - 1);
        for (int l = L - 1; l >= 0; l--) {
            int k = l % K, gs = (L - 1 - l) % 2;
            mt_event *fetched = mt_engine_ckpt_fetched(e, l);
            if (fetched) compute_wait(e, fetched);
            compute_wait(e, e->slot_loaded[k]);
            compute_wait(e, e->grad_free[gs]);
            mt_zero_async(be, e->grad_slot[gs], (size_t)unit_numel(e, mt_unit_block(l)) * 4, e->compute);
            j = base;
            j.kind = JOB_BLOCK_BWD;
            j.block = l;
            j.slot = k;
            j.grad_slot = gs;
            j.x_in = mt_engine_ckpt(e, l);
            MT_TRY(launch(e, j));
            mt_event_record(be, e->slot_free[k], e->compute);
            mt_engine_ckpt_read(e, l);
            mt_engine_ckpt_fetch(e, l - 1); /* while this block's backward runs */
            /* In ring mode the buffer was last used by block l + ring: the optimizer must be done with it. */
            if (e->grad_ring && l + e->grad_ring < L)
                r->waited += mt_flag_wait(&e->updated[mt_unit_block(l + e->grad_ring)], e->generation + 1);
            send_home(e, mt_unit_block(l), e->grad_slot[gs], e->grad_ready[gs], e->grad_free[gs], publish);
            if (l - K >= 0) load_unit(e, mt_unit_block(l - K), e->slot[k], e->slot_free[k], e->slot_loaded[k]);
        }
        j = base;
        j.kind = JOB_EMBED_BWD;
        MT_TRY(launch(e, j));
        if (step && e->poison_next) { /* as a NaN in the gradient would, for the host and the device alike */
            static const float nan_norm = NAN;
            mt_copy_async(be, e->dev_norms, &nan_norm, 4, e->compute);
        }
        /* The full copy lands where the optimizer reads the early part: it must be done with it. */
        if (overlap && !ends_update) r->waited += mt_flag_wait(&e->embed_early_done, e->generation + 1);
        if (ends_home) send_home(e, 0, e->embed_grad, e->unit_ready, NULL, publish);
        if (ends_update) {
            j = base;
            j.kind = JOB_ENDS_UPDATE;
            j.adam = mt_engine_adamw_params(e, step->lr, e->ends_step + 1, 1.0f);
            j.clip = !step->overlapped;
            MT_TRY(launch(e, j));
            mt_event_record(be, e->ends_updated, e->compute);
            mt_stream_wait(be, e->d2h, e->ends_updated);
        }
        mt_copy_async(be, e->host_norms, e->dev_norms, (size_t)U * 4, e->d2h);
    } else {
        mt_event_record(be, e->unit_ready, e->compute);
        mt_stream_wait(be, e->d2h, e->unit_ready);
        if (mode == RUN_LOGITS)
            mt_copy_async(be, e->host_logits, e->dev_logits, (size_t)e->cfg->vocab_size * 4, e->d2h);
    }
    mt_copy_async(be, e->host_loss, e->dev_loss, 4, e->d2h);
    mt_event_record(be, e->done, e->d2h);
    return MT_OK;
}

/* Waits for the pass to finish and reads its loss and gradient norm. */
static mt_status finish_pass(mt_engine *e, pass_result *r) {
    mt_event_sync(e->be, e->done);
    MT_TRY(mt_backend_check(e->be));
    r->loss = r->targets > 0 ? *e->host_loss / (double)r->targets : 0;
    r->grad_norm = mt_global_norm(e->host_norms, e->U);
    r->stalled = 0;
    for (int i = 0; i < e->num_stalls; i++) r->stalled += mt_event_elapsed(e->be, e->stall_begin[i], e->stall_end[i]);
    r->busy = r->idle_forward = r->idle_backward = 0;
    for (int i = 0; i < e->num_jobs; i++) {
        r->busy += mt_event_elapsed(e->be, e->job_begin[i], e->job_end[i]);
        if (i == 0) continue;
        double gap = mt_event_elapsed(e->be, e->job_end[i - 1], e->job_begin[i]);
        if (i < e->first_backward_job) r->idle_forward += gap;
        else r->idle_backward += gap;
    }
    return MT_OK;
}

mt_status mt_engine_step(mt_engine *e, const int32_t *inputs, const int32_t *targets, float lr,
                         mt_step_result *res) {
    double t0 = mt_now();
    int overlapped = e->o.max_grad_norm <= 0;
    pass_result r;
    mt_opt_job job = {.generation = e->generation, .lr = lr, .overlapped = overlapped, .grad_scale = 1.0f};
    MT_TRY(run_pass(e, RUN_TRAIN, inputs, targets, e->o.batch, e->o.seq, e->o.micro_batches, 0, &job, &r));
    mt_status rc = finish_pass(e, &r);
    if (e->fault_next) {
        rc = mt_fail(MT_ERR_DEVICE, "injected device fault at the end of a step (test hook)");
        e->fault_next = 0;
    }
    e->poison_next = 0;
    if (!overlapped) {
        float scale = mt_clip_scale(r.grad_norm, e->o.max_grad_norm);
        job.skip = rc != MT_OK || !isfinite(scale);
        if (!job.skip) job.grad_scale = scale;
        mt_engine_optimizer_post(e, &job);
    }
    if (!job.skip) e->ends_step++; /* the device's update of the embedding and head, if it makes one */
    e->generation++;
    MT_TRY(rc);
    *res = (mt_step_result){.loss = r.loss, .grad_norm = r.grad_norm, .skipped = job.skip,
                            .seconds = mt_now() - t0, .wait_opt_seconds = r.waited,
                            .stall_seconds = r.stalled, .compute_seconds = r.busy,
                            .idle_forward_seconds = r.idle_forward, .idle_backward_seconds = r.idle_backward};
    pthread_mutex_lock(&e->opt_lock);
    res->opt_seconds = e->opt_seconds;
    res->opt_seconds_per_block = e->opt_seconds_per_block;
    pthread_mutex_unlock(&e->opt_lock);
    return MT_OK;
}

void mt_engine_poison_next_step(mt_engine *e) { e->poison_next = 1; }

void mt_engine_fault_next_step(mt_engine *e) { e->fault_next = 1; }

const float *mt_engine_host_grads(const mt_engine *e) { return e->grads_full; }

mt_status mt_engine_grads(mt_engine *e, const int32_t *inputs, const int32_t *targets, double *loss) {
    if (!e->grads_full)
        return mt_fail(MT_ERR_INVALID, "the engine keeps only a ring of gradients (no clipping): set keep_grads");
    pass_result r;
    MT_TRY(run_pass(e, RUN_GRADS, inputs, targets, e->o.batch, e->o.seq, e->o.micro_batches, 0, NULL, &r));
    MT_TRY(finish_pass(e, &r));
    *loss = r.loss;
    return MT_OK;
}

mt_status mt_engine_eval(mt_engine *e, const int32_t *inputs, const int32_t *targets, double *loss) {
    pass_result r;
    MT_TRY(run_pass(e, RUN_EVAL, inputs, targets, e->o.batch, e->o.seq, e->o.micro_batches, 0, NULL, &r));
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
    mt_status rc = run_pass(e, RUN_LOGITS, tokens, ignored, 1, len, 1, len - 1, NULL, &r);
    free(ignored);
    MT_TRY(rc);
    MT_TRY(finish_pass(e, &r));
    for (int v = 0; v < e->cfg->vocab_size; v++) logits[v] = e->host_logits[v];
    return MT_OK;
}
