/* The CPU attention at a length that spans several of its 64-position tiles with a partial
 * last one (150 = 64 + 64 + 22): forward against the double reference, backward against
 * finite differences at the positions on tile edges, and the bitwise independence from the
 * batch size that the engine's micro-batching relies on; windows of queries against the whole,
 * plain and with the variants (mt_attn_params: sliding windows, scale, soft cap, sinks). */
#include <criterion/criterion.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "ops_check.h"
#include "ops_reference.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Two query heads on one kv head, so dk and dv sum over a group. */
enum { SEQ = 150, HEADS = 2, KV_HEADS = 1, HEAD_DIM = 8, BATCH = 2 };
enum { Q_WIDTH = HEADS * HEAD_DIM, KV_WIDTH = KV_HEADS * HEAD_DIM };
static const mt_attn_dims TWO_SEQS = {BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM, 0, 0};
static const mt_attn_dims ONE_SEQ = {1, SEQ, HEADS, KV_HEADS, HEAD_DIM, 0, 0};

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
    mt_cpu_attention(data.out, data.lse, data.q, data.k, data.v, TWO_SEQS, NULL, NULL);
    ops_ref_attention(want_out, want_lse, data.q, data.k, data.v, TWO_SEQS);
    ops_assert_close("out", data.out, want_out, COUNT(want_out), FWD_ATOL, FWD_RTOL);
    ops_assert_close("lse", data.lse, want_lse, COUNT(want_lse), FWD_ATOL, FWD_RTOL);
}

static double one_seq_loss(void *ctx) {
    attention_data *d = ctx;
    mt_cpu_attention(d->out, d->lse, d->q, d->k, d->v, ONE_SEQ, NULL, NULL);
    return ops_probe(d->out, d->dout, (size_t)SEQ * Q_WIDTH);
}

