/* Data parallelism on the cpu backend (engine/ranks.h): ranks are threads that fill every
 * accumulator (the loss, each gradient, each vocabulary chunk of the ends') in turns, in rank order
 * (backend.h's acc_open/acc_close), so n ranks of M micro-batches must give the bits of one rank
 * running all n x M micro-batches: masters, both moments and every step's loss, whatever the shape
 * (clipping, the ends or blocks on the device, the ends in vocabulary chunks, a tied embedding, pieces
 * of a sequence). A rank that fails ends the step of every rank. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/host_comm.h"
#include "engine/ranks.h"
#include "tiny_model.h"
#include "util/clock.h"
#include "test_limits.h"

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

/* What a case changes from the defaults; `summed`: the ranks sum their own accumulators in rank
 * order (MT_TEST_RANKS_SUMMED), reduce-scatter host-updated units' gradients and sum the slices'
 * norms, as on NCCL. */
typedef struct {
    float clip;
    int ends_on_device, device_blocks, chunk, summed, grad_ring;
} shape;

static mt_engine_options options(int micro_batches, shape sh) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = BATCH;
    o.micro_batches = micro_batches;
    o.lm_chunk = 5;
    o.opt_threads = 1;
    o.max_grad_norm = sh.clip;
    o.ends_on_device = sh.ends_on_device;
    o.device_blocks = sh.device_blocks;
    if (sh.chunk) o.chunk = sh.chunk;
    if (sh.grad_ring) o.grad_ring = sh.grad_ring;
    return o;
}

/* Trains STEPS steps on n ranks of M micro-batches each, the windows of step s the same whatever n
 * and M. Returns the masters and both moments (3 x total_numel floats) and every step's loss. */
