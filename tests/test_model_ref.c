/* The whole model against the independent PyTorch reference (tests/reference/llama_ref.py):
 * loss and every parameter's gradient, and a few AdamW training steps; with a loss mask, against
 * the reference's cross_entropy with ignore_index on the masked targets. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_fixture.h"
#include "tiny_model.h"
#include "util/rng.h"

enum { SEQ = 8, SEQUENCES = 2 };

static mt_engine_options options(int micro_batches) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.micro_batches = micro_batches;
    o.batch = SEQUENCES / micro_batches;
    o.lm_chunk = 3;
    return o;
}

/* A loss mask over `count` targets: 1 (the target counts) with probability `keep` in 1/8ths,
 * drawn from `seed`. */
static void random_mask(uint64_t seed, int keep, int count, uint8_t *mask) {
    mt_rng rng = {seed};
    for (int i = 0; i < count; i++) mask[i] = mt_rng_next(&rng) % 8 < (uint64_t)keep;
}

/* What the dataset does with a masked shard: a target that carries no loss becomes -1. */
static void apply_mask(const uint8_t *mask, int count, int32_t *targets) {
    for (int i = 0; i < count; i++)
        if (mask && !mask[i]) targets[i] = -1;
}

/* Packed examples (io/dataset.h): sequence 0 holds segments of 3 and 5 tokens, sequence 1 of 1, 2
 * and 5; a segment's last token predicts nothing (its mask is 0), the rest do. */
static const int32_t packed_positions[SEQUENCES * SEQ] = {0, 1, 2, 0, 1, 2, 3, 4, 0, 0, 1, 0, 1, 2, 3, 4};
static const uint8_t packed_mask[SEQUENCES * SEQ] = {1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1, 0};

/* mask: NULL, or one byte per target (0: no loss); positions: NULL, or packed examples' (the
 * engine attends within them and the reference with its own block-diagonal mask); attn_tile: the
 * engine's (0: the default). */
static void check_grads_at(const mt_config *cfg, int micro_batches, const uint8_t *mask, const int32_t *positions,
                           int attn_tile) {
    mt_engine_options o = options(micro_batches);
    o.packed = positions != NULL;
    if (attn_tile) o.attn_tile = attn_tile;
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 11);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(12, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
    apply_mask(mask, SEQUENCES * SEQ, targets);
    double loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, positions, &loss), MT_OK, "%s", mt_error());

    size_t n = (size_t)t.layout.total_numel;
    float *want = calloc(n, sizeof *want);
    double want_loss;
    cr_assert_eq(mt_ref_run_grads_packed(&t.layout, mt_store_f32(&t.store), tokens, mask, positions, SEQUENCES, SEQ,
                                         &want_loss, want), MT_OK, "%s", mt_error());
    /* fp32 against float64: the loss agrees to ~1e-6 relative. */
    cr_expect_lt(fabs(loss - want_loss), 1e-5 * fabs(want_loss), "loss %.9f, reference %.9f", loss, want_loss);
    mt_ref_diff d;
    mt_ref_compare(&t.layout, mt_engine_host_grads(t.engine), want, &d);
    /* fp32 kernels over dot products of at most 53 terms land near 1e-6 relative per tensor; a
     * wrong or missing term in any backward is O(1). 1e-4 separates the two with room. */
    cr_expect_lt(d.worst_rel, 1e-4, "gradient of %s off by %g relative (max abs %g)", d.worst_tensor,
                 d.worst_rel, d.worst_max_abs);
    free(want);
    mt_tiny_model_close(&t);
}

static void check_grads(const mt_config *cfg, int micro_batches, const uint8_t *mask) {
    check_grads_at(cfg, micro_batches, mask, NULL, 0);
}

Test(model, grads_match_reference_gqa_untied) {
    mt_config c = mt_tiny_config_gqa();
    check_grads(&c, 1, NULL);
}

Test(model, grads_match_reference_tied_bias_two_micro_batches) {
    mt_config c = mt_tiny_config_tied_bias();
    check_grads(&c, 2, NULL);
}

Test(model, grads_match_reference_mha_llama3_rope) {
    mt_config c = mt_tiny_config_mha();
    check_grads(&c, 1, NULL);
}

/* The step's mean is over the unmasked targets of both micro-batches together: the first holds
 * 2 of them, the second 7, so a mean per micro-batch (or over all targets) is far off. */
static const uint8_t uneven_mask[SEQUENCES * SEQ] = {0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1};

Test(model, masked_grads_match_reference_ignore_index) {
    mt_config c = mt_tiny_config_gqa();
    check_grads(&c, 1, uneven_mask);
}

