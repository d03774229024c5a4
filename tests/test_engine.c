/* The schedule does not change the math: slots, optimizer threads, the grouping of sequences
 * into micro-batches, where activation checkpoints live and which units the backend updates itself
 * (the embedding and head with ends_on_device, the first device_blocks blocks, each with its own
 * AdamW and clip ops and its gradients waiting on the device) give bitwise-identical masters and
 * moments on the cpu backend, through a skipped step too. These tests also run
 * under ThreadSanitizer (make test), which watches the streams, events and optimizer thread. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tiny_model.h"
#include "train/backend_select.h"

enum { SEQ = 8, SEQUENCES = 4, STEPS = 3 };

/* One way to run the same training. */
typedef struct {
    int slots, threads, micro_batches;
    int ckpt_on_host;   /* -1: every block's */
    int ends_on_device;
    int device_blocks;  /* -1: every block */
} schedule;

static mt_engine_options options_of(const mt_config *cfg, schedule sc, int seq, float clip) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = seq;
    o.micro_batches = sc.micro_batches;
    o.batch = SEQUENCES / sc.micro_batches;
    o.slots = sc.slots;
    o.opt_threads = sc.threads;
    o.lm_chunk = 5;
    o.max_grad_norm = clip;
    o.ckpt_on_host = sc.ckpt_on_host < 0 ? cfg->num_layers : sc.ckpt_on_host;
    o.ends_on_device = sc.ends_on_device;
    o.device_blocks = sc.device_blocks < 0 ? cfg->num_layers : sc.device_blocks;
    return o;
}

/* Trains STEPS steps of SEQUENCES sequences of `seq` tokens each, step `poisoned` (0: none) with a
 * NaN gradient norm, and returns a copy of the masters and both moments (3 x total_numel floats). */
static float *train_seq(const mt_config *cfg, schedule sc, int seq, float clip, int poisoned) {
    mt_engine_options o = options_of(cfg, sc, seq, clip);
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 7);
    int32_t *tokens = malloc(sizeof *tokens * SEQUENCES * (seq + 1)), *inputs = malloc(sizeof *inputs * SEQUENCES * seq),
            *targets = malloc(sizeof *targets * SEQUENCES * seq);
    for (int s = 1; s <= STEPS; s++) {
        mt_tiny_windows(100 + s, SEQUENCES, seq, cfg->vocab_size, tokens, inputs, targets);
        if (s == poisoned) mt_engine_poison_next_step(t.engine);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 3e-3f, &r), MT_OK, "%s", mt_error());
        cr_assert_eq(r.skipped, s == poisoned && clip > 0, "step %d", s);
    }
    cr_assert_eq(mt_engine_finish(t.engine), STEPS - (poisoned && clip > 0));
    free(tokens);
    free(inputs);
    free(targets);
    size_t n = (size_t)t.layout.total_numel;
    float *state = malloc(3 * n * sizeof *state);
    memcpy(state, mt_store_f32(&t.store), n * sizeof *state);
    memcpy(state + n, t.store.moments.m, n * sizeof *state);
    memcpy(state + 2 * n, t.store.moments.v, n * sizeof *state);
    mt_tiny_model_close(&t);
    return state;
}

static float *train(const mt_config *cfg, schedule sc, float clip, int poisoned) {
    return train_seq(cfg, sc, SEQ, clip, poisoned);
}

