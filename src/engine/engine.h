/* The streaming engine: one optimizer step of a model whose home is the host store. docs/engine.md
 * walks through a step; protocol.c's table lists every event and flag that orders it.
 *
 * Units stream through the device: the embedding and the head have a buffer each; blocks
 * rotate through K weight slots (block l always uses slot l mod K, so the last K blocks of the
 * forward are still resident when the backward starts and are not copied again). A step runs
 * layer-major over M micro-batches: each resident block runs all M before it leaves, its input
 * checkpoints (one per micro-batch) stay on the device, and its fp32 gradients accumulate over
 * the M micro-batches and go home once. Three streams (h2d, compute, d2h) are ordered only by
 * events; a CPU optimizer thread updates each unit once its gradients are home.
 *
 * Clipping meets the overlap like this:
 *   max_grad_norm > 0: exact clipping. The global norm is known when the backward ends; the
 *     gradients are kept on the host until it is. Then the optimizer updates the masters in
 *     forward order while the next step's forward already runs, each unit's copy waiting only for
 *     that unit's update, and then the moments: the plain update's bits, clipped or not. A step
 *     whose norm is NaN/Inf is skipped (masters and moments unchanged). After a step applied
 *     unclipped the optimizer takes each unit's whole update as its gradients come home instead,
 *     as if this step were not clipped either (mt_update_ahead), so that a run past its clipping
 *     phase waits for no master; where the step does clip, that update's step is taken back out
 *     (within fp32 rounding of the plain update). With bf16 or 8-bit moments the whole update
 *     waits for the norm in one pass (engine_internal.h's modes).
 *   max_grad_norm == 0: no clipping; each unit is updated as soon as its gradients are home,
 *     overlapping the rest of the backward.
 * Exact clipping keeps every host-updated unit's fp32 gradient on the host until the step's update
 * is through with it (4 bytes per parameter; the device-updated units' wait on the device); without
 * clipping the blocks' gradients land in a ring of a few unit-sized buffers, each reused once the
 * optimizer is done with it. */
#ifndef MT_ENGINE_ENGINE_H
#define MT_ENGINE_ENGINE_H

#include <stdint.h>

#include "backend/backend.h"
#include "engine/store.h"
#include "optim/adamw.h"
#include "util/cpu_list.h"

typedef struct mt_engine mt_engine;

/* With exact clipping the optimizer takes each unit's moments as its gradients come home and
 * the masters once the norm is known, or, AHEAD, the whole update then (the plain update's bits if
 * the step is not clipped; where it is, that update's step is taken back out of the masters, within
 * fp32 rounding, and a skipped step's masters come back to within fp32 rounding of before). AUTO
 * takes it ahead after a step that was applied unclipped: the forward of the next step then waits
 * for no master when the run no longer clips. */
typedef enum { MT_UPDATE_AHEAD_AUTO, MT_UPDATE_AHEAD_NEVER, MT_UPDATE_AHEAD_ALWAYS } mt_update_ahead;

typedef struct {
    int batch;           /* sequences per micro-batch */
    int seq;             /* tokens per sequence */
    int micro_batches;   /* M per optimizer step */
    int slots;           /* K >= 2 block weight slots */
    int opt_threads;     /* threads the optimizer uses on one unit; 0: all cores but one (left to
                          * the issuing thread and the copies), or one per opt_cores entry */
    const char *opt_cores; /* NULL: optimizer threads unpinned; MT_OPT_CORES_AUTO: one pinned to
                            * each core the process may use but the first; else a core list
                            * ("2-15", "4,5,6", util/cpu_list.h) with one thread pinned to each */
    int lm_chunk;        /* rows of logits the LM head holds at once */
    int head_vocab_chunk; /* vocabulary rows of the head's and the embedding's fp32 gradients the
                          * device holds at once when they go home (ends not on the device): each
                          * chunk is produced and copied home in turn (engine_jobs.c); 0 or at
                          * least the vocabulary: all of it at once */
    int chunk;           /* tokens a block's token-wise ops (norms, projections, MLP) take at once
                          * (engine/block.h: mt_block_piece_rows); 0: the whole micro-batch */
    int attn_tile;       /* queries a block's attention takes at once, and the rows of its other
                          * per-query buffers (engine/block.h: mt_block_tile_rows); 0: the whole
                          * micro-batch */
    int packed;          /* passes may carry positions (packed examples, --doc-mask): the engine
                          * stages them with the tokens and sizes attention for segments */
    float max_grad_norm; /* 0: no clipping */
    int update_ahead;    /* exact clipping with fp32 moments: when the optimizer takes each unit's
                          * whole update ahead of the norm (mt_update_ahead) */
    float beta1, beta2, eps, weight_decay;
    int keep_grads;      /* keep every unit's gradient on the host (mt_engine_host_grads) even
                          * without clipping; otherwise unclipped training keeps a ring */
    int grad_ring;       /* that ring's block gradient buffers: the backward runs at most this
                          * many blocks ahead of the optimizer (0: MT_ENGINE_GRAD_RING; at most
                          * the number of blocks) */
    int ckpt_on_host;    /* activation checkpoints kept in pinned host memory: the inputs of the
                          * first this many blocks (0 to num_layers), copied out in the forward
                          * and back in the backward (engine_ckpt.c); 0: all on the device */
    int ends_on_device;  /* the device keeps the embedding's and the head's fp32 masters and
                          * moments (12 bytes a parameter) and updates them itself at the end of
                          * the backward: their gradients never go home and the host optimizer
                          * skips them. Needs fp32 moments. The engine reads the store's copy
                          * of them once, at creation, and brings it up to date in
                          * mt_engine_finish. */
    int device_blocks;   /* the first this many blocks live on the device as the ends do with
                          * ends_on_device: their working weights stay resident (no weight slot,
                          * no copy either way), their fp32 masters and moments (12 bytes a
                          * parameter) and their gradients waiting for the clipping norm (4) are
                          * the device's, and the device updates them at the end of the backward.
                          * The host optimizer skips them; mt_engine_finish brings their state
                          * home. Needs fp32 moments. 0 to num_layers. */
    int all_experts;     /* a mixture of experts' backward reloads every expert of a streamed block;
                          * otherwise (0) only those the pass routed some token to: the same
                          * bits, fewer bytes where some expert got no token */
    int forward_only;    /* passes without a backward only (mt_engine_eval, mt_engine_next_logits:
                          * sampling): no gradient buffers, on the device or the host, and no
                          * optimizer thread; the store may then hold working weights alone
                          * (mt_store_create_weights). Needs ends_on_device and device_blocks 0. */
} mt_engine_options;

