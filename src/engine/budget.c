#include "engine/budget.h"

#include "engine/block.h"
#include "util/size.h"

static double gib(int64_t bytes) { return (double)bytes / 1073741824.0; }

mt_status mt_engine_fit_budget(mt_backend *be, const mt_config *cfg, mt_engine_options *o, int64_t budget) {
    if (budget <= 0) return MT_OK;
    mt_engine_bytes b = mt_engine_size(be, cfg, o);
    while (b.total > budget && o->slots > 2) {
        o->slots--;
        b = mt_engine_size(be, cfg, o);
    }
    while (b.total > budget && o->batch > 1 && o->batch % 2 == 0) {
        o->batch /= 2;
        o->micro_batches *= 2;
        b = mt_engine_size(be, cfg, o);
    }
    /* Checkpoints move to the host before the chunks shrink: their PCIe traffic (both passes) runs
     * on the copy streams beside the compute, while smaller GEMMs slow the compute itself (at 8B in
     * 8 GiB: 0.83x of the 24 GiB run's tokens/s with 1024-token pieces and 128-row head chunks). */
    while (b.total > budget && o->ckpt_on_host < cfg->num_layers) {
        o->ckpt_on_host++;
        b = mt_engine_size(be, cfg, o);
    }
    while (b.total > budget && o->lm_chunk > 128) {
        o->lm_chunk /= 2;
        b = mt_engine_size(be, cfg, o);
    }
    /* The attention tile: the queries' side of the workspace is a tile's; more tiles are more
     * attention calls over the same scores (on cuda a cuDNN plan each). */
    if (b.total > budget && (o->attn_tile <= 0 || o->attn_tile > o->batch * o->seq)) o->attn_tile = o->batch * o->seq;
    while (b.total > budget && o->attn_tile > MT_BUDGET_MIN_TILE) {
        o->attn_tile = o->attn_tile / 2 > MT_BUDGET_MIN_TILE ? o->attn_tile / 2 : MT_BUDGET_MIN_TILE;
        b = mt_engine_size(be, cfg, o);
    }
    /* The block chunk: a piece of MT_BUDGET_MIN_CHUNK rows still runs its GEMMs near full rate. */
    if (b.total > budget && (o->chunk <= 0 || o->chunk > o->batch * o->seq)) o->chunk = o->batch * o->seq;
    while (b.total > budget && o->chunk > MT_BUDGET_MIN_CHUNK) {
        o->chunk = o->chunk / 2 > MT_BUDGET_MIN_CHUNK ? o->chunk / 2 : MT_BUDGET_MIN_CHUNK;
        b = mt_engine_size(be, cfg, o);
    }
    if (b.total <= budget) return MT_OK;
    char budget_text[32], total_text[32];
    return mt_fail(MT_ERR_NOMEM,
                   "the device budget of %s (--gpu-mem) is too small: the engine needs %s even with "
                   "2 weight slots, %d sequence(s) per micro-batch, an LM-head chunk of %d rows, an attention tile "
                   "of %d queries, a block chunk of %d tokens and every checkpoint it can move to the host there "
                   "(weight slots %.2f, embedding and head weights %.2f, resident blocks' weights %.2f, "
                   "device-updated units' fp32 master and moments %.2f, gradients %.2f, activation checkpoints "
                   "%.2f, workspace %.2f GiB); lower --micro-batches, --seq or --device-blocks, or raise --gpu-mem",
                   mt_size_gib_text(budget, budget_text, sizeof budget_text),
                   mt_size_gib_text(b.total, total_text, sizeof total_text), o->batch, o->lm_chunk, mt_block_tile_rows(o->batch, o->seq, o->attn_tile),
                   o->chunk, gib(b.weight_slots),
                   gib(b.embed_head), gib(b.resident_weights), gib(b.device_state), gib(b.grads),
                   gib(b.checkpoints), gib(b.workspace));
}
