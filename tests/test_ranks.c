/* Data parallelism on the cpu backend (engine/ranks.h): ranks are threads, their gradients summed
 * by the host all-reduce. The sum is exact when every rank sees the same data (each computes half
 * the gradient, bitwise, and half plus half is exact), so two ranks on the same windows must give
 * one rank's bits; on different windows two ranks must match one rank that runs all their
 * micro-batches up to the order of the sum. A rank that fails ends the step of every rank. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/host_comm.h"
#include "engine/ranks.h"
#include "tiny_model.h"
#include "util/clock.h"

enum { SEQ = 8, BATCH = 2, STEPS = 3 };

static mt_status open_cpu(void *ctx, int rank, mt_backend **out) { return mt_backend_cpu_create(out, 2); }

/* A group of n cpu ranks over a store with the tiny model's weights from seed 7. */
typedef struct {
    mt_ranks *g;
    mt_layout layout;
    mt_store store;
} group;

static mt_status group_open(group *t, const mt_config *cfg, const mt_engine_options *o, int n) {
    cr_assert_eq(mt_ranks_create(&t->g, n, open_cpu, NULL), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_layout_init(&t->layout, cfg), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_store_create(&t->store, &t->layout, mt_ranks_backend(t->g, 0)), MT_OK, "%s", mt_error());
    mt_store_init_random(&t->store, 7);
    return mt_ranks_start(t->g, &t->store, o, 0);
}

static void group_close(group *t) {
    mt_ranks_stop(t->g);
    mt_store_free(&t->store);
    mt_ranks_destroy(t->g);
    mt_layout_free(&t->layout);
}

static mt_engine_options options(int micro_batches, float clip, int ends_on_device) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = BATCH;
    o.micro_batches = micro_batches;
    o.lm_chunk = 5;
    o.opt_threads = 1;
    o.max_grad_norm = clip;
    o.ends_on_device = ends_on_device;
    return o;
}

/* Trains STEPS steps on n ranks of M micro-batches each; `same`: every rank gets rank 0's windows.
 * Returns the masters and both moments (3 x total_numel floats) and the last step's loss. */
static float *train(const mt_config *cfg, int n, int M, int same, float clip, int ends_on_device, double *loss) {
    mt_engine_options o = options(M, clip, ends_on_device);
    group t;
    cr_assert_eq(group_open(&t, cfg, &o, n), MT_OK, "%s", mt_error());
    int per = M * BATCH, all = n * per;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    for (int s = 1; s <= STEPS; s++) {
        mt_tiny_windows(100 + s, same ? per : all, SEQ, cfg->vocab_size, tokens, inputs, targets);
        for (int r = 1; same && r < n; r++) {
            memcpy(inputs + r * per * SEQ, inputs, per * SEQ * sizeof *inputs);
            memcpy(targets + r * per * SEQ, targets, per * SEQ * sizeof *targets);
        }
        mt_step_result res;
        cr_assert_eq(mt_ranks_step(t.g, inputs, targets, 3e-3f, &res), MT_OK, "%s", mt_error());
        cr_assert_eq(res.skipped, 0);
        *loss = res.loss;
    }
    cr_assert_eq(mt_engine_finish(mt_ranks_leader(t.g)), STEPS);
    size_t count = (size_t)t.layout.total_numel;
    float *state = malloc(3 * count * sizeof *state);
    memcpy(state, t.store.master, count * sizeof *state);
    memcpy(state + count, t.store.moments.m, count * sizeof *state);
    memcpy(state + 2 * count, t.store.moments.v, count * sizeof *state);
    group_close(&t);
    return state;
}

static size_t numel(const mt_config *cfg) {
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, cfg), MT_OK);
    size_t n = (size_t)lay.total_numel;
    mt_layout_free(&lay);
    return n;
}

static void expect_same_bits_on_same_data(const mt_config *cfg, float clip, int ends_on_device) {
    size_t n = numel(cfg);
    double one_loss, two_loss;
    float *one = train(cfg, 1, 1, 0, clip, ends_on_device, &one_loss);
    float *two = train(cfg, 2, 1, 1, clip, ends_on_device, &two_loss);
    size_t first = 0;
    while (first < 3 * n && !memcmp(&one[first], &two[first], sizeof *one)) first++;
    cr_expect_eq(first, 3 * n, "2 ranks on the same windows changed %s[%zu]: %a vs %a (clip %g, ends on device %d)",
                 first < n ? "master" : first < 2 * n ? "m" : "v", first % n, first < 3 * n ? one[first] : 0.0,
                 first < 3 * n ? two[first] : 0.0, (double)clip, ends_on_device);
    cr_expect_eq(one_loss, two_loss, "loss %.17g on one rank, %.17g on two", one_loss, two_loss);
    free(one);
    free(two);
}

