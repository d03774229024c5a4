/* Every CUDA op against the CPU reference kernels on random inputs, odd sizes included.
 *
 * Inputs are rounded to bf16 before both sides see them, so differences come only from the
 * GPU's arithmetic and the rounding of its outputs. Tolerances (relative error
 * ||out - ref|| / ||ref||): 1e-2 for bf16 outputs (bf16 keeps 8 mantissa bits, a relative
 * rounding of up to 2^-9 per element, plus fp32 summation-order differences); tighter for fp32
 * outputs computed in fp32 from the same inputs, as stated at each. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "gpu_harness.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "util/bf16.h"

#define BF16_TOL 1e-2

static float *host(size_t count) {
    float *p = calloc(count ? count : 1, sizeof *p);
    cr_assert(p);
    return p;
}

static float *random_host(size_t count, float scale, unsigned *seed) {
    float *p = host(count);
    fill_random(p, count, scale, seed);
    return p;
}

Test(cuda, matmul_with_bias_odd_rows) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 1;
    const int n = 37, in = 72, out = 44;
    float *x = random_host((size_t)n * in, 1.0f, &seed), *w = random_host((size_t)out * in, 0.2f, &seed);
    float *bias = random_host(out, 0.5f, &seed), *y = host((size_t)n * out), *ref = host((size_t)n * out);
    void *dx = gpu_put_bf16(&g, x, (size_t)n * in), *dw = gpu_put_bf16(&g, w, (size_t)out * in);
    void *db = gpu_put_bf16(&g, bias, out), *dy = gpu_alloc(&g, (size_t)n * out * 2);
    g.be->ops->matmul(g.be, g.s, dy, dx, dw, db, n, in, out);
    gpu_get_bf16(&g, y, dy, (size_t)n * out);
    mt_cpu_matmul(ref, x, w, bias, n, in, out);
    cr_assert_lt(rel_err(y, ref, (size_t)n * out), BF16_TOL);
    gpu_close(&g);
    free(x), free(w), free(bias), free(y), free(ref);
}

Test(cuda, matmul_dx_accumulates) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 2;
    const int n = 33, in = 48, out = 80;
    float *dy = random_host((size_t)n * out, 1.0f, &seed), *w = random_host((size_t)out * in, 0.2f, &seed);
    float *dx = random_host((size_t)n * in, 1.0f, &seed), *got = host((size_t)n * in);
    void *d_dy = gpu_put_bf16(&g, dy, (size_t)n * out), *d_w = gpu_put_bf16(&g, w, (size_t)out * in);
    void *d_dx = gpu_put_bf16(&g, dx, (size_t)n * in);
    g.be->ops->matmul_dx(g.be, g.s, d_dx, d_dy, d_w, n, in, out, 1);
    gpu_get_bf16(&g, got, d_dx, (size_t)n * in);
    mt_cpu_matmul_dx(dx, dy, w, n, in, out, 1);
    cr_assert_lt(rel_err(got, dx, (size_t)n * in), BF16_TOL);
    gpu_close(&g);
    free(dy), free(w), free(dx), free(got);
}

Test(cuda, matmul_dw_and_dbias_accumulate_in_fp32) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 3;
    const int n = 29, in = 40, out = 24;
    float *dy = random_host((size_t)n * out, 1.0f, &seed), *x = random_host((size_t)n * in, 1.0f, &seed);
    float *dw = random_host((size_t)out * in, 1.0f, &seed), *dbias = random_host(out, 1.0f, &seed);
    float *got_w = host((size_t)out * in), *got_b = host(out);
    void *d_dy = gpu_put_bf16(&g, dy, (size_t)n * out), *d_x = gpu_put_bf16(&g, x, (size_t)n * in);
    void *d_dw = gpu_put_f32(&g, dw, (size_t)out * in), *d_db = gpu_put_f32(&g, dbias, out);
    g.be->ops->matmul_dw(g.be, g.s, d_dw, d_db, d_dy, d_x, n, in, out);
    gpu_get_f32(&g, got_w, d_dw, (size_t)out * in);
    gpu_get_f32(&g, got_b, d_db, out);
    mt_cpu_matmul_dw(dw, dbias, dy, x, n, in, out);
    /* fp32 sums of the same bf16 products: only the summation order differs */
    cr_assert_lt(rel_err(got_w, dw, (size_t)out * in), 1e-5);
    cr_assert_lt(rel_err(got_b, dbias, out), 1e-5);
    gpu_close(&g);
    free(dy), free(x), free(dw), free(dbias), free(got_w), free(got_b);
}

