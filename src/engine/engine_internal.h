/* The engine's state, shared by its files: engine.c (creation), engine_buffers.c (buffers),
 * engine_schedule.c (what runs where and when), engine_jobs.c (the compute jobs),
 * engine_loads.c (the weights' loads), engine_optimizer.c (the CPU optimizer thread), engine_sync.c
 * (events and flags, as protocol.h's table lists them), engine_ckpt.c and engine_device_state.c.
 * docs/engine.md is the guide. */
#ifndef MT_ENGINE_INTERNAL_H
#define MT_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/block.h"
#include "engine/engine.h"
#include "engine/flag.h"
#include "engine/protocol.h"

/* Device buffers that host-kept activation checkpoints pass through: one being written, one
 * being read, one on its way out or in. */
#define CKPT_STAGES 3

/* The device-updated units' masters go up and come home through a host buffer of this many bytes:
 * the store keeps them split (store.h), the device in fp32. */
#define MT_ENGINE_MASTER_STAGING ((size_t)64 << 20)

/* How the optimizer thread takes a step (engine_optimizer.c):
 *   OVERLAPPED   no clipping: each unit's whole update as soon as its gradients are home, during
 *                the backward;
 *   SPECULATIVE  exact clipping with fp32 moments: once the global norm is known (norm_known), the
 *                masters in the order the next forward needs them, then the moments (bitwise the
 *                plain update); after a step applied unclipped, each unit's whole update as its
 *                gradients come home during the backward instead, as if this step were not
 *                clipped either, taken back out within fp32 rounding where it is;
 *   DEFERRED     exact clipping with bf16 or 8-bit moments (each part would round them): every
 *                unit's update once the pass is done and the norm known. */
typedef enum { MT_OPT_OVERLAPPED, MT_OPT_SPECULATIVE, MT_OPT_DEFERRED } mt_opt_mode;

/* What the optimizer thread is asked to do for one step. */
typedef struct {
    int64_t generation; /* the step's index: its updates raise the flags to generation + 1 */
    float lr;           /* also the device's, for the units it updates (ends_on_device) */
    mt_opt_mode mode;
    float grad_scale;   /* deferred: the clip coefficient */
    int skip;           /* deferred: non-finite gradient: leave everything unchanged */
} mt_opt_job;

/* A load's destination whose other ranks' slices are still to come (engine_share.c); dst NULL: none. */
typedef struct {
    int unit;
    void *dst;
} mt_gather_due;

struct mt_engine {
    mt_backend *be;
    const mt_op_iface *op;     /* be->ops->op: the layer ops */
    mt_store *store;
    const mt_layout *lay;
    const mt_config *cfg;
    mt_engine_options o;
    int L, U, K;
    int device_blocks;         /* blocks 0..device_blocks-1 are resident (D in comments), the rest stream */

    mt_stream *h2d, *compute, *d2h;

