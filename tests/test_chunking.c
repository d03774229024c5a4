/* A block's token-wise ops (norms, projections, MLP) run over pieces of the micro-batch
 * (engine/block.h: mt_block_piece_rows). The math must not notice, on the cpu backend:
 *
 * - pieces of whole sequences (chunk >= seq) give bitwise the unchunked loss and gradients:
 *   every weight gradient still accumulates one sequence at a time, in sequence order;
 * - pieces inside a sequence (chunk < seq) give the same loss and gradients up to fp32
 *   rounding. A weight gradient over a sequence is then the sum of its pieces' GEMMs instead of
 *   one GEMM, and BLAS picks its blocking by the row count, so only the order of an fp32 sum
 *   changes. Its error is at most about rows x 2^-24 of the sum of |terms|; with 64 rows and
 *   terms of mixed sign the measured relative L2 error is ~1e-7, so 1e-5 leaves headroom while a
 *   piece lost, repeated or misplaced gives an error of order 1 (the test was broken on purpose
 *   that way: a piece skipped in the backward fails it).
 *
 * With checkpoints on the host and a small LM-head chunk as well, as the long-context runs use. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/block.h"
#include "train/backend_select.h"
#include "ops_check.h"
#include "tiny_model.h"

enum { SEQ = 64, SEQUENCES = 4 };

typedef mt_tiny_grads result;

static result grads_of(const mt_config *cfg, int batch, int chunk, int ckpt_on_host, int lm_chunk, int head_chunk) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = batch;
    o.micro_batches = SEQUENCES / batch;
    o.chunk = chunk;
    o.ckpt_on_host = ckpt_on_host;
    o.lm_chunk = lm_chunk;
    o.head_vocab_chunk = head_chunk;
    o.max_grad_norm = 1.0f;
    return mt_tiny_grads_of(cfg, &o, 11, 42, NULL);
}

static void expect_chunking_invisible(const mt_config *cfg) {
    result want = grads_of(cfg, 2, 0, 0, 7, 0);
    /* whole sequences a piece: 1, 3 (the last piece holds the one left), all of them */
    const int whole[] = {SEQ, 3 * SEQ, 4 * SEQ, SEQ + 5};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        for (int batch = 2; batch <= 4; batch += 2) {
            result got = grads_of(cfg, batch, whole[i], cfg->num_layers, 7, 0);
            char what[64];
            snprintf(what, sizeof what, "chunk %d, batch %d, against unchunked", whole[i], batch);
            mt_tiny_expect_same_bits(&got, &want, what);
            free(got.grads);
        }
    }
    /* pieces inside a sequence: even, uneven (64 = 2 x 24 + 16), one token; with the ends'
     * gradients in vocabulary chunks (256 = 6 x 37 + 34; tied, the one matrix's, made in the
     * embedding's backward) and without */
    const int part[] = {16, 24, 1, SEQ, 16};
    const int head[] = {0, 37, 0, 37, 255};
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        result got = grads_of(cfg, 2, part[i], 1, 7, head[i]);
        char what[64];
        snprintf(what, sizeof what, "chunk %d, head chunk %d, against unchunked", part[i], head[i]);
        mt_tiny_expect_close(&got, &want, what);
        free(got.grads);
    }
    free(want.grads);
}

Test(chunking, pieces_do_not_change_the_gradients) {
    mt_config cfg = mt_tiny_config_gqa();
    cfg.max_position = SEQ;
    expect_chunking_invisible(&cfg);
}

/* q/k/v bias gradients and the tied head's, through the pieces */
Test(chunking, pieces_do_not_change_the_gradients_tied_bias) {
    mt_config cfg = mt_tiny_config_tied_bias();
    cfg.max_position = SEQ;
    expect_chunking_invisible(&cfg);
}

/* Qwen3's per-head q/k norms run over the micro-batch between the pieced projections. */
Test(chunking, pieces_do_not_change_the_gradients_qwen3) {
    mt_config cfg = mt_tiny_config_qwen3(0);
    cfg.max_position = SEQ;
    expect_chunking_invisible(&cfg);
}

