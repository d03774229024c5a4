#include "plan/placement.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/block.h"
#include "engine/budget.h"
#include "optim/adamw.h"
#include "util/size.h"

/* Without --gpu-mem the plan leaves this much of the device's free memory to the libraries' own
 * allocations (cuBLAS, cuDNN workspaces) and to fragmentation: a twentieth, at least 2 GiB. */
static int64_t free_memory_margin(int64_t free_bytes) {
    int64_t twentieth = free_bytes / 20, floor = (int64_t)2 << 30;
    return twentieth > floor ? twentieth : floor;
}

/* The lent H200 machine's measured rates (docs/memory.md): PCIe and GEMM as measured there; host
 * memory as our AdamW moves it there (3.74 G params/s x 30 bytes, 15 threads, bench/adamw,
 * 2026-11-22). */
mt_rates mt_placement_rates(void) {
    return (mt_rates){.gemm_flop_per_s = 700e12, .pcie_bytes_per_s = 51e9, .pcie_d2h_bytes_per_s = 51e9,
                      .host_bytes_per_s = 112e9,
                      .source = "the lent H200 machine's: PCIe and GEMM measured there, host memory from bench/adamw"};
}

/* ---- the classes of bytes: one table sizes the refusal's text and describes the plan ---- */

typedef enum { HOME_DEVICE, HOME_HOST_STORE, HOME_HOST_ENGINE } home;

/* When a class goes by its other name: the weights when the masters are not split (fp32 weights:
 * they are the masters), the host gradients without clipping (a ring that none waits in). */
typedef enum { NAMED_ALWAYS, NAMED_UNSPLIT, NAMED_UNCLIPPED } other_name;

typedef struct {
    const char *name;
    home where;
    size_t offset; /* into mt_engine_bytes (device, host engine) or mt_store_bytes (host store) */
    other_name when;
    const char *other;
} byte_class;

#define DEV(name, field) {name, HOME_DEVICE, offsetof(mt_engine_bytes, field), NAMED_ALWAYS, NULL}
#define STORE(name, field, when, other) {name, HOME_HOST_STORE, offsetof(mt_store_bytes, field), when, other}
#define HOST(name, field, when, other) {name, HOME_HOST_ENGINE, offsetof(mt_engine_bytes, field), when, other}
static const byte_class classes[] = {
    DEV("weight slots", weight_slots),
    DEV("embedding and head weights", embed_head),
    DEV("resident blocks' weights", resident_weights),
    DEV("device-updated units' fp32 master and moments", device_state),
    DEV("gradients (slots, and those waiting on the device)", grads),
    DEV("activation checkpoints", checkpoints),
    DEV("workspace", workspace),
    STORE("fp32 master: high halves (the bf16 weights)", weights, NAMED_UNSPLIT, "fp32 master (the weights)"),
    STORE("fp32 master: low halves", low, NAMED_ALWAYS, NULL),
    STORE("Adam moments", moments, NAMED_ALWAYS, NULL),
    HOST("gradients kept for the clip", host_grads, NAMED_UNCLIPPED, "gradient ring"),
    HOST("staging", host_staging, NAMED_ALWAYS, NULL),
    HOST("activation checkpoints", host_checkpoints, NAMED_ALWAYS, NULL),
};
#undef DEV
#undef STORE
#undef HOST

static int64_t class_bytes(const mt_placement *p, const byte_class *c) {
    const char *base = c->where == HOME_HOST_STORE ? (const char *)&p->store : (const char *)&p->dev;
    return *(const int64_t *)(base + c->offset);
}

static const char *class_name(const mt_placement *p, const byte_class *c) {
    int other = (c->when == NAMED_UNSPLIT && p->store.low == 0) ||
                (c->when == NAMED_UNCLIPPED && p->eo.max_grad_norm <= 0 && !p->eo.keep_grads);
    return other ? c->other : c->name;
}

static double gb(int64_t bytes) { return (double)bytes / 1e9; }
static double gib(int64_t bytes) { return (double)bytes / 1073741824.0; }

/* ---- the step's time floor ---- */

