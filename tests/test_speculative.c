/* Exact clipping (engine_optimizer.c): the engine's step against the plain computation, made here
 * from the same gradient and the step's own norm: the whole update (optim/adamw.h's FULL) with the
 * clip coefficient, tensor by tensor. Not taken ahead (the update after the norm, masters then
 * moments) it is the plain update bit for bit, clipped or not, and a skipped step leaves masters
 * and moments bit for bit. Taken ahead (the step before applied unclipped), bit for bit when the
 * step is not clipped; within the rounding that the correction's recovery of beta m, beta v and the
 * decayed master takes (the bounds of tests/test_adamw.c's test of it) when it is; a skipped step
 * leaves the masters and moments within the rounding of their undoing. An untied embedding's rows
 * no input token touched (zero gradient) are updated on the host before the norm whatever it is: a
 * skipped step takes them back out within that rounding too, taken ahead or not. The units on the
 * device take the plain update after the norm (backend.h's adamw), within those bounds too. */
#include <criterion/criterion.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_test_files.h"
#include "io/checkpoint.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "tiny_model.h"
#include "train/run_state.h"

enum { SEQ = 12, SEQUENCES = 4 };

typedef struct {
    size_t n;
    float *master, *m, *v;
} snapshot;

static snapshot take(const mt_tiny_model *t) {
    snapshot s = {.n = (size_t)t->layout.total_numel};
    s.master = malloc(s.n * 4), s.m = malloc(s.n * 4), s.v = malloc(s.n * 4);
    cr_assert(s.master && s.m && s.v);
    mt_store_read_masters(&t->store, 0, s.n, s.master);
    memcpy(s.m, t->store.moments.m, s.n * 4);
    memcpy(s.v, t->store.moments.v, s.n * 4);
    return s;
}

static void drop(snapshot *s) { free(s->master), free(s->m), free(s->v); }

static snapshot copy_of(const snapshot *from) {
    snapshot s = {.n = from->n, .master = malloc(from->n * 4), .m = malloc(from->n * 4), .v = malloc(from->n * 4)};
    cr_assert(s.master && s.m && s.v);
    memcpy(s.master, from->master, s.n * 4), memcpy(s.m, from->m, s.n * 4), memcpy(s.v, from->v, s.n * 4);
    return s;
}

/* Part `part` of the update of `before` with gradient g and clip coefficient c (the second step),
 * tensor by tensor: FULL is the plain update. */
static snapshot update_of(const mt_layout *lay, const snapshot *before, const float *g, float c, float lr,
                          const mt_engine_options *o, mt_adamw_part part) {
    snapshot s = copy_of(before);
    mt_adamw_params p = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                         .weight_decay = o->weight_decay, .step = 2, .grad_scale = c};
    for (int i = 0; i < lay->num_tensors; i++) {
        const mt_tensor *t = &lay->tensors[i];
        size_t at = (size_t)(lay->units[t->unit].offset + t->offset), n = (size_t)t->rows * t->cols;
        mt_adamw_update(part, &p, t->decay, (mt_master){.f32 = s.master + at}, s.m + at, s.v + at, g + at, n);
    }
    return s;
}

/* The tests' engine: SEQUENCES windows of SEQ tokens a step, clipping at `clip`. */
static mt_engine_options options(float clip) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = SEQUENCES;
    o.max_grad_norm = clip;
    return o;
}

/* One step of e on the windows of `windows` at lr. */
static void step_on(mt_engine *e, const mt_config *cfg, uint64_t windows, float lr, mt_step_result *r) {
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_tiny_windows(windows, SEQUENCES, SEQ, cfg->vocab_size, tokens, inputs, targets);
    cr_assert_eq(mt_engine_step(e, inputs, targets, NULL, lr, r), MT_OK, "%s", mt_error());
}

typedef struct {
    float clip;
    int ends_on_device, device_blocks;
    int poison; /* the step's norm reads NaN: skipped */
    int ahead;  /* the whole update taken ahead of the norm (MT_UPDATE_AHEAD_ALWAYS) */
} spec_case;

/* The second step of a tiny model (the first gives the moments values: from zero the correction's
 * recovery is exact), against the plain computation. */
