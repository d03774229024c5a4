/* AdamW for the tensors whose optimizer state the device keeps, and the clip coefficient it
 * reads. Bit for bit the host's update (optim/adamw.h): each step is one explicitly rounded fp32
 * operation in the host's order (the _rn intrinsics keep nvcc from fusing a multiply-add), and the
 * bf16 weights are the masters' high halves as the host store keeps them (util/split_f32.h), so a
 * master streams as the same bf16 whoever updates it. */
#include "backend/cuda/bf16_vec.cuh"
#include "optim/clip.h"
#include "util/split_f32.h"

enum { THREADS = 256 };

__global__ void clip_scale_kernel(float *scale, const float *norms, int count, float max_norm) {
    *scale = mt_clip_scale(mt_global_norm(norms, count), max_norm);
}

__device__ static inline float stepped(const mt_adamw_coef &c, float w, float mi, float vi) {
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.sqrt_bias_correction2), c.eps);
    return __fadd_rn(w, __fdiv_rn(__fmul_rn(c.neg_step_size, mi), denom));
}

/* The whole update with c.grad_scale, or with the clip coefficient *scale when there is one; for a
 * coefficient that is not finite (a skipped step) none: masters and moments as they are, the
 * weights the masters' high halves (backend.h). */
__global__ void adamw_kernel(mt_adamw_coef c, const float *scale, float *master, float *m, float *v,
                             const float *grad, uint16_t *w, size_t n) {
    float clip = scale ? *scale : c.grad_scale;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        if (!isfinite(clip)) {
            w[i] = mt_split_hi_bits(__float_as_uint(master[i]));
            continue;
        }
        float g = __fmul_rn(grad[i], clip);
        float wi = __fmul_rn(master[i], c.decay_mul);
        float mi = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(c.one_minus_beta1, g));
        float vi = __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
        wi = stepped(c, wi, mi, vi);
        master[i] = wi;
        m[i] = mi;
        v[i] = vi;
        w[i] = mt_split_hi_bits(__float_as_uint(wi));
    }
}

extern "C" mt_status mt_cuda_clip_scale(cudaStream_t s, float *scale, const float *norms, int count,
                                        float max_norm) {
    clip_scale_kernel<<<1, 1, 0, s>>>(scale, norms, count, max_norm);
    return launch_status("clip_scale");
}

extern "C" mt_status mt_cuda_adamw(cudaStream_t s, const mt_adamw_coef *c, const float *scale, float *master,
                                   float *m, float *v, const float *grad, void *w, size_t n) {
    if (n == 0) return MT_OK;
    adamw_kernel<<<grid_for(n, THREADS), THREADS, 0, s>>>(*c, scale, master, m, v, grad, (uint16_t *)w, n);
    return launch_status("adamw");
}
