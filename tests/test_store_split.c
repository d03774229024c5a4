/* The host store with split masters (engine/store.h): bf16 weights are the masters' high halves,
 * the low halves beside them. A cpu backend made to say its weights are bf16 holds such a store
 * here (the store and checkpoints only: the cpu's ops read fp32 weights, so no engine runs on it).
 * And a checkpoint written before the split (tests/data/checkpoints/main-ca9cd4d, by main's build)
 * loads after it: into an fp32 store, whose next step gives the bits main's build gave, and into a
 * split store, which saves it back byte for byte. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "data/checkpoints/main-ca9cd4d/make_shared.h"
#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "train/run_state.h"
#include "train/saver.h"
#include "util/split_f32.h"

#define FIXTURE "tests/data/checkpoints/main-ca9cd4d"

/* A cpu backend whose weights are bf16: its stores split their masters. */
static mt_backend_ops bf16_ops;
static mt_backend *split_backend(void) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 2), MT_OK, "%s", mt_error());
    bf16_ops = *be->ops;
    bf16_ops.weight_dtype = MT_DTYPE_BF16;
    be->ops = &bf16_ops;
    return be;
}

static float *read_blob(const char *checkpoint, const char *name, size_t n) {
    float *x = malloc(n * sizeof *x);
    cr_assert_not_null(x);
    cr_assert_eq(mt_checkpoint_read(checkpoint, name, x, n * sizeof *x), MT_OK, "%s", mt_error());
    return x;
}

static void assert_blobs_equal(const char *a, const char *b, size_t n) {
    static const char *const names[] = {"master", "adam_m", "adam_v"};
    for (int i = 0; i < 3; i++) {
        float *x = read_blob(a, names[i], n), *y = read_blob(b, names[i], n);
        size_t k = 0;
        while (k < n && !memcmp(&x[k], &y[k], 4)) k++;
        cr_assert_eq(k, n, "%s[%zu]: %.9g in %s, %.9g in %s", names[i], k, (double)x[k % n], a, (double)y[k % n], b);
        free(x), free(y);
    }
}

/* Every high half is its master rounded (util/split_f32.h); read back, the masters are `want`. */
static void assert_split_of(const mt_store *s, const float *want) {
    size_t n = (size_t)s->layout->total_numel;
    float *got = malloc(n * sizeof *got);
    mt_store_read_masters(s, 0, n, got);
    cr_assert(!memcmp(got, want, n * 4), "the split masters do not join back to the checkpoint's");
    const uint16_t *hi = s->weights;
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(hi[i], mt_split_hi_bits(mt_f32_bits(want[i])), "weight %zu is not its master's high half", i);
    free(got);
}

Test(store_split, a_checkpoint_from_before_the_split_resumes_to_the_same_bits) {
    mt_config cfg = fixture_config(), saved;
    cr_assert_eq(mt_run_load_config(FIXTURE "/ckpt-000002", &saved), MT_OK, "%s", mt_error());
    cr_assert_eq(saved.hidden_size, cfg.hidden_size);
    mt_engine_options o = fixture_options();
    mt_layout lay;
    mt_backend *be;
    mt_store store;
    mt_engine *e;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    cr_assert_eq(mt_backend_cpu_create(&be, 2), MT_OK);
    cr_assert_eq(mt_store_create(&store, &lay, be), MT_OK, "%s", mt_error());
    mt_run_progress progress;
    cr_assert_eq(mt_run_load(FIXTURE "/ckpt-000002", &store, &progress), MT_OK, "%s", mt_error());
    cr_assert_eq(progress.step, 2);
    cr_assert_eq(mt_engine_create(&e, be, &store, &o, progress.adam_step), MT_OK, "%s", mt_error());
    int32_t inputs[FIXTURE_TOKENS], targets[FIXTURE_TOKENS];
    fixture_tokens(3, inputs, targets);
    mt_step_result r;
    cr_assert_eq(mt_engine_step(e, inputs, targets, NULL, FIXTURE_LR, &r), MT_OK, "%s", mt_error());
    progress.adam_step = mt_engine_finish(e);
    progress.step = 3;
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    mt_run_save_options save = {.good_step = -1};
    cr_assert_eq(mt_run_save(dir, &store, &progress, &save, NULL), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_path(path, sizeof path, dir, 3), MT_OK);
    assert_blobs_equal(path, FIXTURE "/ckpt-000003", (size_t)lay.total_numel);
    hf_test_rmtree(dir);
    mt_engine_destroy(e);
    mt_store_free(&store);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}

/* Loaded into split masters, saved again (mt_run_save, and the saver with and without staging
 * copies): the same bytes as the checkpoint it came from. */
Test(store_split, split_masters_load_and_save_a_checkpoint_byte_for_byte) {
    mt_config cfg = fixture_config();
    mt_layout lay;
    mt_store store;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_backend *be = split_backend();
    cr_assert_eq(mt_store_create(&store, &lay, be), MT_OK, "%s", mt_error());
    cr_assert_not_null(store.low, "a bf16 store splits its masters");
    mt_run_progress progress;
    cr_assert_eq(mt_run_load(FIXTURE "/ckpt-000002", &store, &progress), MT_OK, "%s", mt_error());
    size_t n = (size_t)lay.total_numel;
    float *want = read_blob(FIXTURE "/ckpt-000002", "master", n);
    assert_split_of(&store, want);
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    mt_run_save_options save = {.good_step = -1};
    cr_assert_eq(mt_run_save(dir, &store, &progress, &save, NULL), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_checkpoint_path(path, sizeof path, dir, 2), MT_OK);
    assert_blobs_equal(path, FIXTURE "/ckpt-000002", n);
    for (int staging = 0; staging <= 1; staging++) { /* the writer joins live halves; the guard copies joined ones */
        mt_saver *saver;
        cr_assert_eq(mt_saver_create(&saver, &store, staging ? INT64_MAX / 2 : 0), MT_OK, "%s", mt_error());
        progress.step = 10 + staging;
        cr_assert_eq(mt_saver_start(saver, dir, &progress, &save), MT_OK, "%s", mt_error());
        if (staging)
            for (int u = 0; u < lay.num_units; u++) mt_saver_guard(saver, u);
        mt_save_report report;
        cr_assert_eq(mt_saver_wait(saver, &report), MT_OK, "%s", mt_error());
        cr_assert(report.finite);
        cr_assert_eq(mt_checkpoint_path(path, sizeof path, dir, progress.step), MT_OK);
        assert_blobs_equal(path, FIXTURE "/ckpt-000002", n);
        mt_saver_destroy(saver);
    }
    hf_test_rmtree(dir);
    free(want);
    mt_store_free(&store);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}

/* The same seed gives a split store the fp32 store's masters, bit for bit, and its weights are
 * their high halves. */
Test(store_split, random_masters_are_the_same_split_or_not) {
    mt_config cfg = fixture_config();
    mt_layout lay;
    mt_store f32, split;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_backend *cpu, *be = split_backend();
    cr_assert_eq(mt_backend_cpu_create(&cpu, 1), MT_OK);
    cr_assert_eq(mt_store_create(&f32, &lay, cpu), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_store_create(&split, &lay, be), MT_OK, "%s", mt_error());
    mt_store_init_random(&f32, 7);
    mt_store_init_random(&split, 7);
    assert_split_of(&split, mt_store_f32(&f32));
    mt_store_free(&f32);
    mt_store_free(&split);
    mt_backend_destroy(cpu);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}
