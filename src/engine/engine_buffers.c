/* Every buffer the engine allocates, sized and allocated by one walk (llm.c's
 * fill_in_activation_sizes / malloc_and_point_activations, as block.c does for its workspace):
 * mt_engine_size sums the walk's bytes by class without allocating, the engine's creation takes
 * the same walk and allocates, so what --gpu-mem budgets is what the engine allocates. The
 * classes are mt_engine_bytes's; docs/memory.md says what each holds and how budget.c fits them. */
#include "engine/engine_internal.h"

#include <stdlib.h>
#include <string.h>

/* What the walk needs: known before an engine exists. */
typedef struct {
    mt_backend *be;
    const mt_config *cfg;
    const mt_layout *lay;
    const mt_engine_options *o;
    int K;        /* the streamed blocks' weight slots */
    int D;        /* resident blocks, updated by the device */
    int P;        /* activation checkpoints kept on the host */
    int keep_all; /* every host-updated unit's gradient stays on the host (clipping, keep_grads),
                   * else a ring */
    int full;     /* that in layout positions, every unit's (keep_grads, or every unit on the host) */
    int64_t host_numel; /* the host-updated units' parameters */
    int ring;     /* the ring's block buffers */
    int chunk_buffers; /* the host buffers the ends' gradient chunks come home through */
    int follower; /* a follower rank: its gradients land in its leader's host buffers */
    size_t ckpt;  /* one checkpoint's bytes, [M][n, D] */
    int J;        /* resident blocks whose gradients lie in the checkpoints' memory */
    size_t grads_top, grad_stride; /* where theirs end in it, and the bytes apart */
    int S;        /* the next ones, whose gradients lie in the streamed blocks' gradient slots */
} shape;

/* The first resident blocks' gradients live in the device checkpoints' memory. Block j's gradient
 * is written by its own backward and read by the device's update (or its copy home) at the pass's
 * end, all of it after the last read of every checkpoint past j (the backward runs from the last
 * block down, the head's first) and before the next pass's forward writes them again (the update
 * runs on the same stream; the pass ends waiting for every copy home, finish_pass). So it may lie
 * over the checkpoints of blocks j + 1 and on: block 0's at the top of their buffer, block 1's
 * below it, and so on while the next one stays clear of the checkpoint of its own block. How many
 * fit. */
static int grads_in_checkpoints(shape *s) {
    size_t region = (size_t)(s->cfg->num_layers + 1 - s->P) * s->ckpt;
    s->grad_stride = ((size_t)s->lay->max_block_numel * 4 + 255) / 256 * 256;
    s->grads_top = region / 256 * 256;
    if (s->o->forward_only) return 0;
    int j = 0;
    for (; j < s->D; j++) {
        size_t below = (size_t)(j + 1) * s->grad_stride;
        size_t first_kept = (size_t)(j + 1 > s->P ? j + 1 - s->P : 0) * s->ckpt; /* ckpt[j + 1]'s offset */
        if (below > s->grads_top || s->grads_top - below < first_kept) break;
    }
    return j;
}

static shape shape_of(mt_backend *be, const mt_config *cfg, const mt_layout *lay, const mt_engine_options *o) {
    int streamed = cfg->num_layers - o->device_blocks;
    shape s = {.be = be, .cfg = cfg, .lay = lay, .o = o, .K = o->slots < streamed ? o->slots : streamed,
               .D = o->device_blocks, .P = o->ckpt_on_host > 0 ? o->ckpt_on_host : 0,
               .keep_all = o->max_grad_norm > 0 || o->keep_grads,
               .host_numel = lay->total_numel - mt_engine_device_params(lay, o)};
    s.full = o->keep_grads || s.host_numel == lay->total_numel;
    s.ring = s.keep_all || o->forward_only ? 0 : mt_engine_grad_ring(cfg, o);
    s.chunk_buffers = mt_engine_chunk_buffers_for(cfg, o);
    s.ckpt = (size_t)o->micro_batches * o->batch * o->seq * cfg->hidden_size * mt_dtype_size(be->ops->act_dtype);
    s.J = grads_in_checkpoints(&s);
    /* The two gradient slots are free once the last streamed block's gradient is home, and until
     * the next backward: the next two resident blocks' gradients take them (engine_internal.h). */
    int free_slots = s.K > 0 && !o->forward_only ? 2 : 0;
    s.S = s.D - s.J < free_slots ? s.D - s.J : free_slots;
    return s;
}

