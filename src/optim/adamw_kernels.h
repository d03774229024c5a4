/* Internal to src/optim (and the cuda backend's AdamW kernel, which takes the same constants): the
 * per-call constants of an AdamW update and the kernels that apply them to a range of elements.
 * adamw.c forms the constants and picks a kernel. */
#ifndef MT_OPTIM_ADAMW_KERNELS_H
#define MT_OPTIM_ADAMW_KERNELS_H

#include <stddef.h>

#include "optim/adamw.h"

/* The SIMD kernels are x86-64 only; elsewhere the reference runs alone. */
#if defined(__x86_64__)
#define MT_ADAMW_HAVE_X86 1
#else
#define MT_ADAMW_HAVE_X86 0
#endif

typedef struct {
    float grad_scale;
    float decay_mul; /* 1 - lr * weight_decay, or exactly 1 when the tensor takes no decay */
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float sqrt_bias_correction2; /* sqrt(1 - beta2^step) */
    float eps;
    float neg_step_size;         /* -lr / (1 - beta1^step) */
} mt_adamw_coef;

typedef void (*mt_adamw_kernel)(const mt_adamw_coef *c, mt_adamw_part part, mt_master w, float *m, float *v,
                                const float *grad, size_t n);

/* Runs RUN(PART) with `part` as a constant, so that a SIMD kernel's inner loop is compiled once for
 * each part (the part's branches folded away). */
#define MT_ADAMW_EACH_PART(part, RUN)                                             \
    switch (part) {                                                               \
    case MT_ADAMW_FULL: RUN(MT_ADAMW_FULL); break;                                \
    case MT_ADAMW_MASTERS: RUN(MT_ADAMW_MASTERS); break;                          \
    case MT_ADAMW_MOMENTS: RUN(MT_ADAMW_MOMENTS); break;                          \
    case MT_ADAMW_AHEAD: RUN(MT_ADAMW_AHEAD); break;                              \
    case MT_ADAMW_AHEAD_CORRECT_MASTERS: RUN(MT_ADAMW_AHEAD_CORRECT_MASTERS); break; \
    case MT_ADAMW_CORRECT_MOMENTS: RUN(MT_ADAMW_CORRECT_MOMENTS); break;          \
    case MT_ADAMW_AHEAD_UNDO: RUN(MT_ADAMW_AHEAD_UNDO); break;                    \
    }

/* The constants of one update of a tensor. */
mt_adamw_coef mt_adamw_coef_of(const mt_adamw_params *p, int decay);
/* The kernel of an implementation; one the CPU lacks gives MT_ADAMW_BEST's. */
mt_adamw_kernel mt_adamw_kernel_of(mt_adamw_impl impl);

void mt_adamw_kernel_ref(const mt_adamw_coef *c, mt_adamw_part part, mt_master w, float *m, float *v,
                         const float *grad, size_t n);
#if MT_ADAMW_HAVE_X86
void mt_adamw_kernel_avx2(const mt_adamw_coef *c, mt_adamw_part part, mt_master w, float *m, float *v,
                          const float *grad, size_t n);
void mt_adamw_kernel_avx512(const mt_adamw_coef *c, mt_adamw_part part, mt_master w, float *m, float *v,
                            const float *grad, size_t n);
#endif

#endif