Test(model, masked_grads_match_reference_two_micro_batches) {
    mt_config c = mt_tiny_config_tied_bias();
    check_grads(&c, 2, uneven_mask);
}

Test(model, masked_grads_match_reference_random_mask) {
    uint8_t mask[SEQUENCES * SEQ];
    random_mask(5, 3, SEQUENCES * SEQ, mask);
    mt_config c = mt_tiny_config_mha();
    check_grads(&c, 1, mask);
}

/* The mask matters: the gradient with another mask (the complement) is not the reference's. */
Test(model, a_wrong_mask_gives_other_grads) {
    mt_config c = mt_tiny_config_gqa();
    mt_engine_options o = options(2);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &c, &o, 11);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(12, SEQUENCES, SEQ, c.vocab_size, tokens, inputs, targets);
    uint8_t wrong[SEQUENCES * SEQ];
    for (int i = 0; i < SEQUENCES * SEQ; i++) wrong[i] = !uneven_mask[i];
    apply_mask(wrong, SEQUENCES * SEQ, targets);
    double loss, want_loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    size_t n = (size_t)t.layout.total_numel;
    float *want = calloc(n, sizeof *want);
    cr_assert_eq(mt_ref_run_grads_masked(&t.layout, mt_store_f32(&t.store), tokens, uneven_mask, SEQUENCES, SEQ, &want_loss,
                                         want), MT_OK, "%s", mt_error());
    mt_ref_diff d;
    mt_ref_compare(&t.layout, mt_engine_host_grads(t.engine), want, &d);
    cr_expect_gt(d.worst_rel, 0.1, "a complementary mask still matched the reference (%g relative)", d.worst_rel);
    cr_expect_gt(fabs(loss - want_loss), 1e-3, "a complementary mask gave the reference's loss %.6f", want_loss);
    free(want);
    mt_tiny_model_close(&t);
}

/* No target carries loss: the engine's loss is 0 and its gradient zero, never NaN. */
Test(model, a_step_with_every_target_masked_is_zero_not_nan) {
    mt_config c = mt_tiny_config_gqa();
    mt_engine_options o = options(2);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &c, &o, 11);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(12, SEQUENCES, SEQ, c.vocab_size, tokens, inputs, targets);
    for (int i = 0; i < SEQUENCES * SEQ; i++) targets[i] = -1;
    double loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    cr_expect_eq(loss, 0.0, "loss %g with no target", loss);
    const float *g = mt_engine_host_grads(t.engine);
    for (int64_t i = 0; i < t.layout.total_numel; i++)
        cr_assert_eq(g[i], 0.0f, "gradient element %lld is %g with no target", (long long)i, (double)g[i]);
    cr_expect_eq(mt_engine_eval(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    cr_expect_eq(loss, 0.0, "eval loss %g with no target", loss);
    mt_tiny_model_close(&t);
}

/* Qwen3: per-head q/k RMSNorm before RoPE, head_dim 16 against hidden / heads = 8. */
Test(model, grads_match_reference_qwen3_untied) {
    mt_config c = mt_tiny_config_qwen3(0);
    check_grads(&c, 1, NULL);
}

Test(model, grads_match_reference_qwen3_tied_two_micro_batches) {
    mt_config c = mt_tiny_config_qwen3(1);
    check_grads(&c, 2, NULL);
}

/* Attention in windows of 3 queries (8 = 2 + 3 + 3, engine/block.c), each at its positions: RoPE's
 * llama3 scaling and Qwen3's q/k norms through the windows, against the reference's whole
 * sequences; and packed examples whose segments cross the windows' edges. */
Test(model, grads_match_reference_mha_llama3_rope_in_windows) {
    mt_config c = mt_tiny_config_mha();
    check_grads_at(&c, 1, NULL, NULL, 3);
}

Test(model, grads_match_reference_qwen3_in_windows_two_micro_batches) {
    mt_config c = mt_tiny_config_qwen3(1);
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, packed_grads_match_reference_in_windows) {
    mt_config c = mt_tiny_config_mha();
    check_grads_at(&c, 2, packed_mask, packed_positions, 3);
}

/* Packed examples against the reference's block-diagonal attention and positions, whole and in
 * two micro-batches, with q/k norms, and with GQA. */
Test(model, packed_grads_match_reference_gqa) {
    mt_config c = mt_tiny_config_gqa();
    check_grads_at(&c, 1, packed_mask, packed_positions, 0);
}

Test(model, packed_grads_match_reference_two_micro_batches_qwen3) {
    mt_config c = mt_tiny_config_qwen3(1);
    check_grads_at(&c, 2, packed_mask, packed_positions, 0);
}

Test(model, packed_grads_match_reference_mha_llama3_rope) {
    mt_config c = mt_tiny_config_mha();
    check_grads_at(&c, 1, packed_mask, packed_positions, 0);
}

/* The segments matter: the engine without them (one sequence each) is not the packed reference. */
Test(model, unpacked_windows_are_not_the_packed_reference) {
    mt_config c = mt_tiny_config_gqa();
    mt_engine_options o = options(1);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &c, &o, 11);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(12, SEQUENCES, SEQ, c.vocab_size, tokens, inputs, targets);
    apply_mask(packed_mask, SEQUENCES * SEQ, targets);
    double loss, want_loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    size_t n = (size_t)t.layout.total_numel;
    float *want = calloc(n, sizeof *want);
    cr_assert_eq(mt_ref_run_grads_packed(&t.layout, mt_store_f32(&t.store), tokens, packed_mask, packed_positions, SEQUENCES,
                                         SEQ, &want_loss, want), MT_OK, "%s", mt_error());
    mt_ref_diff d;
    mt_ref_compare(&t.layout, mt_engine_host_grads(t.engine), want, &d);
    cr_expect_gt(d.worst_rel, 0.01, "windows without segments matched the packed reference (%g relative)",
                 d.worst_rel);
    cr_expect_gt(fabs(loss - want_loss), 1e-4, "windows without segments gave the packed loss %.6f", want_loss);
    free(want);
    mt_tiny_model_close(&t);
}