static float *train(const mt_config *cfg, int n, int M, shape sh, double loss[STEPS], double norm[STEPS]) {
    mt_engine_options o = options(M, sh);
    group t;
    if (sh.summed) setenv("MT_TEST_RANKS_SUMMED", "1", 1);
    mt_status rc = group_open(&t, cfg, &o, n);
    unsetenv("MT_TEST_RANKS_SUMMED");
    cr_assert_eq(rc, MT_OK, "%s", mt_error());
    int all = n * M * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    for (int s = 1; s <= STEPS; s++) {
        mt_tiny_windows(100 + s, all, SEQ, cfg->vocab_size, tokens, inputs, targets);
        mt_step_result res;
        cr_assert_eq(mt_ranks_step(t.g, inputs, targets, NULL, 3e-3f, &res), MT_OK, "%s", mt_error());
        cr_assert_eq(res.skipped, 0);
        loss[s - 1] = res.loss;
        norm[s - 1] = res.grad_norm;
    }
    cr_assert_eq(mt_engine_finish(mt_ranks_leader(t.g)), STEPS);
    size_t count = (size_t)t.layout.total_numel;
    float *state = malloc(3 * count * sizeof *state);
    memcpy(state, mt_store_f32(&t.store), count * sizeof *state);
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

/* n ranks of M micro-batches against one rank of n x M: the same bits. */
static void expect_one_ranks_bits(const char *what, const mt_config *cfg, int n, int M, shape sh) {
    size_t count = numel(cfg);
    double one_loss[STEPS], many_loss[STEPS], one_norm[STEPS], many_norm[STEPS];
    float *one = train(cfg, 1, n * M, sh, one_loss, one_norm);
    float *many = train(cfg, n, M, sh, many_loss, many_norm);
    size_t first = 0;
    while (first < 3 * count && !memcmp(&one[first], &many[first], sizeof *one)) first++;
    cr_expect_eq(first, 3 * count, "%s: %d ranks of %d micro-batches changed %s[%zu]: %a vs %a on one rank", what, n,
                 M, first < count ? "master" : first < 2 * count ? "m" : "v", first % count,
                 first < 3 * count ? one[first] : 0.0, first < 3 * count ? many[first] : 0.0);
    for (int s = 0; s < STEPS; s++)
        cr_expect_eq(memcmp(&one_loss[s], &many_loss[s], sizeof one_loss[s]), 0,
                     "%s: step %d's loss %.17g on one rank, %.17g on %d", what, s + 1, one_loss[s], many_loss[s], n);
    for (int s = 0; s < STEPS; s++)
        cr_expect_eq(memcmp(&one_norm[s], &many_norm[s], sizeof one_norm[s]), 0,
                     "%s: step %d's gradient norm %.17g on one rank, %.17g on %d", what, s + 1, one_norm[s],
                     many_norm[s], n);
    /* and the training moved the masters: the equality is not that of two runs that did nothing */
    mt_tiny_model init;
    mt_engine_options o = options(1, sh);
    mt_tiny_model_open(&init, cfg, &o, 7);
    size_t moved = 0;
    for (size_t i = 0; i < count; i++) moved += one[i] != mt_store_f32(&init.store)[i];
    mt_tiny_model_close(&init);
    cr_expect_gt(moved, count / 2, "%s: training moved %zu of %zu masters", what, moved, count);
    free(one);
    free(many);
}

Test(ranks, several_ranks_give_the_bits_of_one_rank_running_all_micro_batches) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_one_ranks_bits("clip 1", &cfg, 2, 1, (shape){.clip = 1.0f});
    expect_one_ranks_bits("clip 0.05", &cfg, 2, 2, (shape){.clip = 0.05f}); /* the clip scales every step */
    expect_one_ranks_bits("3 ranks", &cfg, 3, 1, (shape){.clip = 0.05f});
    expect_one_ranks_bits("ends on device", &cfg, 2, 1, (shape){.clip = 0.05f, .ends_on_device = 1});
    expect_one_ranks_bits("blocks on device", &cfg, 2, 2, (shape){.clip = 0.05f, .device_blocks = 1});
    expect_one_ranks_bits("pieces of a sequence", &cfg, 2, 1, (shape){.clip = 0.05f, .chunk = 3});
    mt_config tied = mt_tiny_config_tied_bias(); /* the embedding's gradient: the head's turns, then its own */
    expect_one_ranks_bits("tied", &tied, 2, 2, (shape){.clip = 0.05f});
    expect_one_ranks_bits("tied, 3 ranks", &tied, 3, 1, (shape){.clip = 0.05f, .ends_on_device = 1});
    mt_config qwen3 = mt_tiny_config_qwen3(0);
    expect_one_ranks_bits("qk norms", &qwen3, 2, 1, (shape){.clip = 0.05f, .device_blocks = 1});
    /* past the default head_vocab_chunk: the ends' gradients in two vocabulary chunks, each rank
     * copying its slice of each chunk home */
    mt_config wide_vocab = mt_tiny_config_gqa();
    wide_vocab.vocab_size = MT_ENGINE_HEAD_VOCAB_CHUNK + 500;
    expect_one_ranks_bits("vocabulary chunks", &wide_vocab, 2, 1, (shape){.clip = 1.0f});
    /* tied in chunks: each chunk's head part made in the embedding's backward, a round of its own */
    mt_config tied_wide = mt_tiny_config_tied_bias();
    tied_wide.vocab_size = MT_ENGINE_HEAD_VOCAB_CHUNK + 500;
    expect_one_ranks_bits("tied vocabulary chunks", &tied_wide, 2, 1, (shape){.clip = 0.05f});
    expect_one_ranks_bits("tied vocabulary chunks, clip 0", &tied_wide, 3, 1, (shape){.clip = 0.0f});
    /* without clipping the leader's optimizer updates each unit once every rank's slice is home,
     * during the backward; one rank updates the embedding's untouched rows early, ranks whole */
    expect_one_ranks_bits("clip 0", &cfg, 2, 2, (shape){.clip = 0.0f});
    expect_one_ranks_bits("clip 0, 3 ranks, tied", &tied, 3, 1, (shape){.clip = 0.0f});
    expect_one_ranks_bits("clip 0, ends and a block on device", &cfg, 2, 1,
                          (shape){.clip = 0.0f, .ends_on_device = 1, .device_blocks = 1});
    expect_one_ranks_bits("clip 0, vocabulary chunks", &wide_vocab, 2, 1, (shape){.clip = 0.0f});
    /* a ring of one block buffer: each block's backward waits for the update of the one before */
    expect_one_ranks_bits("clip 0, a ring of 1", &cfg, 3, 1, (shape){.clip = 0.0f, .grad_ring = 1});
    /* a mixture of experts with its load-balancing loss: each micro-batch's, the mean over every
     * rank's (the loss's accumulator takes turns too) */
    mt_config moe = mt_tiny_config_moe(MT_ARCH_QWEN2_MOE, 1);
    expect_one_ranks_bits("mixture of experts", &moe, 2, 2, (shape){.clip = 0.05f});
}

/* Ranks that sum (the path NCCL takes: each host-updated unit's gradient reduce-scattered, each rank
 * sending home its slice, the slices' sums of squares summed across the ranks) against one rank of
 * n x M micro-batches: the same up to the order of the sums. The norm is checked on its own: Adam
 * all but hides a wrong clip coefficient in the masters. */
