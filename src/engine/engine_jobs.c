/* The compute jobs of a pass: what runs on the compute stream, each a function of its job's
 * description (engine_internal.h's mt_compute_job) that issues backend ops. The schedule
 * (engine_schedule.c) decides when each runs. */
#include <stdlib.h>

#include "engine/ends.h"
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
/* Micro-batch m's sequences' rows before their padding, for a pass that has segments; NULL else. */
static const int *real_rows_at(const mt_engine *e, const mt_compute_job *j, int m) {
    return j->segmented ? e->real_rows + (size_t)m * e->o.batch : NULL;
}
/* The real tokens (not padding) of micro-batch m. */
static int real_tokens(const mt_engine *e, const mt_compute_job *j, int m) {
    const int *real = real_rows_at(e, j, m);
    if (!real) return j->batch * j->seq;
    int n = 0;
    for (int b = 0; b < j->batch; b++) n += real[b];
    return n;
}
/* Micro-batch m's segments, for a pass that has them. */
static mt_segments segments_at(const mt_engine *e, int m) {
    size_t n = mt_engine_rows(e);
    return (mt_segments){e->dev_pos + (size_t)m * n, e->dev_starts + (size_t)m * (n + 1), e->seg_count[m], 0};
}


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

/* Sums gradient x[count] (elements [at, at + count) of unit u) across the group, inside the job that
 * made it, and adds the sum of squares of this rank's part to the unit's norm. A group that sums
 * (NCCL; not the cpu's turns) reduce-scatters what each rank needs only its slice of (a host-updated
 * unit: the slice goes home; a sharded replica's whole unit) and all-reduces what every rank needs
 * whole (a unit the device updates; an unsharded replica's, whose store is its own; a sharded
 * replica's vocabulary chunk, of which it keeps what lies in its slice of the unit); each rank takes
 * its part's sum of squares, and MT_JOB_NORMS sums them across the ranks. Alone or in turns: the
 * whole buffer's, with one rank's bits. */
static void reduce_grad(mt_engine *e, int u, float *x, size_t at, size_t count) {
    size_t lo = 0, hi = count;
    if (e->reduce && !e->ordered) {
        int whole = at == 0 && count == (size_t)mt_engine_numel(e, u);
        int scatter = !mt_engine_unit_on_device(e, u) && (e->shard ? whole : e->ranks > 1);
        if (e->shard) mt_engine_piece_part(e, u, at, count, &lo, &hi);
        else mt_coll_slice(count, e->group_rank, e->group_size, &lo, &hi);
        if (scatter) e->be->ops->coll.reduce_scatter(e->be, e->compute, x, count);
        else e->be->ops->coll.all_reduce(e->be, e->compute, x, count);
    } else {
        mt_engine_reduce(e, x, count);
    }
    e->op->sumsq(e->be, e->compute, e->dev_norms + u, x + lo, hi - lo);
}

/* ---- compute jobs ---- */

/* Rows [row, row + rows) of sequence b of micro-batch m: one piece of the head's work, at most the
 * block workspace's piece (h1, tmp). Visits every piece in sequence order. */
typedef struct {
    int m, b, row, rows;
} head_piece;

static int next_head_piece(const mt_engine *e, const mt_compute_job *j, head_piece *p) {
    int most = mt_block_piece_rows(1, j->seq, e->o.chunk);
    if (p->rows == 0) *p = (head_piece){0, 0, 0, 0};
    else if ((p->row += p->rows) == j->seq) {
        p->row = 0;
        if (++p->b == j->batch) p->b = 0, p->m++;
    }
    if (p->m == j->micro_batches) return 0;
    p->rows = j->seq - p->row < most ? j->seq - p->row : most;
    return 1;
}
#define FOR_EACH_HEAD_PIECE(e, j, p) for (head_piece p = {0}; next_head_piece(e, j, &p);)

static size_t head_row(const mt_compute_job *j, head_piece p) { return (size_t)p.b * j->seq + p.row; }

/* The ends' maths on the compute stream (engine/ends.h). */
static mt_ends ends(const mt_engine *e) { return mt_ends_of(e->be, e->compute, e->cfg); }

/* h1 = the final norm of piece p's rows. */
static void final_norm(const mt_compute_job *j, const mt_ends *k, head_piece p, const void *norm_w) {
    mt_engine *e = j->e;
    mt_head_norm(k, e->ws.h1, e->ws.rstd1, row_of(e, ckpt_at(e, e->L, p.m), head_row(j, p)), norm_w, p.rows);
}

/* Adds the head's weight gradient for vocabulary rows [v0, v0 + rows) into dw ([rows, D]), from
 * every row of the step: the final norm again, the chunk's logits from the rows' log-sum-exp. */