/* FLOPs of one step: linear layers 2 (forward) + 2 (recompute) + 4 (backward) per active parameter
 * (a mixture of experts: those of the top_k experts a token goes to) and token; the LM head 6 (no
 * recompute); causal attention 2 T Q per token and layer for each of its products over the keys
 * before the token (the blocks' extra FLOPs: scores and values, forward), taken in the forward, its
 * recompute, and 5 of them in the backward (the scores again, dV, dP, dQ, dK, as cuDNN's and
 * FlashAttention's backward make them): 4.5 times the forward's. Past ~100k tokens attention is
 * most of a step. */
static double step_flops(const mt_config *c, double tokens, int seq) {
    double block = (double)mt_config_blocks_active_params(c);
    double head = (double)c->vocab_size * c->hidden_size;
    double attention = 4.5 * mt_config_blocks_extra_flops(c, seq);
    return tokens * (8.0 * block + 6.0 * head + attention);
}

/* How the host optimizer takes a step with these options (engine_internal.h's modes). */
typedef enum { OPT_OVERLAPPED, OPT_SPECULATIVE, OPT_DEFERRED } opt_mode;

static opt_mode opt_mode_of(const mt_engine_options *o, mt_moments_format moments) {
    if (o->max_grad_norm <= 0) return OPT_OVERLAPPED;
    return moments == MT_MOMENTS_F32 ? OPT_SPECULATIVE : OPT_DEFERRED;
}

/* Host memory traffic of the host optimizer a parameter and step (optim/adamw.h's parts), in all
 * and once the norm is known (what the next forward waits for): without clipping the whole update
 * as gradients come home (28 bytes with fp32 moments); with exact clipping, for a step that clips,
 * the masters after the norm (20) and then the moments (20) (a step that does not, after one that
 * did not, takes the whole update as gradients come home, as without clipping); with bf16 or
 * 8-bit moments the whole update after the norm. */
static void opt_bytes(const mt_layout *lay, const mt_store_bytes *s, opt_mode mode, double *total, double *after_norm) {
    double moment = (double)s->moments / 2 / (double)lay->total_numel;
    double full = mt_adamw_part_bytes(MT_ADAMW_FULL, moment);
    switch (mode) {
    case OPT_OVERLAPPED: *total = full, *after_norm = 0; break;
    case OPT_SPECULATIVE:
        *after_norm = mt_adamw_part_bytes(MT_ADAMW_MASTERS, moment);
        *total = *after_norm + mt_adamw_part_bytes(MT_ADAMW_MOMENTS, moment);
        break;
    case OPT_DEFERRED: *total = *after_norm = full; break;
    }
}

/* The share of the GEMM rate a whole step of the engine reaches: its FLOPs' time at the GEMM rate
 * over the measured step, where the GEMMs bound it (--clip 0): Llama-3-8B, 8 x 4096 tokens on the
 * H200 (2.988 s of 3.614 s, bench/results/2026-11-22-h200-8b.md) and Qwen2.5-14B, 4 x 4096 on an H100
 * (2.795 s of 3.434 s, issue 25): 0.83 and 0.81. The rest is the norms, attention's softmax, the
 * loss, and the pipeline's ends, which the GEMMs do not hide. */
#define STEP_COMPUTE_SHARE 0.82

/* The share of a step's GEMM FLOPs in the backward: the recompute (2 a parameter and token) and
 * the backward (4) of the 8. With clipping, the host's work after the norm comes after it. */
#define BACKWARD_SHARE 0.75