static void expect_close_to_one_rank(const char *what, const mt_config *cfg, int n, int M, shape sh) {
    size_t count = numel(cfg);
    double one_loss[STEPS], many_loss[STEPS], one_norm[STEPS], many_norm[STEPS];
    sh.summed = 1;
    float *one = train(cfg, 1, n * M, sh, one_loss, one_norm);
    float *many = train(cfg, n, M, sh, many_loss, many_norm);
    double worst = 0;
    size_t same = 0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)one[i] - many[i]);
        if (d > worst) worst = d;
        same += one[i] == many[i];
    }
    cr_expect_lt(worst, 1e-5, "%s: a master differs by %g between 1 rank and %d", what, worst, n);
    cr_expect_lt(same, count, "%s: summing ranks gave one rank's bits: the path under test did not run", what);
    for (int s = 0; s < STEPS; s++) {
        cr_expect_lt(fabs(one_loss[s] - many_loss[s]), 1e-6 * one_loss[s], "%s: step %d's loss %.9g vs %.9g", what,
                     s + 1, one_loss[s], many_loss[s]);
        cr_expect_lt(fabs(one_norm[s] - many_norm[s]), 1e-5 * one_norm[s], "%s: step %d's norm %.9g vs %.9g", what,
                     s + 1, one_norm[s], many_norm[s]);
    }
    free(one);
    free(many);
}

Test(ranks, summing_ranks_reduce_scatter_and_match_one_rank_up_to_the_order_of_the_sums) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_close_to_one_rank("clip 0.05", &cfg, 2, 1, (shape){.clip = 0.05f});
    expect_close_to_one_rank("3 ranks", &cfg, 3, 1, (shape){.clip = 0.05f}); /* slices with a remainder */
    expect_close_to_one_rank("ends and a block on the device", &cfg, 2, 2,
                             (shape){.clip = 0.05f, .ends_on_device = 1, .device_blocks = 1});
    mt_config tied = mt_tiny_config_tied_bias();
    expect_close_to_one_rank("tied", &tied, 3, 1, (shape){.clip = 0.05f});
    mt_config wide_vocab = mt_tiny_config_gqa();
    wide_vocab.vocab_size = MT_ENGINE_HEAD_VOCAB_CHUNK + 500;
    expect_close_to_one_rank("vocabulary chunks", &wide_vocab, 3, 1, (shape){.clip = 0.05f});
    expect_close_to_one_rank("clip 0", &cfg, 2, 1, (shape){.clip = 0.0f});
    expect_close_to_one_rank("clip 0, tied", &tied, 2, 1, (shape){.clip = 0.0f});
    mt_config moe = mt_tiny_config_moe(MT_ARCH_QWEN3_MOE, 1);
    expect_close_to_one_rank("mixture of experts", &moe, 2, 1, (shape){.clip = 0.05f});
    mt_config tied_wide = mt_tiny_config_tied_bias();
    tied_wide.vocab_size = MT_ENGINE_HEAD_VOCAB_CHUNK + 500;
    expect_close_to_one_rank("tied vocabulary chunks", &tied_wide, 3, 1, (shape){.clip = 0.05f});
}

static void expect_failure_ends_the_group(int failing) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options(1, (shape){.clip = 1.0f});
    group t;
    cr_assert_eq(group_open(&t, &cfg, &o, 2), MT_OK, "%s", mt_error());
    int all = 2 * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    mt_tiny_windows(5, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
    mt_step_result res;
    cr_assert_eq(mt_ranks_step(t.g, inputs, targets, NULL, 3e-3f, &res), MT_OK, "%s", mt_error());
    mt_ranks_fail_next_step(t.g, failing);
    double t0 = mt_now();
    cr_assert_neq(mt_ranks_step(t.g, inputs, targets, NULL, 3e-3f, &res), MT_OK);
    char expected[64];
    snprintf(expected, sizeof expected, "rank %d of 2: injected failure", failing);
    cr_expect(strstr(mt_error(), expected), "the error names the rank that failed: %s", mt_error());
    cr_expect_lt(mt_now() - t0, MT_TEST_LIMIT(30.0), "the other rank was not released at once");
    cr_expect_neq(mt_ranks_step(t.g, inputs, targets, NULL, 3e-3f, &res), MT_OK, "an aborted group took another step");
    cr_expect(strstr(mt_error(), "aborted"), "%s", mt_error());
    group_close(&t);
}