int mt_engine_ends_chunked_for(const mt_config *c, const mt_engine_options *o) {
    return !o->ends_on_device && o->head_vocab_chunk > 0 && o->head_vocab_chunk < c->vocab_size;
}

int mt_engine_chunk_buffers_for(const mt_config *c, const mt_engine_options *o) {
    int whole = o->max_grad_norm > 0 || o->keep_grads || o->forward_only;
    return !whole && mt_engine_ends_chunked_for(c, o) ? MT_ENGINE_CHUNK_BUFFERS : 0;
}

int mt_engine_grad_ring(const mt_config *c, const mt_engine_options *o) {
    int ring = o->grad_ring > 0 ? o->grad_ring : MT_ENGINE_GRAD_RING, streamed = c->num_layers - o->device_blocks;
    return streamed < ring ? streamed : ring;
}

/* The walk's state: sizing (e NULL) or allocating into e; the bytes and buffers so far. */
typedef struct {
    mt_engine *e;
    mt_engine_bytes bytes;
    int device_buffers, host_buffers;
} walker;

/* Counts one buffer in its class and, when allocating, allocates it on the device or the host. */
static void *buffer(walker *w, int64_t *class_bytes, int on_host, size_t bytes, const char *what) {
    *class_bytes += (int64_t)bytes;
    if (on_host) w->host_buffers++;
    else w->device_buffers++;
    mt_engine *e = w->e;
    if (!e || e->failed) return NULL;
    void *p = on_host ? mt_host_alloc(e->be, bytes, what) : mt_dev_alloc(e->be, bytes, what);
    if (!p) e->failed = 1;
    else if (on_host) e->host_allocs[e->num_host_allocs++] = p;
    else e->allocs[e->num_allocs++] = p;
    return p;
}

/* One buffer of the engine: counted in class `cls` of mt_engine_bytes, and when allocating,
 * stored in e->field. */
#define BUFFER(on_host, field, cls, size, what)                               \
    do {                                                                      \
        void *p_ = buffer(w, &w->bytes.cls, on_host, (size_t)(size), (what)); \
        if (w->e) w->e->field = p_;                                           \
    } while (0)
#define DEVICE(field, cls, size, what) BUFFER(0, field, cls, size, what)
#define HOST(field, cls, size, what) BUFFER(1, field, cls, size, what)

