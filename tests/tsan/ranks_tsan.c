/* Data-parallel ranks (engine/ranks.h) under ThreadSanitizer: the ranks' threads, their engines on
 * one store, the host all-reduce and the accumulators' turns, the leader's optimizer and the followers'
 * waits on it; then a rank that fails and the abort that releases the others. n ranks of a micro-batch
 * each must end with the bits of one rank running all n (the turns: tests/test_ranks.c). A plain program, as Criterion
 * cannot run under TSan; TSan (halt_on_error=1) ends it non-zero on any race. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ranks.h"
#include "util/rng.h"

enum { SEQ = 8, BATCH = 2, STEPS = 3 };

static const mt_config config = {.arch = MT_ARCH_LLAMA, .hidden_size = 32, .intermediate_size = 40,
                                 .num_layers = 3, .num_heads = 4, .num_kv_heads = 2, .head_dim = 8,
                                 .vocab_size = 53, .max_position = 64, .rms_norm_eps = 1e-5f,
                                 .rope_theta = 10000.0f, .bos_token_id = -1, .eos_token_id = -1};

static int failures;

static void check(int ok, const char *what) {
    if (!ok) failures++, fprintf(stderr, "FAIL: %s (%s)\n", what, mt_error());
}

static mt_status open_cpu(void *ctx, int rank, mt_backend **out) { return mt_backend_cpu_create(out, 1); }

/* STEPS steps on n ranks of M micro-batches, the same n x M micro-batches a step whatever n and M;
 * `fail`: rank 1 fails in the last step; `clip` 0: the leader's optimizer overlaps the backward,
 * waiting on every rank's copies. Returns the masters. */
static float *train(int n, int M, int fail, float clip) {
    mt_engine_options o = mt_engine_defaults();
    o.micro_batches = M;
    o.max_grad_norm = clip;
    o.grad_ring = 1; /* without clipping: every block's backward waits for the update of the one before */
    o.seq = SEQ;
    o.batch = BATCH;
    o.lm_chunk = 5;
    o.opt_threads = 1;
    mt_ranks *g;
    mt_layout lay;
    mt_store store;
    if (mt_ranks_create(&g, n, open_cpu, NULL) || mt_layout_init(&lay, &config) ||
        mt_store_create(&store, &lay, mt_ranks_backend(g, 0))) {
        fprintf(stderr, "setup: %s\n", mt_error());
        exit(1);
    }
    mt_store_init_random(&store, 7);
    check(mt_ranks_start(g, &store, &o, 0) == MT_OK, "start");
    int per = n * M * BATCH * SEQ;
    int32_t *inputs = malloc((size_t)per * sizeof *inputs), *targets = malloc((size_t)per * sizeof *targets);
    mt_rng rng = {11};
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < per; i++) {
            inputs[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)config.vocab_size);
            targets[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)config.vocab_size);
        }
        if (fail && s == STEPS - 1) mt_ranks_fail_next_step(g, 1);
        mt_step_result res;
        double loss;
        mt_status rc = mt_ranks_step(g, inputs, targets, NULL, 3e-3f, &res);
        check((rc == MT_OK) == !(fail && s == STEPS - 1), fail ? "the failing step fails" : "step");
        if (rc == MT_OK) check(mt_ranks_eval(g, inputs, targets, NULL, &loss) == MT_OK, "eval");
    }
    if (!fail) check(mt_engine_finish(mt_ranks_leader(g)) == STEPS, "all updates applied");
    size_t count = (size_t)lay.total_numel;
    float *master = malloc(count * sizeof *master);
    memcpy(master, mt_store_f32(&store), count * sizeof *master);
    mt_ranks_stop(g);
    mt_store_free(&store);
    mt_ranks_destroy(g);
    mt_layout_free(&lay);
    free(inputs);
    free(targets);
    return master;
}

int main(void) {
    mt_layout lay;
    mt_layout_init(&lay, &config);
    size_t bytes = (size_t)lay.total_numel * sizeof(float);
    for (int n = 2; n <= 3; n++)
        for (int clip = 0; clip <= 1; clip++) {
            float *one = train(1, n, 0, (float)clip), *many = train(n, 1, 0, (float)clip);
            check(memcmp(one, many, bytes) == 0, n == 2 ? "2 ranks give the masters of 1 running both micro-batches"
                                                        : "3 ranks give the masters of 1 running all 3 micro-batches");
            free(one), free(many);
        }
    free(train(2, 1, 1, 1.0f));
    free(train(2, 1, 1, 0.0f));
    mt_layout_free(&lay);
    printf("ranks under TSan: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