static void expect_same_bits(const mt_config *cfg, float clip, int poisoned) {
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, cfg), MT_OK);
    size_t n = (size_t)lay.total_numel;
    float *want = train(cfg, (schedule){2, 1, 1, 0, 0, 0}, clip, poisoned);
    /* The last six: some blocks on the device, with and without the ends, all of them, and with
     * checkpoints on the host. */
    const schedule variants[] = {{3, 1, 1, 0, 0, 0},  {4, 2, 1, 0, 0, 0},  {2, 2, 4, 0, 0, 0}, {3, 1, 2, 0, 0, 0},
                                 {2, 1, 4, 0, 0, 0},  {2, 1, 2, 1, 0, 0},  {3, 2, 1, 2, 0, 0}, {2, 2, 4, -1, 0, 0},
                                 {2, 1, 1, 0, 1, 0},  {3, 2, 2, -1, 1, 0}, {2, 1, 1, 0, 0, 1}, {2, 2, 2, 0, 1, 2},
                                 {2, 1, 1, 0, 0, -1}, {2, 2, 1, 0, 1, -1}, {2, 1, 2, -1, 0, 1}, {3, 2, 1, 1, 1, 2}};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        const schedule *v = &variants[i];
        float *got = train(cfg, *v, clip, poisoned);
        size_t first = 0;
        while (first < 3 * n && !memcmp(&got[first], &want[first], sizeof *got)) first++;
        cr_expect_eq(first, 3 * n, "slots %d, optimizer threads %d, micro-batches %d, checkpoints on the host %d, "
                     "ends on the device %d, blocks on the device %d changed %s[%zu] (clip %g, poisoned step %d)",
                     v->slots, v->threads, v->micro_batches, v->ckpt_on_host, v->ends_on_device, v->device_blocks,
                     first < n ? "master" : first < 2 * n ? "m" : "v", first % n, (double)clip, poisoned);
        free(got);
    }
    if (poisoned) {
        float *unpoisoned = train(cfg, (schedule){2, 1, 1, 0, 0, 0}, clip, 0);
        cr_expect_neq(memcmp(unpoisoned, want, 3 * n * sizeof *want), 0, "the skipped step changed nothing?");
        free(unpoisoned);
    }
    free(want);
    mt_layout_free(&lay);
}

Test(engine, schedule_does_not_change_weights_clipped) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_same_bits(&cfg, 0.5f, 0);
}

Test(engine, schedule_does_not_change_weights_overlapped) {
    mt_config cfg = mt_tiny_config_tied_bias();
    cfg.num_layers = 7; /* more blocks than the host gradient ring holds */
    expect_same_bits(&cfg, 0.0f, 0);
}

/* Qwen3's per-head q/k norms add workspace and weight-gradient sums of their own. */
Test(engine, schedule_does_not_change_weights_qwen3) {
    mt_config cfg = mt_tiny_config_qwen3(1);
    expect_same_bits(&cfg, 0.5f, 0);
}

/* Tied: an untied embedding's rows no input token touched are updated on the host before the norm,
 * and a skipped step takes them back out within rounding (tests/test_speculative.c), where the
 * device, updating the embedding itself, leaves them as they were. */
Test(engine, schedule_does_not_change_a_skipped_step) {
    mt_config cfg = mt_tiny_config_tied_bias();
    expect_same_bits(&cfg, 1.0f, 2);
}

/* The first resident blocks' gradients lie in the device checkpoints' memory (engine_buffers.c)
 * where the checkpoints are large enough to hold them: here LONG-token sequences over 5 blocks (the
 * next two's in the streamed blocks' gradient slots: expect_same_bits's variants, at SEQ). The
 * same bits as the host's training, with clipping and without, with micro-batches, the ends on the
 * device and a checkpoint on the host, and through a skipped step (tied, as
 * schedule_does_not_change_a_skipped_step says why, and every step clipped: a step the host took
 * ahead of the norm, skipped, comes back out within rounding, where the device's is never taken);
 * and the budget counts their bytes out. */
Test(engine, resident_gradients_in_the_checkpoints_train_like_the_host) {
    enum { LONG = 64 };
    mt_backend *be = NULL;
    cr_assert_eq(mt_backend_open("cpu", 1, &be), MT_OK, "%s", mt_error());
    const schedule host = {2, 1, 1, 0, 0, 0};
    const schedule variants[] = {{2, 1, 1, 0, 0, 3}, {2, 2, 2, 0, 1, 3}, {3, 1, 1, 1, 0, 2}, {2, 1, 1, 0, 0, -1}};
    const float clips[] = {0.5f, 0.0f, 1e-3f}; /* the last: every step clips, none taken ahead */
    for (int c = 0; c < 3; c++) {
        int poisoned = c == 2 ? 2 : 0;
        mt_config cfg = poisoned ? mt_tiny_config_tied_bias() : mt_tiny_config_gqa();
        cfg.num_layers = 5;
        mt_layout lay;
        cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
        size_t n = (size_t)lay.total_numel;
        float *want = train_seq(&cfg, host, LONG, clips[c], poisoned);
        for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
            const schedule *v = &variants[i];
            mt_engine_options o = options_of(&cfg, *v, LONG, clips[c]), short_seq = options_of(&cfg, *v, SEQ, clips[c]);
            mt_engine_bytes b = mt_engine_size(be, &cfg, &o), z = mt_engine_size(be, &cfg, &short_seq);
            cr_assert_gt(b.grads_in_checkpoints, 0, "variant %zu: no gradient in the checkpoints' memory", i);
            cr_expect_eq(z.grads_in_checkpoints, 0, "variant %zu: the short checkpoints hold a gradient", i);
            int elsewhere = b.grads_in_checkpoints + b.grads_in_slots - z.grads_in_slots; /* z's lie in the slots */
            cr_expect_eq(z.grads - b.grads, (int64_t)elsewhere * lay.max_block_numel * 4,
                         "variant %zu: the gradients in the checkpoints are counted there", i);
            float *got = train_seq(&cfg, *v, LONG, clips[c], poisoned);
            size_t first = 0;
            while (first < 3 * n && !memcmp(&got[first], &want[first], sizeof *got)) first++;
            cr_expect_eq(first, 3 * n, "variant %zu (%d blocks on the device, %d of their gradients in the "
                         "checkpoints) changed %s[%zu] (clip %g, poisoned step %d)", i, o.device_blocks,
                         b.grads_in_checkpoints, first < n ? "master" : first < 2 * n ? "m" : "v", first % n,
                         (double)clips[c], poisoned);
            free(got);
        }
        free(want);
        mt_layout_free(&lay);
    }
    mt_backend_destroy(be);
}