/* The walk, in one fixed order. Shapes: n = batch * seq rows, M micro-batches, D hidden, V vocab. */
static void walk(const shape *s, walker *w) {
    const mt_config *c = s->cfg;
    const mt_layout *lay = s->lay;
    const mt_engine_options *o = s->o;
    int U = lay->num_units;
    size_t wsize = mt_dtype_size(s->be->ops->weight_dtype);
    size_t n = (size_t)o->batch * o->seq, M = (size_t)o->micro_batches, D = (size_t)c->hidden_size;
    size_t V = (size_t)c->vocab_size, block = (size_t)lay->max_block_numel, constants = mt_block_constants_bytes(c);
    size_t embed = (size_t)lay->units[0].numel, head = (size_t)lay->units[U - 1].numel, ckpt = s->ckpt;

    for (int k = 0; k < s->K; k++) DEVICE(slot[k], weight_slots, block * wsize, "a block weight slot");
    DEVICE(embed_w, embed_head, embed * wsize, "the embedding weights");
    DEVICE(head_w, embed_head, head * wsize, "the head weights");
    size_t on_device = (size_t)mt_engine_device_numel(lay, o);
    if (on_device) { /* the ends' then blocks 0..D-1's fp32 state, and the clip coefficient */
        DEVICE(dev_master, device_state, on_device * 4, "the device-updated units' master weights");
        DEVICE(dev_m, device_state, on_device * 4, "the device-updated units' first moments");
        DEVICE(dev_v, device_state, on_device * 4, "the device-updated units' second moments");
        DEVICE(dev_clip_scale, device_state, 4, "the clip coefficient");
    }
    int train = !o->forward_only; /* the buffers only a backward uses */
    if (s->D > 0) { /* [D][max block] each */
        DEVICE(resident_w, resident_weights, (size_t)s->D * block * wsize, "the resident blocks' weights");
        if (s->D > s->J + s->S) /* the first J lie in the checkpoints' memory, the next S in the gradient slots */
            DEVICE(resident_grad, grads, (size_t)(s->D - s->J - s->S) * block * 4, "the resident blocks' gradients");
    }
    if (s->K > 0 && train) /* the streamed blocks' */
        for (int g = 0; g < 2; g++) DEVICE(grad_slot[g], grads, block * 4, "a block gradient slot");
    int head_chunked = mt_engine_ends_chunked_for(c, o);
    if (train) {
        DEVICE(embed_grad, grads, mt_engine_embed_grad_numel_for(lay, o) * 4,
               head_chunked ? "the embedding's gradient chunk" : "the embedding gradients");
        DEVICE(head_grad, grads, mt_engine_head_grad_numel_for(lay, o) * 4,
               head_chunked ? "the head's gradient chunk" : "the head gradients");
    }

    /* [L+1-P][M][n, D] on the device; [P][M][n, D] on the host, through CKPT_STAGES device buffers */
    DEVICE(ckpt, checkpoints, (size_t)(c->num_layers + 1 - s->P) * ckpt, "activation checkpoints");
    if (s->P > 0) {
        for (int i = 0; i < CKPT_STAGES; i++) DEVICE(ckpt_stage[i], checkpoints, ckpt, "a checkpoint staging buffer");
        HOST(host_ckpt, host_checkpoints, (size_t)s->P * ckpt, "activation checkpoints kept on the host");
    }

    /* The blocks' and LM head's scratch, the gradient flowing back, and the small things. */
    DEVICE(ws_base, workspace, mt_block_ws_bytes(s->be, c, o->batch, o->seq, o->chunk, o->attn_tile, o->packed),
           "the block workspace");
    DEVICE(lm_ws, workspace, s->be->ops->op.lmhead_workspace(s->be, o->lm_chunk, c->vocab_size),
           "the LM head workspace");
    if (train) DEVICE(dy, workspace, ckpt, "activation gradients");             /* [M][n, D] */
    DEVICE(dev_inputs, workspace, 2 * M * n * sizeof(int32_t), "token ids");     /* inputs, targets */
    if (o->packed) DEVICE(dev_pos, workspace, M * (2 * n + 1) * sizeof(int32_t), "token positions and segments");
    DEVICE(dev_logits, workspace, V * 4, "logits");
    DEVICE(dev_constants, workspace, constants, "the block kinds' constants");
    DEVICE(dev_norms, workspace, (size_t)U * 4, "gradient norms");
    DEVICE(dev_loss, workspace, 4, "the loss");
    if (head_chunked) DEVICE(dev_lse, workspace, M * n * 4, "the rows' log-sum-exp");
    int pass_state = 0;
    for (int k = 0; k < MT_FFN_KINDS; k++) {
        size_t bytes = mt_block_pass_bytes(c, (mt_ffn_kind)k, o->micro_batches, 0);
        if (bytes) DEVICE(pass[k].dev, workspace, bytes, "a feed-forward kind's pass state (routing statistics)");
        pass_state |= bytes > 0;
    }
    if (pass_state) DEVICE(dev_aux_loss, workspace, 4, "the auxiliary (load-balancing) loss");

    HOST(host_tokens, host_staging, 2 * M * n * sizeof(int32_t), "token staging");
    if (o->packed) {
        HOST(host_segments, host_staging, M * (2 * n + 1) * sizeof(int32_t), "position staging");
        HOST(seg_count, host_staging, M * sizeof(int), "segment counts");
        HOST(real_rows, host_staging, M * (size_t)o->batch * sizeof(int), "each sequence's rows before its padding");
    }
    HOST(host_norms, host_staging, (size_t)U * 4, "gradient norms");
    HOST(host_loss, host_staging, 4, "the loss");
    HOST(host_logits, host_staging, V * 4, "logits");
    HOST(host_constants, host_staging, constants, "the block kinds' constants");
    for (int i = 0; i < 2; i++) HOST(input_rows[i], host_staging, V, "the input-token row masks");
    if (on_device)
        HOST(master_staging, host_staging, MT_ENGINE_MASTER_STAGING, "the staging of the device-updated units' masters");
    for (int k = 0; k < MT_FFN_KINDS; k++) {
        size_t bytes = mt_block_pass_bytes(c, (mt_ffn_kind)k, o->micro_batches, 1);
        if (bytes) HOST(pass[k].host, host_staging, bytes, "a feed-forward kind's pass state (routing statistics)");
    }
    if (pass_state) HOST(host_aux_loss, host_staging, 4, "the auxiliary (load-balancing) loss");

    /* Where gradients land on the host: every unit's (keep_grads, or exact clipping with every unit
     * on the host: it needs every gradient until the norm is known; tests read them), the
     * host-updated units' (clipping with some unit on the device), or the streamed blocks' in a
     * ring by backward order and the embedding and head each in their own buffer (none when the
     * device updates them; in vocabulary chunks, the chunk buffers, the head's tensors before its
     * matrix, and a row of zeros for the embedding's rows no input token touched). A follower rank
     * has none: its slices land in its leader's, with clipping or without. */
    if (!train || s->follower) {
        /* none; or the leader's */
    } else if (s->keep_all && s->full) {
        HOST(grads_full, host_grads, (size_t)lay->total_numel * 4, "the gradients of every unit");
    } else if (s->keep_all) {
        HOST(grads_host, host_grads, (size_t)s->host_numel * 4, "the gradients of the host-updated units");
    } else {
        if (s->chunk_buffers) {
            for (int i = 0; i < s->chunk_buffers; i++)
                HOST(chunk_buf[i], host_grads, (size_t)o->head_vocab_chunk * D * 4, "a chunk buffer of the ends' gradients");
            HOST(grad_home[U - 1], host_grads, mt_engine_head_rest_numel_for(lay) * 4,
                 "the head's gradients before its matrix");
        } else if (!o->ends_on_device) {
            HOST(grad_home[0], host_grads, embed * 4, "the embedding's gradients");
            HOST(grad_home[U - 1], host_grads, head * 4, "the head's gradients");
        }
        if (s->ring > 0) HOST(grad_ring_base, host_grads, (size_t)s->ring * block * 4, "the block gradient ring");
    }
    /* The embedding's rows no input token touched, untied, take a zero gradient: through the chunk
     * buffers, and with exact clipping before the norm (engine_optimizer.c). */
    int zero_rows = s->chunk_buffers || (o->max_grad_norm > 0 && !o->ends_on_device);
    if (train && !s->follower && zero_rows && !c->tie_embeddings)
        HOST(zero_row, host_grads, D * 4, "the gradient of the embedding's untouched rows");
}

