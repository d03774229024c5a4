/* Data parallelism on two GPUs through NCCL (engine/ranks.h; needs a machine with 2 GPUs, the
 * tests skip on one): two ranks of one micro-batch each against one GPU running both micro-batches,
 * from the same bf16 weights, over four steps: the losses within 1e-3 relative and each tensor's
 * change of its masters within 2% relative (||d2 - d1|| / ||d1||). Only the order of the gradient's
 * sum (and the GPU's atomics) differs; a gradient left unreduced, or a slice sent home from the
 * wrong place, is off by O(1). Then a rank that dies before its pass: the other, inside an NCCL
 * all-reduce that will never complete, is released by the abort within seconds. */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <math.h>
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

static void group_open(group *t, const mt_config *cfg, int n, int M) {
    mt_engine_options o = mt_engine_defaults();
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
static float *train(const mt_config *cfg, int n, int M, double *losses, float **before) {
    group t;
    group_open(&t, cfg, n, M);
    size_t count = (size_t)t.layout.total_numel;
    *before = malloc(count * sizeof **before);
    memcpy(*before, t.store.master, count * sizeof **before);
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
    memcpy(after, t.store.master, count * sizeof *after);
    group_close(&t);
    return after;
}

Test(cuda, two_gpus_match_one_gpu_running_both_micro_batches) {
    need_two_gpus();
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    double one_loss[STEPS], two_loss[STEPS];
    float *one_before, *two_before;
    float *one = train(&cfg, 1, 2, one_loss, &one_before);
    float *two = train(&cfg, 2, 1, two_loss, &two_before);
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

Test(cuda, a_gpu_rank_that_dies_releases_the_other_from_nccl) {
    need_two_gpus();
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    group t;
    group_open(&t, &cfg, 2, 1);
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
