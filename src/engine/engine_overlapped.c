/* The optimizer's step without clipping (engine_internal.h's MT_OPT_OVERLAPPED): each host-updated
 * unit's whole update as soon as its gradients are home, during the backward.
 *
 * Gradients arrive in backward order (the head, blocks L-1..0, the embedding), but the next
 * forward needs them the other way round. While the backward runs, blocks go oldest first: the
 * issuing thread reuses a block's gradient buffer (the ring) only once its update is done. Once it
 * is over, the backlog drains in the order the next forward needs it, while that forward already
 * runs.
 *
 * The ends come home one of two ways (engine_buffers.c):
 *   - whole, each in a host buffer of its own (they are not chunked, or every gradient is kept):
 *     the head is needed last of all, so its pieces fill the moments when nothing else is home
 *     (whole, its update, the largest, would hold up the blocks arriving behind it); the
 *     embedding's rows no input token touches are final in an early copy made after the head
 *     (zeros, or tied the head's part), its other rows once its backward is done;
 *   - in vocabulary chunks through the chunk buffers (mt_engine_chunk_buffers_for): each chunk's
 *     rows are updated as it lands, first of all, since the device's chunk after next waits for
 *     its buffer; the head's tensors before its matrix (the final norm) come home apart. The
 *     embedding's rows no input token touches have a zero gradient (alone; tied, the head's part
 *     makes every row's, and in a group the mask is this rank's inputs only: there every row comes
 *     from the chunks): they are updated from a row of zeros, a vocabulary chunk at a time, once
 *     this step's load of the embedding is done, where nothing else is home during the backward
 *     and first after it.
 * Each work is bitwise that part of the whole unit's update (AdamW is elementwise). */
#include <string.h>

#include "engine/engine_internal.h"
#include "util/clock.h"

/* A unit of that work: one update with the gradients one copy brings home. */
typedef enum {
    WORK_EMBED_INPUT_ROWS, /* the embedding's rows some input token touches: after its backward */
    WORK_EMBED_OTHER_ROWS, /* its other rows: from the early copy; with chunk buffers those of one
                            * vocabulary chunk, from a row of zeros */
    WORK_BLOCK,            /* one block */
    WORK_HEAD_PIECE,       /* a piece of the head, cut on moment-block boundaries */
    WORK_HEAD_REST,        /* chunk buffers: the head's tensors before its matrix */
    WORK_CHUNK,            /* chunk buffers: one vocabulary chunk of the head matrix or the embedding */
} opt_work_kind;

typedef struct {
    opt_work_kind kind;
    int unit;          /* the unit it updates */
    int piece, pieces; /* WORK_HEAD_PIECE: which of how many */
    int chunk, v0;     /* WORK_CHUNK: the step's chunk k (its buffer's index), its first vocabulary row;
                        * WORK_EMBED_OTHER_ROWS with chunk buffers: the first row */
    int done;
} opt_work;

/* The step's works in the order the next forward needs them (the embedding's, the blocks', the
 * head's), and the order their gradients arrive in. */
typedef struct {
    opt_work *work;
    int *arrival;
    int n;
    int embed_works; /* work[0, embed_works): the embedding's */
    int first_block; /* block l is work[first_block + l] */
} work_list;

static int head_pieces(const mt_engine *e) {
    int64_t piece = e->lay->max_block_numel / 4 > 0 ? e->lay->max_block_numel / 4 : 1;
    int64_t pieces = (e->lay->units[e->U - 1].numel + piece - 1) / piece;
    return pieces < 1 ? 1 : (int)pieces;
}

/* Through the chunk buffers, whether the embedding's rows no input token touches are updated apart
 * (from zeros) and its chunks bring only the input tokens' rows. */
static int embed_split(const mt_engine *e) { return mt_engine_embed_early_copy(e); }

static int max_works(const mt_engine *e) {
    if (!e->chunk_buffers) return 2 + e->L + head_pieces(e);
    return 3 * mt_engine_vocab_chunks(e) + e->L + 1;
}

/* The ends whole: the embedding's input rows, its other rows, blocks 0..L-1, the head's pieces;
 * arriving the head's pieces (all at once) first, the embedding's other rows next from the early
 * copy, or without one (mt_engine_embed_early_copy) last, before its input rows. */