    /* device buffers */
    void **slot;               /* [K] block weights */
    mt_gather_due *gather_due; /* [K + 2] a sharded replica's loads not yet made whole (engine_share.c):
                                * slot k's at k, the head's at K, the embedding's at K + 1 */
    float *grad_slot[2];       /* block gradients, alternating */
    void *embed_w, *head_w;    /* unit 0 and unit U-1 weights */
    float *embed_grad, *head_grad;
    void *ckpt;                /* [L+1-P][M][n, D]: the input of block l >= P is ckpt[l - P], the
                                * head's ckpt[L - P]; P = o.ckpt_on_host (engine_ckpt.c) */
    void *host_ckpt;           /* [P][M][n, D] pinned: the inputs of blocks 0..P-1 */
    void *ckpt_stage[CKPT_STAGES]; /* [M][n, D] each: their device ring */
    void *dy;                  /* [M][n, D] gradient flowing back */
    void *ws_base, *lm_ws;
    mt_block_ws ws;
    int32_t *dev_inputs, *dev_targets; /* [M][n] each */
    int32_t *dev_pos, *dev_starts;     /* packed: [M][n] positions, [M][n + 1] segment starts */
    /* The units the device updates (engine_device_state.c): their fp32 state, the embedding's,
     * the head's (ends_on_device), then blocks 0..D-1 (mt_engine_state_offset); the resident
     * blocks' weights [D][max block] and gradients (below); the clip coefficient. */
    float *dev_master, *dev_m, *dev_v, *dev_clip_scale;
    void *resident_w;
    float *resident_grad;      /* [D - J - S][max block]: blocks J+S..D-1's; blocks 0..J-1's lie in
                                * the checkpoints' memory, block j's ending (j * grad_stride) bytes
                                * below ckpt_grads_top, and blocks J..J+S-1's in the gradient slots
                                * (engine_buffers.c, mt_engine_block_grads) */
    int grads_in_ckpts;        /* J */
    size_t ckpt_grads_top, grad_stride;
    int grads_in_slots;        /* S */
    int64_t dev_step;          /* updates the device applied to them; issuing thread only */
    int64_t dev_home_generation; /* the store holds the device's state as of this many steps */
    float *dev_norms, *dev_loss, *dev_logits;
    void *dev_constants;       /* the block kinds' constants (mt_block_constants_fill) */
    float *dev_lse;            /* [M][n]: each row's log-sum-exp of its logits (head chunked) */
    /* The feed-forward kinds' state over a pass (block.h: a mixture of experts' routing statistics
     * and load-balancing loss gradient), any_pass_state when some kind keeps one; the auxiliary
     * loss the head's job adds the kinds' losses into, summed over the micro-batches. */
    mt_pass_state pass[MT_FFN_KINDS];
    int any_pass_state;
    float *dev_aux_loss;
    /* A mixture of experts whose backward reloads streamed blocks (MT_MODE_ROUTED): a reload
     * brings only the experts the pass routed some token to (engine_schedule.c), once the
     * forward's routing is at home (routed_home; routing_known for this pass). unrouted: [E]
     * scratch, a block's experts skipped. */
    int routed_reload, routing_known;
    uint8_t *unrouted;
    /* This pass's weight bytes copied to the device, and its reloads' experts: skipped of seen. */
    double bytes_in;
    int64_t experts_seen, experts_skipped;

    /* host staging (pinned on cuda) */
    int32_t *host_tokens;      /* [2][M][n]: inputs then targets */
    int32_t *host_segments;    /* packed: [M][n] positions then [M][n + 1] segment starts */
    int *seg_count;            /* packed: [M] the pass's segments a micro-batch; the jobs read it */
    int *real_rows;            /* packed: [M][batch] each sequence's rows before its padding (engine.h) */
    float *grads_full;         /* every unit's gradient in layout positions, or NULL (ring mode; or
                                * clipping with some unit on the device: grads_host) */
    float *grads_host;         /* that case: the host-updated units' gradients, one after another */
    float **grad_home;         /* [U]: where unit u's gradient lands on the host */
    float *grad_ring_base;     /* ring mode: [grad_ring][max block] */
    int grad_ring;             /* ring mode: blocks' gradients rotate through this many buffers */
    /* The ends' gradient chunks home (mt_engine_chunk_buffers_for; engine_schedule.c): chunk k of
     * the step (the head's vocabulary chunks, then the embedding's) lands in chunk_buf[k mod
     * chunk_buffers], [head_vocab_chunk][hidden] each, and the head's tensors before its matrix in
     * grad_home[U - 1]; the embedding's rows no input token touched take zero_row ([hidden] zeros). */
    int chunk_buffers;
    float *chunk_buf[MT_ENGINE_CHUNK_BUFFERS];
    float *zero_row;
    float *host_norms, *host_loss, *host_logits;
    void *host_constants;
    float *master_staging;     /* the device-updated units' masters pass through it (engine_device_state.c) */
    float *host_aux_loss;

    /* Events and flags (protocol.h): ev[id][i] and fl[id][i], i below n_ev[id] and n_fl[id]. */
    mt_event **ev[MT_EV_COUNT];
    int n_ev[MT_EV_COUNT];
    mt_flag *fl[MT_FL_COUNT];
    int n_fl[MT_FL_COUNT];
    mt_protocol_trace *trace;  /* tests: every use of them is appended here */
    int num_stalls, max_stalls;          /* the pass's timed compute waits (stall_begin, stall_end) */
    int num_jobs, max_jobs;              /* the pass's compute jobs (job_begin, job_end) */
    int first_backward_job;              /* the index of the pass's first backward job */
    /* Without clipping the embedding is updated in two parts (engine_optimizer.c): the rows no
     * input token of the step touches, from a first copy of its gradient made right after the
     * head, and the input tokens' rows once the embedding's backward is done. */
    uint8_t *input_rows[2];    /* [vocab] per step parity: 1 where a row is some input token */
    int64_t generation;        /* steps issued */
    int poison_next;           /* test hook: the next step's gradient norm reads NaN */
    int fault_next;            /* test hook: the next step fails as on a device error */

