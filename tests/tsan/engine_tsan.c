/* The engine's concurrency under ThreadSanitizer (6 blocks: more than the host gradient ring). Criterion cannot run under TSan (its sandbox
 * maps an arena where TSan keeps its shadow memory), so this is a plain program: it trains a
 * tiny model with several schedules (slots, optimizer threads, micro-batches, clipping on and
 * off), runs evaluation and sampling passes between steps, and checks that every schedule ends
 * with bitwise-identical weights; and it writes checkpoints in the background while the optimizer
 * goes on (train/saver.h, the writer slowed down so that the updates meet it), each of which
 * must hold its step's masters and moments; then a mixture of experts (its routing statistics and
 * load-balancing loss, made on the compute worker, copied home by d2h) under a few schedules; and
 * attention in windows of queries (--attn-tile: the dk/dv sums the compute worker keeps over a
 * sequence's windows, checkpoints on the host); and the resident blocks' gradients in the
 * checkpoints' memory and the gradient slots, copied home each pass. TSan (halt_on_error=1) ends it
 * non-zero on any race. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "io/checkpoint.h"
#include "train/saver.h"
#include "util/rng.h"

enum { SEQ = 8, SEQUENCES = 4, STEPS = 3 };

static const mt_config config = {.arch = MT_ARCH_LLAMA, .hidden_size = 32, .intermediate_size = 40,
                                 .num_layers = 6, .num_heads = 4, .num_kv_heads = 2, .head_dim = 8,
                                 .vocab_size = 53, .max_position = 64, .rms_norm_eps = 1e-5f,
                                 .rope_theta = 10000.0f, .bos_token_id = -1, .eos_token_id = -1};

/* A Qwen2-MoE: q/k/v biases, 6 experts top 2 and a shared expert in every second block, the
 * load-balancing loss in the objective. */
static const mt_config moe_config = {.arch = MT_ARCH_QWEN2_MOE, .hidden_size = 32, .intermediate_size = 40,
                                     .num_layers = 6, .num_heads = 4, .num_kv_heads = 2, .head_dim = 8,
                                     .vocab_size = 53, .max_position = 64, .rms_norm_eps = 1e-5f,
                                     .rope_theta = 10000.0f, .attention_bias = 1, .bos_token_id = -1,
                                     .eos_token_id = -1, .num_experts = 6, .experts_per_token = 2,
                                     .moe_intermediate_size = 12, .shared_expert_intermediate_size = 16,
                                     .decoder_sparse_step = 2, .output_router_logits = 1,
                                     .router_aux_loss_coef = 0.1f};
/* The model train() trains, and its attention tile (0: the engine's default, whole sequences here). */
static const mt_config *model = &config;
static int attn_tile;

static int failures, passes;

static void check(int ok, const char *what) {
    if (ok) passes++;
    else failures++, fprintf(stderr, "FAIL: %s\n", what);
}

/* Background checkpoints of a run: after every step but the last, into dir, with this staging
 * budget. */
typedef struct {
    const char *dir;
    int64_t staging;
} save_plan;

/* The state a checkpoint must hold: the masters and moments right after the step. */
typedef struct {
    float *master, *m;
} snapshot;

static void take_snapshot(const mt_store *store, snapshot *snap) {
    size_t bytes = (size_t)store->layout->total_numel * sizeof(float);
    snap->master = malloc(bytes);
    snap->m = malloc(bytes);
    memcpy(snap->master, mt_store_f32(store), bytes);
    memcpy(snap->m, store->moments.m, bytes);
}

/* Collects the save in flight and checks it against its step's snapshot. */
static void check_save(mt_saver *saver, const save_plan *plan, snapshot *snap, size_t bytes) {
    mt_save_report report;
    check(mt_saver_wait(saver, &report) == MT_OK, "background save");
    char path[4096];
    mt_checkpoint_path(path, sizeof path, plan->dir, report.step);
    float *got = malloc(bytes);
    check(mt_checkpoint_read(path, "master", got, bytes) == MT_OK && memcmp(got, snap->master, bytes) == 0,
          "the checkpoint holds its step's masters");
    check(mt_checkpoint_read(path, "adam_m", got, bytes) == MT_OK && memcmp(got, snap->m, bytes) == 0,
          "the checkpoint holds its step's first moments");
    free(got);
    free(snap->master);
    free(snap->m);
}

