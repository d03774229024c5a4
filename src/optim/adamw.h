/* CPU AdamW: the update of one tensor's fp32 master weights and Adam moments. The masters are the
 * store's (optim/master.h): one fp32 array, or split into the bf16 high halves the device reads
 * and the low halves; either way the update writes the weights the device reads next.
 *
 * The math is torch.optim.AdamW's, in its operation order:
 *   g = grad * grad_scale
 *   master *= 1 - lr * weight_decay                      (only when decay)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   master -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * i.e. master -= lr * mhat / (sqrt(vhat) + eps). The scalar factors are formed in double (as
 * Python does) and rounded to float once; every per-element operation is a separately rounded
 * fp32 mul, add, div or sqrt, so all implementations below give bitwise equal results.
 *
 * With exact clipping the engine makes the update in parts (engine_optimizer.c). Once the global
 * norm is known: MASTERS, the masters alone (what the next forward waits for), then MOMENTS, each
 * with the step's clip coefficient: FULL's bits, in two passes. When the step before was applied
 * unclipped, the engine takes the whole update ahead of the norm instead (AHEAD: the plain
 * update's bits if this step is not clipped either), and where it is, takes AHEAD's step back out
 * of the masters (within fp32 rounding) in AHEAD_CORRECT_MASTERS then CORRECT_MOMENTS, or for a
 * skipped step AHEAD_UNDO. */
#ifndef MT_OPTIM_ADAMW_H
#define MT_OPTIM_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "optim/master.h"
#include "optim/moments.h"

typedef struct mt_adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;     /* 1-based, for bias correction */
    float grad_scale; /* multiplies the gradient first: 1/global-norm clip coefficient times any
                       * loss scale */
} mt_adamw_params;

/* Which part of the update a call makes, per element (B = (1 - beta1) g0 and Bv = (1 - beta2) g0 g0
 * with g0 = grad, the gradient as it came home):
 *   FULL     the whole update above.
 *   MASTERS  the masters alone: the moments formed as FULL forms them and not stored. MASTERS then
 *            MOMENTS, with the same grad_scale, is FULL, bit for bit, where the step's norm is
 *            finite.
 *   MOMENTS  m and v only, with g = grad * grad_scale; an element whose (1 - beta2) g g is not
 *            finite keeps both.
 *   AHEAD    FULL where (1 - beta2) g g is finite, the element untouched elsewhere (as MOMENTS):
 *            the whole update before the norm is known, with grad_scale 1.
 *   AHEAD_CORRECT_MASTERS   after AHEAD, for a clipped step: AHEAD's step taken back out of the
 *            master (the decayed master recovered within its rounding), beta1 m and beta2 v
 *            recovered as m - B and max(v - Bv, 0), the clipped gradient's terms (grad * grad_scale)
 *            added, and the masters stepped from those moments; the moments then take
 *            CORRECT_MOMENTS. The recovery is exact up to the rounding of AHEAD's sums, so each
 *            moment is within a few units in the last place of |beta1 m| + (1 - beta1)|g0| (and of
 *            beta2 v + (1 - beta2) g0^2) of FULL's; relative to the moment itself that grows as 1/c
 *            (1/c^2) for a clip coefficient c where the gradient term dominates. v never goes
 *            negative.
 *   CORRECT_MOMENTS   the moments AHEAD_CORRECT_MASTERS computes, stored; the masters untouched.
 *   AHEAD_UNDO   after AHEAD, for a skipped step: the master back to within fp32 rounding of before
 *            (AHEAD's step taken out, the decay divided out), m = (m - B) / beta1 and
 *            v = max(v - Bv, 0) / beta2 where AHEAD changed them. */
typedef enum {
    MT_ADAMW_FULL,
    MT_ADAMW_MASTERS,
    MT_ADAMW_MOMENTS,
    MT_ADAMW_AHEAD,
    MT_ADAMW_AHEAD_CORRECT_MASTERS,
    MT_ADAMW_CORRECT_MOMENTS,
    MT_ADAMW_AHEAD_UNDO,
} mt_adamw_part;

/* Updates n elements in place (masters w, m, v). `decay` applies weight decay to this tensor.
 * Pointers need only their type's natural alignment. */
void mt_adamw_update(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, float *m, float *v,
                     const float *grad, size_t n);

/* The same update with the range split across `threads` OpenMP threads (a static split into
 * cache-line-aligned chunks; the result does not depend on `threads`). */
void mt_adamw_update_parallel(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, float *m,
                              float *v, const float *grad, size_t n, int threads);

/* The same as mt_adamw_update_parallel with a chosen implementation, for tests and benchmarks.
 * An implementation the CPU lacks (see mt_adamw_impl_supported) falls back to MT_ADAMW_BEST. */
void mt_adamw_update_with(mt_adamw_impl impl, mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w,
                          float *m, float *v, const float *grad, size_t n, int threads);

/* The update with moments in any format (optim/moments.h): elements [at, at + n) of `mom`;
 * w and grad point at element `at`. fp32 moments take mt_adamw_update_parallel's path, bit for
 * bit, and every part; bf16 and 8-bit ones take FULL alone: they are dequantized, updated by the
 * fp32 kernel and stored back rounded to nearest. An 8-bit block that the range covers in part
 * is requantized whole, so calls that run at once must not share a block. */
void mt_adamw_update_moments(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, mt_moments *mom,
                             size_t at, const float *grad, size_t n, int threads);

/* The same on the rows r of a rows x cols matrix at element `at` of `mom` with
 * mask[r] == which (the others untouched), split across `threads`. Row r's gradient is
 * grad + r * grad_stride: grad_stride cols for a gradient of the matrix's shape, 0 for one row that
 * every row takes (a row of zeros: the embedding's rows no input token touched). */
void mt_adamw_update_rows(mt_adamw_part part, const mt_adamw_params *p, int decay, mt_master w, mt_moments *mom,
                          size_t at, const float *grad, size_t grad_stride, size_t rows, size_t cols,
                          const uint8_t *mask, uint8_t which, int threads);

/* The split of the parallel update, for whoever must follow it (the store's first touch): the
 * threads an update of n elements runs on when given `threads` (fewer for small tensors), and
 * thread t of nt's elements [*begin, *begin + *count) (count 0: none). */
int mt_adamw_threads(size_t n, int threads);
void mt_adamw_share(size_t n, int t, int nt, size_t *begin, size_t *count);

/* Bytes of host memory a part reads and writes per element, with fp32 masters (split or not) and
 * moments of `moments` bytes a value: what the planner weighs the host optimizer with. */
double mt_adamw_part_bytes(mt_adamw_part part, double moment_bytes);

#endif
