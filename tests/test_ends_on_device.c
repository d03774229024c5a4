/* An engine with quantized moments refuses to keep the embedding and head (or blocks) on the
 * device. The backend's AdamW and clip ops that update them give the host optimizer's bits (the op
 * table, tests/ops_table.c); training with them is compared with the host optimizer in
 * test_engine.c. */
#include <criterion/criterion.h>
#include <string.h>

#include "tiny_model.h"

enum { SEQ = 8 };

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

/* Blocks on the device (device_blocks) ask the same of the moments, and a count within the model. */
Test(ends_on_device, device_blocks_refuse_quantized_moments_and_a_count_past_the_blocks) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK);
    for (int moments = 0; moments < 2; moments++) {
        mt_store store;
        cr_assert_eq(mt_store_create_with_moments(&store, &lay, be, moments ? MT_MOMENTS_F32 : MT_MOMENTS_8BIT), MT_OK);
        mt_engine_options o = mt_engine_defaults();
        o.seq = SEQ;
        o.device_blocks = moments ? cfg.num_layers + 1 : 1;
        mt_engine *e = NULL;
        cr_assert_eq(mt_engine_create(&e, be, &store, &o, 0), MT_ERR_INVALID);
        cr_expect(strstr(mt_error(), moments ? "outside 0..3" : "fp32 Adam moments"), "%s", mt_error());
        o.device_blocks = -1;
        cr_assert_eq(mt_engine_create(&e, be, &store, &o, 0), MT_ERR_INVALID);
        mt_store_free(&store);
    }
    mt_backend_destroy(be);
    mt_layout_free(&lay);
}