static void head_dw_chunk(const mt_compute_job *j, float *dw, int v0, int rows) {
    mt_engine *e = j->e;
    mt_ends k = ends(e);
    int D = e->cfg->hidden_size;
    const void *norm_w = mt_bind_weights(e->lay, e->U - 1, e->head_w, e->be->ops->weight_dtype).t[MT_T_FINAL_NORM];
    const char *lm_w = lm_weight(e);
    size_t wsize = mt_dtype_size(e->be->ops->weight_dtype);
    FOR_EACH_HEAD_PIECE(e, j, p) {
        size_t row = head_row(j, p);
        final_norm(j, &k, p, norm_w);
        mt_head_dw(&k, dw, e->ws.h1, lm_w + (size_t)v0 * D * wsize, targets_at(e, p.m) + row,
                   e->dev_lse + p.m * mt_engine_rows(e) + row, p.rows, v0, rows, j->scale, e->o.lm_chunk, e->lm_ws);
    }
}

/* A gradient chunk of unit u is done: summed across the ranks, its sum of squares added to the
 * unit's norm (reduce_grad), and this rank's part of it (elements [at, at + count) of the unit)
 * copied home to `home`, on the compute stream before the next chunk takes the buffer. */
static void chunk_done(mt_engine *e, int u, size_t at, float *home, float *chunk, size_t count) {
    reduce_grad(e, u, chunk, at, count);
    mt_engine_copy_home_in_launch(e, u, at, home, chunk, count);
}

/* The rows of vocabulary chunk j->v0 (the ends chunked). */
static int chunk_rows(const mt_compute_job *j) {
    int V = j->e->cfg->vocab_size, chunk = j->e->o.head_vocab_chunk;
    return V - j->v0 < chunk ? V - j->v0 : chunk;
}

/* The head matrix's gradient for vocabulary chunk j->v0 (MT_JOB_HEAD_CHUNK: untied, the ends
 * chunked; tied, the matrix is the embedding's, its chunks made in the embedding's backward). */
static void head_chunk(const mt_compute_job *j) {
    mt_engine *e = j->e;
    int U = e->U, rows = chunk_rows(j);
    size_t count = (size_t)rows * e->cfg->hidden_size;
    float *dw = mt_bind_grads(e->lay, U - 1, e->head_grad).t[MT_T_LM_HEAD];
    mt_zero_in_launch(e->be, dw, count * 4, e->compute);
    mt_engine_acc_open(e, mt_acc_unit(U - 1), dw, count, 1);
    head_dw_chunk(j, dw, j->v0, rows);
    mt_engine_acc_close(e, mt_acc_unit(U - 1), dw, count);
    chunk_done(e, U - 1, mt_engine_head_rest_numel_for(e->lay) + (size_t)j->v0 * e->cfg->hidden_size, j->home, dw, count);
}

/* The kinds' auxiliary loss (a mixture of experts' load balancing: block_parts.h's pass_loss) of
 * each micro-batch's forward, their mean over the step's micro-batches, and over a group's ranks,
 * as the cross-entropy's mean is over every rank's targets; and each micro-batch's gradient, which
 * the blocks' backwards take. */
static void aux_loss(const mt_compute_job *j) {
    mt_engine *e = j->e;
    float mean = 1.0f / (float)(j->micro_batches * (e->reduce ? e->group_size : 1));
    mt_engine_acc_open(e, mt_acc_aux(e), e->dev_aux_loss, 1, 1);
    for (int m = 0; m < j->micro_batches; m++) {
        int rows = real_tokens(e, j, m);
        if (rows > 0) mt_block_pass_loss(e->pass, e->compute, m, rows, mean); /* all padding: no loss */
    }
    mt_engine_acc_close(e, mt_acc_aux(e), e->dev_aux_loss, 1);
    mt_engine_reduce(e, e->dev_aux_loss, 1);
}

/* The final norm, the LM head and the loss, and in training their backward: the gradient flowing
 * into the last block (dy), and the head's weight gradients, a piece of a sequence at a time so
 * that they accumulate in sequence order. */