static void floor_terms(mt_placement *p, mt_backend *be, const mt_layout *lay) {
    const mt_config *c = &lay->cfg;
    const mt_engine_options *o = &p->eo;
    double wsize = (double)mt_dtype_size(be->ops->weight_dtype), block = (double)lay->max_block_numel;
    int streamed = c->num_layers - o->device_blocks, slots = o->slots < streamed ? o->slots : streamed;
    p->params = (double)lay->total_numel;
    p->tokens = (double)o->micro_batches * o->batch * o->seq;
    p->flops = step_flops(c, p->tokens, o->seq);
    p->gemm_s = p->flops / (p->rates.gemm_flop_per_s * STEP_COMPUTE_SHARE);
    p->host_params = (double)(lay->total_numel - mt_engine_device_params(lay, o));
    /* In: the host-updated units' weights, and the streamed blocks the backward reloads; out:
     * their gradients. Host-kept checkpoints go out in the forward and come back in the backward. */
    p->pcie_in = wsize * (p->host_params + block * (streamed - slots)) + (double)p->dev.host_checkpoints;
    p->pcie_out = 4.0 * p->host_params + (double)p->dev.host_checkpoints;
    double in_s = p->pcie_in / p->rates.pcie_bytes_per_s, out_s = p->pcie_out / p->rates.pcie_d2h_bytes_per_s;
    p->pcie_s = in_s > out_s ? in_s : out_s;
    p->pcie_cover_tokens = p->gemm_s > 0 ? p->tokens * p->pcie_s / p->gemm_s : 0;
    opt_bytes(lay, &p->store, opt_mode_of(o, p->moments), &p->opt_bytes_per_param, &p->after_norm_bytes_per_param);
    p->opt_s = p->opt_bytes_per_param * p->host_params / p->rates.host_bytes_per_s;
    p->after_norm_s = p->after_norm_bytes_per_param * p->host_params / p->rates.host_bytes_per_s;
    p->floor_s = p->gemm_s > p->pcie_s ? p->gemm_s : p->pcie_s;
    if (p->opt_s > p->floor_s) p->floor_s = p->opt_s;
    if (p->after_norm_s > 0 && BACKWARD_SHARE * p->gemm_s + p->after_norm_s > p->floor_s)
        p->floor_s = BACKWARD_SHARE * p->gemm_s + p->after_norm_s;
}

/* ---- spending the device budget ---- */

/* Step time a unit of `params` parameters saves when the device keeps and updates its state: its
 * host AdamW, its gradients' trip home and its weights' trips in (a streamed block's twice). */
static double seconds_saved(const mt_placement_request *rq, const mt_layout *lay, mt_backend *be, double params,
                            int loads) {
    mt_store_bytes s = mt_store_size(lay, be->ops->weight_dtype, rq->moments);
    double wsize = (double)mt_dtype_size(be->ops->weight_dtype), total, after_norm;
    opt_bytes(lay, &s, opt_mode_of(&rq->eo, rq->moments), &total, &after_norm);
    double host = params * total / rq->rates.host_bytes_per_s;
    return host + params * (4.0 + wsize * loads) / rq->rates.pcie_bytes_per_s;
}

/* Moves units onto the device while they fit `limit`, best saving per byte first: the embedding
 * and head (one move), and blocks one at a time. */
#define ENDS_PREFERENCE 0.9
static void spend_on_device_units(mt_backend *be, const mt_config *cfg, const mt_layout *lay,
                                  const mt_placement_request *rq, mt_engine_options *eo, int64_t limit) {
    int ends = rq->ends == MT_PLACE_AUTO, blocks = rq->device_blocks == MT_PLACE_AUTO;
    double ends_params = (double)(lay->units[0].numel + lay->units[lay->num_units - 1].numel);
    double ends_saving = seconds_saved(rq, lay, be, ends_params, 1);
    double block_saving = seconds_saved(rq, lay, be, (double)lay->max_block_numel, 2);
    for (;;) {
        int64_t now = mt_engine_size(be, cfg, eo).total;
        mt_engine_options with_ends = *eo, with_block = *eo;
        with_ends.ends_on_device = 1;
        with_block.device_blocks++;
        int64_t ends_bytes = mt_engine_size(be, cfg, &with_ends).total;
        int64_t block_bytes = mt_engine_size(be, cfg, &with_block).total;
        int ends_fits = ends && !eo->ends_on_device && ends_bytes <= limit;
        int block_fits = blocks && eo->device_blocks < cfg->num_layers && block_bytes <= limit;
        if (!ends_fits && !block_fits) return;
        double ends_rate = ends_saving / (double)(ends_bytes - now > 1 ? ends_bytes - now : 1);
        double block_rate = block_saving / (double)(block_bytes - now > 1 ? block_bytes - now : 1);
        /* The ends also spare their gradients' trips home a vocabulary chunk at a time (the head's
         * chunks recomputed, each end's chunks waiting for the host optimizer's buffers without
         * clipping): within the model's precision, they go first. */
        if (ends_fits && (!block_fits || ends_rate >= ENDS_PREFERENCE * block_rate)) *eo = with_ends;
        else *eo = with_block;
    }
}