    /* the optimizer thread */
    pthread_t opt_thread;
    int opt_running;
    pthread_mutex_t opt_lock;
    pthread_cond_t opt_cond;
    mt_opt_job job;
    int job_pending, opt_stop;
    int opt_busy;              /* a job is running; guarded by opt_lock */
    int opt_halted;            /* (atomic) mt_engine_optimizer_halt: no more work, ever */
    int64_t adam_step;         /* updates applied; guarded by opt_lock */
    float norm_scale;          /* speculative: the step's clip coefficient, and whether it is */
    int norm_skip;             /* skipped; guarded by opt_lock, written before norm_known rises */
    int update_ahead;          /* speculative: the next job takes each unit's whole update ahead of
                                * the norm (the last step was applied unclipped); guarded by opt_lock */
    double opt_seconds;        /* time spent updating in the last step; guarded by opt_lock */
    double opt_seconds_per_block; /* its mean per block; guarded by opt_lock */
    double opt_after_norm_seconds; /* exact clipping, the last job: from learning the norm to its
                                    * last master out; guarded by opt_lock */
    int opt_backlog_units;     /* its host-updated units whose moments were still to take then;
                                * likewise */
    double job_block_seconds;  /* the running job's time on blocks so far; optimizer thread only */
    double job_update_seconds; /* the running job's time updating (not waiting) so far; likewise */
    double job_norm_time;      /* the running job's: when it learned the norm; likewise */
    double job_after_norm_seconds; /* the running job's opt_after_norm_seconds and */
    int job_backlog_units;     /* opt_backlog_units; likewise */
    int *opt_cores, num_opt_cores; /* the optimizer team's cores (pinned), or none */
    void (*guard)(void *ctx, int unit); /* mt_engine_set_update_guard's; set under opt_lock */
    void *guard_ctx;

    /* Data parallelism (ranks.c): this engine is rank `rank` of `ranks` engines on one store. Each
     * unit's gradient is summed across the ranks on the devices (the backend's all_reduce, in the
     * compute job that made it) and each rank sends home its slice of it (mt_engine_slice) into the
     * leader's host gradients; the leader (rank 0) alone runs the optimizer, once every follower's
     * pass_done says its slices are home, and the followers wait on the leader's updated flags. */
    int rank, ranks;
    int reduce;                /* gradients and loss are summed across a group: ranks (threads) or
                                * replicas (processes, each with its own store: ranks.h) */
    int group_rank, group_size; /* this engine's place in that group (a replica's: set by its step) */
    int ordered;               /* the group takes turns with every accumulator (backend.h: the cpu's
                                * threads): its sums have one rank's bits; otherwise it sums, and each
                                * rank reduce-scatters what only its slice needs (engine_jobs.c) */
    int shard;                 /* a replica whose group splits the host-updated units (engine_share.c):
                                * each process takes home and updates only its slice of each, and the
                                * other slices come from their owners over the devices */
    mt_engine *leader;         /* a follower's leader; NULL on the leader and on a lone engine */
    mt_engine **peers;         /* the leader's: every rank's engine, [ranks] */
    mt_flag pass_done;         /* a follower's: raised to g + 1 once step g's slices are home */
    int64_t step_targets;      /* the step's targets over every rank; 0: this pass's own */
    int group_failed;          /* set (atomically) when the group aborts: another rank failed */

    /* cleanup lists */
    void **allocs, **host_allocs;
    int num_allocs, num_host_allocs, failed;
};

/* The kinds of pass (engine_schedule.c) and of compute job (engine_jobs.c). */
typedef enum { MT_RUN_TRAIN, MT_RUN_GRADS, MT_RUN_EVAL, MT_RUN_LOGITS } mt_run_mode;
typedef enum {
    MT_JOB_EMBED_FWD,
    MT_JOB_BLOCK_FWD,
    MT_JOB_HEAD,    /* the final norm, the LM head and its loss; in training its backward too */
    MT_JOB_HEAD_CHUNK, /* the ends chunked: one vocabulary chunk of the head's weight gradient */
    MT_JOB_BLOCK_BWD,
    MT_JOB_EMBED_BWD,
    MT_JOB_DEVICE_UPDATE, /* the device's AdamW of the units whose state it keeps */
    MT_JOB_NORMS,         /* a summing group: every rank's slices' sums of squares, summed */
} mt_job_kind;

