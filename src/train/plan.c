/* mt_plan: what a run needs before anything is allocated: host and device bytes by class, and
 * the floor of one step's time from the performance model in docs/memory.md. */
#include <stdio.h>

#include "engine/block.h"
#include "engine/engine.h"
#include "engine/store.h"
#include "megatrain.h"
#include "train/backend_select.h"
#include "train/machine_rates.h"
#include "train/memory_check.h"
#include "train/options.h"

/* Reduced-precision moments are reported as what they are: an option, not the default. */
static const char *const moments_note[] = {
    [MT_MOMENTS_F32] = "", [MT_MOMENTS_BF16] = " (bf16 moments: an option, not the default)",
    [MT_MOMENTS_8BIT] = " (8-bit moments: an option, not the default)"};

static double gb(int64_t bytes) { return (double)bytes / 1e9; }

/* FLOPs of one step: linear layers 2 (forward) + 2 (recompute) + 4 (backward) per parameter and
 * token; the LM head 6 (no recompute); causal attention 2 T Q per token and layer forward, four
 * times that with its recompute and backward. */
static double step_flops(const mt_config *c, double tokens, int seq) {
    double block = (double)mt_config_block_params(c) * c->num_layers;
    double head = (double)c->vocab_size * c->hidden_size;
    double attention = 8.0 * seq * (double)c->num_heads * c->head_dim * c->num_layers * 0.5;
    return tokens * (8.0 * block + 6.0 * head + attention);
}

/* The pieces the sequence is worked through in, and where the activation checkpoints live. */
static void print_chunks(const mt_config *c, const mt_engine_options *eo, int64_t host_ckpt, FILE *out) {
    int piece = mt_block_piece_rows(eo->batch, eo->seq, eo->chunk);
    char head[96] = "whole";
    if (!c->tie_embeddings && !eo->ends_on_device && eo->head_vocab_chunk > 0 && eo->head_vocab_chunk < c->vocab_size)
        snprintf(head, sizeof head, "%d vocabulary rows at a time (%d chunks)", eo->head_vocab_chunk,
                 (c->vocab_size + eo->head_vocab_chunk - 1) / eo->head_vocab_chunk);
    fprintf(out, "chunks    blocks' norms, projections and MLP %d tokens at a time (%d per micro-batch); LM head "
            "%d rows of logits at a time; its gradient on the device %s\n", piece,
            (eo->batch * eo->seq + piece - 1) / piece, eo->lm_chunk, head);
    fprintf(out, "ckpts     the inputs of %d of %d blocks (the first) in pinned host memory (%.2f GB), the rest and "
            "the head's on the device\n", eo->ckpt_on_host, c->num_layers, gb(host_ckpt));
}