/* Without clipping, block gradients come home through a ring of host buffers, and the backward
 * runs at most the ring's length ahead of the optimizer. MT_ENGINE_GRAD_RING blocks (two: one
 * landing while the optimizer updates the other) are the slack a backward and a much faster
 * optimizer need. Where the optimizer is busy most of a block's backward (RING_BUSY of it, by the
 * rates: large models beside the GPU's own blocks, small models, slow hosts), its jitter and its
 * falling behind hold the backward up: Qwen2.5-14B on an H100 of the x2, the probe's optimizer at
 * 0.83 of a block's backward, ran 16% slower with 2 blocks than with 6. Then the ring grows, as
 * far as it pays and to at most a quarter of a byte a parameter:
 *   - the next forward needs the first streamed block, whose gradient comes home last and which the
 *     optimizer therefore updates last, so that the optimizer's own time bounds the step whatever
 *     the ring; a ring only lets the GPU run on to the work that needs no host: the backward and
 *     forward of the blocks it updates itself. A ring longer than that tail covers buys nothing;
 *   - each block of it is 4 bytes a parameter of a block, host memory the run no longer has: it
 *     grows to at most GRAD_RING_BYTES_PER_PARAM of the model's parameters (and half of what the
 *     host can spare), the host floor staying at the master's and moments' 12 bytes a parameter
 *     plus a quarter.
 * --grad-ring N sets it instead. */
#define RING_BUSY 0.8
#define GRAD_RING_BYTES_PER_PARAM 0.25

static void choose_grad_ring(mt_backend *be, const mt_config *cfg, const mt_layout *lay,
                             const mt_placement_request *rq, mt_engine_options *eo) {
    if (eo->max_grad_norm > 0 || eo->keep_grads) return;
    int64_t streamed = cfg->num_layers - eo->device_blocks, block = lay->max_block_numel * 4;
    if (eo->grad_ring > 0) { /* --grad-ring: the user's, at most the blocks that stream */
        if (eo->grad_ring > streamed) eo->grad_ring = (int)streamed;
        return;
    }
    mt_store_bytes s = mt_store_size(lay, be->ops->weight_dtype, rq->moments);
    double tokens = (double)eo->micro_batches * eo->batch * eo->seq;
    double compute = step_flops(cfg, tokens, eo->seq) / (rq->rates.gemm_flop_per_s * STEP_COMPUTE_SHARE) /
                     cfg->num_layers; /* a block's forward and backward */
    double moment = (double)s.moments / 2 / (double)lay->total_numel;
    double optimizer = mt_adamw_part_bytes(MT_ADAMW_FULL, moment) * (double)lay->max_block_numel / rq->rates.host_bytes_per_s;
    int64_t grow = 0;
    if (optimizer > RING_BUSY * BACKWARD_SHARE * compute) {
        int64_t tail = (int64_t)ceil((double)eo->device_blocks * compute / optimizer) - MT_ENGINE_GRAD_RING;
        int64_t share = (int64_t)(GRAD_RING_BYTES_PER_PARAM * (double)lay->total_numel) / block - MT_ENGINE_GRAD_RING;
        grow = tail < share ? tail : share;
    }
    if (grow > 0 && rq->host_available >= 0) {
        mt_engine_bytes d = mt_engine_size(be, cfg, eo);
        int64_t needed = s.weights + s.low + s.moments + d.host_grads + d.host_staging + d.host_checkpoints +
                         (rq->device_memory ? 0 : d.total);
        int64_t spare = rq->host_available - needed, room = spare > 0 && block > 0 ? spare / 2 / block : 0;
        if (grow > room) grow = room;
    }
    int64_t ring = MT_ENGINE_GRAD_RING + (grow > 0 ? grow : 0);
    eo->grad_ring = (int)(ring < streamed ? ring : streamed);
}

static mt_status check_request(const mt_config *cfg, const mt_placement_request *rq) {
    if (rq->device_blocks != MT_PLACE_AUTO && (rq->device_blocks < 0 || rq->device_blocks > cfg->num_layers))
        return mt_fail(MT_ERR_INVALID, "--device-blocks %d: the model has %d blocks", rq->device_blocks,
                       cfg->num_layers);
    int asked = rq->ends == 1 || (rq->device_blocks != MT_PLACE_AUTO && rq->device_blocks > 0);
    if (asked && !rq->device_optimizer)
        return mt_fail(MT_ERR_INVALID, "this backend has no optimizer ops: it cannot update the embedding, head or "
                       "blocks itself; set --ends-on-device off and --device-blocks 0");
    if (asked && rq->moments != MT_MOMENTS_F32)
        return mt_fail(MT_ERR_INVALID, "units updated on the device (--ends-on-device on, --device-blocks) need "
                       "fp32 Adam moments, not --moments %s", mt_moments_format_name(rq->moments));
    return MT_OK;
}