static void check_rmsnorm(int n, int d, unsigned seed) {
    gpu g;
    gpu_open(&g);
    float *x = random_host((size_t)n * d, 2.0f, &seed), *w = random_host(d, 1.0f, &seed);
    float *dy = random_host((size_t)n * d, 1.0f, &seed), *dx = random_host((size_t)n * d, 1.0f, &seed);
    float *dw = random_host(d, 1.0f, &seed);
    float *y = host((size_t)n * d), *ref_y = host((size_t)n * d), *rstd = host(n), *ref_rstd = host(n);
    float *got_dx = host((size_t)n * d), *got_dw = host(d), *ref_dw = host(d);
    void *d_x = gpu_put_bf16(&g, x, (size_t)n * d), *d_w = gpu_put_bf16(&g, w, d);
    void *d_dy = gpu_put_bf16(&g, dy, (size_t)n * d), *d_dx = gpu_put_bf16(&g, dx, (size_t)n * d);
    void *d_dw = gpu_put_f32(&g, dw, d), *d_y = gpu_alloc(&g, (size_t)n * d * 2), *d_rstd = gpu_alloc(&g, (size_t)n * 4);

    g.be->ops->rmsnorm(g.be, g.s, d_y, d_rstd, d_x, d_w, n, d, 1e-5f);
    g.be->ops->rmsnorm_dx(g.be, g.s, d_dx, d_dw, d_dy, d_x, d_w, d_rstd, n, d, 1);
    gpu_get_bf16(&g, y, d_y, (size_t)n * d);
    gpu_get_f32(&g, rstd, d_rstd, n);
    gpu_get_bf16(&g, got_dx, d_dx, (size_t)n * d);
    gpu_get_f32(&g, got_dw, d_dw, d);
    mt_cpu_rmsnorm(ref_y, ref_rstd, x, w, n, d, 1e-5f);
    /* dw summed in float64: over many rows a float32 running sum strays further than 1e-5 */
    for (int j = 0; j < d; j++) {
        double sum = dw[j];
        for (int r = 0; r < n; r++) sum += (double)dy[(size_t)r * d + j] * x[(size_t)r * d + j] * ref_rstd[r];
        ref_dw[j] = (float)sum;
    }
    mt_cpu_rmsnorm_dx(dx, dw, dy, x, w, ref_rstd, n, d, 1);

    cr_assert_lt(rel_err(y, ref_y, (size_t)n * d), BF16_TOL);
    cr_assert_lt(rel_err(rstd, ref_rstd, n), 1e-5, "fp32 statistics of the same inputs");
    cr_assert_lt(rel_err(got_dx, dx, (size_t)n * d), BF16_TOL);
    cr_assert_lt(rel_err(got_dw, ref_dw, d), 1e-5, "fp32 sums of the same products");
    gpu_close(&g);
    free(x), free(w), free(dy), free(dx), free(dw), free(y), free(ref_y), free(rstd), free(ref_rstd);
    free(got_dx), free(got_dw), free(ref_dw);
}

/* Rows up to 1024 wide take a warp each, 8 to a block (row counts that leave a block part
 * empty); wider ones a block each; widths that are not multiples of 8 go element by element. */
Test(cuda, rmsnorm_vector_width) { check_rmsnorm(70, 256, 4); }
Test(cuda, rmsnorm_odd_width) { check_rmsnorm(13, 101, 5); }
Test(cuda, rmsnorm_head_dim_64) { check_rmsnorm(8 * 37 + 3, 64, 6); }
Test(cuda, rmsnorm_head_dim_128) { check_rmsnorm(4 * 128 + 5, 128, 7); }
Test(cuda, rmsnorm_narrow_odd_width) { check_rmsnorm(45, 6, 8); }
Test(cuda, rmsnorm_wide_rows) { check_rmsnorm(9, 4096, 9); }
Test(cuda, rmsnorm_wide_odd_width) { check_rmsnorm(5, 1031, 10); }
/* More rows than the weight gradient's grid is high (4096 bands of 64 rows): the q/k norms of a
 * long sequence are tokens x heads rows. */
Test(cuda, rmsnorm_rows_past_the_band_grid) { check_rmsnorm(4096 * 64 + 77, 8, 11); }