static void run_head(const mt_compute_job *j) {
    mt_engine *e = j->e;
    mt_ends k = ends(e);
    mt_unit_weights w = mt_bind_weights(e->lay, e->U - 1, e->head_w, e->be->ops->weight_dtype);
    const void *norm_w = w.t[MT_T_FINAL_NORM], *lm_w = lm_weight(e);
    if (j->mode == MT_RUN_LOGITS) {
        mt_head_norm(&k, e->ws.h1, e->ws.rstd1, row_of(e, ckpt_at(e, e->L, 0), j->last_row), norm_w, 1);
        mt_head_logits(&k, e->dev_logits, e->ws.h1, lm_w);
        return;
    }
    if (e->any_pass_state) aux_loss(j);
    int train = j->mode != MT_RUN_EVAL, chunked = train && mt_engine_ends_chunked(e), tied = e->cfg->tie_embeddings;
    /* Only a backward has gradients (a forward-only engine has no buffers for them). */
    mt_unit_grads g = train ? mt_bind_grads(e->lay, e->U - 1, e->head_grad) : (mt_unit_grads){0};
    /* What the pieces add into: the loss; in training the head unit's gradient (chunked untied: the
     * final norm's part), and tied unchunked the embedding's, whose second round is the embedding's
     * backward. */
    size_t head_acc = chunked && !tied ? (size_t)(g.t[MT_T_LM_HEAD] - e->head_grad) : (size_t)mt_engine_numel(e, e->U - 1);
    int embed_acc = train && tied && !chunked;
    mt_engine_acc_open(e, MT_ACC_LOSS, e->dev_loss, 1, 1);
    if (train) mt_engine_acc_open(e, mt_acc_unit(e->U - 1), e->head_grad, head_acc, 1);
    if (embed_acc) mt_engine_acc_open(e, mt_acc_unit(0), e->embed_grad, (size_t)mt_engine_numel(e, 0), 1);
    FOR_EACH_HEAD_PIECE(e, j, p) {
        size_t row = head_row(j, p);
        final_norm(j, &k, p, norm_w);
        float *lse = chunked ? e->dev_lse + p.m * mt_engine_rows(e) + row : NULL;
        mt_head_loss(&k, e->dev_loss, lse, train ? e->ws.tmp : NULL, train && !chunked ? lm_grad(e) : NULL, e->ws.h1,
                     lm_w, targets_at(e, p.m) + row, p.rows, j->scale, e->o.lm_chunk, e->lm_ws);
        if (train)
            mt_head_norm_backward(&k, row_of(e, dy_at(e, p.m), row), g.t[MT_T_FINAL_NORM], e->ws.tmp,
                                  row_of(e, ckpt_at(e, e->L, p.m), row), norm_w, e->ws.rstd1, p.rows);
    }
    mt_engine_acc_close(e, MT_ACC_LOSS, e->dev_loss, 1);
    if (train) mt_engine_acc_close(e, mt_acc_unit(e->U - 1), e->head_grad, head_acc);
    if (embed_acc) mt_engine_acc_close(e, mt_acc_unit(0), e->embed_grad, (size_t)mt_engine_numel(e, 0));
    mt_engine_reduce(e, e->dev_loss, 1); /* every rank's loss is the group's */
    if (j->mode == MT_RUN_EVAL) return;
    if (chunked) { /* the unit's tensors before the head matrix (the final norm's) go home; its chunks follow */
        chunk_done(e, e->U - 1, 0, e->grad_home[e->U - 1], e->head_grad, mt_engine_head_rest_numel_for(e->lay));
        return;
    }
    reduce_grad(e, e->U - 1, e->head_grad, 0, (size_t)mt_engine_numel(e, e->U - 1));
}

/* The embedding's gradient: the rows the step's input tokens touch, gathered from the gradient
 * flowing back. Whole, or (mt_engine_ends_chunked) vocabulary chunk j->v0, with its norm and its
 * copy home on the compute stream before the next chunk's job takes the buffer; tied, each chunk
 * starts with the head's part (as the whole gradient does, from the head's job). */
static void embed_backward(const mt_compute_job *j) {
    mt_engine *e = j->e;
    int D = e->cfg->hidden_size, chunked = mt_engine_ends_chunked(e);
    int v0 = chunked ? j->v0 : 0, rows = chunked ? chunk_rows(j) : e->cfg->vocab_size;
    float *dw = mt_bind_grads(e->lay, 0, e->embed_grad).t[MT_T_WTE];
    size_t acc = chunked ? (size_t)rows * D : (size_t)mt_engine_numel(e, 0);
    if (chunked) mt_zero_in_launch(e->be, e->embed_grad, (size_t)rows * D * 4, e->compute);
    if (mt_engine_embed_grad_late(e)) { /* the head's round of the chunk, then the embedding's */
        mt_engine_acc_open(e, mt_acc_unit(0), e->embed_grad, acc, 1);
        head_dw_chunk(j, dw, v0, rows);
        mt_engine_acc_close(e, mt_acc_unit(0), e->embed_grad, acc);
    }
    mt_ends k = ends(e);
    mt_engine_acc_open(e, mt_acc_unit(0), e->embed_grad, acc, !e->cfg->tie_embeddings);
    for (int m = 0; m < j->micro_batches; m++)
        for (int b = 0; b < j->batch; b++) {
            size_t row = (size_t)b * j->seq;
            mt_embed_backward(&k, dw, inputs_at(e, m) + row, row_of(e, dy_at(e, m), row), j->seq, v0, rows);
        }
    mt_engine_acc_close(e, mt_acc_unit(0), e->embed_grad, acc);
    if (chunked) chunk_done(e, 0, (size_t)v0 * D, j->home, dw, (size_t)rows * D); /* the WTE matrix starts the unit */
    else reduce_grad(e, 0, e->embed_grad, 0, (size_t)mt_engine_numel(e, 0));
}

