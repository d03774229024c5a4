/* The profile (backend.h's prof group, bench --profile) on CUDA, over training steps of a small
 * OLMoE-shaped mixture of experts: its rows add up to what the engine's own timers measured (the
 * compute stream's jobs and its waits on copies, timed by the engine's events, apart from the
 * profile's), within 3% of the jobs' time; every op of the expert block is a row of each phase with
 * one call a block, micro-batch and piece, the cuBLASLt loop's host wait one a grouped GEMM; only
 * the GEMMs count FLOPs; no row's own time is negative; and the profile leaves the step's numbers
 * as they are: the loss and the gradients as without it, to the float atomics' order (the
 * embedding's and the norms' weight gradients add with atomicAdd, so two runs differ in the last
 * bits: 1e-6 relative on the loss, 1e-4 on the gradients' norm of the difference). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tiny_model.h"
#include "engine/block.h"

enum { SEQ = 128, BATCH = 2, MICRO = 2, STEPS = 3 };

static mt_config small_moe(void) {
    mt_config c = mt_tiny_wider(mt_tiny_config_moe(MT_ARCH_OLMOE, 1));
    c.intermediate_size = c.moe_intermediate_size = 128; /* OLMoE's experts are intermediate_size wide */
    c.max_position = SEQ;
    return c;
}

static mt_engine_options options(void) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ, o.batch = BATCH, o.micro_batches = MICRO;
    return o;
}

static void open_model(mt_tiny_model *t) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "%s", mt_error());
    mt_config c = small_moe();
    mt_engine_options o = options();
    mt_tiny_model_open_on(t, be, &c, &o, 11);
}

static const mt_prof_row *row(const mt_prof_row *rows, int count, const char *phase, const char *op) {
    for (int i = 0; i < count; i++)
        if (!strcmp(rows[i].phase, phase) && !strcmp(rows[i].op, op)) return &rows[i];
    return NULL;
}

/* Calls of an op a step: one a block, micro-batch and piece (one piece a micro-batch here). */
static long per_step(const mt_config *c) { return (long)mt_config_moe_layers(c) * MICRO; }

static void expect_calls(const mt_prof_row *rows, int count, const char *phase, const char *op, long calls) {
    const mt_prof_row *r = row(rows, count, phase, op);
    cr_expect_not_null(r, "no row for %s / %s", phase, op);
    if (r) cr_expect_eq(r->calls, calls, "%s / %s: %ld calls, not %ld", phase, op, r->calls, calls);
}