mt_status mt_placement_resolve(mt_backend *be, const mt_config *cfg, const mt_placement_request *rq,
                               mt_placement *out) {
    MT_TRY(check_request(cfg, rq));
    mt_layout lay;
    MT_TRY(mt_layout_init(&lay, cfg));
    mt_placement p = {.eo = rq->eo, .moments = rq->moments, .budget_given = rq->gpu_mem > 0,
                      .device_free = rq->device_free, .rates = rq->rates, .layers = cfg->num_layers,
                      .units = lay.num_units};
    p.eo.ends_on_device = rq->ends == 1;
    p.eo.device_blocks = rq->device_blocks == MT_PLACE_AUTO ? 0 : rq->device_blocks;
    if (rq->gpu_mem > 0) p.device_limit = rq->gpu_mem;
    else if (rq->device_memory && rq->device_free > 0)
        p.device_limit = rq->device_free - free_memory_margin(rq->device_free);
    if (p.device_limit < 0) p.device_limit = 0;
    /* The shape first, fitted into a given budget (the cheapest losses: slots, split, chunk,
     * checkpoints; without one, the shape is the run's and mt_memory_check holds it against the
     * free memory), then units onto the device with what the budget, or the free memory less the
     * margin, leaves. */
    mt_status rc = mt_engine_fit_budget(be, cfg, &p.eo, rq->gpu_mem);
    int can_update = rq->device_memory && rq->device_optimizer && rq->moments == MT_MOMENTS_F32;
    if (rc == MT_OK && can_update && p.device_limit > 0)
        spend_on_device_units(be, cfg, &lay, rq, &p.eo, p.device_limit);
    if (rc == MT_OK) {
        choose_grad_ring(be, cfg, &lay, rq, &p.eo);
        p.dev = mt_engine_size(be, cfg, &p.eo);
        p.store = mt_store_size(&lay, be->ops->weight_dtype, rq->moments);
        for (int u = 0; u < lay.num_units; u++) {
            int end = u == 0 || u == lay.num_units - 1;
            p.units_on_device += end ? p.eo.ends_on_device : u - mt_unit_block(0) < p.eo.device_blocks;
        }
        floor_terms(&p, be, &lay);
        *out = p;
    }
    mt_layout_free(&lay);
    return rc;
}

/* ---- describing it ---- */

void mt_placement_grads_where(const mt_placement *p, char *buf, size_t cap) {
    const char *host = p->eo.max_grad_norm > 0 || p->eo.keep_grads ? "host fp32" : "host fp32 ring";
    if (p->units_on_device == 0) snprintf(buf, cap, "%s", host);
    else if (p->units_on_device == p->units) snprintf(buf, cap, "device");
    else snprintf(buf, cap, "device %d units, %s %d units", p->units_on_device, host, p->units - p->units_on_device);
}

int mt_placement_slots(const mt_placement *p) {
    int streamed = p->layers - p->eo.device_blocks;
    return p->eo.slots < streamed ? p->eo.slots : streamed;
}

void mt_placement_describe(const mt_placement *p, char *buf, size_t cap) {
    const mt_engine_options *o = &p->eo;
    char grads[96];
    mt_placement_grads_where(p, grads, sizeof grads);
    int streamed = p->layers - o->device_blocks;
    char in_ckpts[128] = "";
    int J = p->dev.grads_in_checkpoints, S = p->dev.grads_in_slots;
    if (J > 0 || S > 0) /* their gradients in memory that other buffers use at other times */
        snprintf(in_ckpts, sizeof in_ckpts, "; gradients: %d in the checkpoints' memory, %d in the gradient slots", J, S);
    snprintf(buf, cap, "optimizer state: the embedding and head on the %s, %d of %d blocks on the device "
             "(device AdamW%s) and %d on the host (host AdamW); gradients waiting for the norm: %s%s; %d weight "
             "slots; %d micro-batches x %d sequences x %d tokens; LM-head chunk %d rows; attention tile %d queries; "
             "the input checkpoints of %d of %d blocks in pinned host memory",
             o->ends_on_device ? "device" : "host", o->device_blocks, p->layers, in_ckpts, streamed, grads,
             o->max_grad_norm > 0 ? "" : " (no clipping: none wait)", mt_placement_slots(p),
             o->micro_batches, o->batch, o->seq, o->lm_chunk, mt_block_tile_rows(o->batch, o->seq, o->attn_tile),
             o->ckpt_on_host, p->layers);
}