/* A compute job: one unit's work over the pass's M micro-batches. */
typedef struct {
    mt_engine *e;
    mt_job_kind kind;
    mt_run_mode mode;
    int block, grad_slot;
    int v0;               /* the ends chunked: the first vocabulary row of the job's chunk (MT_JOB_HEAD_CHUNK,
                           * MT_JOB_EMBED_BWD) */
    float *home;          /* where on the host that chunk lands (this rank's slice of it at its place) */
    int batch, seq, micro_batches, last_row;
    int segmented;        /* the pass's micro-batches have segments (positions were given) */
    float scale;
    void *x_in, *x_out;   /* activation checkpoints read and written: [M][n, D] */
    mt_gather_due gather; /* weights the job reads, to be made whole first (engine_share.c) */
    mt_adamw_params adam; /* MT_JOB_DEVICE_UPDATE */
    int clip;
} mt_compute_job;

/* engine_share.c: a sharded replica's weights and state. A load brings this rank's slice of the
 * weights alone (what its optimizer wrote): mt_engine_loaded notes the load, and the job that first
 * reads them takes the note (mt_engine_take_gather) and makes them whole first, every rank's slice
 * broadcast from its owner (mt_engine_gather_weights, inside the job). */
void mt_engine_loaded(mt_engine *e, int u, void *dst, int where);
void mt_engine_take_gather(mt_engine *e, mt_compute_job *j, int where);
void mt_engine_gather_weights(mt_engine *e, const mt_gather_due *g);
/* Where a load lands, as gather_due indexes it. */
static inline int mt_engine_where_slot(int k) { return k; }
static inline int mt_engine_where_head(const mt_engine *e) { return e->K; }
static inline int mt_engine_where_embed(const mt_engine *e) { return e->K + 1; }
/* Elements [*lo, *hi) of unit u's layout range (absolute element indices) this engine's optimizer
 * updates: all of them, or a sharded replica's slice. */
void mt_engine_owned(const mt_engine *e, int u, int64_t *lo, int64_t *hi);

/* engine_jobs.c: issues a copy of the job on the compute stream (mt_launch: on cpu it runs later,
 * on the stream's worker, and frees itself), between two timing events: their spans add up to the
 * time the device spent computing, the rest of a pass is the time it sat idle. */
mt_status mt_engine_launch(mt_engine *e, mt_compute_job job);

/* Token rows of a full micro-batch (batch x seq), and unit u's parameters. */
static inline size_t mt_engine_rows(const mt_engine *e) { return (size_t)e->o.batch * e->o.seq; }
static inline int64_t mt_engine_numel(const mt_engine *e, int u) { return e->lay->units[u].numel; }

/* Whose slices a unit's gradient is cut into on its way home: the threads' of one store (rank of
 * ranks), or a sharded replica's group (each process its own slice, which it alone updates). */
static inline int mt_engine_home_rank(const mt_engine *e) { return e->shard ? e->group_rank : e->rank; }
static inline int mt_engine_home_ranks(const mt_engine *e) { return e->shard ? e->group_size : e->ranks; }

/* Rank r's slice [*lo, *hi) of unit u's elements: what it sends home (reduce_scatter's slice). */
static inline void mt_engine_slice_of(const mt_engine *e, int u, int r, size_t *lo, size_t *hi) {
    mt_coll_slice((size_t)mt_engine_numel(e, u), r, mt_engine_home_ranks(e), lo, hi);
}
static inline void mt_engine_slice(const mt_engine *e, int u, size_t *lo, size_t *hi) {
    mt_engine_slice_of(e, u, mt_engine_home_rank(e), lo, hi);
}

/* What this rank sends home of a piece of unit u's gradient (elements [at, at + count) of the unit,
 * reduced as one buffer), relative to the piece: the threads each send the piece's own slice; a
 * sharded replica sends what of the piece lies in its slice of the unit (the slice it updates). */
