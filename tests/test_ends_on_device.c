/* The backend's own AdamW and clip ops, with which it updates the embedding and head (engine
 * ends_on_device), give the host optimizer's bits; an engine with quantized moments refuses them.
 * Training with them is compared with the host optimizer in test_engine.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "tiny_model.h"

enum { N = 1000, SEQ = 8 };

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
    be->ops->op.adamw(be, NULL, &params, 1, &scale, got.master, got.m, got.v, got.grad, got.w, N);
    cr_assert_eq(memcmp(&got, &want, sizeof got), 0, "a device scale of 0.37 is grad_scale 0.37");
    mt_adamw_update(&params, 0, want.master, want.m, want.v, want.grad, want.w, MT_DTYPE_F32, N);
    be->ops->op.adamw(be, NULL, &params, 0, NULL, got.master, got.m, got.v, got.grad, got.w, N);
    cr_assert_eq(memcmp(&got, &want, sizeof got), 0, "no scale: the params' own, no decay");
    float nan_scale = NAN;
    be->ops->op.adamw(be, NULL, &params, 1, &nan_scale, got.master, got.m, got.v, got.grad, got.w, N);
    cr_assert_eq(memcmp(&got, &want, sizeof got), 0, "a NaN scale (a skipped step) changes nothing");
    mt_backend_destroy(be);
}

Test(ends_on_device, clip_scale_op) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK);
    float sums[3] = {9, 16, 0}, scale;
    be->ops->op.clip_scale(be, NULL, &scale, sums, 3, 1.0f);
    cr_assert_eq(scale, (float)(1.0 / (5.0 + 1e-6)), "norm 5 clipped at 1");
    be->ops->op.clip_scale(be, NULL, &scale, sums, 3, 5.0f);
    cr_assert_eq(scale, 1.0f, "a norm at the limit is left alone");
    sums[2] = INFINITY;
    be->ops->op.clip_scale(be, NULL, &scale, sums, 3, 1.0f);
    cr_assert(isnan(scale), "an infinite norm skips the step");
    sums[2] = NAN;
    be->ops->op.clip_scale(be, NULL, &scale, sums, 3, 1.0f);
    cr_assert(isnan(scale), "a NaN norm skips the step");
    mt_backend_destroy(be);
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
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}
