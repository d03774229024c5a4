/* The embedding and head updated by the backend (engine ends_on_device) against the host
 * optimizer: the backend's AdamW and clip ops give the host's bits, and so does training with
 * them, clipped or not, tied or untied, through a skipped step. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "tiny_model.h"

enum { N = 1000, SEQ = 8, SEQUENCES = 4, STEPS = 4 };

static void fill(float *x, size_t n, unsigned seed, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
    }
}

typedef struct {
    float master[N], m[N], v[N], grad[N], w[N];
} adam_state;

static void random_state(adam_state *s) {
    fill(s->master, N, 1, -1, 1);
    fill(s->m, N, 2, -0.1f, 0.1f);
    fill(s->v, N, 3, 0, 0.01f);
    fill(s->grad, N, 4, -2, 2);
    memset(s->w, 0, sizeof s->w);
}

static const mt_adamw_params params = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                       .weight_decay = 0.1f, .step = 3, .grad_scale = 1.0f};

Test(ends_on_device, adamw_op_is_the_host_update) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 2), MT_OK);
    adam_state want, got;
    random_state(&want);
    random_state(&got);
    mt_adamw_params scaled = params;
    scaled.grad_scale = 0.37f;
    mt_adamw_update(&scaled, 1, want.master, want.m, want.v, want.grad, want.w, MT_DTYPE_F32, N);
    float scale = 0.37f;
    be->ops->adamw(be, NULL, &params, 1, &scale, got.master, got.m, got.v, got.grad, got.w, N);
    cr_assert_eq(memcmp(&got, &want, sizeof got), 0, "a device scale of 0.37 is grad_scale 0.37");
    mt_adamw_update(&params, 0, want.master, want.m, want.v, want.grad, want.w, MT_DTYPE_F32, N);
    be->ops->adamw(be, NULL, &params, 0, NULL, got.master, got.m, got.v, got.grad, got.w, N);
    cr_assert_eq(memcmp(&got, &want, sizeof got), 0, "no scale: the params' own, no decay");
    float nan_scale = NAN;
    be->ops->adamw(be, NULL, &params, 1, &nan_scale, got.master, got.m, got.v, got.grad, got.w, N);
    cr_assert_eq(memcmp(&got, &want, sizeof got), 0, "a NaN scale (a skipped step) changes nothing");
    be->ops->destroy(be);
}

Test(ends_on_device, clip_scale_op) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK);
    float sums[3] = {9, 16, 0}, scale;
    be->ops->clip_scale(be, NULL, &scale, sums, 3, 1.0f);
    cr_assert_eq(scale, (float)(1.0 / (5.0 + 1e-6)), "norm 5 clipped at 1");
    be->ops->clip_scale(be, NULL, &scale, sums, 3, 5.0f);
    cr_assert_eq(scale, 1.0f, "a norm at the limit is left alone");
    sums[2] = INFINITY;
    be->ops->clip_scale(be, NULL, &scale, sums, 3, 1.0f);
    cr_assert(isnan(scale), "an infinite norm skips the step");
    sums[2] = NAN;
    be->ops->clip_scale(be, NULL, &scale, sums, 3, 1.0f);
    cr_assert(isnan(scale), "a NaN norm skips the step");
    be->ops->destroy(be);
}

/* Masters and moments after STEPS steps; step `poisoned` (0: none) gets a NaN gradient norm. */
static float *train(const mt_config *cfg, float clip, int ends_on_device, int poisoned, size_t *count) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = SEQUENCES;
    o.lm_chunk = 5;
    o.max_grad_norm = clip;
    o.ends_on_device = ends_on_device;
    mt_tiny_model t;
    mt_tiny_model_open(&t, cfg, &o, 11);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    for (int s = 1; s <= STEPS; s++) {
        mt_tiny_windows(40 + s, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
        if (s == poisoned) mt_engine_poison_next_step(t.engine);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, 2e-3f, &r), MT_OK, "%s", mt_error());
        cr_assert_eq(r.skipped, s == poisoned && clip > 0, "step %d", s);
    }
    cr_assert_eq(mt_engine_finish(t.engine), STEPS - (poisoned && clip > 0));
    size_t n = (size_t)t.layout.total_numel;
    float *state = malloc(3 * n * sizeof *state);
    memcpy(state, t.store.master, n * sizeof *state);
    memcpy(state + n, t.store.moments.m, n * sizeof *state);
    memcpy(state + 2 * n, t.store.moments.v, n * sizeof *state);
    *count = 3 * n;
    mt_tiny_model_close(&t);
    return state;
}

static void expect_host_bits(const mt_config *cfg, float clip, int poisoned) {
    size_t n_host, n_device;
    float *host = train(cfg, clip, 0, poisoned, &n_host), *device = train(cfg, clip, 1, poisoned, &n_device);
    cr_assert_eq(n_host, n_device);
    size_t n = n_host / 3, first = n_host;
    for (size_t i = 0; i < n_host && first == n_host; i++)
        if (memcmp(&host[i], &device[i], sizeof *host)) first = i;
    cr_expect_eq(first, n_host, "clip %g: %s element %zu differs: host %.9g, device %.9g", (double)clip,
                 first / n == 0 ? "master" : first / n == 1 ? "m" : "v", first % n, (double)host[first % n_host],
                 (double)device[first % n_host]);
    float *fresh = train(cfg, clip, 1, 0, &n_device);
    if (poisoned) cr_expect_neq(memcmp(fresh, device, n_host * sizeof *fresh), 0, "the skip changed nothing?");
    free(fresh);
    free(host);
    free(device);
}

Test(ends_on_device, host_bits_clipped_untied) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_host_bits(&cfg, 0.5f, 0);
}

Test(ends_on_device, host_bits_overlapped_tied) {
    mt_config cfg = mt_tiny_config_tied_bias();
    cfg.num_layers = 6; /* more blocks than the host gradient ring holds */
    expect_host_bits(&cfg, 0.0f, 0);
}

Test(ends_on_device, host_bits_through_a_skipped_step) {
    mt_config cfg = mt_tiny_config_gqa();
    expect_host_bits(&cfg, 1.0f, 2);
}

Test(ends_on_device, refuses_quantized_moments) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK);
    mt_store store;
    cr_assert_eq(mt_store_create_with_moments(&store, &lay, be, MT_MOMENTS_BF16), MT_OK);
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.ends_on_device = 1;
    mt_engine *e = NULL;
    cr_assert_eq(mt_engine_create(&e, be, &store, &o, 0), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "fp32 Adam moments"), "%s", mt_error());
    mt_store_free(&store);
    be->ops->destroy(be);
    mt_layout_free(&lay);
}