typedef struct {
    double loss;         /* mean cross-entropy over the step's target tokens */
    double grad_norm;    /* global L2 norm of the gradient, before clipping */
    int skipped;         /* the update was skipped (non-finite gradient) */
    double seconds;      /* wall time of the step */
    double wait_opt_seconds; /* time the issuing thread waited for the optimizer */
    double stall_seconds;    /* time the compute stream waited for weight and gradient copies */
    double compute_seconds;  /* time the device spent computing; seconds - compute_seconds is the
                              * step's device idle time (copies, optimizer, the host) */
    /* That idle time's parts between the step's first and last compute job: in the forward (the
     * head's job included) and in the backward. The rest lies at the step's two ends. */
    double idle_forward_seconds, idle_backward_seconds;
    /* The latest update the optimizer completed (this step's, or the previous step's while this
     * one's still runs behind the next forward): its time spent updating (not waiting for
     * gradients), and its mean time per block. */
    double opt_seconds, opt_seconds_per_block;
    /* With exact clipping, that update's time from the optimizer learning the norm to its last
     * master out (what the next forward waits for), and how many host-updated units' updates
     * ahead of the norm it still had to take when the norm came (the backlog of the backward's
     * work; none when the update waits for the norm). */
    double opt_after_norm_seconds;
    int opt_backlog_units;
    /* A mixture of experts (moe set): the router's load-balancing loss (transformers'
     * load_balancing_loss_func over the layers, the mean over the micro-batches; unweighted: it joins
     * the objective times router_aux_loss_coef where the config's output_router_logits says so), and
     * the experts' load: the largest and smallest share of a layer's routed tokens (its tokens x
     * experts_per_token) one expert got, over every MoE layer and expert (1 / num_experts when
     * balanced; 0 for an expert no token chose). */
    int moe;
    double aux_loss, expert_load_max, expert_load_min;
    /* Working weights copied to the device in the step (bytes), and, a mixture of experts, the share
     * of the experts in the blocks its backward reloaded that no token chose: their weights stayed
     * home (0 with all_experts). */
    double weight_bytes_in, experts_unrouted;
} mt_step_result;

/* Device bytes the engine allocates for these options, by class (total), and the host buffers
 * it allocates beside them (not in total): the gradients coming home, staging for tokens,
 * norms, loss and logits, and the activation checkpoints kept on the host. device_state: the
 * fp32 masters and moments of the units the device updates; resident_weights: the weights of
 * the device_blocks; grads: the gradient slots and the gradients of the ends and of the
 * device_blocks (those wait on the device for the norm), but for the first grads_in_checkpoints
 * blocks', which lie in the device checkpoints' memory (the backward has read those checkpoints
 * for the last time when it writes them), and the next grads_in_slots blocks', which lie in the
 * streamed blocks' gradient slots (free from the last streamed block's copy home to the next
 * backward). */