Test(cuda, profile_adds_up_to_the_engines_timers) {
    mt_tiny_model t;
    open_model(&t);
    int32_t tokens[MICRO * BATCH * (SEQ + 1)], inputs[MICRO * BATCH * SEQ], targets[MICRO * BATCH * SEQ];
    mt_tiny_windows(3, MICRO * BATCH, SEQ, t.cfg.vocab_size, tokens, inputs, targets);
    mt_step_result r;
    cr_assert_eq(mt_profile_start(t.be), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-4f, &r), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_profile_collect(t.be), MT_OK, "%s", mt_error()); /* the events made; the rows anew */
    mt_profile_clear(t.be);
    double busy = 0, stalled = 0;
    for (int s = 0; s < STEPS; s++) {
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-4f, &r), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_profile_collect(t.be), MT_OK, "%s", mt_error());
        busy += r.compute_seconds, stalled += r.stall_seconds;
    }
    mt_profile_stop(t.be);
    int count;
    const mt_prof_row *rows = mt_profile_rows(t.be, &count);
    double jobs = 0, waits = 0;
    for (int i = 0; i < count; i++) {
        /* the events' resolution, about half a microsecond, in each of a span's and its children's times */
        cr_expect_geq(rows[i].seconds, -2e-6 * rows[i].calls, "%s / %s: %g s of its own", rows[i].phase, rows[i].op,
                      rows[i].seconds);
        if (!strcmp(rows[i].phase, "wait")) waits += rows[i].seconds;
        else jobs += rows[i].seconds;
    }
    cr_log_info("profile: %d rows, jobs %.3f ms against the engine's %.3f ms, waits %.3f ms against %.3f ms", count,
                1e3 * jobs, 1e3 * busy, 1e3 * waits, 1e3 * stalled);
    cr_expect_lt(fabs(jobs - busy), 0.03 * busy, "the jobs' rows %.3f ms, the engine's jobs %.3f ms", 1e3 * jobs,
                 1e3 * busy);
    cr_expect_lt(fabs(waits - stalled), 0.03 * busy, "the waits' rows %.3f ms, the engine's stalls %.3f ms",
                 1e3 * waits, 1e3 * stalled);

    long n = STEPS * per_step(&t.cfg);
    const char *forward_ops[] = {"norm", "router GEMM", "route: softmax, top k", "permute", "gather", "gate/up GEMM",
                                 "SwiGLU", "down GEMM"};
    for (size_t i = 0; i < sizeof forward_ops / sizeof *forward_ops; i++) {
        expect_calls(rows, count, MT_PHASE_FORWARD, forward_ops[i], n);
        expect_calls(rows, count, MT_PHASE_RECOMPUTE, forward_ops[i], n);
    }
    expect_calls(rows, count, MT_PHASE_FORWARD, "combine", n);
    expect_calls(rows, count, MT_PHASE_FORWARD, "residual add", n);
    const char *backward_ops[] = {"combine_dx", "down dW GEMM", "down dX GEMM", "SwiGLU_dx", "gate/up dW GEMM",
                                  "gate/up dX GEMM", "gather_dx", "route_dx", "router dW GEMM", "router dX GEMM",
                                  "norm_dx"};
    for (size_t i = 0; i < sizeof backward_ops / sizeof *backward_ops; i++)
        expect_calls(rows, count, MT_PHASE_BACKWARD, backward_ops[i], n);
    /* the default cuBLASLt loop waits for the offsets before each grouped GEMM; the kernels never */
    const char *way = getenv("MT_MOE_GEMM");
    if (way && !strcmp(way, "kernel")) {
        for (int i = 0; i < count; i++)
            cr_expect(strcmp(rows[i].op, "host sync: expert offsets home"), "the kernels waited for the host");
    } else {
        expect_calls(rows, count, MT_PHASE_FORWARD, "host sync: expert offsets home", 2 * n);
        expect_calls(rows, count, MT_PHASE_RECOMPUTE, "host sync: expert offsets home", 2 * n);
        expect_calls(rows, count, MT_PHASE_BACKWARD, "host sync: expert offsets home", 4 * n);
    }
    expect_calls(rows, count, MT_PHASE_FORWARD, "attention", STEPS * t.cfg.num_layers * MICRO * 2); /* prepare, tile */
    for (int i = 0; i < count; i++) {
        int gemm = strstr(rows[i].op, "GEMM") != NULL;
        cr_expect_eq(rows[i].flops > 0, gemm, "%s / %s: %g FLOPs", rows[i].phase, rows[i].op, rows[i].flops);
    }
    mt_tiny_model_close(&t);
}

Test(cuda, profile_leaves_the_step_as_it_is) {
    mt_tiny_model t;
    open_model(&t);
    int32_t tokens[MICRO * BATCH * (SEQ + 1)], inputs[MICRO * BATCH * SEQ], targets[MICRO * BATCH * SEQ];
    mt_tiny_windows(4, MICRO * BATCH, SEQ, t.cfg.vocab_size, tokens, inputs, targets);
    size_t numel = (size_t)t.layout.total_numel;
    float *off = malloc(numel * sizeof *off);
    cr_assert_not_null(off);
    double loss_off, loss_on;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss_off), MT_OK, "%s", mt_error());
    memcpy(off, mt_engine_host_grads(t.engine), numel * sizeof *off);
    cr_assert_eq(mt_profile_start(t.be), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss_on), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_profile_collect(t.be), MT_OK, "%s", mt_error());
    mt_profile_stop(t.be);
    int count;
    mt_profile_rows(t.be, &count);
    cr_expect_gt(count, 0, "the profile has no rows");
    cr_expect_lt(fabs(loss_on - loss_off), 1e-6 * loss_off, "loss %.9g with the profile, %.9g without", loss_on,
                 loss_off);
    const float *on = mt_engine_host_grads(t.engine);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < numel; i++) {
        diff += ((double)on[i] - off[i]) * ((double)on[i] - off[i]);
        norm += (double)off[i] * off[i];
    }
    cr_expect_lt(sqrt(diff), 1e-4 * sqrt(norm), "the gradients differ by %.3g relative with the profile on",
                 sqrt(diff / norm));
    free(off);
    mt_tiny_model_close(&t);
}
