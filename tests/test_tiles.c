/* A block works through the micro-batch in attention tiles (engine/block.h: mt_block_tile_rows,
 * --attn-tile): the queries' side of the workspace (q, the attention output, their gradients, x2)
 * is a tile's, k and v stay whole. The math must not notice, on the cpu backend:
 *
 * - tiles of whole sequences (tile >= seq) give bitwise the untiled loss and gradients: each weight
 *   gradient still accumulates one sequence at a time, in sequence order;
 * - windows inside a sequence (tile < seq: each attending to every key before it, the backward
 *   from the last window, dk and dv summed over the windows in fp32) give the same loss and
 *   gradients up to fp32 rounding: a window's rows see the same keys in the same order (their
 *   out, lse and dq agree with the whole to BLAS's row blocking, tests/test_attention_tiles.c),
 *   dk and dv and the weight gradients sum the same terms in another order. The relative L2
 *   errors measured were 1.4e-7 to 3.7e-7 (the loss's 0 to 1.2e-7); the bound is 1e-5, as for
 *   pieces inside a sequence in tests/test_chunking.c. A window taken out of order (the backward
 *   run first to last, checked on purpose) gives errors of 0.2 to 445.
 *
 * With pieces inside the windows, checkpoints on the host, the attention variants (GQA, q/k/v biases
 * and a tied head, Qwen3's per-head q/k norms, OLMoE's over the projection, gpt-oss's o_proj bias
 * and sinks) and mixtures of experts. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "engine/block.h"
#include "ops_check.h"
#include "tiny_model.h"

enum { SEQ = 64, SEQUENCES = 4 };

typedef mt_tiny_grads result;

/* SEQUENCES sequences of seq <= SEQ tokens; positions: NULL, or packed examples' over their rows
 * (engine.h). */
static result grads_at(const mt_config *cfg, int seq, int batch, int tile, int chunk, int ckpt_on_host,
                       const int32_t *positions) {
    mt_engine_options o = mt_engine_defaults();
    o.packed = positions != NULL;
    o.seq = seq;
    o.batch = batch;
    o.micro_batches = SEQUENCES / batch;
    o.attn_tile = tile;
    o.chunk = chunk;
    o.ckpt_on_host = ckpt_on_host;
    o.max_grad_norm = 1.0f;
    return mt_tiny_grads_of(cfg, &o, 13, 43, positions);
}

static result grads_of(const mt_config *cfg, int batch, int tile, int chunk, int ckpt_on_host) {
    return grads_at(cfg, SEQ, batch, tile, chunk, ckpt_on_host, NULL);
}

static void expect_tiles_invisible(const mt_config *cfg) {
    /* whole sequences a tile: 1, 3 (the last tile holds the one left), all, and a tile a few rows
     * past one sequence; against the untiled run of the same micro-batches (a mixture of experts'
     * load-balancing loss is a micro-batch's) */
    const int whole[] = {SEQ, 3 * SEQ, 4 * SEQ, SEQ + 5};
    for (int batch = 2; batch <= 4; batch += 2) {
        result untiled = grads_of(cfg, batch, 0, SEQ, 0);
        for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
            result got = grads_of(cfg, batch, whole[i], SEQ, 0);
            char what[64];
            snprintf(what, sizeof what, "tile %d, batch %d, against untiled", whole[i], batch);
            mt_tiny_expect_same_bits(&got, &untiled, what);
            free(got.grads);
        }
        free(untiled.grads);
    }
    result want = grads_of(cfg, 2, 0, 0, 0);
    /* windows: 64 = 16 + 2 x 24 (a first window of the rest), 4 x 16, 1 + 63, one query each;
     * pieces inside them (10 rows: cut at the windows' edges too), checkpoints on the host */
    const int tile[] = {24, 16, 63, 1, 24};
    const int chunk[] = {0, 0, 10, 0, 10};
    for (size_t i = 0; i < sizeof tile / sizeof tile[0]; i++) {
        result got = grads_of(cfg, 2, tile[i], chunk[i], i % 2);
        char what[64];
        snprintf(what, sizeof what, "tile %d, chunk %d, against untiled", tile[i], chunk[i]);
        mt_tiny_expect_close(&got, &want, what);
        free(got.grads);
    }
    free(want.grads);
}

Test(tiles, tiles_do_not_change_the_gradients) {
    mt_config cfg = mt_tiny_config_gqa();
    cfg.max_position = SEQ;
    expect_tiles_invisible(&cfg);
}

Test(tiles, tiles_do_not_change_the_gradients_tied_bias) {
    mt_config cfg = mt_tiny_config_tied_bias();
    cfg.max_position = SEQ;
    expect_tiles_invisible(&cfg);
}

/* Qwen3's q norm runs over a tile's queries, its k norm over the micro-batch's keys, its backward
 * over a window's rows once their gradients are final. */
Test(tiles, tiles_do_not_change_the_gradients_qwen3) {
    mt_config cfg = mt_tiny_config_qwen3(0);
    cfg.max_position = SEQ;
    expect_tiles_invisible(&cfg);
}

/* gpt-oss's attention: the o_proj bias, and the sinks' gradient, which every tile adds its queries'
 * share to, a sequence at a time (sliding windows of 3 on two blocks of three). */
Test(tiles, tiles_do_not_change_the_gradients_sinks) {
    mt_config cfg = mt_tiny_config_sinks();
    cfg.max_position = SEQ;
    expect_tiles_invisible(&cfg);
}

/* Mixtures of experts over a tile's pieces (x2 the tile's): OLMoE's q/k norms over the whole
 * projection with the load-balancing loss, and Qwen2-MoE's shared expert among dense blocks. The
 * routing is the same: the windows' rounding (~1e-7) moves no token to another expert here. */