static void list_whole(const mt_engine *e, work_list *w) {
    int n = 0, a = 0, pieces = head_pieces(e), late = !mt_engine_embed_early_copy(e);
    w->work[n++] = (opt_work){.kind = WORK_EMBED_INPUT_ROWS, .unit = 0};
    w->work[n++] = (opt_work){.kind = WORK_EMBED_OTHER_ROWS, .unit = 0};
    w->embed_works = w->first_block = n;
    for (int l = 0; l < e->L; l++) w->work[n++] = (opt_work){.kind = WORK_BLOCK, .unit = mt_unit_block(l)};
    for (int p = 0; p < pieces; p++)
        w->work[n++] = (opt_work){.kind = WORK_HEAD_PIECE, .unit = e->U - 1, .piece = p, .pieces = pieces};
    for (int p = 0; p < pieces; p++) w->arrival[a++] = w->first_block + e->L + p;
    if (!late) w->arrival[a++] = 1;
    for (int l = e->L - 1; l >= 0; l--) w->arrival[a++] = w->first_block + l;
    if (late) w->arrival[a++] = 1;
    w->arrival[a++] = 0;
    w->n = n;
}

/* Through the chunk buffers: the embedding's other rows (split) and its chunks, blocks 0..L-1, the
 * head's rest and its matrix's chunks (untied); arriving the head's rest, the other rows (with it),
 * the head's chunks, blocks L-1..0, the embedding's chunks: the order the issuing thread sends them
 * in (engine_schedule.c). */
static void list_chunked(const mt_engine *e, work_list *w) {
    int n = 0, a = 0, chunks = mt_engine_vocab_chunks(e), step = e->o.head_vocab_chunk, head = !e->cfg->tie_embeddings;
    int embed_k = head ? chunks : 0; /* the step's first embedding chunk */
    for (int c = 0; embed_split(e) && c < chunks; c++)
        w->work[n++] = (opt_work){.kind = WORK_EMBED_OTHER_ROWS, .unit = 0, .v0 = c * step};
    for (int c = 0; c < chunks; c++)
        w->work[n++] = (opt_work){.kind = WORK_CHUNK, .unit = 0, .chunk = embed_k + c, .v0 = c * step};
    w->embed_works = w->first_block = n;
    for (int l = 0; l < e->L; l++) w->work[n++] = (opt_work){.kind = WORK_BLOCK, .unit = mt_unit_block(l)};
    int rest = n;
    w->work[n++] = (opt_work){.kind = WORK_HEAD_REST, .unit = e->U - 1};
    for (int c = 0; head && c < chunks; c++)
        w->work[n++] = (opt_work){.kind = WORK_CHUNK, .unit = e->U - 1, .chunk = c, .v0 = c * step};
    w->arrival[a++] = rest;
    for (int i = 0; i < w->embed_works; i++)
        if (w->work[i].kind == WORK_EMBED_OTHER_ROWS) w->arrival[a++] = i;
    for (int i = rest + 1; i < n; i++) w->arrival[a++] = i;
    for (int l = e->L - 1; l >= 0; l--) w->arrival[a++] = w->first_block + l;
    for (int i = 0; i < w->embed_works; i++)
        if (w->work[i].kind == WORK_CHUNK) w->arrival[a++] = i;
    w->n = n;
}

/* Whether w's gradients are home; `wait`: wait until they are. The embedding's other rows come
 * from its early copy where there is one, else with the whole; through the chunk buffers their
 * gradient is zeros, but their update must not begin before this step's load of the embedding is
 * done reading its weights: the head's gradients (the head's job ran after the embedding's forward,
 * which waited for that load) say it is. */
static int work_home(mt_engine *e, const mt_opt_job *job, const opt_work *w, int wait) {
    if (w->kind == WORK_CHUNK) return mt_engine_grads_home(e, job, MT_FL_CHUNK_ISSUED, MT_EV_CHUNK_HOME, w->chunk, wait);
    if (w->kind == WORK_EMBED_OTHER_ROWS && e->chunk_buffers)
        return mt_engine_grads_home(e, job, MT_FL_GRADS_ISSUED, MT_EV_GRADS_HOME, e->U - 1, wait);
    if (w->kind == WORK_EMBED_OTHER_ROWS && mt_engine_embed_early_copy(e))
        return mt_engine_grads_home(e, job, MT_FL_EMBED_EARLY_ISSUED, MT_EV_EMBED_EARLY_HOME, 0, wait);
    return mt_engine_grads_home(e, job, MT_FL_GRADS_ISSUED, MT_EV_GRADS_HOME, w->unit, wait);
}