/* The profile's span of each kind of job (backend.h's prof group): a block's holds what its parts'
 * spans do not (the gradient's zeroing and norm, a sharded replica's gather of its weights). */
static const struct {
    const char *phase, *op;
} job_span[] = {
    [MT_JOB_EMBED_FWD] = {"step", "embedding"},
    [MT_JOB_BLOCK_FWD] = {MT_PHASE_FORWARD, "block, outside its parts"},
    [MT_JOB_HEAD] = {"step", "head and loss"},
    [MT_JOB_HEAD_CHUNK] = {"step", "head gradient chunk"},
    [MT_JOB_BLOCK_BWD] = {MT_PHASE_BACKWARD, "block, outside its parts"},
    [MT_JOB_EMBED_BWD] = {"step", "embedding backward"},
    [MT_JOB_DEVICE_UPDATE] = {"step", "device optimizer"},
    [MT_JOB_NORMS] = {"step", "gradient norms summed"},
};

static void do_job(mt_compute_job *j) {
    mt_engine *e = j->e;
    int n = j->batch * j->seq;
    mt_block_ctx ctx = {e->be, e->compute, e->cfg, j->batch, j->seq, e->o.chunk, e->dev_constants, &e->ws, j->block,
                        NULL, NULL, e->pass, 0, e->o.attn_tile, {0, 0}, NULL, NULL};
    if (j->gather.dst) mt_engine_gather_weights(e, &j->gather);
    switch (j->kind) {
    case MT_JOB_EMBED_FWD: {
        mt_unit_weights w = mt_bind_weights(e->lay, 0, e->embed_w, e->be->ops->weight_dtype);
        mt_ends k = ends(e);
        for (int m = 0; m < j->micro_batches; m++)
            mt_embed_forward(&k, micro(e, j->x_out, m), inputs_at(e, m), w.t[MT_T_WTE], n);
        break;
    }
    case MT_JOB_BLOCK_FWD: {
        int u = mt_unit_block(j->block);
        mt_unit_weights w = mt_bind_weights(e->lay, u, mt_engine_block_weights(e, j->block), e->be->ops->weight_dtype);
        for (int m = 0; m < j->micro_batches; m++) {
            mt_segments seg = j->segmented ? segments_at(e, m) : (mt_segments){0};
            ctx.seg = j->segmented ? &seg : NULL;
            ctx.real_rows = real_rows_at(e, j, m);
            ctx.micro = m;
            mt_block_forward(&ctx, &w, micro(e, j->x_in, m), micro(e, j->x_out, m));
        }
        break;
    }
    case MT_JOB_HEAD: run_head(j); break;
    case MT_JOB_HEAD_CHUNK: head_chunk(j); break;
    case MT_JOB_BLOCK_BWD: {
        int u = mt_unit_block(j->block);
        float *grads = mt_engine_block_grads(e, j->block, j->grad_slot);
        mt_unit_weights w = mt_bind_weights(e->lay, u, mt_engine_block_weights(e, j->block), e->be->ops->weight_dtype);
        mt_unit_grads g = mt_bind_grads(e->lay, u, grads);
        mt_engine_acc_open(e, mt_acc_unit(u), grads, (size_t)mt_engine_numel(e, u), 1);
        for (int m = 0; m < j->micro_batches; m++) {
            mt_segments seg = j->segmented ? segments_at(e, m) : (mt_segments){0};
            ctx.seg = j->segmented ? &seg : NULL;
            ctx.real_rows = real_rows_at(e, j, m);
            ctx.micro = m;
            mt_block_backward(&ctx, &w, &g, micro(e, j->x_in, m), dy_at(e, m));
        }
        mt_engine_acc_close(e, mt_acc_unit(u), grads, (size_t)mt_engine_numel(e, u));
        reduce_grad(e, u, grads, 0, (size_t)mt_engine_numel(e, u));
        break;
    }
    case MT_JOB_EMBED_BWD: embed_backward(j); break;
    case MT_JOB_DEVICE_UPDATE: mt_engine_device_update(e, &j->adam, j->clip); break;
    case MT_JOB_NORMS: mt_engine_reduce(e, e->dev_norms, (size_t)e->U); break;
    }
}

static void run_job(void *arg) {
    mt_compute_job *j = arg;
    mt_engine *e = j->e;
    mt_span_begin(e->be, e->compute, job_span[j->kind].phase, job_span[j->kind].op, 0);
    do_job(j);
    mt_span_end(e->be, e->compute);
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