int64_t mt_placement_host_bytes(const mt_placement *p) {
    int64_t total = 0;
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (classes[i].where != HOME_DEVICE) total += class_bytes(p, &classes[i]);
    return total;
}

static void print_classes(const mt_placement *p, FILE *out, const char *label, int host) {
    int64_t total = 0;
    fprintf(out, "%-9s", label);
    int first = 1;
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        const byte_class *c = &classes[i];
        if ((c->where != HOME_DEVICE) != host) continue;
        int64_t b = class_bytes(p, c);
        if (!b) continue;
        fprintf(out, "%s%s %.2f GB", first ? " " : " + ", class_name(p, c), gb(b));
        total += b;
        first = 0;
    }
    if (host) fprintf(out, " = %.2f GB, %.2f bytes a parameter\n", gb(total), (double)total / p->params);
    else fprintf(out, " = %.2f GB\n", gb(total));
}

void mt_placement_print(const mt_placement *p, FILE *out) {
    char where[768];
    mt_placement_describe(p, where, sizeof where);
    fprintf(out, "placement %s\n", where);
    char budget[32];
    if (p->budget_given)
        fprintf(out, "budget    %s: %d weight slots, %d x %d sequences, LM-head chunk of %d rows, attention tile of "
                "%d queries, the inputs of %d of %d blocks kept in pinned host memory (--gpu-mem)\n",
                mt_size_gib_text(p->device_limit, budget, sizeof budget), mt_placement_slots(p), p->eo.micro_batches, p->eo.batch, p->eo.lm_chunk,
                mt_block_tile_rows(p->eo.batch, p->eo.seq, p->eo.attn_tile), p->eo.ckpt_on_host, p->layers);
    else if (p->device_limit > 0)
        fprintf(out, "budget    none given: the device's free %.2f GiB less a margin = %.2f GiB\n", gib(p->device_free),
                gib(p->device_limit));
    print_classes(p, out, "device", 0);
    print_classes(p, out, "host", 1);
    fprintf(out, "floor     GEMM %.3g FLOP / %.0f TFLOP/s x %.3g (what a step of the engine reaches of it) = %.3f s\n",
            p->flops, p->rates.gemm_flop_per_s / 1e12, STEP_COMPUTE_SHARE, p->gemm_s);
    fprintf(out, "          PCIe in %.2f GB at %.1f GB/s, out %.2f GB at %.1f GB/s = %.3f s\n", p->pcie_in / 1e9,
            p->rates.pcie_bytes_per_s / 1e9, p->pcie_out / 1e9, p->rates.pcie_d2h_bytes_per_s / 1e9, p->pcie_s);
    fprintf(out, "          the GEMMs cover the PCIe copies from %.0f tokens a step (this one: %.0f, %s)\n",
            p->pcie_cover_tokens, p->tokens,
            p->tokens >= p->pcie_cover_tokens ? "the compute sets the pace" : "the copies set the pace");
    fprintf(out, "          host optimizer %.0f bytes/parameter x %.3f B parameters over %.0f GB/s host memory = "
            "%.3f s (the device updates the other %.3f B)\n", p->opt_bytes_per_param, p->host_params / 1e9,
            p->rates.host_bytes_per_s / 1e9, p->opt_s, (p->params - p->host_params) / 1e9);
    if (p->after_norm_s > 0)
        fprintf(out, "          with clipping, %.0f of them once the norm is known, after the backward's GEMMs: %.3f s + "
                "%.3f s = %.3f s (a step that clips; one that does not, after one that did not, takes %.0f as the "
                "gradients come home)\n",
                p->after_norm_bytes_per_param, BACKWARD_SHARE * p->gemm_s, p->after_norm_s,
                BACKWARD_SHARE * p->gemm_s + p->after_norm_s, mt_adamw_part_bytes(MT_ADAMW_FULL, 4));
    fprintf(out, "          = %.3f s a step at best, %.0f tokens/s\n", p->floor_s, p->tokens / p->floor_s);
    if (p->rates.source) fprintf(out, "          (rates: %s)\n", p->rates.source);
}