/* A few AdamW steps against torch.optim.AdamW: with exact clipping (the optimizer runs after the
 * backward) and without (it runs during the backward, gradients in the host ring: 7 blocks).
 * positions: NULL, or every step's packed examples. */
static void check_packed_training(mt_config cfg, float clip, const uint8_t *mask, const int32_t *positions) {
    enum { STEPS = 4 };
    cfg.num_layers = 7;
    mt_engine_options o = options(1);
    o.packed = positions != NULL;
    o.max_grad_norm = clip;
    o.weight_decay = 0.1f;
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 21);
    size_t n = (size_t)t.layout.total_numel;
    float *before = malloc(n * sizeof *before), *want = malloc(n * sizeof *want);
    memcpy(before, mt_store_f32(&t.store), n * sizeof *before);
    memcpy(want, mt_store_f32(&t.store), n * sizeof *want);

    int32_t tokens[STEPS * SEQUENCES * (SEQ + 1)], inputs[STEPS * SEQUENCES * SEQ], targets[STEPS * SEQUENCES * SEQ];
    mt_tiny_windows(22, STEPS * SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    apply_mask(mask, STEPS * SEQUENCES * SEQ, targets);
    float lr = 1e-2f, losses[STEPS], want_losses[STEPS];
    for (int s = 0; s < STEPS; s++) {
        mt_step_result r;
        const int32_t *step_positions = positions ? positions + s * SEQUENCES * SEQ : NULL;
        cr_assert_eq(mt_engine_step(t.engine, inputs + s * SEQUENCES * SEQ, targets + s * SEQUENCES * SEQ,
                                    step_positions, lr, &r), MT_OK, "%s", mt_error());
        losses[s] = (float)r.loss;
    }
    mt_engine_finish(t.engine);
    mt_ref_train_settings ts = {.steps = STEPS, .lr = lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps,
                                .weight_decay = o.weight_decay, .max_grad_norm = o.max_grad_norm};
    cr_assert_eq(mt_ref_run_train_packed(&t.layout, before, tokens, mask, positions, SEQUENCES, SEQ, &ts, want_losses,
                                         want), MT_OK, "%s", mt_error());
    for (int s = 0; s < STEPS; s++)
        cr_expect_lt(fabsf(losses[s] - want_losses[s]), 1e-4f * fabsf(want_losses[s]),
                     "step %d: loss %.7f, reference %.7f", s, (double)losses[s], (double)want_losses[s]);
    /* Compare what training changed: the relative error of the weight update per tensor. Both
     * sides are fp32, so updates agree to ~1e-5; a wrong bias correction, decay or clip is >10%. */
    float *delta = malloc(n * sizeof *delta), *want_delta = malloc(n * sizeof *want_delta);
    for (size_t i = 0; i < n; i++) {
        delta[i] = mt_store_f32(&t.store)[i] - before[i];
        want_delta[i] = want[i] - before[i];
    }
    mt_ref_diff d;
    mt_ref_compare(&t.layout, delta, want_delta, &d);
    cr_expect_lt(d.worst_rel, 1e-2, "update of %s off by %g relative", d.worst_tensor, d.worst_rel);
    free(delta);
    free(want_delta);
    free(before);
    free(want);
    mt_tiny_model_close(&t);
}