static inline void mt_engine_piece_part(const mt_engine *e, int u, size_t at, size_t count, size_t *lo, size_t *hi) {
    if (!e->shard) {
        mt_coll_slice(count, e->rank, e->ranks, lo, hi);
        return;
    }
    size_t ulo, uhi;
    mt_engine_slice(e, u, &ulo, &uhi);
    size_t a = ulo > at ? ulo : at, b = uhi < at + count ? uhi : at + count;
    if (b < a) a = b = at; /* none of the piece is this rank's */
    *lo = a - at;
    *hi = b - at;
}

/* Sums what a compute job made (a gradient, the loss) across the group, inside the job, on the
 * compute stream. */
static inline void mt_engine_reduce(const mt_engine *e, float *x, size_t count) {
    if (e->reduce) e->be->ops->coll.all_reduce(e->be, e->compute, x, count);
}

/* Ordered accumulation (backend.h's acc_open, acc_close; the cpu's threads): every accumulator the
 * group sums (the loss, each unit's gradient, each vocabulary chunk of the ends') is filled by the
 * ranks in turns, so that the sum has one rank's bits. Opened once zeroed, where the job starts
 * adding into it (`fresh`: a new sum; 0: the tied embedding's second round, after the head's), closed
 * once its job is done adding, before any of the job's reductions. Its tag: the loss 0, unit u 1 + u. */
enum { MT_ACC_LOSS = 0 };
static inline int mt_acc_unit(int u) { return 1 + u; }
/* The auxiliary loss's (the kinds' pass losses: a mixture of experts' load balancing): after every
 * unit's. */
static inline int mt_acc_aux(const mt_engine *e) { return 1 + e->U; }

static inline void mt_engine_acc_open(const mt_engine *e, int tag, float *buf, size_t count, int fresh) {
    if (e->ordered) e->be->ops->coll.acc_open(e->be, e->compute, tag, buf, count, fresh);
}
static inline void mt_engine_acc_close(const mt_engine *e, int tag, float *buf, size_t count) {
    if (e->ordered) e->be->ops->coll.acc_close(e->be, e->compute, tag, buf, count);
}

/* The head's and the embedding's gradients exist on the device a vocabulary chunk at a time, each
 * copied home by the compute stream once done (mt_engine_ends_chunked_for: their gradients going
 * home, not ends_on_device). head_grad then holds the unit's tensors up to the head matrix (the
 * final norm's gradient) and one chunk of it (tied: the final norm's alone); embed_grad one chunk. */
static inline int mt_engine_ends_chunked(const mt_engine *e) { return mt_engine_ends_chunked_for(e->cfg, &e->o); }
/* Tied and chunked, the one matrix's gradient (the head's part, then the embedding's) is made a
 * chunk at a time in the embedding's backward: none of it is home before then, so there is no
 * early copy for the optimizer to start on. */
static inline int mt_engine_embed_grad_late(const mt_engine *e) {
    return e->cfg->tie_embeddings && mt_engine_ends_chunked(e);
}
/* Without clipping the embedding's gradient comes home in two parts: an early copy after the head
 * (the rows no input token touches are final there) and the rest after its backward. Not when its
 * gradient is made late, nor in a group (ranks, replicas: the head's part of a tied embedding is
 * summed across the ranks only with the rest): the optimizer then takes it whole. */
static inline int mt_engine_embed_early_copy(const mt_engine *e) { return !e->reduce && !mt_engine_embed_grad_late(e); }
/* Elements of head_grad. */
static inline size_t mt_engine_head_grad_numel_for(const mt_layout *lay, const mt_engine_options *o) {
    const mt_config *c = &lay->cfg;
    if (!mt_engine_ends_chunked_for(c, o) || c->tie_embeddings) return (size_t)lay->units[lay->num_units - 1].numel;
    const mt_tensor *head = mt_layout_tensor(lay, lay->num_units - 1, MT_T_LM_HEAD);
    return (size_t)head->offset + (size_t)o->head_vocab_chunk * c->hidden_size;
}
static inline size_t mt_engine_head_grad_numel(const mt_engine *e) { return mt_engine_head_grad_numel_for(e->lay, &e->o); }
/* The head unit's elements before its matrix (the final norm's gradient and the layout's padding;
 * tied, where it has no matrix, all of them): what goes home from the head's job when the matrix's
 * gradient goes home in vocabulary chunks. */