static void check_step(const spec_case *sc) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options(sc->clip);
    o.lm_chunk = 5;
    o.keep_grads = 1; /* the gradient the step takes, for the plain computation */
    o.ends_on_device = sc->ends_on_device;
    o.device_blocks = sc->device_blocks;
    o.update_ahead = sc->ahead ? MT_UPDATE_AHEAD_ALWAYS : MT_UPDATE_AHEAD_NEVER;
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 21);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    mt_step_result r;
    float lr = 3e-3f;
    step_on(t.engine, &cfg, 76, lr, &r);
    mt_engine_finish(t.engine);
    mt_tiny_windows(77, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
    snapshot before = take(&t);
    double loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, NULL, &loss), MT_OK, "%s", mt_error());
    size_t n = before.n;
    float *g = malloc(n * 4);
    memcpy(g, mt_engine_host_grads(t.engine), n * 4);
    if (sc->poison) mt_engine_poison_next_step(t.engine);
    cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, lr, &r), MT_OK, "%s", mt_error());
    mt_engine_finish(t.engine);
    snapshot got = take(&t);
    float c = mt_clip_scale(r.grad_norm, sc->clip);
    cr_assert_eq(!memcmp(g, mt_engine_host_grads(t.engine), n * 4), 1, "the step's gradient is not the pass's");
    char what[160];
    snprintf(what, sizeof what, "clip %g (coefficient %g), ends on the device %d, blocks on the device %d%s%s",
             (double)sc->clip, (double)c, sc->ends_on_device, sc->device_blocks, sc->poison ? ", skipped" : "",
             sc->ahead ? ", ahead" : "");
    /* the masters AHEAD made, which the correction takes its step back out of */
    snapshot ahead = update_of(&t.layout, &before, g, 1.0f, lr, &o, MT_ADAMW_AHEAD);
    snapshot want = sc->poison ? copy_of(&before) : update_of(&t.layout, &before, g, c, lr, &o, MT_ADAMW_FULL);
    if (sc->poison) cr_assert(r.skipped, "%s: not skipped", what);
    /* the elements a skipped step takes back out: every one taken ahead, else the embedding's rows
     * no input token touched, on the host (the model is untied) */
    uint8_t *undone = calloc(n, 1);
    cr_assert(undone);
    size_t rows_undone = 0, D = (size_t)cfg.hidden_size;
    for (int row = 0; sc->poison && row < cfg.vocab_size; row++) {
        int touched = 0;
        for (int k = 0; k < SEQUENCES * SEQ; k++) touched |= inputs[k] == row;
        if (sc->ahead || (!touched && !sc->ends_on_device)) memset(undone + (size_t)row * D, 1, D), rows_undone++;
    }
    if (sc->poison && !sc->ahead && !sc->ends_on_device)
        cr_assert(rows_undone > 0 && rows_undone < (size_t)cfg.vocab_size, "%s: %zu of %d rows untouched, the test "
                  "would not see both kinds", what, rows_undone, cfg.vocab_size);
    if (sc->poison && sc->ahead)
        for (size_t i = (size_t)cfg.vocab_size * D; i < n; i++) undone[i] = 1;
    if (!sc->ahead || (!sc->poison && c == 1.0f)) {
        size_t i = 0;
        while (i < n && (undone[i] || (!memcmp(&got.master[i], &want.master[i], 4) &&
                                       !memcmp(&got.m[i], &want.m[i], 4) && !memcmp(&got.v[i], &want.v[i], 4))))
            i++;
        cr_assert_eq(i, n, "%s: not the plain update's bits at %zu", what, i);
    }
    if (sc->poison) {
        for (size_t i = 0; i < n; i++) { /* AHEAD_UNDO's roundings (tests/test_adamw.c) */
            if (!undone[i]) continue;
            cr_assert_leq(fabs((double)got.master[i] - before.master[i]),
                          2 * FLT_EPSILON * (fabs(before.master[i]) + fabs(ahead.master[i])), "%s: master[%zu]", what, i);
            double m1 = o.beta1 * before.m[i] + (1 - o.beta1) * g[i], v1 = o.beta2 * before.v[i] + (1 - o.beta2) * g[i] * g[i];
            cr_assert_leq(fabs((double)got.m[i] - before.m[i]), 2 * FLT_EPSILON * (fabs(before.m[i]) + fabs(m1)) / o.beta1,
                          "%s: m[%zu]", what, i);
            cr_assert_leq(fabs((double)got.v[i] - before.v[i]), 2 * FLT_EPSILON * (before.v[i] + v1) / o.beta2,
                          "%s: v[%zu]", what, i);
        }
    } else if (sc->ahead && c != 1.0f) {
        double b1 = o.beta1, b2 = o.beta2, eps = FLT_EPSILON, c2 = sqrt(1 - b2 * b2);
        for (size_t i = 0; i < n; i++) {
            double sm = b1 * fabs(before.m[i]) + (1 - b1) * fabs(g[i]) + fabs(want.m[i]);
            double sv = b2 * before.v[i] + (1 - b2) * (double)g[i] * g[i] + want.v[i];
            double denom = sqrt(want.v[i]) / c2 + o.eps;
            double dsqrt = want.v[i] > 0 ? fmin(eps * sv / sqrt(want.v[i]), sqrt(2 * eps * sv)) : sqrt(2 * eps * sv);
            double dstep = lr / (1 - b1 * b1) * (2 * eps * sm / denom + fabs(want.m[i]) * dsqrt / c2 / (denom * denom));
            cr_assert_leq(fabs((double)got.m[i] - want.m[i]), 2 * eps * sm, "%s: m[%zu]", what, i);
            cr_assert_leq(fabs((double)got.v[i] - want.v[i]), 2 * eps * sv, "%s: v[%zu]", what, i);
            double recovery = eps * (fabs(ahead.master[i]) + fabs(before.master[i]));
            cr_assert_leq(fabs((double)got.master[i] - want.master[i]), dstep + eps * fabs(want.master[i]) + recovery,
                          "%s: master[%zu] %.9g, plain %.9g", what, i, (double)got.master[i], (double)want.master[i]);
        }
        cr_assert(memcmp(got.m, want.m, n * 4), "%s: the correction left no trace? (the test would not see one)", what);
    }
    free(undone);
    drop(&want);
    free(g);
    drop(&ahead);
    drop(&before);
    drop(&got);
    mt_tiny_model_close(&t);
}

