/* The mixtures of experts, whole, against the independent PyTorch reference
 * (tests/reference/llama_ref.py, written from transformers' sparse MoE blocks, GptOssMLP and
 * load_balancing_loss_func): loss and every parameter's gradient for a tiny model of each family,
 * with and without the load-balancing loss, in one micro-batch and in two (the loss then the mean
 * of each micro-batch's forward's); a few AdamW steps with clipping and the loss; the experts' load
 * and the loss as the step reports them. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_fixture.h"
#include "tiny_model.h"

enum { SEQ = 8, SEQUENCES = 4 };

static mt_engine_options options(int micro_batches) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.micro_batches = micro_batches;
    o.batch = SEQUENCES / micro_batches;
    o.lm_chunk = 3;
    o.chunk = 2 * SEQ; /* two sequences a piece: pieces of several segments */
    return o;
}

static void check_grads(mt_config cfg, int micro_batches) {
    mt_engine_options o = options(micro_batches);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 21);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(22, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    double loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());

    mt_ref_fixture fx;
    cr_assert_eq(mt_ref_fixture_create(&fx), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_ref_fixture_write_split(&fx, &t.layout, mt_store_f32(&t.store), tokens, SEQUENCES, SEQ, micro_batches, NULL),
                 MT_OK, "%s", mt_error());
    cr_assert_eq(mt_ref_run_jobs(&(mt_ref_job){"grads", &fx}, 1), MT_OK, "%s", mt_error());
    size_t n = (size_t)t.layout.total_numel;
    double *want64 = malloc(n * sizeof *want64), want_loss;
    float *want = malloc(n * sizeof *want);
    cr_assert_eq(mt_ref_read_grads(&fx, &t.layout, &want_loss, want64), MT_OK, "%s", mt_error());
    for (size_t i = 0; i < n; i++) want[i] = (float)want64[i];
    mt_ref_fixture_remove(&fx);

    mt_ref_diff d;
    mt_ref_compare(&t.layout, mt_engine_host_grads(t.engine), want, &d);
    /* fp32 kernels against float64, as for the dense models (test_model_ref.c): ~1e-6 relative per
     * tensor; a wrong routing, weight or missing term is O(1). */
    cr_expect_lt(d.worst_rel, 1e-4, "gradient of %s off by %g relative (max abs %g)", d.worst_tensor, d.worst_rel,
                 d.worst_max_abs);
    /* The engine's loss is the cross-entropy, the reference's the objective (the aux loss's part in
     * it is checked by the training test). */
    if (!cfg.output_router_logits)
        cr_expect_lt(fabs(loss - want_loss), 1e-5 * fabs(want_loss), "loss %.9f, reference %.9f", loss, want_loss);
    free(want64);
    free(want);
    mt_tiny_model_close(&t);
}

Test(moe, qwen3_moe_grads_match_reference) { check_grads(mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 0), 1); }
Test(moe, qwen3_moe_grads_with_aux_loss_two_micro_batches) { check_grads(mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 1), 2); }
Test(moe, qwen2_moe_shared_expert_grads_with_aux_loss) { check_grads(mt_tiny_config_moe(MT_ARCH_QWEN2_MOE, 1), 1); }
Test(moe, mixtral_grads_with_aux_loss) { check_grads(mt_tiny_config_moe(MT_ARCH_MIXTRAL, 1), 1); }
Test(moe, olmoe_grads_match_reference) { check_grads(mt_tiny_config_moe(MT_ARCH_OLMOE, 0), 2); }
Test(moe, gpt_oss_grads_match_reference) { check_grads(mt_tiny_config_moe(MT_ARCH_GPT_OSS, 0), 1); }
Test(moe, gpt_oss_grads_with_aux_loss_two_micro_batches) { check_grads(mt_tiny_config_moe(MT_ARCH_GPT_OSS, 1), 2); }

/* A few AdamW steps with clipping against torch.optim.AdamW: the objective (the cross-entropy plus
 * router_aux_loss_coef times the load-balancing loss, which the step reports apart) and the weights'
 * updates. Routing decides which experts a token's gradient reaches, so a wrong top k shows here
 * as a wrong update, not only as a wrong loss. */
