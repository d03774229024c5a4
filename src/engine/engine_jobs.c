/* The compute jobs of a pass: what runs on the compute stream, each a function of its job's
 * description (engine_internal.h's mt_compute_job) that issues backend ops. The schedule
 * (engine_schedule.c) decides when each runs. */
#include <stdlib.h>

#include "engine/engine_internal.h"

static size_t act_size(const mt_engine *e) { return mt_dtype_size(e->be->ops->act_dtype); }

/* Micro-batch m's rows of a checkpoint's device buffer. */
static void *micro(const mt_engine *e, void *ckpt, int m) {
    return (char *)ckpt + (size_t)m * mt_engine_rows(e) * e->cfg->hidden_size * act_size(e);
}
static void *ckpt_at(const mt_engine *e, int l, int m) { return micro(e, mt_engine_ckpt(e, l), m); }
static void *dy_at(const mt_engine *e, int m) {
    return (char *)e->dy + (size_t)m * mt_engine_rows(e) * e->cfg->hidden_size * act_size(e);
}
static void *row_of(const mt_engine *e, void *base, size_t row) {
    return (char *)base + row * e->cfg->hidden_size * act_size(e);
}
static int32_t *inputs_at(const mt_engine *e, int m) { return e->dev_inputs + (size_t)m * mt_engine_rows(e); }
static int32_t *targets_at(const mt_engine *e, int m) { return e->dev_targets + (size_t)m * mt_engine_rows(e); }


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

static void run_head(const mt_compute_job *j) {
    mt_engine *e = j->e;
    const mt_op_iface *op = e->op;
    int D = e->cfg->hidden_size, V = e->cfg->vocab_size, seq = j->seq;
    mt_unit_weights w = mt_bind_weights(e->lay, e->U - 1, e->head_w, e->be->ops->weight_dtype);
    mt_unit_grads g = mt_bind_grads(e->lay, e->U - 1, e->head_grad);
    const void *norm_w = w.t[MT_T_FINAL_NORM], *lm_w = lm_weight(e);
    if (j->mode == MT_RUN_LOGITS) {
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
            if (j->mode == MT_RUN_EVAL) {
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
    mt_engine_reduce(e, e->dev_loss, 1); /* every rank's loss is the group's */
    if (j->mode == MT_RUN_EVAL) return;
    mt_engine_reduce(e, e->head_grad, (size_t)mt_engine_numel(e, e->U - 1));
    op->sumsq(e->be, e->compute, e->dev_norms + e->U - 1, e->head_grad, (size_t)mt_engine_numel(e, e->U - 1));
}

static void run_job(void *arg) {
    mt_compute_job *j = arg;
    mt_engine *e = j->e;
    const mt_op_iface *op = e->op;
    int D = e->cfg->hidden_size, n = j->batch * j->seq;
    mt_block_ctx ctx = {e->be, e->compute, e->cfg, j->batch, j->seq, e->dev_inv_freq, &e->ws};
    switch (j->kind) {
    case MT_JOB_EMBED_FWD: {
        mt_unit_weights w = mt_bind_weights(e->lay, 0, e->embed_w, e->be->ops->weight_dtype);
        for (int m = 0; m < j->micro_batches; m++)
            op->embedding(e->be, e->compute, micro(e, j->x_out, m), inputs_at(e, m), w.t[MT_T_WTE], n, D);
        break;
    }
    case MT_JOB_BLOCK_FWD: {
        int u = mt_unit_block(j->block);
        mt_unit_weights w = mt_bind_weights(e->lay, u, mt_engine_block_weights(e, j->block), e->be->ops->weight_dtype);
        for (int m = 0; m < j->micro_batches; m++)
            mt_block_forward(&ctx, &w, micro(e, j->x_in, m), micro(e, j->x_out, m));
        break;
    }
    case MT_JOB_HEAD: run_head(j); break;
    case MT_JOB_BLOCK_BWD: {
        int u = mt_unit_block(j->block);
        float *grads = mt_engine_block_grads(e, j->block, j->grad_slot);
        mt_unit_weights w = mt_bind_weights(e->lay, u, mt_engine_block_weights(e, j->block), e->be->ops->weight_dtype);
        mt_unit_grads g = mt_bind_grads(e->lay, u, grads);
        for (int m = 0; m < j->micro_batches; m++)
            mt_block_backward(&ctx, &w, &g, micro(e, j->x_in, m), dy_at(e, m));
        mt_engine_reduce(e, grads, (size_t)mt_engine_numel(e, u));
        op->sumsq(e->be, e->compute, e->dev_norms + u, grads, (size_t)mt_engine_numel(e, u));
        break;
    }
    case MT_JOB_EMBED_BWD: {
        mt_unit_grads g = mt_bind_grads(e->lay, 0, e->embed_grad);
        for (int m = 0; m < j->micro_batches; m++)
            for (int b = 0; b < j->batch; b++) {
                size_t row = (size_t)b * j->seq;
                op->embedding_dw(e->be, e->compute, g.t[MT_T_WTE], inputs_at(e, m) + row,
                                 row_of(e, dy_at(e, m), row), j->seq, D);
            }
        mt_engine_reduce(e, e->embed_grad, (size_t)mt_engine_numel(e, 0));
        op->sumsq(e->be, e->compute, e->dev_norms, e->embed_grad, (size_t)mt_engine_numel(e, 0));
        break;
    }
    case MT_JOB_DEVICE_UPDATE: mt_engine_device_update(e, &j->adam, j->clip); break;
    }
    free(j);
}

mt_status mt_engine_launch(mt_engine *e, mt_compute_job proto) {
    mt_compute_job *j = malloc(sizeof *j);
    if (!j) return mt_fail(MT_ERR_NOMEM, "cannot allocate a compute job");
    *j = proto;
    j->e = e;
    int timed = e->num_jobs < e->max_jobs;
    if (timed) mt_engine_record(e, MT_EV_JOB_BEGIN, e->num_jobs, e->compute);
    mt_launch(e->be, e->compute, run_job, j);
    if (timed) mt_engine_record(e, MT_EV_JOB_END, e->num_jobs++, e->compute);
    return MT_OK;
}