Test(cuda, rope_forward_and_inverse) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 6;
    const int seq = 7, n = 2 * seq, heads = 3, hd = 64;
    size_t count = (size_t)n * heads * hd;
    float *x = random_host(count, 1.0f, &seed), *inv = host(hd / 2), *got = host(count);
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / hd);
    void *d_x = gpu_put_bf16(&g, x, count), *d_inv = gpu_put_f32(&g, inv, hd / 2);
    for (int inverse = 0; inverse <= 1; inverse++) {
        g.be->ops->rope(g.be, g.s, d_x, d_inv, n, seq, heads, hd, inverse);
        gpu_get_bf16(&g, got, d_x, count);
        mt_cpu_rope(x, inv, n, seq, heads, hd, inverse);
        cr_assert_lt(rel_err(got, x, count), BF16_TOL, "inverse %d", inverse);
    }
    gpu_close(&g);
    free(x), free(inv), free(got);
}

Test(cuda, swiglu_and_backward_with_tail) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 7;
    const size_t count = 1003; /* 125 vectors of 8 and a tail of 3 */
    float *gate = random_host(count, 3.0f, &seed), *up = random_host(count, 1.0f, &seed);
    float *da = random_host(count, 1.0f, &seed), *a = host(count), *ref_a = host(count);
    float *dg = host(count), *du = host(count), *ref_dg = host(count), *ref_du = host(count);
    void *d_g = gpu_put_bf16(&g, gate, count), *d_u = gpu_put_bf16(&g, up, count);
    void *d_da = gpu_put_bf16(&g, da, count), *d_a = gpu_alloc(&g, count * 2);
    void *d_dg = gpu_alloc(&g, count * 2), *d_du = gpu_alloc(&g, count * 2);
    g.be->ops->swiglu(g.be, g.s, d_a, d_g, d_u, count);
    g.be->ops->swiglu_dx(g.be, g.s, d_dg, d_du, d_da, d_g, d_u, count);
    gpu_get_bf16(&g, a, d_a, count);
    gpu_get_bf16(&g, dg, d_dg, count);
    gpu_get_bf16(&g, du, d_du, count);
    mt_cpu_swiglu(ref_a, gate, up, count);
    mt_cpu_swiglu_dx(ref_dg, ref_du, da, gate, up, count);
    cr_assert_lt(rel_err(a, ref_a, count), BF16_TOL);
    cr_assert_lt(rel_err(dg, ref_dg, count), BF16_TOL);
    cr_assert_lt(rel_err(du, ref_du, count), BF16_TOL);
    gpu_close(&g);
    free(gate), free(up), free(da), free(a), free(ref_a), free(dg), free(du), free(ref_dg), free(ref_du);
}

Test(cuda, add_in_place_and_unaligned) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 8;
    const size_t count = 517;
    float *a = random_host(count, 1.0f, &seed), *b = random_host(count, 1.0f, &seed);
    float *got = host(count), *ref = host(count);
    void *d_a = gpu_put_bf16(&g, a, count), *d_b = gpu_put_bf16(&g, b, count);
    g.be->ops->add(g.be, g.s, d_a, d_a, d_b, count); /* y aliases a: the vector path */
    gpu_get_bf16(&g, got, d_a, count);
    mt_cpu_add(ref, a, b, count);
    cr_assert_lt(rel_err(got, ref, count), BF16_TOL);
    /* one element in: no 16-byte alignment, the scalar path */
    g.be->ops->add(g.be, g.s, (char *)d_a + 2, (char *)d_a + 2, (char *)d_b + 2, count - 1);
    gpu_get_bf16(&g, got, d_a, count);
    for (size_t i = 1; i < count; i++) ref[i] += b[i];
    cr_assert_lt(rel_err(got, ref, count), BF16_TOL);
    gpu_close(&g);
    free(a), free(b), free(got), free(ref);
}

