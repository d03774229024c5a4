/* Data parallelism on two GPUs through NCCL (engine/ranks.h; needs a machine with 2 GPUs, the
 * tests skip on one): two ranks of one micro-batch each against one GPU running both micro-batches,
 * from the same bf16 weights, over four steps, with clipping and without: the losses within 1e-3
 * relative and each tensor's change of its masters within 2% relative (||d2 - d1|| / ||d1||). Only
 * the order of the gradient's sum (and the GPU's atomics) differs; a gradient left unreduced, or a
 * slice sent home from the wrong place, is off by O(1). NCCL's reduce-scatter alone (equal parts and
 * a tail): each rank's slice is the sum, bitwise (two addends). Then a rank that dies before its
 * pass: the other, inside an NCCL all-reduce that will never complete, is released by the abort
 * within seconds. */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../tiny_model.h"
#include "engine/ranks.h"
#include "util/bf16.h"
#include "util/clock.h"

enum { SEQ = 32, BATCH = 2, STEPS = 4 };

static mt_status open_gpu(void *ctx, int rank, mt_backend **out) { return mt_backend_cuda_create(out, rank); }

static void need_two_gpus(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) cr_skip_test("needs 2 GPUs, %d visible", count);
}

typedef struct {
    mt_ranks *g;
    mt_layout layout;
    mt_store store;
} group;

static void group_open(group *t, const mt_config *cfg, int n, int M, float clip) {
    mt_engine_options o = mt_engine_defaults();
    o.max_grad_norm = clip;
    o.seq = SEQ;
    o.batch = BATCH;
    o.micro_batches = M;
    o.lm_chunk = 24;
    cr_assert_eq(mt_ranks_create(&t->g, n, open_gpu, NULL), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_layout_init(&t->layout, cfg), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_store_create(&t->store, &t->layout, mt_ranks_backend(t->g, 0)), MT_OK, "%s", mt_error());
    mt_store_init_random(&t->store, 8);
    cr_assert_eq(mt_ranks_start(t->g, &t->store, &o, 0), MT_OK, "%s", mt_error());
}

static void group_close(group *t) {
    mt_ranks_stop(t->g);
    mt_store_free(&t->store);
    mt_ranks_destroy(t->g);
    mt_layout_free(&t->layout);
}

/* STEPS steps on the same windows, split across n ranks of M micro-batches; the losses, and the
 * masters before and after. */
static float *train(const mt_config *cfg, int n, int M, float clip, double *losses, float **before) {
    group t;
    group_open(&t, cfg, n, M, clip);
    size_t count = (size_t)t.layout.total_numel;
    *before = malloc(count * sizeof **before);
    mt_store_read_masters(&t.store, 0, count, *before);
    int all = n * M * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    for (int s = 0; s < STEPS; s++) {
        mt_tiny_windows(40 + s, all, SEQ, cfg->vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_ranks_step(t.g, inputs, targets, 3e-3f, &r), MT_OK, "%s", mt_error());
        losses[s] = r.loss;
    }
    mt_engine_finish(mt_ranks_leader(t.g));
    float *after = malloc(count * sizeof *after);
    mt_store_read_masters(&t.store, 0, count, after);
    group_close(&t);
    return after;
}

/* `clip` 0: the leader's optimizer overlaps the backward, taking each unit once both GPUs' slices
 * of it are home. */
static void expect_two_gpus_match_one(float clip) {
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    double one_loss[STEPS], two_loss[STEPS];
    float *one_before, *two_before;
    float *one = train(&cfg, 1, 2, clip, one_loss, &one_before);
    float *two = train(&cfg, 2, 1, clip, two_loss, &two_before);
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    cr_assert_eq(memcmp(one_before, two_before, (size_t)lay.total_numel * 4), 0, "not the same start");
    for (int s = 0; s < STEPS; s++) {
        cr_log_info("step %d: loss 1 GPU %.6f, 2 GPUs %.6f", s, one_loss[s], two_loss[s]);
        cr_expect_lt(fabs(one_loss[s] - two_loss[s]), 1e-3 * one_loss[s], "step %d: loss %.6f on 1 GPU, %.6f on 2",
                     s, one_loss[s], two_loss[s]);
    }
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < lay.num_tensors; i++) {
        const mt_tensor *t = &lay.tensors[i];
        int64_t at = lay.units[t->unit].offset + t->offset, n = (int64_t)t->rows * t->cols;
        double num = 0, den = 0;
        for (int64_t j = at; j < at + n; j++) {
            double d1 = (double)one[j] - one_before[j], d2 = (double)two[j] - two_before[j];
            num += (d2 - d1) * (d2 - d1);
            den += d1 * d1;
        }
        double err = den > 0 ? sqrt(num / den) : sqrt(num);
        if (err > worst) worst = err, worst_name = t->name;
    }
    cr_log_info("worst change of masters: %s at %.3g relative", worst_name, worst);
    cr_expect_lt(worst, 2e-2, "the masters of %s changed by %.3g relative more on 2 GPUs than on 1", worst_name,
                 worst);
    free(one), free(two), free(one_before), free(two_before);
    mt_layout_free(&lay);
}

