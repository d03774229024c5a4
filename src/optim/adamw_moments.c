/* AdamW with bf16 or 8-bit moments: each block of MT_MOMENTS_BLOCK values is dequantized into
 * fp32 scratch, updated by the fp32 kernel (the same math, the same bits given the same inputs)
 * and stored back. Threads own whole blocks of the flat array, so an 8-bit block that a range
 * covers only in part is requantized by one thread alone. */
#include <string.h>

#include "optim/adamw.h"
#include "optim/adamw_kernels.h"
#include "optim/shares.h"
#include "util/bf16.h"

/* What a thread takes at a time (optim/shares.h): 32768 values. */
#define PIECE_BLOCKS ((size_t)(1 << 15) / MT_MOMENTS_BLOCK)

/* One update: the arrays point at element `at` of the moments; `mask` (NULL: every element)
 * picks the rows r of `cols` elements with mask[r] == which. */
typedef struct {
    mt_adamw_kernel kernel;
    mt_adamw_coef coef;
    mt_adamw_part part;
    mt_master w;
    const float *grad;
    size_t grad_stride; /* elements from one row's gradient to the next's (0: one row for all) */
    mt_moments *mom;
    size_t at, n, cols;
    const uint8_t *mask;
    uint8_t which;
} span;

static void load(const mt_moments *mom, size_t b, size_t lo, size_t hi, float *m, float *v) {
    size_t start = b * MT_MOMENTS_BLOCK;
    if (mom->format == MT_MOMENTS_BF16) {
        const uint16_t *mb = mom->m, *vb = mom->v;
        for (size_t i = lo; i < hi; i++) m[i - start] = mt_bf16_to_f32(mb[i]), v[i - start] = mt_bf16_to_f32(vb[i]);
        return;
    }
    size_t count = mom->n - start < MT_MOMENTS_BLOCK ? mom->n - start : MT_MOMENTS_BLOCK;
    mt_moments_dequantize_m((const int8_t *)mom->m + start, count, mom->m_scale[b], m);
    mt_moments_dequantize_v((const uint8_t *)mom->v + start, count, mom->v_scale[b], v);
}

static void store(mt_moments *mom, size_t b, size_t lo, size_t hi, const float *m, const float *v) {
    size_t start = b * MT_MOMENTS_BLOCK;
    if (mom->format == MT_MOMENTS_BF16) {
        uint16_t *mb = mom->m, *vb = mom->v;
        for (size_t i = lo; i < hi; i++) mb[i] = mt_f32_to_bf16(m[i - start]), vb[i] = mt_f32_to_bf16(v[i - start]);
        return;
    }
    size_t count = mom->n - start < MT_MOMENTS_BLOCK ? mom->n - start : MT_MOMENTS_BLOCK;
    mt_moments_quantize_m(m, count, (int8_t *)mom->m + start, &mom->m_scale[b]);
    mt_moments_quantize_v(v, count, (uint8_t *)mom->v + start, &mom->v_scale[b]);
}

/* Block b's part [lo, hi) of the span (global element indices). */
static void update_block(const span *s, size_t b, size_t lo, size_t hi) {
    float m[MT_MOMENTS_BLOCK], v[MT_MOMENTS_BLOCK];
    size_t start = b * MT_MOMENTS_BLOCK;
    int touched = 0;
    load(s->mom, b, lo, hi, m, v);
    for (size_t a = lo; a < hi;) {
        size_t row = (a - s->at) / s->cols, row_end = s->at + (row + 1) * s->cols;
        size_t e = row_end < hi ? row_end : hi, k = a - s->at, g = row * s->grad_stride + (k - row * s->cols);
        if (!s->mask || s->mask[row] == s->which) {
            s->kernel(&s->coef, s->part, mt_master_at(s->w, k), m + (a - start), v + (a - start), s->grad + g, e - a);
            touched = 1;
        }
        a = e;
    }
    if (touched) store(s->mom, b, lo, hi, m, v);
}

/* The span's blocks [b0, b1) counted from its first. */
static void run_blocks(void *ctx, size_t b0, size_t b1) {
    const span *s = ctx;
    size_t first = s->at / MT_MOMENTS_BLOCK;
    for (size_t b = first + b0; b < first + b1; b++) {
        size_t lo = b * MT_MOMENTS_BLOCK > s->at ? b * MT_MOMENTS_BLOCK : s->at;
        size_t hi = (b + 1) * MT_MOMENTS_BLOCK < s->at + s->n ? (b + 1) * MT_MOMENTS_BLOCK : s->at + s->n;
        update_block(s, b, lo, hi);
    }
}

/* Whole blocks a thread: an 8-bit block that a range covers in part is requantized by one thread. */
static void run(const span *s, int threads) {
    if (s->n == 0) return;
    size_t first = s->at / MT_MOMENTS_BLOCK, blocks = (s->at + s->n - 1) / MT_MOMENTS_BLOCK + 1 - first;
    mt_shares_run(blocks, 1, PIECE_BLOCKS, mt_adamw_threads(s->n, threads), run_blocks, (void *)s);
}

void mt_adamw_update_moments(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, mt_moments *mom,
                             size_t at, const float *grad, size_t n, int threads) {
    if (mom->format == MT_MOMENTS_F32) {
        mt_adamw_update_parallel(part, p, decay, w, (float *)mom->m + at, (float *)mom->v + at, grad, n, threads);
        return;
    }
    span s = {.kernel = mt_adamw_kernel_of(MT_ADAMW_BEST), .coef = mt_adamw_coef_of(p, decay), .part = part, .w = w,
              .grad = grad, .grad_stride = n, .mom = mom, .at = at, .n = n, .cols = n ? n : 1};
    run(&s, threads);
}

void mt_adamw_update_rows(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, mt_moments *mom,
                          size_t at, const float *grad, size_t grad_stride, size_t rows, size_t cols,
                          const uint8_t *mask, uint8_t which, int threads) {
    if (mom->format == MT_MOMENTS_F32) {
        float *m = (float *)mom->m + at, *v = (float *)mom->v + at;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (size_t row = 0; row < rows; row++) {
            if (mask[row] != which) continue;
            size_t o = row * cols;
            mt_adamw_update(part, p, decay, mt_master_at(w, o), m + o, v + o, grad + row * grad_stride, cols);
        }
        return;
    }
    span s = {.kernel = mt_adamw_kernel_of(MT_ADAMW_BEST), .coef = mt_adamw_coef_of(p, decay), .part = part, .w = w,
              .grad = grad, .grad_stride = grad_stride, .mom = mom, .at = at, .n = rows * cols, .cols = cols,
              .mask = mask, .which = which};
    run(&s, threads);
}