Test(cuda, embedding_and_repeated_token_gradient) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 9;
    const int n = 19, d = 40, vocab = 11;
    int32_t tokens[19];
    for (int i = 0; i < n; i++) tokens[i] = (i * 7) % vocab; /* every id appears more than once */
    float *wte = random_host((size_t)vocab * d, 1.0f, &seed), *dx = random_host((size_t)n * d, 1.0f, &seed);
    float *dwte = random_host((size_t)vocab * d, 1.0f, &seed);
    float *x = host((size_t)n * d), *ref_x = host((size_t)n * d), *got_dw = host((size_t)vocab * d);
    void *d_tok = gpu_put_i32(&g, tokens, n), *d_wte = gpu_put_bf16(&g, wte, (size_t)vocab * d);
    void *d_dx = gpu_put_bf16(&g, dx, (size_t)n * d), *d_dw = gpu_put_f32(&g, dwte, (size_t)vocab * d);
    void *d_x = gpu_alloc(&g, (size_t)n * d * 2);
    g.be->ops->embedding(g.be, g.s, d_x, d_tok, d_wte, n, d);
    g.be->ops->embedding_dw(g.be, g.s, d_dw, d_tok, d_dx, n, d);
    gpu_get_bf16(&g, x, d_x, (size_t)n * d);
    gpu_get_f32(&g, got_dw, d_dw, (size_t)vocab * d);
    mt_cpu_embedding(ref_x, tokens, wte, n, d);
    mt_cpu_embedding_dw(dwte, tokens, dx, n, d);
    cr_assert_eq(memcmp(x, ref_x, (size_t)n * d * sizeof *x), 0, "a lookup is an exact copy");
    cr_assert_lt(rel_err(got_dw, dwte, (size_t)vocab * d), 1e-6, "fp32 sums of the same values");
    gpu_close(&g);
    free(wte), free(dx), free(dwte), free(x), free(ref_x), free(got_dw);
}

Test(cuda, sumsq_adds_to_out) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 10;
    const size_t count = 100003;
    float *x = random_host(count, 1.0f, &seed), start = 2.5f, got, ref = start;
    void *d_x = gpu_put_f32(&g, x, count), *d_out = gpu_put_f32(&g, &start, 1);
    g.be->ops->sumsq(g.be, g.s, d_out, d_x, count);
    gpu_get_f32(&g, &got, d_out, 1);
    mt_cpu_sumsq(&ref, x, count);
    cr_assert_lt(fabsf(got - ref) / ref, 1e-5, "fp32 sums in a different order: got %g want %g", got, ref);
    gpu_close(&g);
    free(x);
}

Test(cuda, lmhead_loss_chunks_and_ignored_targets) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 11;
    const int n = 37, d = 64, vocab = 301, chunk = 16;
    const float scale = 1.0f / 30.0f;
    int32_t targets[37];
    for (int i = 0; i < n; i++) targets[i] = i % 5 == 3 ? -1 : (i * 31) % vocab;
    float *x = random_host((size_t)n * d, 1.0f, &seed), *w = random_host((size_t)vocab * d, 0.3f, &seed);
    float *dw = random_host((size_t)vocab * d, 0.1f, &seed), *dx = host((size_t)n * d);
    float *got_dx = host((size_t)n * d), *got_dw = host((size_t)vocab * d);
    float loss = 1.0f, got_loss;
    void *d_x = gpu_put_bf16(&g, x, (size_t)n * d), *d_w = gpu_put_bf16(&g, w, (size_t)vocab * d);
    void *d_dw = gpu_put_f32(&g, dw, (size_t)vocab * d), *d_loss = gpu_put_f32(&g, &loss, 1);
    void *d_t = gpu_put_i32(&g, targets, n), *d_dx = gpu_alloc(&g, (size_t)n * d * 2);
    void *ws = gpu_alloc(&g, g.be->ops->lmhead_workspace(g.be, chunk, vocab));
    g.be->ops->lmhead_loss(g.be, g.s, d_loss, d_dx, d_dw, d_x, d_w, d_t, n, d, vocab, scale, chunk, ws);
    gpu_get_f32(&g, &got_loss, d_loss, 1);
    gpu_get_bf16(&g, got_dx, d_dx, (size_t)n * d);
    gpu_get_f32(&g, got_dw, d_dw, (size_t)vocab * d);
    void *cpu_ws = malloc(mt_cpu_lmhead_workspace(chunk, vocab));
    mt_cpu_lmhead_loss(&loss, dx, dw, x, w, targets, n, d, vocab, scale, chunk, cpu_ws);
    /* fp32 logits and softmax from the same inputs */
    cr_assert_lt(fabsf(got_loss - loss) / loss, 1e-4, "loss %g want %g", got_loss, loss);
    cr_assert_lt(rel_err(got_dx, dx, (size_t)n * d), BF16_TOL);
    /* dlogits pass through bf16 before the dw GEMM: bf16 tolerance */
    cr_assert_lt(rel_err(got_dw, dw, (size_t)vocab * d), BF16_TOL);
    gpu_close(&g);
    free(cpu_ws), free(x), free(w), free(dw), free(dx), free(got_dx), free(got_dw);
}