static inline size_t mt_engine_head_rest_numel_for(const mt_layout *lay) {
    if (lay->cfg.tie_embeddings) return (size_t)lay->units[lay->num_units - 1].numel;
    return (size_t)mt_layout_tensor(lay, lay->num_units - 1, MT_T_LM_HEAD)->offset;
}
/* The vocabulary chunks of each end's gradient (the ends chunked). */
static inline int mt_engine_vocab_chunks(const mt_engine *e) {
    return (e->cfg->vocab_size + e->o.head_vocab_chunk - 1) / e->o.head_vocab_chunk;
}
/* The step's chunks that come home through the chunk buffers: the head matrix's (untied), then the
 * embedding's; 0 without chunk buffers. Chunk k's buffer: */
static inline int mt_engine_buffered_chunks(const mt_engine *e) {
    return e->chunk_buffers ? mt_engine_vocab_chunks(e) * (e->cfg->tie_embeddings ? 1 : 2) : 0;
}
static inline float *mt_engine_chunk_buffer(const mt_engine *e, int k) {
    return e->chunk_buf[k % e->chunk_buffers];
}
/* Elements of embed_grad. */
static inline size_t mt_engine_embed_grad_numel_for(const mt_layout *lay, const mt_engine_options *o) {
    if (!mt_engine_ends_chunked_for(&lay->cfg, o)) return (size_t)lay->units[0].numel;
    return (size_t)o->head_vocab_chunk * lay->cfg.hidden_size;
}
static inline size_t mt_engine_embed_grad_numel(const mt_engine *e) { return mt_engine_embed_grad_numel_for(e->lay, &e->o); }
/* Copies count elements (elements [at, at + count) of unit u), reduced as one buffer, from src
 * (device) to dst (host): this rank's part of them (mt_engine_piece_part) at its place in dst, from
 * inside a compute job (mt_copy_in_launch). */
static inline void mt_engine_copy_home_in_launch(mt_engine *e, int u, size_t at, float *dst, const float *src,
                                                 size_t count) {
    size_t lo, hi;
    mt_engine_piece_part(e, u, at, count, &lo, &hi);
    if (lo < hi) mt_copy_in_launch(e->be, dst + lo, src + lo, (hi - lo) * 4, e->compute);
}

/* Unit u's optimizer state lives on the device (ends_on_device: the embedding and the head;
 * device_blocks: blocks 0..D-1). */
static inline int mt_engine_unit_on_device(const mt_engine *e, int u) {
    if (u == 0 || u == e->U - 1) return e->o.ends_on_device;
    return u - mt_unit_block(0) < e->device_blocks;
}
static inline int mt_engine_any_on_device(const mt_engine *e) { return e->o.ends_on_device || e->device_blocks > 0; }

/* Block l's weights on the device: its resident buffer (l < D) or its weight slot: the streamed
 * blocks D..L-1 take the K slots in turn, block l slot (l - D) mod K. Its gradient buffer: its
 * resident one, or gradient slot gs. */
static inline int mt_engine_slot_of(const mt_engine *e, int l) { return (l - e->device_blocks) % e->K; }
static inline void *mt_engine_block_weights(const mt_engine *e, int l) {
    if (l >= e->device_blocks) return e->slot[mt_engine_slot_of(e, l)];
    return (char *)e->resident_w + (size_t)l * e->lay->max_block_numel * mt_dtype_size(e->be->ops->weight_dtype);
}
/* The gradient slot resident block l's gradient lies in, or -1. The streamed blocks' backward
 * alternates the two slots, block l taking (L - 1 - l) mod 2; the resident blocks J..J+S-1, whose
 * backward follows, go on alternating, so that each waits for its slot's copy home no sooner than
 * a streamed block would. */
static inline int mt_engine_resident_grad_slot(const mt_engine *e, int l) {
    int J = e->grads_in_ckpts;
    return l >= J && l < J + e->grads_in_slots ? (e->L - 1 - l) % 2 : -1;
}
static inline float *mt_engine_block_grads(const mt_engine *e, int l, int gs) {
    if (l >= e->device_blocks) return e->grad_slot[gs];
    if (l < e->grads_in_ckpts) return (float *)((char *)e->ckpt + e->ckpt_grads_top - (size_t)(l + 1) * e->grad_stride);
    int slot = mt_engine_resident_grad_slot(e, l);
    if (slot >= 0) return e->grad_slot[slot];
    return e->resident_grad + (size_t)(l - e->grads_in_ckpts - e->grads_in_slots) * e->lay->max_block_numel;
}