Test(cuda, two_gpus_match_one_gpu_running_both_micro_batches) {
    need_two_gpus();
    expect_two_gpus_match_one(1.0f);
}

Test(cuda, two_gpus_match_one_gpu_running_both_micro_batches_without_clipping) {
    need_two_gpus();
    expect_two_gpus_match_one(0.0f);
}

Test(cuda, a_gpu_rank_that_dies_releases_the_other_from_nccl) {
    need_two_gpus();
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    group t;
    group_open(&t, &cfg, 2, 1, 1.0f);
    int all = 2 * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    mt_tiny_windows(3, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
    mt_step_result r;
    cr_assert_eq(mt_ranks_step(t.g, inputs, targets, 3e-3f, &r), MT_OK, "%s", mt_error());
    mt_ranks_fail_next_step(t.g, 1);
    double t0 = mt_now();
    cr_assert_neq(mt_ranks_step(t.g, inputs, targets, 3e-3f, &r), MT_OK);
    cr_log_info("released after %.2f s: %s", mt_now() - t0, mt_error());
    cr_expect(strstr(mt_error(), "rank 1 of 2"), "%s", mt_error());
    cr_expect_lt(mt_now() - t0, 60.0, "rank 0 was not released from its all-reduce at once");
    group_close(&t);
}

/* ---- the coll group's reduce_scatter on two GPUs ---- */

typedef struct {
    mt_backend *be;
    int rank;
    size_t count;
    float *got;     /* [count] the buffer afterwards */
    mt_status rc;
} scatter_rank;

static float addend(int rank, size_t i) { return (float)(rank + 1) * 0.75f + (float)(i % 1000) * 1e-3f; }

static void *open_main(void *p) {
    scatter_rank *r = p;
    r->rc = mt_backend_cuda_create(&r->be, r->rank);
    return NULL;
}

/* Rank r's thread (the device current per thread): its addends to the device, reduce_scatter on a
 * stream, the buffer home. */
static void *scatter_main(void *p) {
    scatter_rank *r = p;
    cudaSetDevice(r->rank);
    mt_stream *s = mt_stream_create(r->be);
    mt_event *done = mt_event_create(r->be);
    float *host = mt_host_alloc(r->be, r->count * 4, "addends");
    float *dev = mt_dev_alloc(r->be, r->count * 4, "the reduced buffer");
    for (size_t i = 0; i < r->count; i++) host[i] = addend(r->rank, i);
    mt_copy_async(r->be, dev, host, r->count * 4, s);
    r->be->ops->coll.reduce_scatter(r->be, s, dev, r->count);
    mt_copy_async(r->be, host, dev, r->count * 4, s);
    mt_event_record(r->be, done, s);
    mt_event_sync(r->be, done);
    r->rc = mt_backend_check(r->be);
    memcpy(r->got, host, r->count * 4);
    mt_dev_free(r->be, dev);
    mt_host_free(r->be, host);
    mt_event_destroy(r->be, done);
    mt_stream_destroy(r->be, s);
    return NULL;
}

static void *close_main(void *p) {
    scatter_rank *r = p;
    cudaSetDevice(r->rank);
    r->be->ops->coll.comm_free(r->be);
    mt_backend_destroy(r->be);
    return NULL;
}

static void run_threads(scatter_rank *r, void *(*main)(void *)) {
    pthread_t t[2];
    for (int k = 0; k < 2; k++) cr_assert_eq(pthread_create(&t[k], NULL, main, &r[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
}

Test(cuda, nccl_reduce_scatter_leaves_each_rank_the_sum_of_its_slice) {
    need_two_gpus();
    scatter_rank r[2];
    for (int k = 0; k < 2; k++) r[k] = (scatter_rank){.rank = k};
    run_threads(r, open_main);
    for (int k = 0; k < 2; k++) cr_assert_eq(r[k].rc, MT_OK, "%s", mt_error());
    mt_backend *be[2] = {r[0].be, r[1].be};
    cr_assert_eq(be[0]->ops->coll.comm_init(be, 2), MT_OK, "%s", mt_error());
    size_t counts[] = {1, 7, (1u << 20) + 3}; /* one rank's part empty; a tail; a large odd count */
    for (int c = 0; c < 3; c++) {
        for (int k = 0; k < 2; k++) {
            r[k].count = counts[c];
            r[k].got = malloc(counts[c] * 4);
        }
        run_threads(r, scatter_main);
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(r[k].rc, MT_OK, "%s", mt_error());
            size_t lo, hi;
            mt_coll_slice(counts[c], k, 2, &lo, &hi);
            size_t wrong = 0;
            for (size_t i = lo; i < hi; i++) wrong += r[k].got[i] != addend(0, i) + addend(1, i);
            cr_expect_eq(wrong, 0, "%zu floats: rank %d's slice [%zu, %zu) has %zu elements that are not the sum",
                         counts[c], k, lo, hi, wrong);
            free(r[k].got);
        }
    }
    run_threads(r, close_main);
}