Test(cuda, logits_of_one_row) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 12;
    const int d = 72, vocab = 301;
    float *x = random_host(d, 1.0f, &seed), *w = random_host((size_t)vocab * d, 0.3f, &seed);
    float *got = host(vocab), *ref = host(vocab);
    void *d_x = gpu_put_bf16(&g, x, d), *d_w = gpu_put_bf16(&g, w, (size_t)vocab * d);
    void *d_l = gpu_alloc(&g, (size_t)vocab * 4);
    g.be->ops->logits(g.be, g.s, d_l, d_x, d_w, d, vocab);
    gpu_get_f32(&g, got, d_l, vocab);
    mt_cpu_logits(ref, x, w, d, vocab);
    cr_assert_lt(rel_err(got, ref, vocab), 1e-5, "fp32 dot products of the same inputs");
    gpu_close(&g);
    free(x), free(w), free(got), free(ref);
}

/* Forward and backward against the reference. The backward of both sides starts from the GPU's
 * own out and lse, so only the backward's arithmetic is compared. */
static void check_attention(mt_attn_dims dims, unsigned seed) {
    gpu g;
    gpu_open(&g);
    size_t n = (size_t)dims.batch * dims.seq;
    size_t qc = n * dims.heads * dims.head_dim, kc = n * dims.kv_heads * dims.head_dim;
    size_t lc = (size_t)dims.batch * dims.heads * dims.seq;
    float *q = random_host(qc, 1.5f, &seed), *k = random_host(kc, 1.5f, &seed);
    float *v = random_host(kc, 1.0f, &seed), *dout = random_host(qc, 1.0f, &seed);
    float *out = host(qc), *lse = host(lc), *ref_out = host(qc), *ref_lse = host(lc);
    float *dq = host(qc), *dk = host(kc), *dv = host(kc), *ref_dq = host(qc), *ref_dk = host(kc), *ref_dv = host(kc);
    void *d_q = gpu_put_bf16(&g, q, qc), *d_k = gpu_put_bf16(&g, k, kc), *d_v = gpu_put_bf16(&g, v, kc);
    void *d_do = gpu_put_bf16(&g, dout, qc), *d_out = gpu_alloc(&g, qc * 2), *d_lse = gpu_alloc(&g, lc * 4);
    void *d_dq = gpu_alloc(&g, qc * 2), *d_dk = gpu_alloc(&g, kc * 2), *d_dv = gpu_alloc(&g, kc * 2);
    void *ws = gpu_alloc(&g, g.be->ops->attention_workspace(g.be, dims));

    g.be->ops->attention(g.be, g.s, d_out, d_lse, d_q, d_k, d_v, dims);
    g.be->ops->attention_dx(g.be, g.s, d_dq, d_dk, d_dv, d_do, d_out, d_lse, d_q, d_k, d_v, dims, ws);
    gpu_get_bf16(&g, out, d_out, qc);
    gpu_get_f32(&g, lse, d_lse, lc);
    gpu_get_bf16(&g, dq, d_dq, qc);
    gpu_get_bf16(&g, dk, d_dk, kc);
    gpu_get_bf16(&g, dv, d_dv, kc);

    mt_cpu_attention(ref_out, ref_lse, q, k, v, dims);
    cr_assert_lt(rel_err(out, ref_out, qc), BF16_TOL);
    cr_assert_lt(rel_err(lse, ref_lse, lc), 1e-4, "fp32 softmax statistics of the same inputs");
    void *cpu_ws = malloc(mt_cpu_attention_workspace(dims) + 1);
    mt_cpu_attention_dx(ref_dq, ref_dk, ref_dv, dout, out, lse, q, k, v, dims, cpu_ws);
    free(cpu_ws);
    cr_assert_lt(rel_err(dq, ref_dq, qc), BF16_TOL);
    cr_assert_lt(rel_err(dk, ref_dk, kc), BF16_TOL);
    cr_assert_lt(rel_err(dv, ref_dv, kc), BF16_TOL);
    gpu_close(&g);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(ref_out), free(ref_lse);
    free(dq), free(dk), free(dv), free(ref_dq), free(ref_dk), free(ref_dv);
}

