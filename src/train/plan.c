/* mt_plan: the run's memory plan (plan/placement.h) before anything is allocated: where every
 * class of bytes lives, the bytes by class, whether they fit, and the floor of one step's time
 * from the performance model in docs/memory.md. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "engine/block.h"
#include "engine/engine.h"
#include "engine/store.h"
#include "io/checkpoint.h"
#include "megatrain.h"
#include "plan/placement.h"
#include "train/backend_select.h"
#include "train/machine_rates.h"
#include "train/memory_check.h"
#include "train/option_table.h"
#include "train/options.h"
#include "train/run_state.h"
#include "train/settings.h"
#include "util/host_memory.h"

/* Reduced-precision moments are reported as what they are: an option, not the default. */
static const char *const moments_note[] = {
    [MT_MOMENTS_F32] = "", [MT_MOMENTS_BF16] = "Adam moments in bf16: an option, not the default\n",
    [MT_MOMENTS_8BIT] = "Adam moments in 8 bits: an option, not the default\n"};

static double gb(int64_t bytes) { return (double)bytes / 1e9; }

/* The tiles attention works through, and the block workspace by what it grows with. */
static void print_tiles(mt_backend *be, const mt_config *c, const mt_engine_options *eo, FILE *out) {
    int T = mt_block_tile_rows(eo->batch, eo->seq, eo->attn_tile);
    mt_block_ws_bytes_by ws = mt_block_ws_split(be, c, eo->batch, eo->seq, eo->chunk, eo->attn_tile, eo->packed);
    char tiles[160];
    if (T < eo->seq)
        snprintf(tiles, sizeof tiles, "windows of %d queries, %d a sequence, each seeing every key before it", T,
                 (eo->seq + T - 1) / T);
    else
        snprintf(tiles, sizeof tiles, "%d tokens at a time (%d whole sequences, %d tiles per micro-batch)", T,
                 T / eo->seq, (eo->batch * eo->seq + T - 1) / T);
    fprintf(out, "attention %s\n", tiles);
    fprintf(out, "          block workspace %.2f GB: %.2f GB a micro-batch's (k, v, their gradients%s, the norms' "
            "statistics), %.2f GB a tile's (q, the attention output, their gradients, x2, the attention's own "
            "workspace), %.2f GB a piece's (the projections' and the feed-forward's)\n", gb((int64_t)ws.total),
            gb((int64_t)ws.micro_batch), T < eo->seq ? " and their fp32 sums over the windows" : "",
            gb((int64_t)ws.tile), gb((int64_t)ws.piece));
}

static mt_status plan(const mt_train_options *o, const mt_config *c, FILE *out);

static int64_t class_bytes(const mt_memory_fit *f, const char *name) {
    for (int i = 0; i < f->host_classes; i++)
        if (!strcmp(f->host[i].name, name)) return f->host[i].bytes;
    return 0;
}

/* Where the host does not fit: by how much, its largest class, and what the options that shrink the
 * host's part would save (--clip 0 keeps a ring of gradients instead: at most the kept ones). */
static void print_host_short(const mt_memory_fit *f, mt_moments_format format, FILE *out) {
    if (f->host_available < 0 || f->host_needed <= f->host_available || f->host_classes == 0) return;
    const mt_memory_class *most = &f->host[0];
    for (int i = 1; i < f->host_classes; i++)
        if (f->host[i].bytes > most->bytes) most = &f->host[i];
    int64_t kept = class_bytes(f, MT_MEMORY_KEPT_GRADS);
    int64_t moments = format == MT_MOMENTS_F32 ? class_bytes(f, MT_MEMORY_MOMENTS) / 2 : 0;
    char less[320] = "";
    size_t at = 0;
    if (kept >= 10000000) /* 10 MB: worth naming */
        at += (size_t)snprintf(less + at, sizeof less - at, "--clip 0 (up to %.2f GB), ", gb(kept));
    if (moments >= 10000000 && at < sizeof less)
        at += (size_t)snprintf(less + at, sizeof less - at, "--moments bf16 (%.2f GB), ", gb(moments));
    if (at < sizeof less)
        snprintf(less + at, sizeof less - at, "a shorter --seq or a smaller --batch (the host's checkpoints and "
                 "buffers grow with the tokens)");
    fprintf(out, "          the host is %.2f GB short, its largest class %s (%.2f GB); less host: %s\n",
            gb(f->host_needed - f->host_available), most->name, gb(most->bytes), less);
}

/* The pieces the sequence is worked through in, and where the activation checkpoints live. */
static void print_chunks(const mt_config *c, const mt_engine_options *eo, int64_t host_ckpt, FILE *out) {
    int piece = mt_block_piece_rows(eo->batch, eo->seq, eo->chunk);
    char head[96] = "whole";
    if (mt_engine_ends_chunked_for(c, eo))
        snprintf(head, sizeof head, "%d vocabulary rows at a time (%d chunks)", eo->head_vocab_chunk,
                 (c->vocab_size + eo->head_vocab_chunk - 1) / eo->head_vocab_chunk);
    int buffers = mt_engine_chunk_buffers_for(c, eo);
    char home[128] = "";
    if (buffers)
        snprintf(home, sizeof home, ", home through %d host buffers of a chunk, each chunk's rows updated as it lands",
                 buffers);
    fprintf(out, "chunks    blocks' norms, projections and MLP %d tokens at a time (%d per micro-batch); LM head "
            "%d rows of logits at a time; its gradient on the device %s%s\n", piece,
            (eo->batch * eo->seq + piece - 1) / piece, eo->lm_chunk, head, home);
    fprintf(out, "ckpts     the inputs of %d of %d blocks (the first) in pinned host memory (%.2f GB), the rest and "
            "the head's on the device\n", eo->ckpt_on_host, c->num_layers, gb(host_ckpt));
}