Test(tiles, tiles_do_not_change_the_gradients_olmoe) {
    mt_config cfg = mt_tiny_config_moe(MT_ARCH_OLMOE, 1);
    cfg.max_position = SEQ;
    expect_tiles_invisible(&cfg);
}

Test(tiles, tiles_do_not_change_the_gradients_qwen2_moe) {
    mt_config cfg = mt_tiny_config_moe(MT_ARCH_QWEN2_MOE, 1);
    cfg.max_position = SEQ;
    expect_tiles_invisible(&cfg);
}

/* Odd sizes: sequences of 37 tokens (a prime: no tile but 1 and 37 divides them), one and two a
 * micro-batch. Tiles of whole sequences (37: one a tile; 42: one, the rows past it unused; 74: the
 * micro-batch of two in one tile) give the untiled bits; windows of 10 (7 + 3 x 10), 36 (1 + 36), 2
 * (1 + 18 x 2) and 1 (37 windows), pieces of 5 cut inside some of them, the untiled gradients up
 * to the rounding above. */
Test(tiles, tiles_at_odd_sizes) {
    enum { ODD = 37 };
    mt_config cfg = mt_tiny_config_gqa();
    cfg.max_position = ODD;
    for (int batch = 1; batch <= 2; batch++) {
        result untiled = grads_at(&cfg, ODD, batch, 0, ODD, 0, NULL);
        const int whole[] = {ODD, ODD + 5, 2 * ODD};
        for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
            result got = grads_at(&cfg, ODD, batch, whole[i], ODD, 0, NULL);
            char what[64];
            snprintf(what, sizeof what, "tile %d, batch %d, against untiled", whole[i], batch);
            mt_tiny_expect_same_bits(&got, &untiled, what);
            free(got.grads);
        }
        free(untiled.grads);
        result want = grads_at(&cfg, ODD, batch, 0, 0, 0, NULL);
        const int tile[] = {10, 36, 2, 1}, chunk[] = {5, 0, 5, 0};
        for (size_t i = 0; i < sizeof tile / sizeof tile[0]; i++) {
            result got = grads_at(&cfg, ODD, batch, tile[i], chunk[i], (int)i % 2, NULL);
            char what[64];
            snprintf(what, sizeof what, "tile %d, chunk %d, batch %d, against untiled", tile[i], chunk[i], batch);
            mt_tiny_expect_close(&got, &want, what);
            free(got.grads);
        }
        free(want.grads);
    }
}

/* Packed examples (segments: attention within each, positions restarting): windows whose edges fall
 * inside segments and segments inside windows give the untiled packed gradients up to the rounding
 * above; a micro-batch of sequences the tile holds is one tile (block.h), the untiled bits. */
Test(tiles, windows_of_packed_examples) {
    static const int lengths[] = {10, 22, 1, 31, 64, 5, 5, 5, 17, 32, 3, 61}; /* 4 sequences of 64 */
    int32_t positions[SEQUENCES * SEQ];
    int row = 0;
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++)
        for (int i = 0; i < lengths[k]; i++) positions[row++] = i;
    cr_assert_eq(row, SEQUENCES * SEQ);
    mt_config cfg = mt_tiny_config_qwen3(0);
    cfg.max_position = SEQ;
    result want = grads_at(&cfg, SEQ, 2, 0, 0, 0, positions);
    result whole = grads_at(&cfg, SEQ, 2, SEQ, 0, 0, positions);
    mt_tiny_expect_same_bits(&whole, &want, "packed, tiles of whole sequences, against untiled");
    const int tile[] = {24, 7};
    for (size_t i = 0; i < sizeof tile / sizeof tile[0]; i++) {
        result got = grads_at(&cfg, SEQ, 2, tile[i], 10, 0, positions);
        char what[64];
        snprintf(what, sizeof what, "packed, tile %d, against untiled", tile[i]);
        mt_tiny_expect_close(&got, &want, what);
        free(got.grads);
    }
    free(whole.grads);
    free(want.grads);
}

Test(tiles, tile_rows) {
    cr_expect_eq(mt_block_tile_rows(4, 8, 0), 32);  /* none: the micro-batch */
    cr_expect_eq(mt_block_tile_rows(4, 8, 100), 32);
    cr_expect_eq(mt_block_tile_rows(4, 8, 20), 16); /* whole sequences only */
    cr_expect_eq(mt_block_tile_rows(4, 8, 5), 5);   /* a window */
    cr_expect_eq(mt_block_tile_rows(1, 524288, 65536), 65536);
}

/* Training without clipping over windows: three steps move the masters as the untiled run's do, up
 * to the rounding above (a wrong window's gradient moves them by ~1e-3). */
static float *masters_after_training(const mt_config *cfg, int tile, double *first_loss) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 2;
    o.micro_batches = 2;
    o.attn_tile = tile;
    o.max_grad_norm = 0;
    return mt_tiny_masters_after_steps(cfg, &o, 5, 80, first_loss);
}

Test(tiles, windows_train_as_whole) {
    mt_config cfg = mt_tiny_config_gqa();
    cfg.max_position = SEQ;
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    double loss_whole, loss_windows;
    float *want = masters_after_training(&cfg, 0, &loss_whole);
    float *got = masters_after_training(&cfg, 24, &loss_windows);
    cr_expect(fabs(loss_windows - loss_whole) <= 1e-6 * fabs(loss_whole), "the first step's loss %.9g, untiled %.9g",
              loss_windows, loss_whole);
    double diff = ops_rel_err(got, want, (size_t)lay.total_numel);
    cr_expect(diff <= 1e-6, "the masters' relative difference is %g", diff);
    free(want);
    free(got);
    mt_layout_free(&lay);
}