Test(speculative, an_unclipped_step_is_the_plain_update_bit_for_bit) {
    const spec_case cases[] = {{1e3f, 0, 0, 0, 0}, {1e3f, 1, 1, 0, 0}, {1e3f, 0, 0, 0, 1}, {1e3f, 1, 1, 0, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_step(&cases[i]);
}

/* Not taken ahead, the plain update's bits; taken ahead, within rounding of them. */
Test(speculative, a_clipped_step_is_the_plain_update_or_within_rounding_of_it_taken_ahead) {
    const spec_case cases[] = {{0.5f, 0, 0, 0, 0}, {1e-2f, 0, 0, 0, 0}, {1e-2f, 1, 2, 0, 0},
                               {0.5f, 0, 0, 0, 1}, {1e-2f, 0, 0, 0, 1}, {1e-2f, 1, 2, 0, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_step(&cases[i]);
}

/* Taken ahead, the masters and moments come back to within their rounding instead of bit for bit. */
Test(speculative, a_skipped_step_keeps_the_masters_and_moments) {
    const spec_case cases[] = {{1.0f, 0, 0, 1, 0}, {1.0f, 1, 1, 1, 0}, {1.0f, 0, 0, 1, 1}, {1.0f, 1, 1, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_step(&cases[i]);
}

/* AUTO takes the update ahead after a step applied unclipped only, and says so for the checkpoint;
 * a resumed engine given that takes the next step's update as the one it replaces would have. */
Test(speculative, auto_takes_the_update_ahead_after_an_unclipped_step) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_step_result r;
    for (int clips = 0; clips < 2; clips++) {
        mt_engine_options o = options(clips ? 1e-3f : 1e3f);
        mt_tiny_model t;
        mt_tiny_model_open(&t, &cfg, &o, 29);
        cr_assert_not(mt_engine_update_ahead(t.engine), "a fresh engine knows no step before");
        step_on(t.engine, &cfg, 90, 1e-3f, &r);
        mt_engine_finish(t.engine);
        cr_assert_eq(mt_engine_update_ahead(t.engine), !clips, "clipped %d: ahead %d", clips, mt_engine_update_ahead(t.engine));
        mt_engine_set_update_ahead(t.engine, clips);
        cr_assert_eq(mt_engine_update_ahead(t.engine), clips);
        mt_tiny_model_close(&t);
    }
}

/* The step's report of the optimizer's work after the norm (what the next forward waits for):
 * with clipping, the time to its last master out and the units whose moments were still to take
 * then, at most the host-updated units; without clipping, none. */
Test(speculative, a_step_reports_the_optimizers_work_after_the_norm) {
    for (int clip = 0; clip < 2; clip++) {
        mt_config cfg = mt_tiny_config_gqa();
        mt_engine_options o = options(clip ? 1e-2f : 0.0f);
        mt_tiny_model t;
        mt_tiny_model_open(&t, &cfg, &o, 23);
        mt_step_result r;
        for (int step = 0; step < 2; step++) /* the second step's report holds the first's update */
            step_on(t.engine, &cfg, 80 + step, 1e-3f, &r);
        mt_engine_finish(t.engine);
        if (clip) {
            cr_expect_gt(r.opt_after_norm_seconds, 0.0, "clipped: no time after the norm reported");
            cr_expect(r.opt_backlog_units >= 0 && r.opt_backlog_units <= t.layout.num_units, "backlog %d of %d units",
                      r.opt_backlog_units, t.layout.num_units);
        } else {
            cr_expect(r.opt_after_norm_seconds == 0.0 && r.opt_backlog_units == 0,
                      "no clipping, yet %g s after the norm, %d units", r.opt_after_norm_seconds, r.opt_backlog_units);
        }
        mt_tiny_model_close(&t);
    }
}

static void restore(mt_tiny_model *t, const snapshot *s) {
    mt_store_write_masters(&t->store, 0, s->n, s->master);
    memcpy(t->store.moments.m, s->m, s->n * 4);
    memcpy(t->store.moments.v, s->v, s->n * 4);
}

/* One clipped step from `from` (after two steps) on a new engine given `ahead` as a resumed run's
 * checkpoint gives it (-1: forced with ALWAYS instead). */
static snapshot clipped_step_from(mt_tiny_model *t, const snapshot *from, int ahead) {
    restore(t, from);
    mt_engine_options o = options(1e-3f); /* a resumed run may change --clip */
    o.update_ahead = ahead < 0 ? MT_UPDATE_AHEAD_ALWAYS : MT_UPDATE_AHEAD_AUTO;
    mt_engine *e;
    cr_assert_eq(mt_engine_create(&e, t->be, &t->store, &o, 2), MT_OK, "%s", mt_error());
    if (ahead >= 0) mt_engine_set_update_ahead(e, ahead);
    mt_step_result r;
    step_on(e, &t->cfg, 93, 1e-3f, &r);
    cr_assert_eq(mt_engine_finish(e), 3);
    cr_assert(r.grad_norm > 1e-3, "the step does not clip");
    mt_engine_destroy(e);
    return take(t);
}

/* A run resumed after an unclipped step takes its next update as the run would have, ahead; told
 * otherwise it would not (the two differ within rounding where the step clips). */
Test(speculative, a_resumed_engine_given_the_state_takes_the_same_update) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options(1e3f);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 31);
    mt_step_result r;
    for (int step = 0; step < 2; step++) step_on(t.engine, &cfg, 91 + step, 1e-3f, &r);
    mt_engine_finish(t.engine);
    cr_assert(mt_engine_update_ahead(t.engine), "two unclipped steps, and the next is not taken ahead");
    snapshot two = take(&t);
    mt_engine_destroy(t.engine);
    t.engine = NULL;
    snapshot given = clipped_step_from(&t, &two, 1), forced = clipped_step_from(&t, &two, -1),
             fresh = clipped_step_from(&t, &two, 0);
    cr_assert(!memcmp(given.master, forced.master, two.n * 4) && !memcmp(given.m, forced.m, two.n * 4) &&
              !memcmp(given.v, forced.v, two.n * 4), "the state given back did not take the update ahead");
    cr_assert(memcmp(given.master, fresh.master, two.n * 4), "ahead or not, the same masters: the test would not see "
              "a resumed run that lost the state");
    drop(&two), drop(&given), drop(&forced), drop(&fresh);
    mt_tiny_model_close(&t);
}

/* The checkpoint keeps it (one written before it was kept loads as no: tests/test_store_split.c). */
Test(speculative, the_checkpoint_keeps_the_state) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options(1.0f);
    mt_tiny_model t;
    mt_tiny_model_open(&t, &cfg, &o, 33);
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    for (int ahead = 0; ahead < 2; ahead++) {
        mt_run_progress saved = {.step = 1 + ahead, .adam_step = 1 + ahead, .update_ahead = ahead}, loaded;
        mt_run_save_options so = {.good_step = -1};
        cr_assert_eq(mt_run_save(dir, &t.store, &saved, &so, NULL), MT_OK, "%s", mt_error());
        cr_assert_eq(mt_checkpoint_path(path, sizeof path, dir, saved.step), MT_OK);
        memset(&loaded, 0xff, sizeof loaded);
        cr_assert_eq(mt_run_load(path, &t.store, &loaded), MT_OK, "%s", mt_error());
        cr_assert_eq(loaded.update_ahead, ahead);
    }
    hf_test_rmtree(dir);
    mt_tiny_model_close(&t);
}