/* Gradients home from resident blocks whose gradients lie in the checkpoints' memory and the
 * gradient slots (keep_grads, and mt_engine_grads's passes), the next pass's forward and an
 * evaluation writing the checkpoints behind them: every host gradient and the state after the
 * steps are the host's bits. */
Test(engine, resident_gradients_in_the_checkpoints_come_home_whole) {
    enum { LONG = 64, ROUNDS = 3 };
    mt_config cfg = mt_tiny_config_gqa();
    cfg.num_layers = 5;
    mt_tiny_model run[2];
    for (int r = 0; r < 2; r++) {
        mt_engine_options o = options_of(&cfg, (schedule){2, 1, 1, 0, 0, r ? 4 : 0}, LONG, 0.5f);
        o.keep_grads = 1;
        mt_tiny_model_open(&run[r], &cfg, &o, 9);
        if (r) {
            mt_engine_bytes b = mt_engine_size(run[r].be, &cfg, &o);
            cr_assert(b.grads_in_checkpoints > 0 && b.grads_in_slots > 0, "%d in the checkpoints, %d in the slots",
                      b.grads_in_checkpoints, b.grads_in_slots);
        }
    }
    size_t n = (size_t)run[0].layout.total_numel, rows = (size_t)SEQUENCES * LONG;
    int32_t *tokens = malloc((rows + SEQUENCES) * sizeof *tokens), *inputs = malloc(rows * sizeof *inputs),
            *targets = malloc(rows * sizeof *targets);
    for (int k = 0; k < ROUNDS; k++) {
        mt_tiny_windows(60 + k, SEQUENCES, LONG, cfg.vocab_size, tokens, inputs, targets);
        for (int what = 0; what < 2; what++) { /* a gradients-only pass, then a step */
            for (int r = 0; r < 2; r++) {
                double loss;
                mt_step_result res;
                mt_status rc = what ? mt_engine_step(run[r].engine, inputs, targets, NULL, 3e-3f, &res)
                                    : mt_engine_grads(run[r].engine, inputs, targets, NULL, &loss);
                cr_assert_eq(rc, MT_OK, "%s", mt_error());
                if (what) cr_assert_eq(mt_engine_finish(run[r].engine), k + 1);
                cr_assert_eq(mt_engine_eval(run[r].engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
            }
            const float *want = mt_engine_host_grads(run[0].engine), *got = mt_engine_host_grads(run[1].engine);
            size_t first = 0;
            while (first < n && !memcmp(&got[first], &want[first], sizeof *got)) first++;
            cr_expect_eq(first, n, "round %d, %s: gradient %zu differs", k, what ? "step" : "gradients pass", first);
        }
    }
    cr_expect_eq(memcmp(mt_store_f32(&run[0].store), mt_store_f32(&run[1].store), n * sizeof(float)), 0);
    free(tokens);
    free(inputs);
    free(targets);
    for (int r = 0; r < 2; r++) mt_tiny_model_close(&run[r]);
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
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-2f, &r), MT_OK, "%s", mt_error());
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
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-3f, &r), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "outside the vocabulary") != NULL, "%s", mt_error());
    mt_tiny_model_close(&t);
}