mt_status mt_plan(const mt_train_options *given, FILE *out) {
    mt_train_options resolved;
    MT_TRY(mt_train_options_fresh(given, &resolved));
    const mt_train_options *o = &resolved;
    mt_config cfg;
    MT_TRY(mt_train_model_config(o, &cfg));
    if (o->seq_len > cfg.max_position) /* as train refuses it */
        return mt_fail(MT_ERR_INVALID, "--seq %d is past the model's max_position_embeddings (%d%s)", o->seq_len,
                       cfg.max_position, cfg.rope_scaling_factor != 0 ? ", its rope scaling applied" : "");
    mt_layout lay;
    MT_TRY(mt_layout_init(&lay, &cfg));
    mt_backend *be = NULL;
    mt_status rc = mt_backend_open_for_plan(o->backend, o->threads, o->gpu_mem, &be);
    if (rc != MT_OK) {
        mt_layout_free(&lay);
        return rc;
    }
    mt_moments_format moments;
    rc = mt_moments_format_parse(o->moments, &moments);
    if (rc != MT_OK) {
        mt_backend_destroy(be);
        mt_layout_free(&lay);
        return rc;
    }
    mt_engine_options eo;
    mt_status fits = mt_train_engine_options(o, be, &cfg, &eo);
    char budget[1200] = "";
    double budget_gib = (double)o->gpu_mem / 1073741824.0;
    if (o->gpu_mem > 0 && fits == MT_OK)
        snprintf(budget, sizeof budget, "budget    %.2f GiB: %d weight slots, %d x %d sequences, LM-head chunk "
                 "of %d rows, the inputs of %d of %d blocks kept in pinned host memory\n", budget_gib, eo.slots,
                 eo.micro_batches, eo.batch, eo.lm_chunk, eo.ckpt_on_host, cfg.num_layers);
    else if (o->gpu_mem > 0)
        snprintf(budget, sizeof budget, "budget    %.2f GiB: does NOT fit: %s\n", budget_gib, mt_error());
    mt_store_bytes hb = mt_store_size(&lay, be->ops->weight_dtype, moments);
    mt_engine_bytes db = mt_engine_size(be, &cfg, &eo);
    double params = (double)mt_config_total_params(&cfg);
    double tokens = (double)o->micro_batches * o->batch * o->seq_len;
    int resident = o->slots < cfg.num_layers ? o->slots : cfg.num_layers;
    double wbytes = (double)mt_dtype_size(be->ops->weight_dtype);
    double block = (double)mt_config_block_params(&cfg);
    /* The units the host optimizer updates cross PCIe each step; with ends_on_device the
     * embedding and head stay on the device. */
    double host_params = params - (eo.ends_on_device ? (double)(lay.units[0].numel + lay.units[lay.num_units - 1].numel) : 0);
    double pcie_in = wbytes * (host_params + block * (cfg.num_layers - resident));
    double pcie_out = 4.0 * host_params;
    /* Host-kept checkpoints go out in the forward and come back in the backward. */
    pcie_in += (double)db.host_checkpoints;
    pcie_out += (double)db.host_checkpoints;
    double flops = step_flops(&cfg, tokens, o->seq_len);

    fprintf(out, "model     %.3f B parameters: %d blocks of %.1f M, vocabulary %d x %d%s\n", params / 1e9,
            cfg.num_layers, block / 1e6, cfg.vocab_size, cfg.hidden_size, cfg.tie_embeddings ? " (tied)" : "");
    fprintf(out, "step      %d micro-batches x %d sequences x %d tokens = %.0f tokens, %s backend\n",
            eo.micro_batches, eo.batch, o->seq_len, tokens, be->ops->name);
    char ring[64];
    snprintf(ring, sizeof ring, " (a ring of %d blocks: no clipping)", mt_engine_grad_ring(&cfg, &eo));
    char host_ckpt[64] = "";
    if (db.host_checkpoints) snprintf(host_ckpt, sizeof host_ckpt, " + checkpoints %.2f GB", gb(db.host_checkpoints));
    fprintf(out, "host      working weights %.2f GB + gradients %.2f GB%s + fp32 master %.2f GB + Adam moments "
            "%.2f GB%s%s = %.2f GB\n", gb(hb.weights), gb(db.host_grads),
            o->max_grad_norm > 0 ? " (all: exact clipping)" : ring, gb(hb.master), gb(hb.moments),
            moments_note[moments], host_ckpt,
            gb(hb.weights + db.host_grads + hb.master + hb.moments + db.host_checkpoints));
    char ends[96] = "";
    if (eo.ends_on_device)
        snprintf(ends, sizeof ends, " + their fp32 masters and moments %.2f GB", gb(db.ends_state));
    fprintf(out, "device    weight slots %.2f GB + embedding and head %.2f GB%s + gradients %.2f GB + "
            "checkpoints %.2f GB + workspace %.2f GB = %.2f GB\n", gb(db.weight_slots), gb(db.embed_head), ends,
            gb(db.grads), gb(db.checkpoints), gb(db.workspace), gb(db.total));
    if (eo.ends_on_device) fprintf(out, "optimizer the embedding and head on the device, the blocks on the host\n");
    print_chunks(&cfg, &eo, db.host_checkpoints, out);
    fputs(budget, out);
    mt_memory_fit fit = mt_memory_fit_of(&lay, be, &eo, moments);
    mt_memory_fit_print(&fit, out);
    mt_machine_rates rates;
    rc = mt_machine_rates_of(o, be, &eo, &rates);
    if (rc != MT_OK) {
        mt_backend_destroy(be);
        mt_layout_free(&lay);
        return rc;
    }
    mt_machine_rates_print(&rates, out);
    fprintf(out, "floor     GEMM %.3g FLOP / %.0f TFLOP/s = %.3f s\n", flops, rates.gemm_flop_per_s / 1e12,
            flops / rates.gemm_flop_per_s);
    double pcie_in_s = pcie_in / rates.pcie_h2d_bytes_per_s, pcie_out_s = pcie_out / rates.pcie_d2h_bytes_per_s;
    fprintf(out, "          PCIe in %.2f GB at %.1f GB/s, out %.2f GB at %.1f GB/s = %.3f s\n", pcie_in / 1e9,
            rates.pcie_h2d_bytes_per_s / 1e9, pcie_out / 1e9, rates.pcie_d2h_bytes_per_s / 1e9,
            pcie_in_s > pcie_out_s ? pcie_in_s : pcie_out_s);
    /* Read gradient, master, m, v; write master, m, v and the working weights. */
    double opt_bytes = (double)(hb.master + hb.moments) * 2 / params + 4.0 + wbytes;
    fprintf(out, "          optimizer %.0f bytes/parameter x %.3f B parameters on the host over %.0f GB/s host memory = "
            "%.3f s\n", opt_bytes, host_params / 1e9, rates.host_bytes_per_s / 1e9,
            opt_bytes * host_params / rates.host_bytes_per_s);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
    return MT_OK;
}