/* Trains and returns the master weights (malloc'd), or NULL after reporting a failure; with a save
 * plan, checkpoints are written while it trains. packed: the windows hold packed examples (the
 * positions staged by the issuing thread, read by the compute worker). */
static float *train(int slots, int threads, int micro_batches, int ends_on_device, int ckpt_on_host,
                    int device_blocks, float clip, int head_vocab_chunk, int packed, const save_plan *plan) {
    mt_layout lay;
    mt_backend *be;
    mt_store store;
    mt_engine *engine;
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.micro_batches = micro_batches;
    o.batch = SEQUENCES / micro_batches;
    o.slots = slots;
    o.opt_threads = threads;
    o.lm_chunk = 5;
    o.max_grad_norm = clip;
    o.ends_on_device = ends_on_device;
    o.ckpt_on_host = ckpt_on_host;
    o.device_blocks = device_blocks;
    if (head_vocab_chunk) o.head_vocab_chunk = head_vocab_chunk;
    o.packed = packed;
    if (attn_tile) o.attn_tile = attn_tile;
    if (mt_layout_init(&lay, model) || mt_backend_cpu_create(&be, 1) || mt_store_create(&store, &lay, be)) {
        fprintf(stderr, "setup: %s\n", mt_error());
        exit(1);
    }
    mt_store_init_random(&store, 7);
    if (mt_engine_create(&engine, be, &store, &o, 0)) {
        fprintf(stderr, "engine: %s\n", mt_error());
        exit(1);
    }
    mt_saver *saver = NULL;
    snapshot snap = {0};
    if (plan) {
        check(mt_saver_create(&saver, &store, plan->staging) == MT_OK, "saver");
        mt_saver_slow_down(saver, 0.002);
        mt_engine_set_update_guard(engine, mt_saver_guard, saver);
    }
    int32_t inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ], positions[SEQUENCES * SEQ];
    mt_rng rng = {11};
    for (int s = 0; s < STEPS; s++) {
        if (saver && s > 0) {
            if (mt_saver_in_flight(saver)) check_save(saver, plan, &snap, (size_t)lay.total_numel * sizeof(float));
            mt_run_progress progress = {.step = s, .adam_step = mt_engine_finish(engine)};
            take_snapshot(&store, &snap);
            mt_run_save_options keep_all = {.keep = 0, .good_step = -1};
            check(mt_saver_start(saver, plan->dir, &progress, &keep_all) == MT_OK, "start a background save");
        }
        for (int i = 0; i < SEQUENCES * SEQ; i++) {
            inputs[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)model->vocab_size);
            targets[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)model->vocab_size);
            /* segments of a few tokens, another layout each step */
            positions[i] = i % SEQ == 0 || mt_rng_next(&rng) % 4 == 0 ? 0 : positions[i - 1] + 1;
        }
        mt_step_result r;
        double loss;
        float logits[53];
        const int32_t *pos = packed ? positions : NULL;
        check(mt_engine_step(engine, inputs, targets, pos, 3e-3f, &r) == MT_OK, "step");
        check(mt_engine_eval(engine, inputs, targets, pos, &loss) == MT_OK, "eval");
        check(mt_engine_next_logits(engine, inputs, SEQ, logits) == MT_OK, "logits");
    }
    check(mt_engine_finish(engine) == STEPS, "all updates applied");
    if (saver) check_save(saver, plan, &snap, (size_t)lay.total_numel * sizeof(float));
    size_t n = (size_t)lay.total_numel;
    float *master = malloc(n * sizeof *master);
    memcpy(master, mt_store_f32(&store), n * sizeof *master);
    mt_engine_destroy(engine);
    mt_saver_destroy(saver);
    mt_store_free(&store);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
    return master;
}

/* Resident blocks whose gradients lie in the checkpoints' memory and the gradient slots, each pass
 * bringing every gradient home (keep_grads): a gradients-only pass, an evaluation and a step in
 * turn, the forwards writing the checkpoints behind the copies home of the gradients there. The
 * host gradients and the weights are those of the same run with every block on the host. */