typedef struct {
    int64_t weight_slots, embed_head, resident_weights, device_state, grads, checkpoints, workspace, total;
    int64_t host_grads, host_staging, host_checkpoints;
    int grads_in_checkpoints, grads_in_slots;
} mt_engine_bytes;
mt_engine_bytes mt_engine_size(mt_backend *be, const mt_config *cfg, const mt_engine_options *opt);
/* What a follower rank of a group (ranks.h) allocates: no host gradients, its slices landing in its
 * leader's. */
mt_engine_bytes mt_engine_follower_size(mt_backend *be, const mt_config *cfg, const mt_engine_options *opt);

/* Elements of the fp32 state the device keeps for these options: the ends' (ends_on_device) and
 * the device_blocks blocks' (each at the largest block's size: the state arrays' stride). */
int64_t mt_engine_device_numel(const mt_layout *lay, const mt_engine_options *opt);
/* The parameters of those units, each block at its own size (blocks differ where some are dense
 * and some mixtures of experts): the rest, total_numel less these, is the host's to update. */
int64_t mt_engine_device_params(const mt_layout *lay, const mt_engine_options *opt);

#define MT_OPT_CORES_AUTO "auto"

/* The optimizer's team for these options, as the engine starts it: --opt-cores' cores (auto:
 * every core of the process's CPU set but the first), one thread each, or --opt-threads threads
 * unpinned, by default every core of the CPU set but one. Free team->cores. */
mt_status mt_engine_optimizer_team(const mt_engine_options *o, mt_cpu_team *team);

/* The store the engine with options `o` will update, first touched by its optimizer's team in the
 * optimizer's split (engine/store.h, mt_store_create_touched), so that on a host of several NUMA
 * nodes each thread's share of the fp32 state lies on its node. */
mt_status mt_engine_store_create(mt_store *store, const mt_layout *layout, mt_backend *be,
                                 mt_moments_format moments, const mt_engine_options *o);

/* The default block chunk: long enough that a piece's GEMMs run at full rate (8192 rows of a
 * 4096-wide model is 0.5 TFLOP a projection), short enough that the MLP's [chunk, F] buffers stay
 * well under a GiB at 8B. */
#define MT_ENGINE_CHUNK 8192

/* The default attention tile: a sequence up to 64k tokens is one tile (untiled); a longer one is
 * windows of 64k queries, each attending to every key before it, so that the queries' side of the
 * workspace (q, the attention output, their gradients, cuDNN's fp32 dQ, x2: about 56 KB a token at
 * 8B, 3.5 GiB) stays a tile's. Each window is a cuDNN plan of its own: 8 at 512k. */
#define MT_ENGINE_ATTN_TILE 65536

/* The default head gradient chunk: 8192 rows of a 4096-wide head are 128 MiB of fp32, against
 * 2 GiB for Llama 3's whole 128256-row head. */
#define MT_ENGINE_HEAD_VOCAB_CHUNK 8192

/* The default gradient ring: two block buffers, the fewest that keep the copies home and the
 * optimizer apart (one block's gradient lands while the optimizer updates the one before it), as
 * the device's two gradient slots keep the backward and the copies home apart. The planner grows
 * it where the optimizer is busy most of a block's backward (plan/placement.c). */
#define MT_ENGINE_GRAD_RING 2

/* Without clipping (and without keep_grads), the ends' gradients in vocabulary chunks come home
 * through this many host buffers of one chunk each instead of a host gradient of each end: the
 * optimizer updates each chunk's rows as it lands and frees its buffer for the chunk after next
 * (docs/memory.md). Two keep the device's next chunk and the optimizer's update apart. */
#define MT_ENGINE_CHUNK_BUFFERS 2

/* The block gradient buffers on the host without clipping: o->grad_ring or the default, at most
 * the number of streamed blocks (not device_blocks). */
int mt_engine_grad_ring(const mt_config *cfg, const mt_engine_options *o);
/* Whether the ends' gradients exist on the device a vocabulary chunk at a time (head_vocab_chunk). */
int mt_engine_ends_chunked_for(const mt_config *c, const mt_engine_options *o);
/* The host buffers the ends' gradient chunks come home through: MT_ENGINE_CHUNK_BUFFERS where the
 * ends are chunked and nothing keeps their whole gradient on the host (no clipping, no keep_grads,
 * a training engine), else 0 (each end's gradient lands whole in a host buffer of its own). */
int mt_engine_chunk_buffers_for(const mt_config *c, const mt_engine_options *o);

/* Options with the defaults a user gets from the CLI. */
mt_engine_options mt_engine_defaults(void);

/* `adam_step` is the number of updates already applied (0 for a fresh run; the checkpoint's
 * step on resume). The store must outlive the engine. */
mt_status mt_engine_create(mt_engine **out, mt_backend *be, mt_store *store,
                           const mt_engine_options *opt, int64_t adam_step);
void mt_engine_destroy(mt_engine *e);