/* The rows of the vocabulary chunk that starts at v0. */
static int chunk_rows(const mt_engine *e, int v0) {
    int left = e->cfg->vocab_size - v0;
    return left < e->o.head_vocab_chunk ? left : e->o.head_vocab_chunk;
}

static void run_chunk(mt_engine *e, const mt_opt_job *job, int64_t adam_step, const opt_work *w) {
    const float *grad = mt_engine_chunk_buffer(e, w->chunk);
    int64_t D = e->cfg->hidden_size, rows = chunk_rows(e, w->v0);
    const uint8_t *mask = e->input_rows[job->generation % 2];
    if (w->unit == 0 && embed_split(e)) {
        mt_engine_update_embedding_rows(e, job, adam_step, MT_ADAMW_FULL, w->v0, (int)rows, grad, (size_t)D,
                                        mask + w->v0, 1);
        return;
    }
    int64_t matrix = w->unit ? (int64_t)mt_engine_head_rest_numel_for(e->lay)
                             : mt_layout_tensor(e->lay, 0, MT_T_WTE)->offset; /* where the matrix starts */
    int64_t lo = matrix + w->v0 * D;
    mt_engine_update_range(e, job, adam_step, MT_ADAMW_FULL, w->unit, lo, lo + rows * D, grad);
}

static void work_run(mt_engine *e, const mt_opt_job *job, int64_t adam_step, const opt_work *w) {
    const uint8_t *mask = e->input_rows[job->generation % 2];
    switch (w->kind) {
    /* A sharded replica's slice of the embedding cuts rows: it takes its slice whole (with no early
     * copy both parts come home together). */
    case WORK_EMBED_INPUT_ROWS:
        if (e->shard) mt_engine_update_piece(e, job, adam_step, MT_ADAMW_FULL, 0, 0, 1);
        else mt_engine_update_masked_rows(e, job, adam_step, MT_ADAMW_FULL, 1, 0);
        break;
    case WORK_EMBED_OTHER_ROWS:
        if (e->chunk_buffers)
            mt_engine_update_embedding_rows(e, job, adam_step, MT_ADAMW_FULL, w->v0, chunk_rows(e, w->v0),
                                            e->zero_row, 0, mask + w->v0, 0);
        else if (!e->shard)
            mt_engine_update_masked_rows(e, job, adam_step, MT_ADAMW_FULL, 0, 0);
        break;
    case WORK_BLOCK: mt_engine_update_piece(e, job, adam_step, MT_ADAMW_FULL, w->unit, 0, 1); break;
    case WORK_HEAD_PIECE: mt_engine_update_piece(e, job, adam_step, MT_ADAMW_FULL, w->unit, w->piece, w->pieces); break;
    case WORK_HEAD_REST:
        mt_engine_update_range(e, job, adam_step, MT_ADAMW_FULL, w->unit, 0,
                               (int64_t)mt_engine_head_rest_numel_for(e->lay), e->grad_home[w->unit]);
        break;
    case WORK_CHUNK: run_chunk(e, job, adam_step, w); break;
    }
}

/* Tells the issuing thread what w's update made possible: a chunk buffer may take the chunk after
 * next; the early copy's buffer may take the full gradient; a unit whose every work is done (the
 * embedding's input rows come last, the head's last piece or chunk) may go to the device again. */
static void work_finished(mt_engine *e, const mt_opt_job *job, const opt_work *w, int *pending) {
    if (w->kind == WORK_CHUNK) mt_engine_raise(e, MT_FL_CHUNK_DONE, w->chunk, job->generation);
    else if (w->kind == WORK_EMBED_OTHER_ROWS && !e->chunk_buffers && mt_engine_embed_early_copy(e))
        mt_engine_raise(e, MT_FL_EMBED_EARLY_DONE, 0, job->generation);
    if (--pending[w->unit] == 0) mt_engine_raise(e, MT_FL_UPDATED, w->unit, job->generation);
}