Test(cuda, attention_gqa_odd_seq_head_dim_64) {
    check_attention((mt_attn_dims){.batch = 2, .seq = 77, .heads = 6, .kv_heads = 2, .head_dim = 64}, 13);
}

Test(cuda, attention_head_dim_128_several_tiles) {
    check_attention((mt_attn_dims){.batch = 1, .seq = 150, .heads = 3, .kv_heads = 1, .head_dim = 128}, 14);
}

Test(cuda, attention_head_dim_40_no_gqa) {
    check_attention((mt_attn_dims){.batch = 3, .seq = 9, .heads = 2, .kv_heads = 2, .head_dim = 40}, 15);
}

/* The benchmark's attention shape (seq 4096, 24 heads, 8 kv heads, head_dim 128): forward and
 * backward must finish, give finite outputs, and stay under a generous time bound; the rates
 * are logged (run with --verbose) to track speed. */
Test(cuda, attention_benchmark_shape_speed) {
    gpu g;
    gpu_open(&g);
    const mt_attn_dims dims = {.batch = 1, .seq = 4096, .heads = 24, .kv_heads = 8, .head_dim = 128};
    size_t qc = (size_t)dims.seq * dims.heads * dims.head_dim, kc = (size_t)dims.seq * dims.kv_heads * dims.head_dim;
    unsigned seed = 16;
    float *q = random_host(qc, 1.0f, &seed), *k = random_host(kc, 1.0f, &seed), *v = random_host(kc, 1.0f, &seed);
    void *d_q = gpu_put_bf16(&g, q, qc), *d_k = gpu_put_bf16(&g, k, kc), *d_v = gpu_put_bf16(&g, v, kc);
    void *d_out = gpu_alloc(&g, qc * 2), *d_lse = gpu_alloc(&g, (size_t)dims.heads * dims.seq * 4);
    void *d_dq = gpu_alloc(&g, qc * 2), *d_dk = gpu_alloc(&g, kc * 2), *d_dv = gpu_alloc(&g, kc * 2);
    void *ws = gpu_alloc(&g, g.be->ops->attention_workspace(g.be, dims));
    mt_event *t0 = g.be->ops->event_create(g.be), *t1 = g.be->ops->event_create(g.be);
    mt_event *t2 = g.be->ops->event_create(g.be);
    const int reps = 3;
    double fwd = 0.0, bwd = 0.0;
    for (int rep = 0; rep <= reps; rep++) { /* rep 0 warms up */
        g.be->ops->event_record(g.be, t0, g.s);
        g.be->ops->attention(g.be, g.s, d_out, d_lse, d_q, d_k, d_v, dims);
        g.be->ops->event_record(g.be, t1, g.s);
        /* out doubles as dout: any values do for timing */
        g.be->ops->attention_dx(g.be, g.s, d_dq, d_dk, d_dv, d_out, d_out, d_lse, d_q, d_k, d_v, dims, ws);
        g.be->ops->event_record(g.be, t2, g.s);
        gpu_sync(&g);
        if (rep > 0) {
            fwd += g.be->ops->event_elapsed(g.be, t0, t1) / reps;
            bwd += g.be->ops->event_elapsed(g.be, t1, t2) / reps;
        }
    }
    /* causal: half of 4 * seq^2 * head_dim per head forward; the backward does 2.5 times that */
    double flops = 2.0 * dims.seq * (double)dims.seq * dims.head_dim * dims.heads;
    cr_log_info("attention seq 4096: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)",
                fwd * 1e3, flops / fwd * 1e-12, bwd * 1e3, 2.5 * flops / bwd * 1e-12);
    float *dq = host(qc);
    gpu_get_bf16(&g, dq, d_dq, qc);
    for (size_t i = 0; i < qc; i++) cr_assert(isfinite(dq[i]), "dq[%zu] = %g", i, dq[i]);
    cr_assert_lt(fwd + bwd, 0.5, "forward + backward took %.3f s", fwd + bwd);
    g.be->ops->event_destroy(g.be, t0);
    g.be->ops->event_destroy(g.be, t1);
    g.be->ops->event_destroy(g.be, t2);
    gpu_close(&g);
    free(q), free(k), free(v), free(dq);
}

/* The first index where a and b differ in bits, NaNs aside (the GPU's arithmetic makes every NaN
 * the canonical one, x86 keeps the input's payload), or n. */
static size_t first_difference(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) && !(isnan(a[i]) && isnan(b[i]))) return i;
    return n;
}

