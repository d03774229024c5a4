/* CPU AdamW: the update of one tensor's fp32 master weights and Adam moments, writing the
 * weights the device reads next (fp32, or bf16 rounded to nearest even).
 *
 * The math is torch.optim.AdamW's, in its operation order:
 *   g = grad * grad_scale
 *   master *= 1 - lr * weight_decay                      (only when decay)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   master -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * i.e. master -= lr * mhat / (sqrt(vhat) + eps). The scalar factors are formed in double (as
 * Python does) and rounded to float once; every per-element operation is a separately rounded
 * fp32 mul, add, div or sqrt, so all implementations below give bitwise equal results. bf16
 * weights are rounded as util/bf16.h's mt_f32_to_bf16 does (nearest even, NaN kept quiet,
 * denormals kept: unlike AVX512_BF16's VCVTNEPS2BF16, which flushes them to zero). */
#ifndef MT_OPTIM_ADAMW_H
#define MT_OPTIM_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "util/dtype.h"
#include "optim/moments.h"

typedef struct mt_adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;     /* 1-based, for bias correction */
    float grad_scale; /* multiplies the gradient first: 1/global-norm clip coefficient times any
                       * loss scale */
} mt_adamw_params;

/* The implementations, slowest first. MT_ADAMW_BEST picks the fastest this CPU supports. */
typedef enum { MT_ADAMW_REF, MT_ADAMW_AVX2, MT_ADAMW_AVX512, MT_ADAMW_BEST } mt_adamw_impl;

/* Updates n elements in place (master, m, v) and writes weights_out (n elements of
 * weights_dtype: MT_DTYPE_F32 or MT_DTYPE_BF16). `decay` applies weight decay to this tensor.
 * Pointers need only their type's natural alignment. */
void mt_adamw_update(const mt_adamw_params *p, int decay, float *master, float *m, float *v,
                     const float *grad, void *weights_out, mt_dtype weights_dtype, size_t n);

/* The same update with the range split across `threads` OpenMP threads (a static split into
 * cache-line-aligned chunks; the result does not depend on `threads`). */
void mt_adamw_update_parallel(const mt_adamw_params *p, int decay, float *master, float *m,
                              float *v, const float *grad, void *weights_out,
                              mt_dtype weights_dtype, size_t n, int threads);

/* The same as mt_adamw_update_parallel with a chosen implementation, for tests and benchmarks.
 * An implementation the CPU lacks (see mt_adamw_impl_supported) falls back to MT_ADAMW_BEST. */
void mt_adamw_update_with(mt_adamw_impl impl, const mt_adamw_params *p, int decay, float *master,
                          float *m, float *v, const float *grad, void *weights_out,
                          mt_dtype weights_dtype, size_t n, int threads);

/* The update with moments in any format (optim/moments.h): elements [at, at + n) of `mom`;
 * master, grad and weights_out point at element `at`. fp32 moments take
 * mt_adamw_update_parallel's path, bit for bit; bf16 and 8-bit ones are dequantized, updated by
 * the fp32 kernel and stored back rounded to nearest. An 8-bit block that the range covers in
 * part is requantized whole, so calls that run at once must not share a block. */
void mt_adamw_update_moments(const mt_adamw_params *p, int decay, float *master, mt_moments *mom, size_t at,
                             const float *grad, void *weights_out, mt_dtype weights_dtype, size_t n,
                             int threads);

/* The same on the rows r of a rows x cols matrix at element `at` of `mom` with
 * mask[r] == which (the others untouched), split across `threads`. */
void mt_adamw_update_rows(const mt_adamw_params *p, int decay, float *master, mt_moments *mom, size_t at,
                          const float *grad, void *weights_out, mt_dtype weights_dtype, size_t rows,
                          size_t cols, const uint8_t *mask, uint8_t which, int threads);

/* The split of the parallel update, for whoever must follow it (the store's first touch): the
 * threads an update of n elements runs on when given `threads` (fewer for small tensors), and
 * thread t of nt's elements [*begin, *begin + *count) (count 0: none). */
int mt_adamw_threads(size_t n, int threads);
void mt_adamw_share(size_t n, int t, int nt, size_t *begin, size_t *count);

int mt_adamw_impl_supported(mt_adamw_impl impl);
const char *mt_adamw_impl_name(mt_adamw_impl impl);

#endif