Test(ops, attention_tiles_gradients_at_tile_edges) {
    cr_assert(mt_cpu_attention_workspace(ONE_SEQ) <= sizeof data.workspace);
    fill_inputs(&data);
    mt_cpu_attention(data.out, data.lse, data.q, data.k, data.v, ONE_SEQ, NULL, NULL);
    mt_cpu_attention_dx(data.dq, data.dk, data.dv, data.dout, data.out, data.lse, data.q, data.k, data.v,
                        ONE_SEQ, NULL, NULL, data.workspace);
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

static void forward_backward_with(attention_data *d, size_t seq0, mt_attn_dims dims, const mt_attn_params *params,
                                  const mt_segments *seg) {
    size_t q_at = seq0 * SEQ * Q_WIDTH, kv_at = seq0 * SEQ * KV_WIDTH, row_at = seq0 * HEADS * SEQ;
    mt_cpu_attention(d->out + q_at, d->lse + row_at, d->q + q_at, d->k + kv_at, d->v + kv_at, dims, params, seg);
    mt_cpu_attention_dx(d->dq + q_at, d->dk + kv_at, d->dv + kv_at, d->dout + q_at, d->out + q_at,
                        d->lse + row_at, d->q + q_at, d->k + kv_at, d->v + kv_at, dims, params, seg, d->workspace);
}

static void forward_backward(attention_data *d, size_t seq0, mt_attn_dims dims) {
    forward_backward_with(d, seq0, dims, NULL, NULL);
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

/* The same with a sliding window shorter than a tile and a soft cap. */
Test(ops, attention_sliding_window_same_bits_for_any_batch) {
    const mt_attn_params params = {.window = 40, .softcap = 2.0f};
    fill_inputs(&data);
    fill_inputs(&split);
    forward_backward_with(&data, 0, TWO_SEQS, &params, NULL);
    for (size_t b = 0; b < BATCH; b++) forward_backward_with(&split, b, ONE_SEQ, &params, NULL);
    cr_assert(memcmp(data.out, split.out, sizeof data.out) == 0, "out depends on the batch");
    cr_assert(memcmp(data.lse, split.lse, sizeof data.lse) == 0, "lse depends on the batch");
    cr_assert(memcmp(data.dq, split.dq, sizeof data.dq) == 0, "dq depends on the batch");
    cr_assert(memcmp(data.dk, split.dk, sizeof data.dk) == 0, "dk depends on the batch");
    cr_assert(memcmp(data.dv, split.dv, sizeof data.dv) == 0, "dv depends on the batch");
}

/* ---- windows of queries (backend.h): the tiled attention of long sequences ----
 *
 * Each sequence cut from its end into windows of T queries, as the engine cuts it (engine/block.c:
 * a first window of the rest, then T each), every window attending to the keys before its last
 * query. Assembled, the windows must give the whole attention: out, lse and dq row by row, dk and
 * dv as the sum of the windows' shares. A row's out, lse and dq are the same operations on the
 * same key blocks in the same order as in the whole, only grouped in other query blocks: equal up
 * to how BLAS blocks a GEMM's rows (measured up to 2e-7; 1e-6, where a wrong mask or position is
 * O(1)). dk and dv sum the same products in another order: fp32 rounding, measured up to 2.5e-7
 * (1e-5); so do the sinks' gradients, added to by every window. A window writes dk and dv only
 * for the keys it sees: the rows past them keep a sentinel. The same holds with every variant of
 * mt_attn_params: a sliding window starts a row's keys in a key block the window's query blocks
 * need not start in, which a row must not notice. */

enum { MAX_WINDOW = SEQ };
#define SENTINEL 777.0f

typedef struct {
    float out[BATCH * SEQ * Q_WIDTH], lse[BATCH * HEADS * SEQ], dq[BATCH * SEQ * Q_WIDTH];
    float dk[BATCH * SEQ * KV_WIDTH], dv[BATCH * SEQ * KV_WIDTH];
} assembled;

/* One window's buffers: its query rows, and the whole sequence's dk, dv. */
typedef struct {
    float q[MAX_WINDOW * Q_WIDTH], dout[MAX_WINDOW * Q_WIDTH], out[MAX_WINDOW * Q_WIDTH], dq[MAX_WINDOW * Q_WIDTH];
    float lse[HEADS * MAX_WINDOW], dk[SEQ * KV_WIDTH], dv[SEQ * KV_WIDTH], workspace[HEADS * MAX_WINDOW];
} window_buffers;

static assembled windowed;
static window_buffers wb;
/* The sinks' gradients: the whole's, the windows' sum. */
static float whole_dsinks[HEADS], windowed_dsinks[HEADS];

/* variant with its dsinks at dsinks (variant NULL: plain attention). */
static mt_attn_params params_with(const mt_attn_params *variant, float *dsinks) {
    mt_attn_params p = variant ? *variant : (mt_attn_params){0};
    p.dsinks = p.sinks ? dsinks : NULL;
    return p;
}

static void window_of(int T, int i, int *q0, int *len) {
    int windows = (SEQ + T - 1) / T, first = SEQ - (windows - 1) * T;
    *q0 = i == 0 ? 0 : first + (i - 1) * T;
    *len = i == 0 ? first : T;
}

/* Packed examples over the two sequences (backend.h's segments), their edges inside the windows and
 * on neither side of them: 30, 64, 1 and 55 tokens, then 100 and 50. */
static const int SEGMENT_LENGTHS[] = {30, 64, 1, 55, 100, 50};
enum { SEGMENTS = COUNT(SEGMENT_LENGTHS) };
static int32_t segment_pos[BATCH * SEQ], segment_starts[SEGMENTS + 1];

static mt_segments packed_segments(void) {
    int row = 0;
    for (int k = 0; k < SEGMENTS; k++) {
        segment_starts[k] = row;
        for (int i = 0; i < SEGMENT_LENGTHS[k]; i++) segment_pos[row++] = i;
    }
    segment_starts[SEGMENTS] = row;
    cr_assert_eq(row, BATCH * SEQ);
    return (mt_segments){segment_pos, segment_starts, SEGMENTS, 0};
}

/* Where lse of (sequence b, head h, query row r of q_rows a sequence) lies: [batch, heads, rows], or
 * [batch * rows, heads] with segments. */
static size_t lse_index(int segmented, int b, int h, int r, int q_rows) {
    return segmented ? ((size_t)b * q_rows + r) * HEADS + h : ((size_t)b * HEADS + h) * q_rows + r;
}

/* The whole attention of data's two sequences through windows of T queries, into windowed; with
 * seg, within its segments (each window's call from its sequence's first row: row0); with variant's
 * variants (NULL: none). */
static void attend_by_windows(int T, const mt_segments *seg, const mt_attn_params *variant) {
    double dk[BATCH * SEQ * KV_WIDTH] = {0}, dv[BATCH * SEQ * KV_WIDTH] = {0};
    memset(windowed_dsinks, 0, sizeof windowed_dsinks);
    const mt_attn_params params = params_with(variant, windowed_dsinks);
    for (int b = 0; b < BATCH; b++) {
        const float *k = data.k + (size_t)b * SEQ * KV_WIDTH, *v = data.v + (size_t)b * SEQ * KV_WIDTH;
        for (int i = 0; i < (SEQ + T - 1) / T; i++) {
            int q0, len;
            window_of(T, i, &q0, &len);
            mt_attn_dims dims = {1, SEQ, HEADS, KV_HEADS, HEAD_DIM, q0, len};
            size_t row = (size_t)b * SEQ + q0;
            cr_assert(mt_cpu_attention_workspace(dims) <= sizeof wb.workspace);
            memcpy(wb.q, data.q + row * Q_WIDTH, (size_t)len * Q_WIDTH * sizeof(float));
            memcpy(wb.dout, data.dout + row * Q_WIDTH, (size_t)len * Q_WIDTH * sizeof(float));
            for (size_t j = 0; j < COUNT(wb.dk); j++) wb.dk[j] = wb.dv[j] = SENTINEL;
            mt_segments window_seg = seg ? *seg : (mt_segments){0};
            window_seg.row0 = b * SEQ;
            const mt_segments *ws = seg ? &window_seg : NULL;
            mt_cpu_attention(wb.out, wb.lse, wb.q, k, v, dims, &params, ws);
            mt_cpu_attention_dx(wb.dq, wb.dk, wb.dv, wb.dout, wb.out, wb.lse, wb.q, k, v, dims, &params, ws,
                                wb.workspace);
            memcpy(windowed.out + row * Q_WIDTH, wb.out, (size_t)len * Q_WIDTH * sizeof(float));
            memcpy(windowed.dq + row * Q_WIDTH, wb.dq, (size_t)len * Q_WIDTH * sizeof(float));
            for (int h = 0; h < HEADS; h++)
                for (int r = 0; r < len; r++)
                    windowed.lse[lse_index(seg != NULL, b, h, q0 + r, SEQ)] = wb.lse[lse_index(seg != NULL, 0, h, r, len)];
            for (size_t j = 0; j < (size_t)SEQ * KV_WIDTH; j++) {
                size_t at = (size_t)b * SEQ * KV_WIDTH + j;
                if (j < (size_t)(q0 + len) * KV_WIDTH) {
                    dk[at] += wb.dk[j];
                    dv[at] += wb.dv[j];
                } else {
                    cr_assert(wb.dk[j] == SENTINEL && wb.dv[j] == SENTINEL,
                              "window %d of %d queries from %d wrote dk/dv past its keys (row %zu)", i, len, q0,
                              j / KV_WIDTH);
                }
            }
        }
    }
    for (size_t j = 0; j < COUNT(dk); j++) windowed.dk[j] = (float)dk[j], windowed.dv[j] = (float)dv[j];
}

static void expect_windows_make_the_whole_with(int T, const mt_segments *seg, const mt_attn_params *variant) {
    fill_inputs(&data);
    memset(whole_dsinks, 0, sizeof whole_dsinks);
    const mt_attn_params params = params_with(variant, whole_dsinks);
    forward_backward_with(&data, 0, TWO_SEQS, &params, seg);
    attend_by_windows(T, seg, variant);
    char what[64];
    const struct {
        const char *name;
        const float *got, *want;
        size_t count;
        double tol;
    } outputs[] = {{"out", windowed.out, data.out, COUNT(data.out), 1e-6},
                   {"lse", windowed.lse, data.lse, COUNT(data.lse), 1e-6},
                   {"dq", windowed.dq, data.dq, COUNT(data.dq), 1e-6},
                   {"dk", windowed.dk, data.dk, COUNT(data.dk), 1e-5},
                   {"dv", windowed.dv, data.dv, COUNT(data.dv), 1e-5},
                   {"dsinks", windowed_dsinks, whole_dsinks, HEADS, 1e-5}};
    for (size_t o = 0; o < COUNT(outputs); o++) {
        double err = ops_rel_err(outputs[o].got, outputs[o].want, outputs[o].count);
        snprintf(what, sizeof what, "%s by windows of %d%s%s", outputs[o].name, T, seg ? ", packed" : "",
                 variant ? ", variants" : "");
        cr_expect(err <= outputs[o].tol, "%s: relative error %g", what, err);
    }
    if (params.sinks) cr_expect(whole_dsinks[0] != 0.0f && whole_dsinks[1] != 0.0f, "no sinks' gradient");
}

static void expect_windows_make_the_whole_within(int T, const mt_segments *seg) {
    expect_windows_make_the_whole_with(T, seg, NULL);
}

static void expect_windows_make_the_whole(int T) { expect_windows_make_the_whole_within(T, NULL); }

/* 150 queries in one window (the whole sequence as a window from 0) */
Test(ops, attention_one_window_is_the_whole) { expect_windows_make_the_whole(SEQ); }

/* 150 = 22 + 2 x 64: windows that start off the 64-key blocks, each crossing two blocks' diagonals */
Test(ops, attention_windows_not_dividing_the_sequence) { expect_windows_make_the_whole(64); }

/* 150 = 3 + 21 x 7 (a window of one query: the op table's) */
Test(ops, attention_many_windows) { expect_windows_make_the_whole(7); }

/* Packed examples: a window's edge inside a segment, a segment inside a window, one of a token */
Test(ops, attention_windows_of_packed_examples) {
    mt_segments seg = packed_segments();
    expect_windows_make_the_whole_within(64, &seg);
    expect_windows_make_the_whole_within(7, &seg);
}

static const float SINKS[HEADS] = {0.5f, 2.0f};

/* Sliding windows shorter than a key block, of two keys (not one: a query seeing only itself has
 * dq = dk = 0 but for rounding), longer than most windows of queries with a scale, a soft cap and
 * sinks */
Test(ops, attention_windows_with_sliding_windows) {
    const mt_attn_params variants[] = {{.window = 40},
                                       {.window = 2},
                                       {.window = 100, .scale = 0.5f, .softcap = 3.0f, .sinks = SINKS}};
    for (size_t i = 0; i < COUNT(variants); i++) {
        expect_windows_make_the_whole_with(64, NULL, &variants[i]);
        expect_windows_make_the_whole_with(7, NULL, &variants[i]);
    }
}

/* Packed examples with a sliding window shorter than some segments, and sinks */
Test(ops, attention_windows_of_packed_examples_with_a_sliding_window) {
    mt_segments seg = packed_segments();
    const mt_attn_params variant = {.window = 20, .softcap = 2.0f, .sinks = SINKS};
    expect_windows_make_the_whole_with(64, &seg, &variant);
    expect_windows_make_the_whole_with(7, &seg, &variant);
}

/* A window over two sequences at once is the two windows alone, bitwise (the engine's tiles hold
 * one sequence's window, the op takes any batch); with sinks (NULL: none), their gradient too. */
static void expect_same_bits_for_any_batch(const float *sinks) {
    enum { Q0 = 70, LEN = 53 };
    static float q[BATCH * LEN * Q_WIDTH], dout[BATCH * LEN * Q_WIDTH], out[2][BATCH * LEN * Q_WIDTH];
    static float lse[2][BATCH * HEADS * LEN], dq[2][BATCH * LEN * Q_WIDTH];
    static float dk[2][BATCH * SEQ * KV_WIDTH], dv[2][BATCH * SEQ * KV_WIDTH], ws[BATCH * HEADS * LEN];
    fill_inputs(&data);
    for (int b = 0; b < BATCH; b++) {
        memcpy(q + (size_t)b * LEN * Q_WIDTH, data.q + ((size_t)b * SEQ + Q0) * Q_WIDTH, sizeof q / BATCH);
        memcpy(dout + (size_t)b * LEN * Q_WIDTH, data.dout + ((size_t)b * SEQ + Q0) * Q_WIDTH, sizeof dout / BATCH);
    }
    mt_attn_dims both = {BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM, Q0, LEN}, one = both;
    one.batch = 1;
    float dsinks[2][HEADS] = {{0}};
    mt_attn_params at_once = {.sinks = sinks, .dsinks = dsinks[0]}, alone = {.sinks = sinks, .dsinks = dsinks[1]};
    mt_cpu_attention(out[0], lse[0], q, data.k, data.v, both, &at_once, NULL);
    mt_cpu_attention_dx(dq[0], dk[0], dv[0], dout, out[0], lse[0], q, data.k, data.v, both, &at_once, NULL, ws);
    for (int b = 0; b < BATCH; b++) {
        size_t qa = (size_t)b * LEN * Q_WIDTH, kva = (size_t)b * SEQ * KV_WIDTH, la = (size_t)b * HEADS * LEN;
        mt_cpu_attention(out[1] + qa, lse[1] + la, q + qa, data.k + kva, data.v + kva, one, &alone, NULL);
        mt_cpu_attention_dx(dq[1] + qa, dk[1] + kva, dv[1] + kva, dout + qa, out[1] + qa, lse[1] + la, q + qa,
                            data.k + kva, data.v + kva, one, &alone, NULL, ws);
    }
    cr_assert(!memcmp(out[0], out[1], sizeof out[0]), "a window's out depends on the batch");
    cr_assert(!memcmp(lse[0], lse[1], sizeof lse[0]), "a window's lse depends on the batch");
    cr_assert(!memcmp(dq[0], dq[1], sizeof dq[0]), "a window's dq depends on the batch");
    cr_assert(!memcmp(dk[0], dk[1], sizeof dk[0]), "a window's dk depends on the batch");
    cr_assert(!memcmp(dv[0], dv[1], sizeof dv[0]), "a window's dv depends on the batch");
    cr_assert(!memcmp(dsinks[0], dsinks[1], sizeof dsinks[0]), "the sinks' gradient depends on the batch");
    if (sinks) cr_assert(dsinks[0][0] != 0.0f && dsinks[0][1] != 0.0f, "no sinks' gradient");
}

Test(ops, attention_window_same_bits_for_any_batch) {
    expect_same_bits_for_any_batch(NULL);
    expect_same_bits_for_any_batch(SINKS);
}