/* The device's AdamW (for the tensors whose state it keeps) is the host's, bit for bit: masters,
 * moments and bf16 weights, a device-side gradient scale, special values included. */
Test(cuda, adamw_is_the_host_update_bitwise) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 21;
    const size_t n = 100003;
    float *master = random_host(n, 1.0f, &seed), *m = random_host(n, 0.1f, &seed), *v = random_host(n, 0.01f, &seed);
    float *grad = random_host(n, 2.0f, &seed);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    grad[0] = 0.0f;
    master[1] = 1e-39f; /* a denormal master stays one in bf16 */
    grad[1] = 0.0f;
    m[1] = v[1] = 0.0f;
    grad[2] = NAN;      /* a NaN weight: the host's quiet bf16 NaN */
    float scale = 0.37f;
    void *d_master = gpu_put_f32(&g, master, n), *d_m = gpu_put_f32(&g, m, n), *d_v = gpu_put_f32(&g, v, n);
    void *d_grad = gpu_put_f32(&g, grad, n), *d_scale = gpu_put_f32(&g, &scale, 1), *d_w = gpu_alloc(&g, n * 2);
    mt_adamw_params p = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .step = 5, .grad_scale = 1.0f};
    g.be->ops->adamw(g.be, g.s, &p, 1, d_scale, d_master, d_m, d_v, d_grad, d_w, n);
    uint16_t *w_bits = calloc(n, sizeof *w_bits);
    p.grad_scale = scale;
    mt_adamw_update(&p, 1, master, m, v, grad, w_bits, MT_DTYPE_BF16, n);
    float *got = host(n), *w = host(n);
    for (size_t i = 0; i < n; i++) w[i] = mt_bf16_to_f32(w_bits[i]);
    const struct { const char *name; const void *dev; const float *want; } outs[] = {
        {"master", d_master, master}, {"m", d_m, m}, {"v", d_v, v}};
    for (int k = 0; k < 3; k++) {
        gpu_get_f32(&g, got, outs[k].dev, n);
        size_t i = first_difference(got, outs[k].want, n);
        cr_expect_eq(i, n, "%s[%zu] differs: device %.9g, host %.9g", outs[k].name, i, (double)got[i % n],
                     (double)outs[k].want[i % n]);
    }
    gpu_get_bf16(&g, got, d_w, n);
    size_t i = first_difference(got, w, n);
    cr_expect_eq(i, n, "bf16 weight %zu differs: device %.9g, host %.9g", i, (double)got[i % n], (double)w[i % n]);
    cr_expect(isnan(got[2]) && got[1] != 0.0f, "the NaN and the denormal came through");
    /* A non-finite scale is a skipped step: nothing changes. */
    float skip = NAN;
    void *d_skip = gpu_put_f32(&g, &skip, 1);
    g.be->ops->adamw(g.be, g.s, &p, 1, d_skip, d_master, d_m, d_v, d_grad, d_w, n);
    gpu_get_f32(&g, got, d_master, n);
    cr_expect_eq(first_difference(got, master, n), n, "a NaN scale changed the masters");
    gpu_close(&g);
    free(master), free(m), free(v), free(grad), free(w_bits), free(got), free(w);
}

Test(cuda, clip_scale_is_the_hosts) {
    gpu g;
    gpu_open(&g);
    unsigned seed = 22;
    float sums[7], scale;
    fill_random(sums, 7, 3.0f, &seed);
    for (int i = 0; i < 7; i++) sums[i] = sums[i] * sums[i];
    void *d_sums = gpu_put_f32(&g, sums, 7), *d_scale = gpu_alloc(&g, 4);
    g.be->ops->clip_scale(g.be, g.s, d_scale, d_sums, 7, 0.5f);
    gpu_get_f32(&g, &scale, d_scale, 1);
    float want = mt_clip_scale(mt_global_norm(sums, 7), 0.5f);
    cr_expect_eq(memcmp(&scale, &want, 4), 0, "device %.9g, host %.9g", (double)scale, (double)want);
    cr_expect_lt(want, 1.0f, "the case clips");
    sums[3] = INFINITY;
    d_sums = gpu_put_f32(&g, sums, 7);
    g.be->ops->clip_scale(g.be, g.s, d_scale, d_sums, 7, 0.5f);
    gpu_get_f32(&g, &scale, d_scale, 1);
    cr_expect(isnan(scale), "an infinite norm gives NaN (skip), got %g", (double)scale);
    gpu_close(&g);
}
