/* The whole model against the independent PyTorch reference (tests/reference/llama_ref.py):
 * loss and every parameter's gradient, and a few AdamW training steps. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_fixture.h"
#include "tiny_model.h"

enum { SEQ = 8, SEQUENCES = 2 };

static mt_engine_options options(int micro_batches) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.micro_batches = micro_batches;
    o.batch = SEQUENCES / micro_batches;
    o.lm_chunk = 3;
    return o;
}

static void check_grads(const mt_config *cfg, int micro_batches) {
    mt_engine_options o = options(micro_batches);
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 11);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(12, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
    double loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, &loss), MT_OK, "%s", mt_error());

    size_t n = (size_t)t.layout.total_numel;
    float *want = calloc(n, sizeof *want);
    double want_loss;
    cr_assert_eq(mt_ref_run_grads(&t.layout, t.store.master, tokens, SEQUENCES, SEQ, &want_loss, want),
                 MT_OK, "%s", mt_error());
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

Test(model, grads_match_reference_gqa_untied) {
    mt_config c = mt_tiny_config_gqa();
    check_grads(&c, 1);
}

Test(model, grads_match_reference_tied_bias_two_micro_batches) {
    mt_config c = mt_tiny_config_tied_bias();
    check_grads(&c, 2);
}

Test(model, grads_match_reference_mha_llama3_rope) {
    mt_config c = mt_tiny_config_mha();
    check_grads(&c, 1);
}

/* Qwen3: per-head q/k RMSNorm before RoPE, head_dim 16 against hidden / heads = 8. */
Test(model, grads_match_reference_qwen3_untied) {
    mt_config c = mt_tiny_config_qwen3(0);
    check_grads(&c, 1);
}

Test(model, grads_match_reference_qwen3_tied_two_micro_batches) {
    mt_config c = mt_tiny_config_qwen3(1);
    check_grads(&c, 2);
}

/* A few AdamW steps against torch.optim.AdamW: with exact clipping (the optimizer runs after the
 * backward) and without (it runs during the backward, gradients in the host ring: 7 blocks). */
static void check_training(mt_config cfg, float clip) {
    enum { STEPS = 4 };
    cfg.num_layers = 7;
    mt_engine_options o = options(1);
    o.max_grad_norm = clip;
    o.weight_decay = 0.1f;
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 21);
    size_t n = (size_t)t.layout.total_numel;
    float *before = malloc(n * sizeof *before), *want = malloc(n * sizeof *want);
    memcpy(before, t.store.master, n * sizeof *before);
    memcpy(want, t.store.master, n * sizeof *want);

    int32_t tokens[STEPS * SEQUENCES * (SEQ + 1)], inputs[STEPS * SEQUENCES * SEQ], targets[STEPS * SEQUENCES * SEQ];
    mt_tiny_windows(22, STEPS * SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    float lr = 1e-2f, losses[STEPS], want_losses[STEPS];
    for (int s = 0; s < STEPS; s++) {
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs + s * SEQUENCES * SEQ, targets + s * SEQUENCES * SEQ,
                                    lr, &r), MT_OK, "%s", mt_error());
        losses[s] = (float)r.loss;
    }
    mt_engine_finish(t.engine);
    mt_ref_train_settings ts = {.steps = STEPS, .lr = lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps,
                                .weight_decay = o.weight_decay, .max_grad_norm = o.max_grad_norm};
    cr_assert_eq(mt_ref_run_train(&t.layout, before, tokens, SEQUENCES, SEQ, &ts, want_losses, want),
                 MT_OK, "%s", mt_error());
    for (int s = 0; s < STEPS; s++)
        cr_expect_lt(fabsf(losses[s] - want_losses[s]), 1e-4f * fabsf(want_losses[s]),
                     "step %d: loss %.7f, reference %.7f", s, (double)losses[s], (double)want_losses[s]);
    /* Compare what training changed: the relative error of the weight update per tensor. Both
     * sides are fp32, so updates agree to ~1e-5; a wrong bias correction, decay or clip is >10%. */
    float *delta = malloc(n * sizeof *delta), *want_delta = malloc(n * sizeof *want_delta);
    for (size_t i = 0; i < n; i++) {
        delta[i] = t.store.master[i] - before[i];
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

Test(model, training_steps_match_reference_adamw_clipped) { check_training(mt_tiny_config_tied_bias(), 1.0f); }

Test(model, training_steps_match_reference_adamw_overlapped) { check_training(mt_tiny_config_tied_bias(), 0.0f); }

/* The q/k norm weights: no weight decay, updated like the other norms. */
Test(model, training_steps_match_reference_qwen3) { check_training(mt_tiny_config_qwen3(0), 1.0f); }