static void check_training(mt_config cfg, int micro_batches) {
    enum { STEPS = 3 };
    mt_engine_options o = options(micro_batches);
    o.max_grad_norm = 1.0f;
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 31);
    size_t n = (size_t)t.layout.total_numel;
    float *before = malloc(n * sizeof *before), *want = malloc(n * sizeof *want);
    memcpy(before, mt_store_f32(&t.store), n * sizeof *before);
    memcpy(want, mt_store_f32(&t.store), n * sizeof *want);
    int32_t tokens[STEPS * SEQUENCES * (SEQ + 1)], inputs[STEPS * SEQUENCES * SEQ], targets[STEPS * SEQUENCES * SEQ];
    mt_tiny_windows(32, STEPS * SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    float lr = 1e-2f, objective[STEPS], want_losses[STEPS];
    for (int s = 0; s < STEPS; s++) {
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs + s * SEQUENCES * SEQ, targets + s * SEQUENCES * SEQ, NULL, lr, &r),
                     MT_OK, "%s", mt_error());
        cr_assert(r.moe && r.aux_loss > 0, "step %d: no load-balancing loss reported", s);
        objective[s] = (float)(r.loss + cfg.router_aux_loss_coef * r.aux_loss);
    }
    mt_engine_finish(t.engine);
    mt_ref_fixture fx;
    mt_ref_train_settings ts = {.steps = STEPS, .lr = lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps,
                                .weight_decay = o.weight_decay, .max_grad_norm = o.max_grad_norm};
    cr_assert_eq(mt_ref_fixture_create(&fx), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_ref_fixture_write_split(&fx, &t.layout, before, tokens, SEQUENCES, SEQ, micro_batches, &ts), MT_OK,
                 "%s", mt_error());
    cr_assert_eq(mt_ref_run_jobs(&(mt_ref_job){"train", &fx}, 1), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_ref_read_train(&fx, &t.layout, STEPS, want_losses, want), MT_OK, "%s", mt_error());
    mt_ref_fixture_remove(&fx);
    for (int s = 0; s < STEPS; s++)
        cr_expect_lt(fabsf(objective[s] - want_losses[s]), 1e-4f * fabsf(want_losses[s]),
                     "step %d: loss + coef x aux loss %.7f, reference %.7f", s, (double)objective[s],
                     (double)want_losses[s]);
    float *delta = malloc(n * sizeof *delta), *want_delta = malloc(n * sizeof *want_delta);
    for (size_t i = 0; i < n; i++) {
        delta[i] = mt_store_f32(&t.store)[i] - before[i];
        want_delta[i] = want[i] - before[i];
    }
    mt_ref_diff d;
    mt_ref_compare(&t.layout, delta, want_delta, &d);
    /* fp32 on both sides (test_model_ref.c): ~1e-5; a wrong routing, clip or decay is >10%. */
    cr_expect_lt(d.worst_rel, 1e-2, "update of %s off by %g relative", d.worst_tensor, d.worst_rel);
    free(delta);
    free(want_delta);
    free(before);
    free(want);
    mt_tiny_model_close(&t);
}

Test(moe, qwen3_moe_training_with_aux_loss_matches_reference) { check_training(mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 1), 2); }
Test(moe, qwen2_moe_training_with_aux_loss_matches_reference) { check_training(mt_tiny_config_moe(MT_ARCH_QWEN2_MOE, 1), 1); }
Test(moe, gpt_oss_training_with_aux_loss_matches_reference) { check_training(mt_tiny_config_moe(MT_ARCH_GPT_OSS, 1), 1); }

/* A router of zeros: every probability equal, the top k by the tie rule (the lower index first) the
 * first k experts, whatever the token. Each of them gets every token (a share of 1/k of the routed
 * ones), the others none: the load the step reports. The aux loss is then E x k x (1/E) = k. */
Test(moe, collapsed_routing_shows_in_the_load) {
    mt_config cfg = mt_tiny_config_moe(MT_ARCH_MIXTRAL, 0);
    cfg.num_experts = 8;
    cfg.experts_per_token = 3;
    mt_engine_options o = options(2);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 41);
    for (int l = 0; l < cfg.num_layers; l++) {
        const mt_tensor *router = mt_layout_tensor(&t.layout, mt_unit_block(l), MT_T_ROUTER);
        memset(mt_store_f32(&t.store) + t.layout.units[router->unit].offset + router->offset, 0,
               (size_t)router->rows * router->cols * sizeof(float));
    } /* (the cpu backend's weights are the fp32 masters themselves) */
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(42, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    mt_step_result r;
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-3f, &r), MT_OK, "%s", mt_error());
    cr_expect(r.moe);
    cr_expect_float_eq(r.expert_load_max, 1.0 / 3, 1e-12, "largest share %g", r.expert_load_max);
    cr_expect_eq(r.expert_load_min, 0.0, "smallest share %g", r.expert_load_min);
    cr_expect_float_eq(r.aux_loss, 3.0, 1e-5, "aux loss %g", r.aux_loss);
    mt_tiny_model_close(&t);
}

/* A dense model reports no experts; a balanced-enough random router gives shares around 1/E. */
Test(moe, random_routing_load_is_around_uniform) {
    mt_config cfg = mt_tiny_config_moe(MT_ARCH_OLMOE, 1);
    mt_engine_options o = options(1);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 43);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(44, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    mt_step_result r;
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-3f, &r), MT_OK, "%s", mt_error());
    double uniform = 1.0 / cfg.num_experts;
    cr_expect(r.expert_load_max > uniform && r.expert_load_max < 1.0 / cfg.experts_per_token, "largest share %g",
              r.expert_load_max);
    cr_expect(r.expert_load_min < uniform, "smallest share %g", r.expert_load_min);
    mt_tiny_model_close(&t);
    mt_config dense = mt_tiny_config_gqa();
    mt_tiny_model_open(&t, &dense, &o, 43);
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-3f, &r), MT_OK, "%s", mt_error());
    cr_expect_not(r.moe);
    mt_tiny_model_close(&t);
}

