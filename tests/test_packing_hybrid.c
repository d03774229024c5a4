/* Packing without leakage through Qwen3.5's hybrid (Gated DeltaNet and gated attention): an
 * example's loss and every gradient are the same alone and packed between two others whose targets
 * carry no loss, to fp32 rounding on the cpu backend. A convolution or a recurrent state that
 * crossed an example's start would reach the example from its neighbour's tokens. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ref_fixture.h"
#include "tiny_model.h"

enum { BEFORE = 5, LEN = 7, AFTER = 4, PACKED = BEFORE + LEN + AFTER };

Test(packing_hybrid, an_example_packed_between_others_is_the_example_alone) {
    mt_config c = mt_tiny_config_qwen3_5();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK, "%s", mt_error());
    size_t n = (size_t)lay.total_numel;
    float *alone = calloc(n, sizeof *alone), *packed = calloc(n, sizeof *packed);
    cr_assert(alone && packed);
    const int alone_starts[] = {0}, packed_starts[] = {0, BEFORE, BEFORE + LEN};
    /* attention in windows of 4 queries: the recurrence's backward spans them */
    double want = mt_tiny_packed_example_grads(NULL, &c, LEN, alone_starts, 1, 0, LEN, 4, alone);
    double got = mt_tiny_packed_example_grads(NULL, &c, PACKED, packed_starts, 3, BEFORE, LEN, 4, packed);
    cr_expect_lt(fabs(got - want), 1e-6 * fabs(want), "loss %.9f packed, %.9f alone", got, want);
    mt_ref_diff d;
    mt_ref_compare(&lay, packed, alone, &d);
    /* fp32 sums over other rows' zeros and other blockings: ~1e-7; a neighbour's token reaching the
     * example: O(1) (test_model_ref.c's packed cases measure the reference's own). */
    cr_expect_lt(d.worst_rel, 1e-5, "gradient of %s off by %g relative packed (max abs %g)", d.worst_tensor,
                 d.worst_rel, d.worst_max_abs);
    free(alone);
    free(packed);
    mt_layout_free(&lay);
}
