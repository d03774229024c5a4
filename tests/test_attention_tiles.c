/* The CPU attention at a length that spans several of its 64-position tiles with a partial
 * last one (150 = 64 + 64 + 22): forward against the double reference, backward against
 * finite differences at the positions on tile edges, and the bitwise independence from the
 * batch size that the engine's micro-batching relies on. */
#include <criterion/criterion.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "ops_check.h"
#include "ops_reference.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Two query heads on one kv head, so dk and dv sum over a group. */
enum { SEQ = 150, HEADS = 2, KV_HEADS = 1, HEAD_DIM = 8, BATCH = 2 };
enum { Q_WIDTH = HEADS * HEAD_DIM, KV_WIDTH = KV_HEADS * HEAD_DIM };
static const mt_attn_dims TWO_SEQS = {BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM};
static const mt_attn_dims ONE_SEQ = {1, SEQ, HEADS, KV_HEADS, HEAD_DIM};

/* Every output is a softmax-weighted sum of up to 150 O(1) terms: float rounding (6e-8 per
 * operation) gives about sqrt(150) * 6e-8 ~ 1e-6, 1e-5 in the worst case. */
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-5

/* As in test_ops.c: step 1e-2 on O(1) inputs truncates at ~1e-4; outputs the perturbed input
 * does not reach cancel exactly, the rest round at ~1e-6 over 2 * step. A wrong term is O(0.1). */
#define FD_STEP 1e-2f
#define FD_ATOL 2e-3
#define FD_RTOL 1e-2

/* The first and last position of every tile. */
static const int EDGES[] = {0, 63, 64, 127, 128, SEQ - 1};

typedef struct {
    float q[BATCH * SEQ * Q_WIDTH], k[BATCH * SEQ * KV_WIDTH], v[BATCH * SEQ * KV_WIDTH];
    float dout[BATCH * SEQ * Q_WIDTH];
    float out[BATCH * SEQ * Q_WIDTH], lse[BATCH * HEADS * SEQ];
    float dq[BATCH * SEQ * Q_WIDTH], dk[BATCH * SEQ * KV_WIDTH], dv[BATCH * SEQ * KV_WIDTH];
    float workspace[BATCH * HEADS * SEQ]; /* one delta per query row */
} attention_data;

/* Static, as they are large for a stack; Criterion runs each test in a fresh process. */
static attention_data data, split;

static void fill_inputs(attention_data *d) {
    ops_fill(d->q, COUNT(d->q), 200, -2, 2);
    ops_fill(d->k, COUNT(d->k), 201, -2, 2);
    ops_fill(d->v, COUNT(d->v), 202, -1, 1);
    ops_fill(d->dout, COUNT(d->dout), 203, -1, 1);
}

Test(ops, attention_tiles_match_reference) {
    static double want_out[BATCH * SEQ * Q_WIDTH], want_lse[BATCH * HEADS * SEQ];
    fill_inputs(&data);
    mt_cpu_attention(data.out, data.lse, data.q, data.k, data.v, TWO_SEQS, NULL);
    ops_ref_attention(want_out, want_lse, data.q, data.k, data.v, TWO_SEQS);
    ops_assert_close("out", data.out, want_out, COUNT(want_out), FWD_ATOL, FWD_RTOL);
    ops_assert_close("lse", data.lse, want_lse, COUNT(want_lse), FWD_ATOL, FWD_RTOL);
}

static double one_seq_loss(void *ctx) {
    attention_data *d = ctx;
    mt_cpu_attention(d->out, d->lse, d->q, d->k, d->v, ONE_SEQ, NULL);
    return ops_probe(d->out, d->dout, (size_t)SEQ * Q_WIDTH);
}

Test(ops, attention_tiles_gradients_at_tile_edges) {
    cr_assert(mt_cpu_attention_workspace(ONE_SEQ) <= sizeof data.workspace);
    fill_inputs(&data);
    mt_cpu_attention(data.out, data.lse, data.q, data.k, data.v, ONE_SEQ, NULL);
    mt_cpu_attention_dx(data.dq, data.dk, data.dv, data.dout, data.out, data.lse, data.q, data.k, data.v,
                        ONE_SEQ, NULL, data.workspace);
    for (size_t e = 0; e < COUNT(EDGES); e++) {
        size_t q_at = (size_t)EDGES[e] * Q_WIDTH, kv_at = (size_t)EDGES[e] * KV_WIDTH;
        ops_check_grad("dq", data.q + q_at, data.dq + q_at, Q_WIDTH, FD_STEP, one_seq_loss, &data, FD_ATOL,
                       FD_RTOL);
        ops_check_grad("dk", data.k + kv_at, data.dk + kv_at, KV_WIDTH, FD_STEP, one_seq_loss, &data, FD_ATOL,
                       FD_RTOL);
        ops_check_grad("dv", data.v + kv_at, data.dv + kv_at, KV_WIDTH, FD_STEP, one_seq_loss, &data, FD_ATOL,
                       FD_RTOL);
    }
}

static void forward_backward(attention_data *d, size_t seq0, mt_attn_dims dims) {
    size_t q_at = seq0 * SEQ * Q_WIDTH, kv_at = seq0 * SEQ * KV_WIDTH, row_at = seq0 * HEADS * SEQ;
    mt_cpu_attention(d->out + q_at, d->lse + row_at, d->q + q_at, d->k + kv_at, d->v + kv_at, dims, NULL);
    mt_cpu_attention_dx(d->dq + q_at, d->dk + kv_at, d->dv + kv_at, d->dout + q_at, d->out + q_at,
                        d->lse + row_at, d->q + q_at, d->k + kv_at, d->v + kv_at, dims, NULL, d->workspace);
}

Test(ops, attention_same_bits_for_any_batch) {
    fill_inputs(&data);
    fill_inputs(&split);
    forward_backward(&data, 0, TWO_SEQS);
    for (size_t b = 0; b < BATCH; b++) forward_backward(&split, b, ONE_SEQ);
    cr_assert(memcmp(data.out, split.out, sizeof data.out) == 0, "out depends on the batch");
    cr_assert(memcmp(data.lse, split.lse, sizeof data.lse) == 0, "lse depends on the batch");
    cr_assert(memcmp(data.dq, split.dq, sizeof data.dq) == 0, "dq depends on the batch");
    cr_assert(memcmp(data.dk, split.dk, sizeof data.dk) == 0, "dk depends on the batch");
    cr_assert(memcmp(data.dv, split.dv, sizeof data.dv) == 0, "dv depends on the batch");
}