/* What --gpu-mem budgets (mt_engine_size) is what the engine allocates, to the byte: on the cpu
 * backend every "device" allocation is the engine's; and what the plan and the memory check count
 * of the host (its host classes) is what the engine allocates there (the cpu store takes none of
 * the backend's host memory). */
Test(engine, device_bytes_are_what_the_budget_counts) {
    mt_config cfg = mt_tiny_config_tied_bias();
    cfg.num_layers = 5;
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = 2;
    o.lm_chunk = 5;
    /* plain; more slots and micro-batches; checkpoints on the host; the ends on the device; blocks
     * on the device, clipped and not; every block and the ends there; without clipping the ends in
     * vocabulary chunks through the chunk buffers, tied and not, and kept whole (keep_grads) */
    for (int variant = 0; variant < 11; variant++) {
        mt_engine_options v = o;
        mt_config c = cfg;
        if (variant == 1) v.slots = 3, v.micro_batches = 2, v.max_grad_norm = 0;
        if (variant == 2) v.ckpt_on_host = 3;
        if (variant == 3) v.ends_on_device = 1;
        if (variant == 4) v.device_blocks = 2;
        if (variant == 5) v.device_blocks = 3, v.max_grad_norm = 0, v.slots = 3;
        if (variant == 6) v.device_blocks = c.num_layers, v.ends_on_device = 1;
        if (variant >= 7 && variant <= 9) v.max_grad_norm = 0, v.head_vocab_chunk = 16, v.grad_ring = 3;
        if (variant == 8) c = mt_tiny_config_gqa(), c.num_layers = 5;
        if (variant == 9) v.keep_grads = 1;
        if (variant == 10) v.seq = 64, v.device_blocks = 3; /* two blocks' gradients in the checkpoints */
        cr_assert_eq(mt_engine_chunk_buffers_for(&c, &v), variant == 7 || variant == 8 ? MT_ENGINE_CHUNK_BUFFERS : 0);
        mt_tiny_model t;
        mt_tiny_model_open(&t, &c, &v, 1);
        size_t peak = mt_dev_peak(t.be), host_peak = mt_host_peak(t.be);
        mt_engine_bytes want = mt_engine_size(t.be, &c, &v);
        cr_expect_eq(want.grads_in_checkpoints > 0, variant == 10, "variant %d: %d resident blocks' gradients in the "
                     "checkpoints", variant, want.grads_in_checkpoints);
        cr_expect_eq((int64_t)peak, want.total, "variant %d: the engine allocated %zu device bytes, the budget counts %lld",
                     variant, peak, (long long)want.total);
        int64_t host = want.host_grads + want.host_staging + want.host_checkpoints;
        cr_expect_eq((int64_t)host_peak, host, "variant %d: the engine allocated %zu host bytes, the plan counts %lld",
                     variant, host_peak, (long long)host);
        mt_tiny_model_close(&t);
    }
}

/* Without clipping the ends' gradients in vocabulary chunks take a few chunk buffers on the host
 * (and the head's final norm, and a row of zeros), not a whole fp32 gradient of each end
 * (Llama-3-8B: 4.2 GB of host less). */
Test(engine, chunk_buffers_hold_no_whole_end) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_backend *be = NULL;
    cr_assert_eq(mt_backend_open("cpu", 1, &be), MT_OK, "%s", mt_error());
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.max_grad_norm = 0;
    o.head_vocab_chunk = 8;
    mt_engine_options whole = o;
    whole.head_vocab_chunk = 0;
    int64_t chunked = mt_engine_size(be, &cfg, &o).host_grads, unchunked = mt_engine_size(be, &cfg, &whole).host_grads;
    int64_t D = cfg.hidden_size, ends = 4 * (lay.units[0].numel + lay.units[lay.num_units - 1].numel);
    int64_t rest = mt_layout_tensor(&lay, lay.num_units - 1, MT_T_LM_HEAD)->offset;
    int64_t buffers = 4 * (MT_ENGINE_CHUNK_BUFFERS * o.head_vocab_chunk * D + rest + D);
    cr_expect_eq(chunked, unchunked - ends + buffers, "chunked %lld host bytes of gradients, whole %lld, the ends %lld",
                 (long long)chunked, (long long)unchunked, (long long)ends);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}