Test(chunking, piece_rows) {
    cr_expect_eq(mt_block_piece_rows(4, 8, 0), 32);  /* none: the micro-batch */
    cr_expect_eq(mt_block_piece_rows(4, 8, 100), 32);
    cr_expect_eq(mt_block_piece_rows(4, 8, 8), 8);   /* one sequence */
    cr_expect_eq(mt_block_piece_rows(4, 8, 20), 16); /* whole sequences only */
    cr_expect_eq(mt_block_piece_rows(4, 8, 5), 5);   /* inside a sequence */
    cr_expect_eq(mt_block_piece_rows(1, 131072, 8192), 8192);
}

/* The workspace of a long sequence grows by what attention must hold a token (k, v, their
 * gradients and fp32 sums, the norms' statistics), not by the MLP's width, the hidden size or the
 * query heads: past the chunk and the attention tile, doubling the sequence adds the same bytes
 * per token whatever F, D and Q are, all of them in the micro-batch's class; the tile's and the
 * piece's stay as they were. */
Test(chunking, workspace_is_a_chunks_and_a_tiles_beyond_attention) {
    mt_backend *be = NULL;
    cr_assert_eq(mt_backend_open("cpu", 1, &be), MT_OK, "%s", mt_error());
    mt_config narrow = mt_tiny_config_gqa(), wide = narrow, heads = narrow;
    wide.intermediate_size = 16 * narrow.intermediate_size;
    wide.hidden_size = 4 * narrow.hidden_size;
    heads.num_heads = 4 * narrow.num_heads;
    size_t growth[3];
    const mt_config *cfgs[3] = {&narrow, &wide, &heads};
    for (int i = 0; i < 3; i++) {
        mt_block_ws_bytes_by shorter = mt_block_ws_split(be, cfgs[i], 1, 4096, 256, 1024, 0);
        mt_block_ws_bytes_by longer = mt_block_ws_split(be, cfgs[i], 1, 8192, 256, 1024, 0);
        growth[i] = longer.total - shorter.total;
        cr_expect_eq(growth[i], longer.micro_batch - shorter.micro_batch, "config %d: growth outside the "
                     "micro-batch's class", i);
        cr_expect_eq(longer.tile, shorter.tile, "config %d: the tile's bytes grew with the sequence", i);
        cr_expect_eq(longer.piece, shorter.piece, "config %d: the piece's bytes grew with the sequence", i);
        cr_expect_eq(longer.total, longer.micro_batch + longer.tile + longer.piece);
    }
    cr_expect_eq(growth[0], growth[1], "4096 more tokens took %zu bytes at F = %d, D = %d, %zu at F = %d, D = %d",
                 growth[0], narrow.intermediate_size, narrow.hidden_size, growth[1], wide.intermediate_size,
                 wide.hidden_size);
    cr_expect_eq(growth[0], growth[2], "4096 more tokens took %zu bytes at %d query heads, %zu at %d", growth[0],
                 narrow.num_heads, growth[2], heads.num_heads);
    cr_expect_lt(mt_block_ws_bytes(be, &wide, 1, 8192, 256, 1024, 0), mt_block_ws_bytes(be, &wide, 1, 8192, 0, 1024, 0));
    cr_expect_lt(mt_block_ws_bytes(be, &wide, 1, 8192, 256, 1024, 0), mt_block_ws_bytes(be, &wide, 1, 8192, 256, 0, 0));
    mt_backend_destroy(be);
}

/* Training without clipping (the overlapped optimizer, a gradient ring) with the head's gradient
 * going home a vocabulary chunk at a time: the updates are the whole head's up to the rounding
 * above. Three steps at lr 3e-3 move the weights by ~1e-2; the masters' relative L2 difference
 * stays ~1e-8, a wrong or missing chunk makes it ~1e-3. */
static float *masters_after_training(const mt_config *cfg, int head_chunk, double *first_loss) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 2;
    o.micro_batches = 2;
    o.chunk = 24;
    o.head_vocab_chunk = head_chunk;
    o.max_grad_norm = 0;
    return mt_tiny_masters_after_steps(cfg, &o, 5, 70, first_loss);
}

