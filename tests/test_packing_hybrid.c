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

static mt_engine_options options(int seq) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = seq;
    o.batch = 1;
    o.micro_batches = 1;
    o.packed = 1;
    o.attn_tile = 4; /* windows of the sequence: the recurrence's backward spans them */
    return o;
}

/* The example's loss and gradients, at row `at` of a sequence of `seq` tokens whose segments start
 * at `starts` (count of them); the other rows' targets carry none. */
static double grads_of(const mt_config *c, int seq, const int *starts, int count, int at, float *grads) {
    mt_engine_options o = options(seq);
    mt_tiny_model t;
    mt_tiny_model_open(&t, c, &o, 7);
    int32_t inputs[PACKED], targets[PACKED], positions[PACKED];
    for (int i = 0, s = 0; i < seq; i++) {
        if (s + 1 < count && i == starts[s + 1]) s++;
        positions[i] = i - starts[s];
        inputs[i] = (int32_t)((i * 37 + 11) % c->vocab_size); /* the neighbours' tokens */
        targets[i] = -1;
    }
    for (int i = 0; i < LEN; i++) inputs[at + i] = (int32_t)((i * 13 + 5) % c->vocab_size);
    for (int i = 0; i + 1 < LEN; i++) targets[at + i] = inputs[at + i + 1];
    double loss;
    cr_assert_eq(mt_engine_grads(t.engine, inputs, targets, positions, &loss), MT_OK, "%s", mt_error());
    memcpy(grads, mt_engine_host_grads(t.engine), (size_t)t.layout.total_numel * sizeof *grads);
    mt_tiny_model_close(&t);
    return loss;
}

Test(packing_hybrid, an_example_packed_between_others_is_the_example_alone) {
    mt_config c = mt_tiny_config_qwen3_5();
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &c), MT_OK, "%s", mt_error());
    size_t n = (size_t)lay.total_numel;
    float *alone = calloc(n, sizeof *alone), *packed = calloc(n, sizeof *packed);
    cr_assert(alone && packed);
    const int alone_starts[] = {0}, packed_starts[] = {0, BEFORE, BEFORE + LEN};
    double want = grads_of(&c, LEN, alone_starts, 1, 0, alone);
    double got = grads_of(&c, PACKED, packed_starts, 3, BEFORE, packed);
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