Test(ranks, a_rank_that_fails_ends_every_ranks_step) {
    expect_failure_ends_the_group(1);
    expect_failure_ends_the_group(0);
}

/* A follower rank's gradients land in its leader's host buffers, with clipping and without: its walk
 * holds no host gradients of its own (without clipping it once allocated a whole ring it never used,
 * 26 GiB at 8B, which the memory check did not count: 14B on 2 GPUs was killed for host memory). */
Test(ranks, a_follower_rank_allocates_no_host_gradients) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK, "%s", mt_error());
    shape shapes[] = {{.clip = 1.0f}, {.clip = 0.0f}, {.clip = 0.0f, .ends_on_device = 1}, {.clip = 0.0f, .grad_ring = 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        mt_engine_options o = options(1, shapes[i]);
        mt_engine_bytes leader = mt_engine_size(be, &cfg, &o), follower = mt_engine_follower_size(be, &cfg, &o);
        cr_expect_gt(leader.host_grads, 0, "case %zu: the leader keeps the gradients", i);
        cr_expect_eq(follower.host_grads, 0, "case %zu: a follower holds %lld bytes of host gradients", i,
                     (long long)follower.host_grads);
        cr_expect_eq(follower.host_staging, leader.host_staging, "case %zu", i);
    }
    mt_backend_destroy(be);
}

Test(ranks, refuses_a_group_of_no_ranks) {
    mt_ranks *g;
    cr_expect_neq(mt_ranks_create(&g, 0, open_cpu, NULL), MT_OK);
    cr_expect(strstr(mt_error(), "at least one rank"), "%s", mt_error());
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
    cr_assert_neq(mt_host_comm_all_reduce(c, 0, buf, 3, 0), MT_OK);
    cr_expect(strstr(mt_error(), "MT_COLL_TIMEOUT_S") && strstr(mt_error(), "1 of 2 came"), "%s", mt_error());
    cr_expect_lt(mt_now() - t0, MT_TEST_LIMIT(10.0));
    cr_expect_neq(mt_host_comm_all_reduce(c, 1, buf, 3, 0), MT_OK, "a timed-out group went on");
    mt_host_comm_release(c);
    mt_host_comm_release(c);
}

/* The host reduce-scatter alone, three threads on 26 floats: each rank's slice (8, 8 and the last 10)
 * holds the sum in rank order and the rest of its buffer is its own; ordered, the slice is the last
 * rank's buffer (the turns' sum). */
typedef struct {
    mt_host_comm *c;
    int rank, ordered;
    float buf[26];
    mt_status rc;
} scatter_rank;

static void *scatter_main(void *p) {
    scatter_rank *r = p;
    r->rc = mt_host_comm_reduce_scatter(r->c, r->rank, r->buf, 26, r->ordered);
    return NULL;
}

Test(ranks, host_reduce_scatter_leaves_each_rank_its_slice_of_the_sum) {
    for (int ordered = 0; ordered <= 1; ordered++) {
        mt_host_comm *c;
        cr_assert_eq(mt_host_comm_create(&c, 3), MT_OK);
        scatter_rank r[3];
        pthread_t threads[3];
        for (int k = 0; k < 3; k++) {
            r[k] = (scatter_rank){.c = c, .rank = k, .ordered = ordered};
            for (int i = 0; i < 26; i++) r[k].buf[i] = (float)((k + 1) * 100 + i) + 0.1f;
            cr_assert_eq(pthread_create(&threads[k], NULL, scatter_main, &r[k]), 0);
        }
        for (int k = 0; k < 3; k++) pthread_join(threads[k], NULL);
        for (int k = 0; k < 3; k++) {
            cr_assert_eq(r[k].rc, MT_OK, "%s", mt_error());
            size_t lo, hi;
            mt_coll_slice(26, k, 3, &lo, &hi);
            cr_expect_eq(hi - lo, k == 2 ? 10u : 8u);
            for (size_t i = 0; i < 26; i++) {
                float own = (float)((k + 1) * 100 + (int)i) + 0.1f, last = (float)(300 + (int)i) + 0.1f;
                float sum = ((float)(100 + (int)i) + 0.1f) + ((float)(200 + (int)i) + 0.1f) + last;
                float want = i < lo || i >= hi ? own : ordered ? last : sum;
                cr_expect_eq(r[k].buf[i], want, "ordered %d, rank %d, element %zu: %g, not %g", ordered, k, i,
                             (double)r[k].buf[i], (double)want);
            }
        }
        for (int k = 0; k < 3; k++) mt_host_comm_release(c);
    }
}