static void check_training(mt_config cfg, float clip, const uint8_t *mask) {
    check_packed_training(cfg, clip, mask, NULL);
}

Test(model, training_steps_match_reference_adamw_clipped) { check_training(mt_tiny_config_tied_bias(), 1.0f, NULL); }

Test(model, training_steps_match_reference_adamw_overlapped) { check_training(mt_tiny_config_tied_bias(), 0.0f, NULL); }

/* The q/k norm weights: no weight decay, updated like the other norms. */
Test(model, training_steps_match_reference_qwen3) { check_training(mt_tiny_config_qwen3(0), 1.0f, NULL); }

/* Every step keeps about half its targets (none empty: PyTorch's mean of none is NaN). */
static void check_masked_training(float clip) {
    uint8_t mask[4 * SEQUENCES * SEQ];
    random_mask(31, 4, (int)sizeof mask, mask);
    check_training(mt_tiny_config_tied_bias(), clip, mask);
}

Test(model, masked_training_steps_match_reference_clipped) { check_masked_training(1.0f); }

Test(model, masked_training_steps_match_reference_overlapped) { check_masked_training(0.0f); }

/* Sliding windows (Mistral v0.1, Qwen2's use_sliding_window): a window of 3 keys on blocks 0 and 2
 * of sequences of 8 against the reference's window mask; in the engine's windows of queries
 * (tiles of 3, whose first key rows fall outside the sliding window), with packed examples longer
 * and shorter than it, and in training steps. */
Test(model, windowed_grads_match_reference) {
    mt_config c = mt_tiny_config_windowed(3);
    check_grads(&c, 1, NULL);
}

Test(model, windowed_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_windowed(3);
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, windowed_packed_grads_match_reference_in_tiles) {
    mt_config c = mt_tiny_config_windowed(2);
    check_grads_at(&c, 1, packed_mask, packed_positions, 3);
}

/* The window matters: the same weights without it are not the windowed reference. */
Test(model, a_window_changes_the_gradients) {
    mt_config c = mt_tiny_config_windowed(3);
    mt_engine_options o = options(1);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &c, &o, 11);
    c.sliding_window = 0;
    memset(c.local_layers, 0, sizeof c.local_layers);
    mt_tiny_model full;
    mt_tiny_model_open(&full, &c, &o, 11);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(12, SEQUENCES, SEQ, c.vocab_size, tokens, inputs, targets);
    double loss, full_loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_grads(full.engine, inputs, targets, NULL, &full_loss), MT_OK, "%s", mt_error());
    mt_ref_diff d;
    mt_ref_compare(&t.layout, mt_engine_host_grads(t.engine), mt_engine_host_grads(full.engine), &d);
    cr_expect_gt(d.worst_rel, 0.01, "the window left the gradients as they were (%g relative)", d.worst_rel);
    cr_expect_gt(fabs(loss - full_loss), 1e-5, "the window left the loss at %.6f", loss);
    mt_tiny_model_close(&t);
    mt_tiny_model_close(&full);
}

Test(model, windowed_training_steps_match_reference) { check_training(mt_tiny_config_windowed(3), 1.0f, NULL); }

/* Gemma 3 and Gemma 2 against the reference's Gemma block (sandwich norms, (1 + w), GeGLU-tanh,
 * the query scalar, the scaled embedding, local layers' window and RoPE base, linear scaling on
 * the global ones; Gemma 2's soft caps): whole, in tiles of 3 with two micro-batches and a mask,
 * packed in tiles, and AdamW steps (with 7 blocks: the local ones those of the 3-block config). */
Test(model, gemma3_grads_match_reference) {
    mt_config c = mt_tiny_config_gemma3();
    check_grads(&c, 1, NULL);
}

Test(model, gemma3_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_gemma3();
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, gemma3_packed_grads_match_reference_in_tiles) {
    mt_config c = mt_tiny_config_gemma3();
    check_grads_at(&c, 1, packed_mask, packed_positions, 3);
}

Test(model, gemma2_grads_match_reference) {
    mt_config c = mt_tiny_config_gemma2();
    check_grads(&c, 1, NULL);
}

Test(model, gemma2_packed_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_gemma2();
    check_grads_at(&c, 2, packed_mask, packed_positions, 3);
}

Test(model, gemma3_training_steps_match_reference) { check_training(mt_tiny_config_gemma3(), 1.0f, NULL); }