Test(ranks, two_ranks_on_the_same_data_give_one_ranks_bits) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_same_bits_on_same_data(&cfg, 1.0f, 0);
    expect_same_bits_on_same_data(&cfg, 0.05f, 0); /* the clip scales every step */
    expect_same_bits_on_same_data(&cfg, 1.0f, 1);  /* each rank's device updates the ends */
    mt_config tied = mt_tiny_config_tied_bias();
    expect_same_bits_on_same_data(&tied, 0.05f, 0);
}

/* Two ranks of one micro-batch each against one rank of two: the same windows in the same order,
 * the gradient summed in another order. */
static void expect_close_to_one_rank(const mt_config *cfg, float clip) {
    size_t n = numel(cfg);
    double one_loss, two_loss;
    float *one = train(cfg, 1, 2, 0, clip, 0, &one_loss);
    float *two = train(cfg, 2, 1, 0, clip, 0, &two_loss);
    mt_tiny_model init;
    mt_engine_options o = options(1, clip, 0);
    mt_tiny_model_open(&init, cfg, &o, 7);
    double worst = 0, moved = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)one[i] - two[i]), m = fabs((double)one[i] - init.store.master[i]);
        if (d > worst) worst = d;
        if (m > moved) moved = m;
    }
    mt_tiny_model_close(&init);
    cr_expect_gt(moved, 1e-3, "training moved no master (%g)", moved);
    cr_expect_lt(worst, 1e-5, "a master differs by %g between 1 rank of 2 micro-batches and 2 ranks of 1 (clip %g)",
                 worst, (double)clip);
    cr_expect_lt(fabs(one_loss - two_loss), 1e-5 * fabs(one_loss), "loss %g vs %g", one_loss, two_loss);
    free(one);
    free(two);
}

Test(ranks, two_ranks_match_one_rank_running_all_micro_batches) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_close_to_one_rank(&cfg, 1.0f);
    expect_close_to_one_rank(&cfg, 0.05f);
}

static void expect_failure_ends_the_group(int failing) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options(1, 1.0f, 0);
    group t;
    cr_assert_eq(group_open(&t, &cfg, &o, 2), MT_OK, "%s", mt_error());
    int all = 2 * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    mt_tiny_windows(5, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
    mt_step_result res;
    cr_assert_eq(mt_ranks_step(t.g, inputs, targets, 3e-3f, &res), MT_OK, "%s", mt_error());
    mt_ranks_fail_next_step(t.g, failing);
    double t0 = mt_now();
    cr_assert_neq(mt_ranks_step(t.g, inputs, targets, 3e-3f, &res), MT_OK);
    char expected[64];
    snprintf(expected, sizeof expected, "rank %d of 2: injected failure", failing);
    cr_expect(strstr(mt_error(), expected), "the error names the rank that failed: %s", mt_error());
    cr_expect_lt(mt_now() - t0, 30.0, "the other rank was not released at once");
    cr_expect_neq(mt_ranks_step(t.g, inputs, targets, 3e-3f, &res), MT_OK, "an aborted group took another step");
    cr_expect(strstr(mt_error(), "aborted"), "%s", mt_error());
    group_close(&t);
}

Test(ranks, a_rank_that_fails_ends_every_ranks_step) {
    expect_failure_ends_the_group(1);
    expect_failure_ends_the_group(0);
}

Test(ranks, refuses_what_it_cannot_do_on_several_ranks) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options(1, 0.0f, 0);
    group t;
    cr_expect_neq(group_open(&t, &cfg, &o, 2), MT_OK);
    cr_expect(strstr(mt_error(), "--clip"), "%s", mt_error());
    group_close(&t);
    cr_expect_neq(mt_ranks_create(&t.g, 0, open_cpu, NULL), MT_OK);
}

/* The host communicator alone: a rank whose peer never comes gives up after MT_COLL_TIMEOUT_S, and
 * the group stays ended. */
Test(ranks, host_all_reduce_sums_and_gives_up_on_a_peer_that_never_comes) {
    setenv("MT_COLL_TIMEOUT_S", "1", 1);
    mt_host_comm *c;
    cr_assert_eq(mt_host_comm_create(&c, 2), MT_OK);
    unsetenv("MT_COLL_TIMEOUT_S");
    float buf[3] = {1, 2, 3};
    double t0 = mt_now();
    cr_assert_neq(mt_host_comm_all_reduce(c, 0, buf, 3), MT_OK);
    cr_expect(strstr(mt_error(), "MT_COLL_TIMEOUT_S") && strstr(mt_error(), "1 of 2 came"), "%s", mt_error());
    cr_expect_lt(mt_now() - t0, 10.0);
    cr_expect_neq(mt_host_comm_all_reduce(c, 1, buf, 3), MT_OK, "a timed-out group went on");
    mt_host_comm_release(c);
    mt_host_comm_release(c);
}
