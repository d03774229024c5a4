/* AdamW: the scalar factors, the plain C reference kernel, and the choice of kernel and threads.
 *
 * Bitwise agreement between kernels rests on every per-element step being one IEEE-rounded fp32
 * operation: the Makefile's -std=c11 turns off GCC's floating-point contraction (no fused
 * multiply-add), and the SIMD kernels use separate mul/add/div/sqrt in the same order. */
#include "optim/adamw.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "optim/adamw_kernels.h"
#include "util/bf16.h"

/* Outputs of tensors this large (elements) bypass the cache: they would only evict the
 * optimizer's own inputs, and the device copy reads them from memory anyway. */
#define MT_ADAMW_STREAM_MIN ((size_t)1 << 18)

/* Threads split a tensor in chunks of this many elements: 256 bytes of fp32, so no two threads
 * share a cache line of any array (given aligned arrays). */
#define MT_ADAMW_CHUNK 64

/* Fewer elements than this per thread and waking a thread costs more than it saves (norm
 * weights and biases run on one). */
#define MT_ADAMW_MIN_PER_THREAD ((size_t)1 << 14)

void mt_adamw_kernel_ref(const mt_adamw_coef *c, float *master, float *m, float *v,
                         const float *grad, void *out, mt_dtype out_dtype, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * c->grad_scale;
        float w = master[i] * c->decay_mul;
        float mi = c->beta1 * m[i] + c->one_minus_beta1 * g;
        float vi = c->beta2 * v[i] + c->one_minus_beta2 * g * g;
        float denom = sqrtf(vi) / c->sqrt_bias_correction2 + c->eps;
        w = w + c->neg_step_size * mi / denom;
        master[i] = w;
        m[i] = mi;
        v[i] = vi;
        if (out_dtype == MT_DTYPE_BF16)
            ((uint16_t *)out)[i] = mt_f32_to_bf16(w);
        else
            ((float *)out)[i] = w;
    }
}

/* Scalars in double, as torch forms them in Python, each rounded to float once. */
mt_adamw_coef mt_adamw_coef_of(const mt_adamw_params *p, int decay, size_t n) {
    double lr = p->lr, beta1 = p->beta1, beta2 = p->beta2, step = (double)p->step;
    return (mt_adamw_coef){
        .grad_scale = p->grad_scale,
        .decay_mul = decay ? (float)(1.0 - lr * (double)p->weight_decay) : 1.0f,
        .beta1 = p->beta1,
        .one_minus_beta1 = (float)(1.0 - beta1),
        .beta2 = p->beta2,
        .one_minus_beta2 = (float)(1.0 - beta2),
        .sqrt_bias_correction2 = (float)sqrt(1.0 - pow(beta2, step)),
        .eps = p->eps,
        .neg_step_size = (float)(-lr / (1.0 - pow(beta1, step))),
        .stream_out = n >= MT_ADAMW_STREAM_MIN,
    };
}

int mt_adamw_impl_supported(mt_adamw_impl impl) {
    switch (impl) {
    case MT_ADAMW_REF:
    case MT_ADAMW_BEST: return 1;
#if MT_ADAMW_HAVE_X86
    case MT_ADAMW_AVX2: return __builtin_cpu_supports("avx2");
    case MT_ADAMW_AVX512: return __builtin_cpu_supports("avx512f");
#else
    default: return 0;
#endif
    }
    return 0;
}

const char *mt_adamw_impl_name(mt_adamw_impl impl) {
    switch (impl) {
    case MT_ADAMW_REF: return "ref";
    case MT_ADAMW_AVX2: return "avx2";
    case MT_ADAMW_AVX512: return "avx512";
    case MT_ADAMW_BEST: return "best";
    }
    return "unknown";
}

mt_adamw_kernel mt_adamw_kernel_of(mt_adamw_impl impl) {
    if (!mt_adamw_impl_supported(impl)) impl = MT_ADAMW_BEST;
    if (impl == MT_ADAMW_BEST) {
        impl = mt_adamw_impl_supported(MT_ADAMW_AVX512) ? MT_ADAMW_AVX512
               : mt_adamw_impl_supported(MT_ADAMW_AVX2) ? MT_ADAMW_AVX2
                                                        : MT_ADAMW_REF;
    }
    switch (impl) {
#if MT_ADAMW_HAVE_X86
    case MT_ADAMW_AVX2: return mt_adamw_kernel_avx2;
    case MT_ADAMW_AVX512: return mt_adamw_kernel_avx512;
#endif
    default: return mt_adamw_kernel_ref;
    }
}

/* Thread `t` of `nt` takes one contiguous run of whole chunks. */
void mt_adamw_share(size_t n, int t, int nt, size_t *begin, size_t *count) {
    size_t chunks = (n + MT_ADAMW_CHUNK - 1) / MT_ADAMW_CHUNK;
    size_t per_thread = (chunks + (size_t)nt - 1) / (size_t)nt * MT_ADAMW_CHUNK;
    *begin = (size_t)t * per_thread;
    *count = *begin >= n ? 0 : n - *begin < per_thread ? n - *begin : per_thread;
}

int mt_adamw_threads(size_t n, int threads) {
    size_t useful_threads = n / MT_ADAMW_MIN_PER_THREAD + 1;
    if ((size_t)threads > useful_threads) threads = (int)useful_threads;
    return threads > 1 ? threads : 1;
}

static void adamw_run_share(mt_adamw_kernel kernel, const mt_adamw_coef *c, float *master,
                            float *m, float *v, const float *grad, void *out, mt_dtype out_dtype,
                            size_t n, int t, int nt) {
    size_t begin, count;
    mt_adamw_share(n, t, nt, &begin, &count);
    if (!count) return;
    kernel(c, master + begin, m + begin, v + begin, grad + begin,
           (char *)out + begin * mt_dtype_size(out_dtype), out_dtype, count);
}

void mt_adamw_update_with(mt_adamw_impl impl, const mt_adamw_params *p, int decay, float *master,
                          float *m, float *v, const float *grad, void *weights_out,
                          mt_dtype weights_dtype, size_t n, int threads) {
    mt_adamw_kernel kernel = mt_adamw_kernel_of(impl);
    mt_adamw_coef c = mt_adamw_coef_of(p, decay, n);
#ifdef _OPENMP
    threads = mt_adamw_threads(n, threads);
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        adamw_run_share(kernel, &c, master, m, v, grad, weights_out, weights_dtype, n,
                        omp_get_thread_num(), omp_get_num_threads());
        return;
    }
#endif
    (void)threads;
    adamw_run_share(kernel, &c, master, m, v, grad, weights_out, weights_dtype, n, 0, 1);
}

void mt_adamw_update_parallel(const mt_adamw_params *p, int decay, float *master, float *m,
                              float *v, const float *grad, void *weights_out,
                              mt_dtype weights_dtype, size_t n, int threads) {
    mt_adamw_update_with(MT_ADAMW_BEST, p, decay, master, m, v, grad, weights_out, weights_dtype,
                         n, threads);
}

void mt_adamw_update(const mt_adamw_params *p, int decay, float *master, float *m, float *v,
                     const float *grad, void *weights_out, mt_dtype weights_dtype, size_t n) {
    mt_adamw_update_with(MT_ADAMW_BEST, p, decay, master, m, v, grad, weights_out, weights_dtype,
                         n, 1);
}