static void resident_gradients_home(void) {
    enum { LONG = 64, ROUNDS = 2 };
    mt_layout lay;
    mt_backend *be[2];
    mt_store store[2];
    mt_engine *engine[2];
    mt_layout_init(&lay, &config);
    for (int r = 0; r < 2; r++) {
        mt_engine_options o = mt_engine_defaults();
        o.seq = LONG;
        o.batch = SEQUENCES;
        o.opt_threads = 2;
        o.lm_chunk = 5;
        o.keep_grads = 1;
        o.device_blocks = r ? 4 : 0;
        if (mt_backend_cpu_create(&be[r], 1) || mt_store_create(&store[r], &lay, be[r])) exit(1);
        mt_store_init_random(&store[r], 5);
        if (mt_engine_create(&engine[r], be[r], &store[r], &o, 0)) {
            fprintf(stderr, "engine: %s\n", mt_error());
            exit(1);
        }
        if (r) {
            mt_engine_bytes b = mt_engine_size(be[r], &config, &o);
            check(b.grads_in_checkpoints > 0 && b.grads_in_slots > 0, "resident gradients in the checkpoints and slots");
        }
    }
    size_t n = (size_t)lay.total_numel, bytes = n * sizeof(float);
    static int32_t inputs[SEQUENCES * LONG], targets[SEQUENCES * LONG];
    mt_rng rng = {13};
    for (int k = 0; k < ROUNDS; k++) {
        for (int i = 0; i < SEQUENCES * LONG; i++) {
            inputs[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)config.vocab_size);
            targets[i] = (int32_t)(mt_rng_next(&rng) % (uint64_t)config.vocab_size);
        }
        for (int what = 0; what < 2; what++) {
            for (int r = 0; r < 2; r++) {
                double loss;
                mt_step_result res;
                check((what ? mt_engine_step(engine[r], inputs, targets, NULL, 3e-3f, &res)
                            : mt_engine_grads(engine[r], inputs, targets, NULL, &loss)) == MT_OK, "pass");
                if (what) mt_engine_finish(engine[r]);
                check(mt_engine_eval(engine[r], inputs, targets, NULL, &loss) == MT_OK, "eval");
            }
            check(memcmp(mt_engine_host_grads(engine[0]), mt_engine_host_grads(engine[1]), bytes) == 0,
                  "resident gradients in the checkpoints: the host's gradients");
        }
    }
    check(memcmp(mt_store_f32(&store[0]), mt_store_f32(&store[1]), bytes) == 0,
          "resident gradients in the checkpoints: the host's weights");
    for (int r = 0; r < 2; r++) {
        mt_engine_destroy(engine[r]);
        mt_store_free(&store[r]);
        mt_backend_destroy(be[r]);
    }
    mt_layout_free(&lay);
}