/* engine_loads.c: the weights' loads on h2d, each after compute is done with the buffer (free_id)
 * and recording loaded_id: unit u into dst (a sharded replica: its slice; skip non-NULL: without
 * those experts' matrices), block l into slot k, and the backward's reload of block l, which brings
 * a mixture of experts' routed experts alone (routed_reload). */
void mt_engine_load_unit(mt_engine *e, int u, void *dst, mt_ev free_id, mt_ev loaded_id, int i, int where,
                         const uint8_t *skip);
void mt_engine_load_slot(mt_engine *e, int l, int k);
void mt_engine_reload_slot(mt_engine *e, int l, int k);

/* engine_ckpt.c: activation checkpoints. The device buffer of ckpt[l] ([M][n, D]) as of now;
 * around a compute job that writes it (forward: keep = copy it out for the backward) and after
 * the last job that reads it; in the backward, a host-kept ckpt[l] is fetched a block ahead
 * (l < 0 or a device-kept l: nothing), and `fetched` gives the stage whose stage_filled its reader
 * waits on (-1 for a device-kept one). */
void *mt_engine_ckpt(const mt_engine *e, int l);
void mt_engine_ckpt_before_write(mt_engine *e, int l);
void mt_engine_ckpt_written(mt_engine *e, int l, int keep);
void mt_engine_ckpt_read(mt_engine *e, int l);
void mt_engine_ckpt_fetch(mt_engine *e, int l);
int mt_engine_ckpt_fetched(const mt_engine *e, int l);

/* engine_device_state.c: the units whose state the device keeps (ends_on_device, device_blocks).
 * Upload their state at creation; update them on the compute stream (inside a compute job;
 * `clip`: scale by the clip coefficient of this pass's norms, skipping a non-finite one); bring
 * their state home to the store. */
mt_status mt_engine_device_upload(mt_engine *e);
void mt_engine_device_update(mt_engine *e, const mt_adamw_params *p, int clip);
void mt_engine_device_home(mt_engine *e);

/* AdamW's parameters for an update with the engine's options: the host optimizer's and the
 * device's alike. */
mt_adamw_params mt_engine_adamw_params(const mt_engine *e, float lr, int64_t step, float grad_scale);

/* engine_buffers.c: allocates every buffer, by the same walk whose bytes mt_engine_size sums. */
mt_status mt_engine_allocate(mt_engine *e);

/* engine_sync.c: every use of an event or flag (protocol.h), traced when e->trace is set. A stream
 * records event (id, i) or waits for its latest record; the calling thread waits for it (sync),
 * polls it (done) or reads the seconds between two records (elapsed). A flag is raised to g + 1 by
 * step g's work; await blocks until it reaches the waiter's g (MT_GEN_G) or g + 1 (MT_GEN_NEXT)
 * and returns the seconds waited; reached tells without waiting. */
void mt_engine_record(mt_engine *e, mt_ev id, int i, mt_stream *s);
void mt_engine_wait(mt_engine *e, mt_stream *s, mt_ev id, int i);
void mt_engine_sync(mt_engine *e, mt_ev id, int i);
int mt_engine_done(mt_engine *e, mt_ev id, int i);
double mt_engine_elapsed(mt_engine *e, mt_ev from, int i, mt_ev to, int j);
void mt_engine_raise(mt_engine *e, mt_fl id, int i, int64_t g);
double mt_engine_await(mt_engine *e, mt_fl id, int i, int64_t g, int gen);
int mt_engine_reached(mt_engine *e, mt_fl id, int i, int64_t g, int gen);
/* The instances of an event or flag this engine has (protocol.h's mt_per). */
int mt_engine_instances(const mt_engine *e, mt_per per);
/* The MT_MODE_* bits of this engine's options. */
unsigned mt_engine_modes(const mt_engine *e);
/* The optimizer thread marks itself, so that traced uses name the thread that made them. */
void mt_engine_on_optimizer_thread(void);
/* mt_engine_create with every use of an event or flag traced into `trace` (tests). */
mt_status mt_engine_create_traced(mt_engine **out, mt_backend *be, mt_store *store, const mt_engine_options *opt,
                                  int64_t adam_step, mt_protocol_trace *trace);