Test(model, gemma2_training_steps_match_reference) { check_training(mt_tiny_config_gemma2(), 1.0f, NULL); }

/* gpt-oss's attention (q/k/v and o_proj biases, a sink logit a head, a window of 3 on blocks 0 and
 * 2) against the reference's sink column: whole, in tiles of 3 with two micro-batches and a mask
 * (each window's share of the sinks' gradient added), packed in tiles, and AdamW steps (the sinks
 * and biases without weight decay). */
Test(model, sinks_grads_match_reference) {
    mt_config c = mt_tiny_config_sinks();
    check_grads(&c, 1, NULL);
}

Test(model, sinks_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_sinks();
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, sinks_packed_grads_match_reference_in_tiles) {
    mt_config c = mt_tiny_config_sinks();
    check_grads_at(&c, 1, packed_mask, packed_positions, 3);
}

Test(model, sinks_training_steps_match_reference) { check_training(mt_tiny_config_sinks(), 1.0f, NULL); }

/* Qwen3.5's Gated DeltaNet on every block against the reference's recurrence written out: whole,
 * in tiles of 3 (windows of each sequence: the recurrence's backward waits for the last) with two
 * micro-batches and a mask, packed (the convolution and the state restart on each example) in
 * tiles, and AdamW steps (A_log, dt_bias and the gated norm's plain weight among them). */
Test(model, qwen3_5_linear_grads_match_reference) {
    mt_config c = mt_tiny_config_qwen3_5_linear();
    check_grads(&c, 1, NULL);
}

Test(model, qwen3_5_linear_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_qwen3_5_linear();
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, qwen3_5_linear_packed_grads_match_reference_in_tiles) {
    mt_config c = mt_tiny_config_qwen3_5_linear();
    check_grads_at(&c, 1, packed_mask, packed_positions, 3);
}

Test(model, qwen3_5_linear_training_steps_match_reference) {
    check_training(mt_tiny_config_qwen3_5_linear(), 1.0f, NULL);
}

/* The hybrid: Gated DeltaNet and gated attention with RoPE over a quarter of each head. */
Test(model, qwen3_5_grads_match_reference) {
    mt_config c = mt_tiny_config_qwen3_5();
    check_grads(&c, 1, NULL);
}

Test(model, qwen3_5_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_qwen3_5();
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, qwen3_5_packed_grads_match_reference_in_tiles) {
    mt_config c = mt_tiny_config_qwen3_5();
    check_grads_at(&c, 1, packed_mask, packed_positions, 3);
}

Test(model, qwen3_5_training_steps_match_reference) { check_training(mt_tiny_config_qwen3_5(), 1.0f, NULL); }

/* Qwen3.5-MoE: the hybrid with experts and a shared expert on every block. */
Test(model, qwen3_5_moe_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_qwen3_5_moe();
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, qwen3_5_moe_packed_grads_match_reference_in_tiles) {
    mt_config c = mt_tiny_config_qwen3_5_moe();
    check_grads_at(&c, 1, packed_mask, packed_positions, 3);
}

/* Qwen3-Next: the fused projections' grouped rows, dense and sparse blocks. */
Test(model, qwen3_next_grads_match_reference_in_tiles_two_micro_batches) {
    mt_config c = mt_tiny_config_qwen3_next();
    check_grads_at(&c, 2, uneven_mask, NULL, 3);
}

Test(model, qwen3_next_packed_grads_match_reference_in_tiles) {
    mt_config c = mt_tiny_config_qwen3_next();
    check_grads_at(&c, 1, packed_mask, packed_positions, 3);
}

Test(model, qwen3_next_training_steps_match_reference) { check_training(mt_tiny_config_qwen3_next(), 1.0f, NULL); }

Test(model, qwen3_5_moe_training_steps_match_reference) {
    check_training(mt_tiny_config_qwen3_5_moe(), 1.0f, NULL);
}

/* Packed examples through a few steps: every step the same layout of segments. */
Test(model, packed_training_steps_match_reference) {
    enum { STEPS = 4 };
    int32_t positions[STEPS * SEQUENCES * SEQ];
    uint8_t mask[STEPS * SEQUENCES * SEQ];
    for (int s = 0; s < STEPS; s++) {
        memcpy(positions + s * SEQUENCES * SEQ, packed_positions, sizeof packed_positions);
        memcpy(mask + s * SEQUENCES * SEQ, packed_mask, sizeof packed_mask);
    }
    check_packed_training(mt_tiny_config_tied_bias(), 1.0f, mask, positions);
}