static void expect_vocabulary_chunks_train_as_whole(mt_config cfg) {
    cfg.max_position = SEQ;
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    double loss_whole, loss_chunked;
    float *want = masters_after_training(&cfg, 0, &loss_whole);
    float *got = masters_after_training(&cfg, 10, &loss_chunked);
    cr_expect(loss_whole == loss_chunked, "the first step's loss %.17g, whole head %.17g", loss_chunked, loss_whole);
    double diff = ops_rel_err(got, want, (size_t)lay.total_numel);
    cr_expect(diff <= 1e-6, "the masters' relative difference is %g", diff);
    free(want);
    free(got);
    mt_layout_free(&lay);
}

Test(chunking, head_by_vocabulary_chunks_trains_as_whole) { expect_vocabulary_chunks_train_as_whole(mt_tiny_config_gqa()); }

/* Tied: the embedding's gradient, the head's part included, comes home only after its backward,
 * so the optimizer has no early copy to start its other rows on. */
Test(chunking, tied_by_vocabulary_chunks_trains_as_whole) {
    expect_vocabulary_chunks_train_as_whole(mt_tiny_config_tied_bias());
}

/* Without clipping the ends' gradients come home through a few chunk buffers, each chunk's rows
 * updated as it lands (the embedding's untouched rows from a row of zeros), instead of whole in a
 * host buffer each (keep_grads keeps that way): the same arithmetic on every element, so the same
 * bits, masters and both moments, whatever the number of buffers, the ring and the threads. */
static float *state_after_training(const mt_config *cfg, int keep_grads, int grad_ring, int threads) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 2;
    o.micro_batches = 2;
    o.head_vocab_chunk = 10;
    o.max_grad_norm = 0;
    o.keep_grads = keep_grads;
    o.grad_ring = grad_ring;
    o.opt_threads = threads;
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 5);
    cr_assert_eq(mt_engine_chunk_buffers_for(cfg, &o), keep_grads ? 0 : MT_ENGINE_CHUNK_BUFFERS);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    for (int s = 0; s < 3; s++) {
        mt_tiny_windows(90 + s, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 3e-3f, &r), MT_OK, "%s", mt_error());
    }
    mt_engine_finish(t.engine);
    size_t n = (size_t)t.layout.total_numel;
    float *state = malloc(3 * n * sizeof *state);
    memcpy(state, mt_store_f32(&t.store), n * sizeof *state);
    memcpy(state + n, t.store.moments.m, n * sizeof *state);
    memcpy(state + 2 * n, t.store.moments.v, n * sizeof *state);
    mt_tiny_model_close(&t);
    return state;
}

static void expect_chunk_buffers_bitwise(mt_config cfg) {
    cfg.max_position = SEQ;
    cfg.num_layers = 4;
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    size_t n = (size_t)lay.total_numel;
    float *want = state_after_training(&cfg, 1, 0, 1);
    const int rings[] = {1, 2, 3}, threads[] = {1, 2, 1};
    for (int i = 0; i < 3; i++) {
        float *got = state_after_training(&cfg, 0, rings[i], threads[i]);
        size_t first = 0;
        while (first < 3 * n && !memcmp(&got[first], &want[first], sizeof *got)) first++;
        int u = 0;
        while (u + 1 < lay.num_units && (size_t)lay.units[u + 1].offset <= first % n) u++;
        cr_expect_eq(first, 3 * n, "ring %d, %d threads: %s[%zu] (unit %d) differs from the whole ends' update",
                     rings[i], threads[i], first < n ? "master" : first < 2 * n ? "m" : "v", first % n, u);
        free(got);
    }
    free(want);
    mt_layout_free(&lay);
}

Test(chunking, chunk_buffers_give_the_bits_of_whole_ends) { expect_chunk_buffers_bitwise(mt_tiny_config_gqa()); }

/* Tied: each chunk is the head's part and the embedding's, every row of it. */
Test(chunking, chunk_buffers_give_the_bits_of_whole_ends_tied) {
    expect_chunk_buffers_bitwise(mt_tiny_config_tied_bias());
}