#undef DEVICE
#undef HOST
#undef BUFFER

static mt_engine_bytes size_of(mt_backend *be, const mt_config *cfg, const mt_engine_options *o, int follower) {
    mt_layout lay;
    walker w = {0};
    if (mt_layout_init(&lay, cfg) != MT_OK) return w.bytes;
    shape s = shape_of(be, cfg, &lay, o);
    s.follower = follower;
    walk(&s, &w);
    mt_layout_free(&lay);
    mt_engine_bytes *b = &w.bytes;
    b->grads_in_checkpoints = s.J;
    b->grads_in_slots = s.S;
    b->total = b->weight_slots + b->embed_head + b->resident_weights + b->device_state + b->grads + b->checkpoints +
               b->workspace;
    return *b;
}

mt_engine_bytes mt_engine_size(mt_backend *be, const mt_config *cfg, const mt_engine_options *o) {
    return size_of(be, cfg, o, 0);
}

mt_engine_bytes mt_engine_follower_size(mt_backend *be, const mt_config *cfg, const mt_engine_options *o) {
    return size_of(be, cfg, o, 1);
}

/* Points what the walk's buffers hold: the targets after the inputs, the workspace's parts, each
 * unit's host gradient; fills what needs it. */
static void point_into_buffers(mt_engine *e) {
    const mt_layout *lay = e->lay;
    e->dev_targets = e->dev_inputs + (size_t)e->o.micro_batches * mt_engine_rows(e);
    if (e->dev_pos) e->dev_starts = e->dev_pos + (size_t)e->o.micro_batches * mt_engine_rows(e);
    mt_block_ws_carve(&e->ws, e->ws_base, e->be, e->cfg, e->o.batch, e->o.seq, e->o.chunk, e->o.attn_tile,
                      e->o.packed);
    for (int i = 0; i < 2; i++) memset(e->input_rows[i], 0, (size_t)e->cfg->vocab_size);
    if (e->o.forward_only) {
        /* no gradient goes home */
    } else if (e->leader) {
        for (int u = 0; u < e->U; u++) e->grad_home[u] = e->leader->grad_home[u];
        for (int i = 0; i < e->chunk_buffers; i++) e->chunk_buf[i] = e->leader->chunk_buf[i];
    } else if (e->grads_full) {
        for (int u = 0; u < e->U; u++) e->grad_home[u] = e->grads_full + lay->units[u].offset;
    } else if (e->grads_host) {
        float *at = e->grads_host;
        for (int u = 0; u < e->U; u++)
            if (!mt_engine_unit_on_device(e, u)) e->grad_home[u] = at, at += lay->units[u].numel;
    } else {
        for (int l = e->device_blocks; l < e->L; l++)
            e->grad_home[mt_unit_block(l)] = e->grad_ring_base + (size_t)((e->L - 1 - l) % e->grad_ring) * lay->max_block_numel;
    }
    if (e->zero_row) memset(e->zero_row, 0, (size_t)e->cfg->hidden_size * 4);
    /* the chunks home never cover the layout's padding (none of it is home with chunk buffers) */
    if (mt_engine_ends_chunked(e) && !e->o.forward_only && !e->chunk_buffers) {
        const mt_tensor *ends[2] = {mt_layout_tensor(lay, 0, MT_T_WTE), mt_layout_tensor(lay, e->U - 1, MT_T_LM_HEAD)};
        for (int i = 0; i < (e->cfg->tie_embeddings ? 1 : 2); i++) { /* tied, the head unit goes home whole */
            int u = i ? e->U - 1 : 0;
            size_t end = (size_t)ends[i]->offset + (size_t)ends[i]->rows * ends[i]->cols;
            memset(e->grad_home[u] + end, 0, ((size_t)mt_engine_numel(e, u) - end) * 4);
        }
    }
    mt_block_constants_fill(e->cfg, e->host_constants);
    mt_copy_async(e->be, e->dev_constants, e->host_constants, mt_block_constants_bytes(e->cfg), e->h2d);
}