/* Blocks of different sizes (dense ones among sparse ones) updated on the "device" (the cpu
 * backend's optimizer ops) with the ends: the host-updated units' gradients are packed by their
 * own sizes, and the training has the bits of the run that updates every unit on the host. */
static float *train_three_steps(const mt_config *cfg, int device_blocks, float clip) {
    mt_engine_options o = options(2);
    o.max_grad_norm = clip;
    o.device_blocks = device_blocks;
    o.ends_on_device = device_blocks > 0;
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 51);
    int32_t tokens[3 * SEQUENCES * (SEQ + 1)], inputs[3 * SEQUENCES * SEQ], targets[3 * SEQUENCES * SEQ];
    mt_tiny_windows(52, 3 * SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
    for (int s = 0; s < 3; s++) {
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs + s * SEQUENCES * SEQ, targets + s * SEQUENCES * SEQ, NULL, 1e-2f, &r),
                     MT_OK, "%s", mt_error());
    }
    mt_engine_finish(t.engine);
    float *master = malloc((size_t)t.layout.total_numel * sizeof *master);
    memcpy(master, mt_store_f32(&t.store), (size_t)t.layout.total_numel * sizeof *master);
    mt_tiny_model_close(&t);
    return master;
}

Test(moe, blocks_of_different_sizes_on_the_device_train_as_on_the_host) {
    mt_config cfg = mt_tiny_config_moe(MT_ARCH_QWEN2_MOE, 1); /* dense, sparse, dense blocks */
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK, "%s", mt_error());
    cr_assert_neq(lay.units[mt_unit_block(0)].numel, lay.units[mt_unit_block(1)].numel);
    for (int clip = 0; clip < 2; clip++) {
        float *host = train_three_steps(&cfg, 0, clip ? 1.0f : 0.0f);
        float *device = train_three_steps(&cfg, 2, clip ? 1.0f : 0.0f);
        int64_t first = 0;
        while (first < lay.total_numel && !memcmp(&host[first], &device[first], sizeof *host)) first++;
        cr_expect_eq(first, lay.total_numel, "clip %d: master %lld differs with blocks 0 and 1 on the device", clip,
                     (long long)first);
        free(host);
        free(device);
    }
    mt_layout_free(&lay);
}

/* The load-balancing loss counts the real tokens only, as transformers' load_balancing_loss_func
 * does under an attention mask: packed examples followed by padding (a segment of token 0 with no
 * targets, io/dataset.h's) give the aux loss and the experts' load of the same examples alone. */
static mt_step_result packed_step(const mt_config *cfg, int seq, int real, const int32_t *tokens) {
    mt_engine_options o = options(1);
    o.seq = seq;
    o.chunk = 2 * seq;
    o.packed = 1;
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 61);
    int32_t inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ], positions[SEQUENCES * SEQ];
    for (int b = 0; b < SEQUENCES; b++)
        for (int i = 0; i < seq; i++) {
            int at = b * seq + i, example = i < real;
            inputs[at] = example ? tokens[b * (real + 1) + i] : 0;
            targets[at] = example ? tokens[b * (real + 1) + i + 1] : -1;
            positions[at] = example ? i : i - real;
        }
    mt_step_result r;
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, positions, 1e-3f, &r), MT_OK, "%s", mt_error());
    mt_tiny_model_close(&t);
    return r;
}

Test(moe, padding_takes_no_part_in_the_load_balancing_loss) {
    enum { REAL = 5 };
    mt_config cfg = mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 1);
    int32_t tokens[SEQUENCES * (REAL + 1)], inputs[SEQUENCES * REAL], targets[SEQUENCES * REAL];
    mt_tiny_windows(62, SEQUENCES, REAL, cfg.vocab_size, tokens, inputs, targets);
    mt_step_result alone = packed_step(&cfg, REAL, REAL, tokens), padded = packed_step(&cfg, SEQ, REAL, tokens);
    cr_assert(alone.moe && alone.aux_loss > 0);
    cr_expect(fabs(padded.aux_loss - alone.aux_loss) <= 1e-5 * alone.aux_loss, "aux loss %.9g padded, %.9g alone",
              padded.aux_loss, alone.aux_loss);
    cr_expect(fabs(padded.expert_load_max - alone.expert_load_max) < 1e-12 &&
                  fabs(padded.expert_load_min - alone.expert_load_min) < 1e-12,
              "expert load %g..%g padded, %g..%g alone", padded.expert_load_min, padded.expert_load_max,
              alone.expert_load_min, alone.expert_load_max);
    cr_expect(fabs(padded.loss - alone.loss) <= 1e-5 * alone.loss, "loss %.9g padded, %.9g alone", padded.loss,
              alone.loss);
}