/* The next block home, while the backward runs oldest first, after it in forward order. */
static int block_home(mt_engine *e, const mt_opt_job *job, const work_list *w, int backward_running) {
    for (int l = 0; l < e->L; l++) {
        int i = w->first_block + (backward_running ? e->L - 1 - l : l);
        if (!w->work[i].done && work_home(e, job, &w->work[i], 0)) return i;
    }
    return -1;
}

/* The backward runs until the gradients of the first block the host updates are issued. */
static int backward_running(mt_engine *e, const mt_opt_job *job) {
    return !mt_engine_reached(e, MT_FL_GRADS_ISSUED, mt_unit_block(e->device_blocks), job->generation, MT_GEN_NEXT);
}

/* The ends whole: the embedding's other rows before its input rows, whose update (the last) lets
 * it go to the device again (with an early copy the input rows' gradient comes home only after the
 * other rows' update; without one both come with the whole gradient); blocks; the head's pieces in
 * order. */
static int pick_whole(mt_engine *e, const mt_opt_job *job, const work_list *w) {
    for (int i = 1; i >= 0; i--)
        if (!w->work[i].done && work_home(e, job, &w->work[i], 0)) return i;
    int block = block_home(e, job, w, backward_running(e, job));
    if (block >= 0) return block;
    for (int i = w->first_block + e->L; i < w->n; i++)
        if (!w->work[i].done) return work_home(e, job, &w->work[i], 0) ? i : -1;
    return -1;
}

/* The first of the embedding's other rows not yet updated (through the chunk buffers), or -1. They
 * are home together. */
static int other_rows(const work_list *w) {
    for (int i = 0; i < w->embed_works; i++)
        if (!w->work[i].done && w->work[i].kind == WORK_EMBED_OTHER_ROWS) return i;
    return -1;
}

/* Through the chunk buffers: the chunks home (and the head's rest), as they came; the embedding's
 * other rows first once the backward is over; blocks; during the backward the other rows where
 * nothing else is home. */
static int pick_chunked(mt_engine *e, const mt_opt_job *job, const work_list *w) {
    for (int a = 0; a < w->n; a++) {
        const opt_work *x = &w->work[w->arrival[a]];
        if ((x->kind == WORK_CHUNK || x->kind == WORK_HEAD_REST) && !x->done && work_home(e, job, x, 0))
            return w->arrival[a];
    }
    int running = backward_running(e, job), other = other_rows(w);
    if (other >= 0 && !work_home(e, job, &w->work[other], 0)) other = -1;
    if (!running && other >= 0) return other;
    int block = block_home(e, job, w, running);
    return block >= 0 ? block : other;
}

void mt_engine_run_overlapped(mt_engine *e, const mt_opt_job *job) {
    int64_t adam_step = mt_engine_count_update(e, 0);
    int max = max_works(e), arrival[max], pending[e->U];
    opt_work work[max];
    work_list w = {.work = work, .arrival = arrival};
    if (e->chunk_buffers) list_chunked(e, &w);
    else list_whole(e, &w);
    memset(pending, 0, sizeof pending);
    int left = 0;
    for (int i = 0; i < w.n; i++) { /* the device's work: the ends with ends_on_device, the resident blocks */
        if (mt_engine_unit_on_device(e, work[i].unit)) work[i].done = 1;
        else pending[work[i].unit]++, left++;
    }
    for (int u = 0; u < e->U; u++)
        if (mt_engine_unit_on_device(e, u)) mt_engine_raise(e, MT_FL_UPDATED, u, job->generation);
    for (; left > 0; left--) {
        int pick = e->chunk_buffers ? pick_chunked(e, job, &w) : pick_whole(e, job, &w);
        for (int a = 0; pick < 0; a++) /* nothing is home: wait for the next to arrive */
            if (!work[arrival[a]].done) work_home(e, job, &work[pick = arrival[a]], 1);
        if (mt_engine_optimizer_halted(e)) return; /* the flags it read no longer mean anything */
        double t0 = mt_now();
        work_run(e, job, adam_step, &work[pick]);
        e->job_update_seconds += mt_now() - t0;
        work[pick].done = 1;
        work_finished(e, job, &work[pick], pending);
    }
}