mt_status mt_engine_allocate(mt_engine *e) {
    shape s = shape_of(e->be, e->cfg, e->lay, &e->o);
    e->grad_ring = s.ring;
    e->chunk_buffers = s.chunk_buffers;
    e->grads_in_ckpts = s.J;
    e->grads_in_slots = s.S;
    e->ckpt_grads_top = s.grads_top;
    e->grad_stride = s.grad_stride;
    s.follower = e->leader != NULL;
    walker count = {0};
    walk(&s, &count);
    e->allocs = calloc((size_t)count.device_buffers, sizeof *e->allocs);
    e->host_allocs = calloc((size_t)count.host_buffers, sizeof *e->host_allocs);
    if (!e->allocs || !e->host_allocs) return mt_fail(MT_ERR_NOMEM, "cannot allocate the engine's buffer lists");
    walker w = {.e = e};
    walk(&s, &w);
    if (e->failed) return mt_fail_context(MT_ERR_NOMEM, "engine buffers");
    point_into_buffers(e);
    for (int k = 0; k < MT_FFN_KINDS; k++) {
        e->pass[k].be = e->be;
        e->pass[k].cfg = e->cfg;
        e->pass[k].micro_batches = e->o.micro_batches;
        e->pass[k].aux_loss = e->dev_aux_loss;
    }
    e->any_pass_state = e->dev_aux_loss != NULL;
    return MT_OK;
}