/* With --resume, the plan of the run in --out as a resume would run it: its newest good
 * checkpoint's model and settings, the options given applied over them (train refuses the ones a
 * resume may not change). Without a checkpoint there, a fresh run's. `saved` holds the settings
 * the names in `o` point into. */
static mt_status resolve(const mt_train_options *given, mt_train_options *o, mt_config *cfg, json_t **saved,
                         FILE *out) {
    char checkpoint[4096];
    mt_ckpt_entry *entries;
    int count = 0;
    *saved = NULL;
    if (given->resume) {
        MT_TRY(mt_checkpoint_list(given->out_dir, &entries, &count));
        mt_checkpoint_list_free(entries, count);
    }
    if (!count) {
        if (given->resume) fprintf(out, "run       %s holds no checkpoint: the plan of a fresh run\n", given->out_dir);
        MT_TRY(mt_train_options_fresh(given, o));
        return mt_train_model_config(o, cfg);
    }
    int64_t step;
    MT_TRY(mt_run_latest(given->out_dir, checkpoint, sizeof checkpoint));
    MT_TRY(mt_run_read_info(checkpoint, &step, saved));
    MT_TRY(mt_train_options_check(given));
    MT_TRY(mt_settings_resolve(given, *saved, checkpoint, o));
    MT_TRY(mt_train_options_check(o));
    MT_TRY(mt_run_load_config(checkpoint, cfg));
    fprintf(out, "run       %s at step %lld: its model and settings\n", checkpoint, (long long)step);
    return MT_OK;
}

mt_status mt_plan(const mt_train_options *given, FILE *out) {
    mt_train_options resolved;
    mt_config cfg;
    json_t *saved;
    mt_status st = resolve(given, &resolved, &cfg, &saved, out);
    if (st == MT_OK) st = plan(&resolved, &cfg, out);
    json_decref(saved);
    return st;
}

static mt_status plan(const mt_train_options *o, const mt_config *c, FILE *out) {
    mt_host_memory_give(o->host_mem);
    mt_config cfg = *c;
    if (o->seq_len > cfg.max_position) /* as train refuses it */
        return mt_fail(MT_ERR_INVALID, "--seq %d is past the model's max_position_embeddings (%d%s)", o->seq_len,
                       cfg.max_position, cfg.rope_scaling_factor != 0 ? ", its rope scaling applied" : "");
    mt_layout lay;
    MT_TRY(mt_layout_init(&lay, &cfg));
    mt_backend *be = NULL;
    mt_status rc = mt_backend_open_for_plan(o->backend, o->threads, o->gpu_mem, &be);
    mt_placement p;
    mt_machine_rates rates;
    if (rc == MT_OK) rc = mt_train_placement(o, be, &cfg, &p, &rates);
    if (rc == MT_OK) {
        double params = (double)mt_config_total_params(&cfg), least = 0, most = 0;
        for (int l = 0; l < cfg.num_layers; l++) {
            double block = (double)mt_config_block_params(&cfg, l);
            if (l == 0 || block < least) least = block;
            if (block > most) most = block;
        }
        char blocks[64];
        if (least == most) snprintf(blocks, sizeof blocks, "%.1f M", most / 1e6);
        else snprintf(blocks, sizeof blocks, "%.1f to %.1f M", least / 1e6, most / 1e6);
        fprintf(out, "model     %.3f B parameters: %d blocks of %s, vocabulary %d x %d%s\n", params / 1e9,
                cfg.num_layers, blocks, cfg.vocab_size, cfg.hidden_size, cfg.tie_embeddings ? " (tied)" : "");
        if (cfg.num_experts > 0) {
            double ends = params - (double)mt_config_blocks_params(&cfg);
            fprintf(out, "experts   %d of %d blocks a mixture of %d experts of %d, %d a token%s; %.3f B parameters active "
                    "a token (the FLOPs count these)\n", mt_config_moe_layers(&cfg), cfg.num_layers, cfg.num_experts,
                    cfg.moe_intermediate_size, cfg.experts_per_token,
                    cfg.shared_expert_intermediate_size ? " and a shared expert" : "",
                    (ends + (double)mt_config_blocks_active_params(&cfg)) / 1e9);
        }
        fprintf(out, "step      %d micro-batches x %d sequences x %d tokens = %.0f tokens, %s backend\n",
                p.eo.micro_batches, p.eo.batch, p.eo.seq, p.tokens, be->ops->name);
        fputs(moments_note[p.moments], out);
        mt_placement_print(&p, out);
        print_chunks(&cfg, &p.eo, p.dev.host_checkpoints, out);
        print_tiles(be, &cfg, &p.eo, out);
        mt_memory_fit fit = mt_memory_fit_of(&lay, be, &p.eo, p.moments);
        mt_memory_fit_print(&fit, out);
        print_host_short(&fit, p.moments, out);
        mt_machine_rates_print(&rates, out);
    } else if (be && rc == MT_ERR_NOMEM) {
        /* A plan that does not fit is still an answer: say why, and succeed. */
        fprintf(out, "plan      does NOT fit: %s\n", mt_error());
        rc = MT_OK;
    }
    if (be) mt_backend_destroy(be);
    mt_layout_free(&lay);
    return rc;
}