/* Token arguments are inputs[M][batch][seq] and targets[M][batch][seq] (the inputs shifted by
 * one); a negative target takes no part in the loss. Ids at or past vocab_size are refused.
 * positions[M][batch][seq], or NULL: each token's position in its segment (backend.h's
 * mt_segments: packed examples that do not see each other), 0 where a segment starts and on each
 * sequence's first token, else the position before it plus one; an engine made with `packed` only
 * takes them, and refuses positions that break these rules. NULL: every sequence is one segment.
 * With positions, a sequence's last segment whose every input is token 0 and every target
 * negative is padding (io/dataset.h's): computed, but a mixture of experts' load-balancing loss
 * and load count only the tokens before it, as transformers' do under an attention mask.
 * The loss, and the gradient it is differentiated from, is the mean over the targets >= 0 of the
 * whole call (all M micro-batches): PyTorch's cross_entropy(reduction="mean", ignore_index=-1)
 * over the flattened [M * batch * seq] targets. With no target >= 0 the loss is 0 and the
 * gradient zero (never NaN); the training loop skips such a step instead of calling this.
 *
 * One optimizer step. Returns once the backward is done; the optimizer may still be updating
 * (mt_engine_finish waits). */
mt_status mt_engine_step(mt_engine *e, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                         float lr, mt_step_result *result);
/* Forward and backward only: fp32 gradients of the mean loss land in mt_engine_host_grads(), in
 * layout positions; no update. Needs keep_grads, or clipping with every unit's state on the host. */
mt_status mt_engine_grads(mt_engine *e, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                          double *loss);
/* Mean loss, no gradients. */
mt_status mt_engine_eval(mt_engine *e, const int32_t *inputs, const int32_t *targets, const int32_t *positions,
                         double *loss);
/* Logits of the last position of one sequence tokens[len] (len <= seq), into host logits[V]. */
mt_status mt_engine_next_logits(mt_engine *e, const int32_t *tokens, int len, float *logits);
/* Test hook (train's MT_TEST_NAN_STEP): the next mt_engine_step sees a NaN global gradient norm,
 * as a NaN anywhere in the gradient would make it, so that step is skipped when clipping is on. */
void mt_engine_poison_next_step(mt_engine *e);
/* Test hook (train's MT_TEST_DEVICE_FAULT_STEP): the next mt_engine_step fails with
 * MT_ERR_DEVICE after its pass, as a CUDA error seen at the end of the step would make it. */
void mt_engine_fault_next_step(mt_engine *e);
/* The host gradients of the last pass, laid out like the masters; NULL when the engine keeps a
 * ring instead (no clipping, no keep_grads), or, with clipping, only the host-updated units'
 * (some unit's state on the device, no keep_grads). A replica of processes that split the units
 * (mt_engine_share_state) holds its own slice of each there, the rest undefined. With ends_on_device or device_blocks, a
 * training step brings those units' gradients home only with keep_grads. */
const float *mt_engine_host_grads(const mt_engine *e);
/* Waits until every pending update has been applied and the host store holds all of them (with
 * ends_on_device, the device's copy of the embedding and head comes home: masters, moments and
 * working weights); returns the number of updates so far. Call it before reading the store. */
int64_t mt_engine_finish(mt_engine *e);
/* With AUTO, whether the next step takes its update ahead of the norm (after mt_engine_finish):
 * the run's checkpoints keep it, so that a resumed run takes the steps' updates as the run would
 * have, bit for bit; mt_engine_set_update_ahead gives it back after mt_engine_create. */
int mt_engine_update_ahead(mt_engine *e);
void mt_engine_set_update_ahead(mt_engine *e, int ahead);
/* A replica of processes that split the host-updated units (engine/ranks.h) keeps its store current
 * in its own slices only: this brings every rank's slices of the state (working weights, low
 * halves, moments) into every rank's store, through the devices. A collective: every replica calls
 * it at the same point, between steps; it finishes first (mt_engine_finish). Any other engine:
 * nothing. */
mt_status mt_engine_share_state(mt_engine *e);
/* 1 when the host optimizer updates unit u while steps run; 0 for the units the device updates
 * (ends_on_device, device_blocks), whose host copy changes only in mt_engine_finish. */
int mt_engine_updates_on_host(const mt_engine *e, int u);
/* `before_update(ctx, u)` runs before anything of unit u in the store is written (masters,
 * moments, working weights): on the optimizer thread, or, for the units the device updates, on
 * the thread that calls mt_engine_finish (a sharded replica's other slices: mt_engine_share_state's); NULL removes it. A checkpoint written while training goes
 * on (train/saver.h) uses it to take unit u's state before the next step changes it. Set it
 * while no step is in flight (after mt_engine_finish). */
void mt_engine_set_update_guard(mt_engine *e, void (*before_update)(void *ctx, int unit), void *ctx);

#endif
