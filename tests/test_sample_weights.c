/* Sampling takes the model's working weights and nothing else: a store of weights alone, filled a
 * piece at a time from a checkpoint's fp32 masters, holds what the full store would, and a
 * forward-only engine on it gives the logits of the full one while it allocates no gradients. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "hf_test_files.h"
#include "tiny_model.h"
#include "train/run_state.h"

static char dir[PATH_MAX];

static void make_dir(void) { hf_test_mkdtemp(dir); }
static void remove_dir(void) { hf_test_rmtree(dir); }

TestSuite(sample_weights, .init = make_dir, .fini = remove_dir);

/* A tiny model (one sequence of 16 tokens a step) and its checkpoint of step `step` in dir, whose
 * directory goes into ckpt[PATH_MAX + 16]. */
static void save_tiny(mt_tiny_model *full, const mt_config *cfg, mt_engine_options *eo, int64_t step, char *ckpt) {
    *eo = mt_engine_defaults();
    eo->batch = 1;
    eo->seq = 16;
    mt_tiny_model_open(full, cfg, eo, 7);
    mt_run_progress progress = {.step = step, .adam_step = step};
    mt_run_save_options so = {.keep = 0, .good_step = -1};
    cr_assert_eq(mt_run_save(dir, &full->store, &progress, &so, NULL), MT_OK, "%s", mt_error());
    snprintf(ckpt, PATH_MAX + 16, "%s/ckpt-%06lld", dir, (long long)step);
}

Test(sample_weights, weights_alone_give_the_full_models_logits) {
    mt_engine_options eo;
    mt_tiny_model full;
    mt_config cfg = mt_tiny_config_gqa();
    char ckpt[PATH_MAX + 16];
    save_tiny(&full, &cfg, &eo, 3, ckpt);

    mt_store weights;
    int64_t step = -1;
    cr_assert_eq(mt_store_create_weights(&weights, &full.layout, full.be), MT_OK, "%s", mt_error());
    cr_assert_null(weights.low, "a store of weights alone holds the masters' low halves");
    cr_assert_null(weights.moments.m, "a store of weights alone holds moments");
    cr_assert_eq(mt_run_load_weights(ckpt, &weights, &step), MT_OK, "%s", mt_error());
    cr_assert_eq(step, 3);
    size_t bytes = (size_t)full.layout.total_numel * mt_dtype_size(weights.weight_dtype);
    cr_assert_eq(memcmp(weights.weights, full.store.weights, bytes), 0, "the working weights differ");

    mt_engine_options forward = eo;
    forward.forward_only = 1;
    mt_engine_bytes all = mt_engine_size(full.be, &cfg, &eo), fwd = mt_engine_size(full.be, &cfg, &forward);
    cr_assert_eq(fwd.grads, 0, "a forward-only engine sizes %lld bytes of gradients", (long long)fwd.grads);
    cr_assert_eq(fwd.host_grads, 0);
    cr_assert_lt(fwd.total, all.total);
    mt_engine *engine;
    cr_assert_eq(mt_engine_create(&engine, full.be, &weights, &forward, step), MT_OK, "%s", mt_error());
    int32_t tokens[16];
    for (int i = 0; i < 16; i++) tokens[i] = (i * 37 + 5) % cfg.vocab_size;
    float *a = malloc((size_t)cfg.vocab_size * sizeof *a), *b = malloc((size_t)cfg.vocab_size * sizeof *b);
    cr_assert_eq(mt_engine_next_logits(full.engine, tokens, 16, a), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_engine_next_logits(engine, tokens, 16, b), MT_OK, "%s", mt_error());
    cr_assert_eq(memcmp(a, b, (size_t)cfg.vocab_size * sizeof *a), 0, "the forward-only engine's logits differ");
    mt_step_result r;
    int32_t targets[16] = {0};
    cr_assert_eq(mt_engine_step(engine, tokens, targets, NULL, 1e-3f, &r), MT_ERR_INVALID, "a forward-only engine trained");
    free(a);
    free(b);
    mt_engine_destroy(engine);
    mt_store_free(&weights);
    mt_tiny_model_close(&full);
}

/* A checkpoint whose masters are corrupt is refused, though its pieces were handed over. */
Test(sample_weights, a_corrupt_master_is_refused) {
    mt_engine_options eo;
    mt_tiny_model full;
    mt_config cfg = mt_tiny_config_gqa();
    char blob[PATH_MAX + 32], ckpt[PATH_MAX + 16];
    save_tiny(&full, &cfg, &eo, 1, ckpt);
    snprintf(blob, sizeof blob, "%s/master.bin", ckpt);
    FILE *f = fopen(blob, "r+b");
    fseek(f, 100, SEEK_SET);
    fputc(0x55, f);
    fclose(f);
    mt_store weights;
    int64_t step;
    cr_assert_eq(mt_store_create_weights(&weights, &full.layout, full.be), MT_OK, "%s", mt_error());
    cr_assert_eq(mt_run_load_weights(ckpt, &weights, &step), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "checksum mismatch"), "%s", mt_error());
    mt_store_free(&weights);
    mt_tiny_model_close(&full);
}
