/* The schedule does not change the math: slots, optimizer threads, the grouping of sequences
 * into micro-batches and where activation checkpoints live give bitwise-identical weights on the
 * cpu backend. These tests also run
 * under ThreadSanitizer (make test), which watches the streams, events and optimizer thread. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tiny_model.h"

enum { SEQ = 8, SEQUENCES = 4, STEPS = 3 };

/* Trains STEPS steps of SEQUENCES sequences each and returns a copy of the master weights. */
static float *train(const mt_config *cfg, int slots, int threads, int micro_batches, int ckpt_on_host, float clip) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.micro_batches = micro_batches;
    o.batch = SEQUENCES / micro_batches;
    o.slots = slots;
    o.opt_threads = threads;
    o.lm_chunk = 5;
    o.max_grad_norm = clip;
    o.ckpt_on_host = ckpt_on_host;
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 7);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    for (int s = 0; s < STEPS; s++) {
        mt_tiny_windows(100 + s, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, 3e-3f, &r), MT_OK, "%s", mt_error());
        cr_assert(!r.skipped);
    }
    cr_assert_eq(mt_engine_finish(t.engine), STEPS);
    size_t n = (size_t)t.layout.total_numel;
    float *master = malloc(n * sizeof *master);
    memcpy(master, t.store.master, n * sizeof *master);
    mt_tiny_model_close(&t);
    return master;
}

static void expect_same_bits(const mt_config *cfg, float clip) {
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, cfg), MT_OK);
    float *want = train(cfg, 2, 1, 1, 0, clip);
    /* slots, optimizer threads, micro-batches, checkpoints on the host (-1: all of them) */
    const int variants[][4] = {{3, 1, 1, 0}, {4, 2, 1, 0}, {2, 2, 4, 0}, {3, 1, 2, 0}, {2, 1, 4, 0},
                               {2, 1, 2, 1}, {3, 2, 1, 2}, {2, 2, 4, -1}};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        int on_host = variants[i][3] < 0 ? cfg->num_layers : variants[i][3];
        float *got = train(cfg, variants[i][0], variants[i][1], variants[i][2], on_host, clip);
        cr_expect_eq(memcmp(got, want, (size_t)lay.total_numel * sizeof *got), 0,
                     "slots %d, optimizer threads %d, micro-batches %d, %d checkpoints on the host changed the "
                     "weights (clip %g)", variants[i][0], variants[i][1], variants[i][2], on_host, (double)clip);
        free(got);
    }
    free(want);
    mt_layout_free(&lay);
}

Test(engine, schedule_does_not_change_weights_clipped) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_same_bits(&cfg, 0.5f);
}

Test(engine, schedule_does_not_change_weights_overlapped) {
    mt_config cfg = mt_tiny_config_tied_bias();
    cfg.num_layers = 7; /* more blocks than the host gradient ring holds */
    expect_same_bits(&cfg, 0.0f);
}

Test(engine, training_moves_weights_and_lowers_loss) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 2;
    mt_config cfg = mt_tiny_config_gqa();
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 3);
    int32_t tokens[2 * (SEQ + 1)], inputs[2 * SEQ], targets[2 * SEQ];
    mt_tiny_windows(5, 2, SEQ, cfg.vocab_size, tokens, inputs, targets);
    double first = 0, last = 0;
    for (int s = 0; s < 30; s++) {
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, 1e-2f, &r), MT_OK, "%s", mt_error());
        if (s == 0) first = r.loss;
        last = r.loss;
    }
    /* One fixed batch, 30 steps at lr 1e-2: a working trainer memorizes it. */
    cr_expect_lt(last, 0.5 * first, "loss went from %f to %f", first, last);
    mt_tiny_model_close(&t);
}

Test(engine, refuses_token_past_vocabulary) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 1;
    mt_config cfg = mt_tiny_config_gqa();
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 3);
    int32_t tokens[SEQ + 1], inputs[SEQ], targets[SEQ];
    mt_tiny_windows(5, 1, SEQ, cfg.vocab_size, tokens, inputs, targets);
    inputs[3] = cfg.vocab_size;
    mt_step_result r;
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, 1e-3f, &r), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "outside the vocabulary") != NULL, "%s", mt_error());
    mt_tiny_model_close(&t);
}

/* What --gpu-mem budgets (mt_engine_size) is what the engine allocates, to the byte: on the cpu
 * backend every "device" allocation is the engine's. */
Test(engine, device_bytes_are_what_the_budget_counts) {
    mt_config cfg = mt_tiny_config_tied_bias();
    cfg.num_layers = 5;
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 2;
    o.lm_chunk = 5;
    /* plain; more slots and micro-batches; checkpoints on the host; the ends on the device */
    for (int variant = 0; variant < 4; variant++) {
        mt_engine_options v = o;
        if (variant == 1) v.slots = 3, v.micro_batches = 2, v.max_grad_norm = 0;
        if (variant == 2) v.ckpt_on_host = 3;
        if (variant == 3) v.ends_on_device = 1;
        mt_tiny_model t;
        mt_tiny_model_open(&t, &cfg, &v, 1);
        size_t peak = 0;
        t.be->ops->dev_mem_info(t.be, NULL, &peak);
        mt_engine_bytes want = mt_engine_size(t.be, &cfg, &v);
        cr_expect_eq((int64_t)peak, want.total, "variant %d: the engine allocated %zu device bytes, the budget counts %lld",
                     variant, peak, (long long)want.total);
        mt_tiny_model_close(&t);
    }
}