/* ranks.c: after a step's pass on one rank of several, with `rc` its outcome: a follower says its
 * slices are home; the leader waits until every follower has. Returns rc, or an error when another
 * rank failed (the step is then skipped everywhere). */
mt_status mt_engine_ranks_settle(mt_engine *e, mt_status rc);

/* ranks.c: an engine that is rank `rank` of `ranks` on the store, following `leader` (NULL for
 * rank 0), whose peers table the leader gets once every rank's engine exists; its gradients summed
 * across `group` ranks (ranks, or for a replica the processes). */
mt_status mt_engine_create_rank(mt_engine **out, mt_backend *be, mt_store *store, const mt_engine_options *opt,
                                int64_t adam_step, mt_engine *leader, int rank, int ranks, int group);

mt_status mt_engine_optimizer_start(mt_engine *e);
void mt_engine_optimizer_stop(mt_engine *e);
void mt_engine_optimizer_post(mt_engine *e, const mt_opt_job *job);
/* Speculative: tells the optimizer step g's clip coefficient (or that it is skipped), raising
 * norm_known. */
void mt_engine_optimizer_norm(mt_engine *e, float scale, int skip);
/* The optimizer of `opt` (a lone engine, or a group's leader) stops for good: a pass failed after
 * it posted a job the optimizer works on during the backward (the gradients it waits for never
 * come), or a rank of the group failed. In order: the halt is set; every flag the optimizer may
 * wait on is raised past any step, on every rank, so that it wakes, sees the halt and does no more
 * work (it never reads a gradient buffer a copy may still be filling); once it is idle, every flag
 * an issuing thread may wait on is raised, so that none waits forever (the flags' values no longer
 * mean anything). The engines refuse every later step. */
void mt_engine_optimizer_halt(mt_engine *opt);
/* Whether the optimizer of `opt` was halted. */
int mt_engine_optimizer_halted(const mt_engine *opt);
/* Speculative: the issuing thread waits until the optimizer is through with unit u's previous
 * gradients before this pass's land where they lie (a no-op in the other modes). */
double mt_engine_await_grads_taken(mt_engine *e, int u);
/* The optimizer calls this before it updates unit u: runs the update guard, if any. */
void mt_engine_guard_unit(mt_engine *e, int u);

/* engine_optimizer.c, the optimizer's pieces of work (on its thread). Part `part` of unit u's
 * update over its elements [lo, hi) (the unit's own indices; a sharded replica's slice of them),
 * their gradients from `grad` on (element lo's). */
void mt_engine_update_range(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part, int u,
                            int64_t lo, int64_t hi, const float *grad);
/* Piece `piece` of `pieces` of unit u, from its host gradient, cut on moment-block boundaries. */
void mt_engine_update_piece(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part, int u,
                            int piece, int pieces);
/* Part `part` of the update of the embedding's rows [v0, v0 + rows) whose mask entry (mask[0]: row
 * v0's) equals `which`, row r's gradient at grad + (r - v0) * grad_stride (0: one row for all).
 * AdamW is elementwise: with fp32 moments, updating the rows in parts gives the bits of one pass. */
void mt_engine_update_embedding_rows(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part,
                                     int v0, int rows, const float *grad, size_t grad_stride, const uint8_t *mask,
                                     uint8_t which);
/* The same over the whole vocabulary, the rows whose mask entry for the job's step (input_rows) is
 * `which` (1: the rows its input tokens touch), each row's gradient its own in grad_home[0] or,
 * `zeros`, a row of zeros (zero_row). */
void mt_engine_update_masked_rows(mt_engine *e, const mt_opt_job *job, int64_t adam_step, mt_adamw_part part,
                                  uint8_t which, int zeros);
/* Counts an update (a skipped step counts none) and returns the step number its bias correction
 * takes. Done before the job's first flag rises, so whoever has seen every flag also sees it. */
int64_t mt_engine_count_update(mt_engine *e, int skip);
/* Whether gradients whose copy home `issued` (a flag, index i) says is issued and `home` (an event,
 * index i) says landed are home, every rank's slice of them (the leader of ranks: each rank copies
 * its own); `wait`: wait until they are. */
int mt_engine_grads_home(mt_engine *e, const mt_opt_job *job, mt_fl issued, mt_ev home, int i, int wait);
/* engine_overlapped.c: a step's update without clipping, during the backward. */
void mt_engine_run_overlapped(mt_engine *e, const mt_opt_job *job);

#endif