int main(void) {
    mt_layout lay;
    mt_layout_init(&lay, &config);
    size_t bytes = (size_t)lay.total_numel * sizeof(float);
    const float clips[] = {1.0f, 0.0f};
    /* slots, optimizer threads, micro-batches, the embedding and head updated on the "device",
     * activation checkpoints on the host, blocks updated on the "device" */
    const int variants[][6] = {{3, 2, 1, 0, 0, 0}, {2, 2, 4, 0, 0, 0}, {4, 1, 2, 0, 0, 0}, {3, 2, 2, 1, 0, 0},
                               {2, 2, 2, 0, 5, 0}, {2, 2, 2, 1, 2, 3}};
    for (int c = 0; c < 2; c++) {
        float *want = train(2, 1, 1, 0, 0, 0, clips[c], 0, 0, NULL);
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            const int *x = variants[v];
            float *got = train(x[0], x[1], x[2], x[3], x[4], x[5], clips[c], 0, 0, NULL);
            char what[192];
            snprintf(what, sizeof what, "slots %d, threads %d, micro-batches %d, ends on device %d, checkpoints on "
                     "the host %d, blocks on device %d, clip %g: same weights", x[0], x[1], x[2], x[3], x[4], x[5],
                     (double)clips[c]);
            check(memcmp(got, want, bytes) == 0, what);
            free(got);
        }
        /* Staging for every unit, and none (the optimizer waits for the writer); the last with the
         * embedding, head and two blocks brought home from the "device" as the saves start. */
        const int64_t budgets[] = {1 << 26, 0, 0};
        for (int b = 0; b < 3; b++) {
            char dir[] = "/tmp/mt-tsan-save-XXXXXX", cleanup[64];
            if (!mkdtemp(dir)) exit(1);
            save_plan plan = {dir, budgets[b]};
            float *got = train(2, 2, 1, b == 2, 0, b == 2 ? 2 : 0, clips[c], 0, 0, &plan);
            char what[128];
            snprintf(what, sizeof what, "background saves (staging %lld, ends on device %d), clip %g: same weights",
                     (long long)budgets[b], b == 2, (double)clips[c]);
            check(memcmp(got, want, bytes) == 0, what);
            free(got);
            snprintf(cleanup, sizeof cleanup, "rm -rf %s", dir);
            check(system(cleanup) == 0, "remove the checkpoints");
        }
        /* The ends' gradients in vocabulary chunks, written home by the compute worker and read by
         * the optimizer: the same training up to the order of fp32 sums (tests/test_chunking.c). */
        float *chunked = train(2, 2, 2, 0, 3, 0, clips[c], 16, 0, NULL);
        /* Packed examples: micro-batching and the engine's threads leave the bits as they are. */
        float *packed_one = train(2, 1, 1, 0, 0, 0, clips[c], 0, 1, NULL);
        float *packed_two = train(3, 2, 2, 0, 2, 0, clips[c], 0, 1, NULL);
        check(memcmp(packed_one, packed_two, bytes) == 0, "packed examples in 1 and 2 micro-batches: same weights");
        check(memcmp(packed_one, want, bytes) != 0, "packed examples train otherwise than plain windows");
        free(packed_one);
        free(packed_two);
        double diff = 0, norm = 0;
        for (int64_t i = 0; i < lay.total_numel; i++) {
            diff += ((double)chunked[i] - want[i]) * ((double)chunked[i] - want[i]);
            norm += (double)want[i] * want[i];
        }
        check(diff <= 1e-12 * norm, "the ends in vocabulary chunks: the same weights up to rounding");
        free(chunked);
        /* Windows of 3 queries (8 = 2 + 3 + 3): the schedules change no bit of them, and they train
         * as the whole sequences do up to the order of fp32 sums (tests/test_tiles.c). */
        attn_tile = 3;
        float *windows_one = train(2, 1, 1, 0, 0, 0, clips[c], 0, 0, NULL);
        float *windows_two = train(3, 2, 2, 0, 4, 0, clips[c], 0, 0, NULL);
        attn_tile = 0;
        check(memcmp(windows_one, windows_two, bytes) == 0, "attention windows under two schedules: same weights");
        diff = norm = 0;
        for (int64_t i = 0; i < lay.total_numel; i++) {
            diff += ((double)windows_one[i] - want[i]) * ((double)windows_one[i] - want[i]);
            norm += (double)want[i] * want[i];
        }
        check(diff <= 1e-12 * norm, "attention windows: the whole sequences' weights up to rounding");
        free(windows_one);
        free(windows_two);
        free(want);
    }
    mt_layout_free(&lay);
    /* The mixture of experts: schedules (slots, threads, blocks and the ends on the "device",
     * checkpoints on the host) change no bit; the micro-batches stay 2 (the aux loss is each one's). */
    model = &moe_config;
    mt_layout_init(&lay, model);
    bytes = (size_t)lay.total_numel * sizeof(float);
    for (int c = 0; c < 2; c++) {
        float *want = train(2, 1, 2, 0, 0, 0, clips[c], 0, 0, NULL);
        const int moe_variants[][6] = {{3, 2, 2, 0, 0, 0}, {2, 2, 2, 1, 2, 3}};
        for (size_t v = 0; v < sizeof moe_variants / sizeof moe_variants[0]; v++) {
            const int *x = moe_variants[v];
            float *got = train(x[0], x[1], x[2], x[3], x[4], x[5], clips[c], 0, 0, NULL);
            char what[160];
            snprintf(what, sizeof what, "mixture of experts, variant %zu, clip %g: same weights", v, (double)clips[c]);
            check(memcmp(got, want, bytes) == 0, what);
            free(got);
        }
        free(want);
    }
    mt_layout_free(&lay);
    resident_gradients_home();
    printf("engine under tsan: %d passed, %d failed\n", passes, failures);
    return failures != 0;
}
