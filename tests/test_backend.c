/* The backend interface itself (backend.h, backend.c): a table without a required entry is
 * refused by name; the optional entries' fallbacks keep the engine's results; the device's kind
 * is stated, not inferred. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tiny_model.h"

enum { SEQ = 8, SEQUENCES = 2, STEPS = 3 };

/* A cpu backend whose table is a copy the test may strip; the copy must outlive the backend. */
static mt_backend *stripped_cpu(mt_backend_ops *table) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 2), MT_OK, "%s", mt_error());
    *table = *be->ops;
    be->ops = table;
    return be;
}

Test(backend, init_refuses_a_table_without_a_required_entry) {
    mt_backend_ops table;
    mt_backend *be = stripped_cpu(&table);
    mt_backend_ops broken = table;
    broken.stream.copy = NULL;
    mt_backend probe;
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "stream.copy"), "%s", mt_error());
    broken = table;
    broken.op.sumsq = NULL;
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "op.sumsq"), "%s", mt_error());
    broken = table;
    broken.op.adamw = NULL; /* half of the optional optimizer */
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "both or neither"), "%s", mt_error());
    broken.op.clip_scale = NULL;
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_OK, "%s", mt_error());
    cr_expect_not(mt_backend_has_device_optimizer(&probe));
    broken = table;
    broken.moe.aux_loss = NULL; /* some of the optional moe group */
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "moe entries"), "%s", mt_error());
    memset(&broken.moe, 0, sizeof broken.moe);
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_OK, "%s", mt_error());
    cr_expect_not(mt_backend_has_moe(&probe));
    cr_expect(mt_backend_has_gdn(&probe));
    broken = table;
    broken.gdn.norm_dx = NULL; /* some of the optional gdn group */
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "gdn entries"), "%s", mt_error());
    memset(&broken.gdn, 0, sizeof broken.gdn);
    cr_assert_eq(mt_backend_init(&probe, &broken), MT_OK, "%s", mt_error());
    cr_expect_not(mt_backend_has_gdn(&probe));
    mt_backend_destroy(be);
}

static void set_flag(void *arg) { *(int *)arg = 1; }

/* Without launch, the function runs at once, on the calling thread. */
Test(backend, launch_falls_back_to_running_at_once) {
    mt_backend_ops table;
    mt_backend *be = stripped_cpu(&table);
    table.stream.launch = NULL;
    mt_stream *s = mt_stream_create(be);
    int ran = 0;
    mt_launch(be, s, set_flag, &ran);
    cr_expect_eq(ran, 1);
    mt_stream_destroy(be, s);
    mt_backend_destroy(be);
}

/* Trains STEPS unclipped steps (the optimizer polls mt_event_done for gradients coming home) and
 * returns the masters; *busy gets the device time the steps reported. */
static float *train(mt_backend *be, double *busy) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = SEQUENCES;
    o.max_grad_norm = 0;
    mt_tiny_model t;
    mt_tiny_model_open_on(&t, be, &cfg, &o, 5);
    int32_t tokens[SEQUENCES * (SEQ + 1)], inputs[SEQUENCES * SEQ], targets[SEQUENCES * SEQ];
    *busy = 0;
    for (int s = 0; s < STEPS; s++) {
        mt_tiny_windows(40 + s, SEQUENCES, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_engine_step(t.engine, inputs, targets, NULL, 1e-2f, &r), MT_OK, "%s", mt_error());
        *busy += r.compute_seconds;
    }
    mt_engine_finish(t.engine);
    size_t bytes = (size_t)t.layout.total_numel * sizeof(float);
    float *masters = malloc(bytes);
    memcpy(masters, mt_store_f32(&t.store), bytes);
    mt_tiny_model_close(&t);
    return masters;
}

Test(backend, optional_entries_fall_back_without_changing_the_bits) {
    mt_backend *full;
    cr_assert_eq(mt_backend_cpu_create(&full, 2), MT_OK, "%s", mt_error());
    mt_backend_ops table;
    mt_backend *bare = stripped_cpu(&table);
    table.stream.event_done = NULL;
    table.stream.event_elapsed = NULL;
    table.stream.check = NULL;
    double full_busy, bare_busy;
    mt_layout lay;
    mt_config cfg = mt_tiny_config_gqa();
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    float *want = train(full, &full_busy), *got = train(bare, &bare_busy);
    cr_expect_eq(memcmp(got, want, (size_t)lay.total_numel * sizeof *got), 0,
                 "the fallbacks of event_done, event_elapsed and check changed the masters");
    cr_expect_gt(full_busy, 0, "the cpu backend times its compute");
    cr_expect_eq(bare_busy, 0, "without event_elapsed no time is reported, got %g s", bare_busy);
    free(want);
    free(got);
    mt_layout_free(&lay);
}

Test(backend, engine_refuses_the_ends_on_a_backend_without_optimizer_ops) {
    mt_backend_ops table;
    mt_backend *be = stripped_cpu(&table);
    table.op.adamw = NULL;
    table.op.clip_scale = NULL;
    mt_config cfg = mt_tiny_config_gqa();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_store store;
    cr_assert_eq(mt_store_create(&store, &lay, be), MT_OK, "%s", mt_error());
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.ends_on_device = 1;
    mt_engine *e = NULL;
    cr_assert_eq(mt_engine_create(&e, be, &store, &o, 0), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "no optimizer ops"), "%s", mt_error());
    o.ends_on_device = 0;
    o.device_blocks = 1; /* blocks on the device need them too */
    cr_assert_eq(mt_engine_create(&e, be, &store, &o, 0), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "no optimizer ops"), "%s", mt_error());
    mt_store_free(&store);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}

/* A model with Gated DeltaNet blocks on a backend without the gdn group: refused, naming it. */
Test(backend, engine_refuses_gated_deltanet_on_a_backend_without_its_ops) {
    mt_backend_ops table;
    mt_backend *be = stripped_cpu(&table);
    memset(&table.gdn, 0, sizeof table.gdn);
    cr_assert_not(mt_backend_has_gdn(be));
    mt_config cfg = mt_tiny_config_qwen3_5();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_store store;
    cr_assert_eq(mt_store_create(&store, &lay, be), MT_OK, "%s", mt_error());
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    mt_engine *e = NULL;
    cr_assert_eq(mt_engine_create(&e, be, &store, &o, 0), MT_ERR_INVALID);
    cr_expect(strstr(mt_error(), "no Gated DeltaNet ops"), "%s", mt_error());
    mt_store_free(&store);
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}

Test(backend, the_cpu_states_its_kind) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK, "%s", mt_error());
    cr_expect_eq(be->ops->kind, MT_DEVICE_CPU);
    cr_expect_not(mt_backend_has_own_memory(be));
    cr_expect_eq(mt_dev_available(be), SIZE_MAX, "no free-memory figure for memory that is the host's");
    cr_expect(mt_backend_has_device_optimizer(be));
    mt_backend_destroy(be);
}
