/* The gated linear units' arithmetic (backend.h's mt_glu), shared by the dense op (swiglu.cu) and
 * the experts' fused rows (moe_experts.cu): one element's a = act(g) * u in fp32, and its gradient,
 * as the CPU reference's (cpu/ops/glu_math.h). */
#ifndef MT_BACKEND_CUDA_GLU_MATH_CUH
#define MT_BACKEND_CUDA_GLU_MATH_CUH

/* torch's tanh approximation of GELU: 0.5 x (1 + tanh(BETA (x + KAPPA x^3))), BETA = sqrt(2/pi) */
#define GELU_BETA 0.7978845608028654f
#define GELU_KAPPA 0.044715f

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

__device__ __forceinline__ float glu_one(mt_glu_params p, float g, float u) {
    switch (p.act) {
    case MT_GLU_GELU_TANH:
        return 0.5f * g * (1.0f + tanhf(GELU_BETA * (g + GELU_KAPPA * (g * g * g)))) * u;
    case MT_GLU_SILU_CLAMPED: {
        float gc = fminf(g, p.limit);
        return (fminf(fmaxf(u, -p.limit), p.limit) + 1.0f) * (gc * sigmoid(p.alpha * gc));
    }
    default:
        return g * sigmoid(g) * u;
    }
}

/* SILU: d silu(g)/dg = sig * (1 + g * (1 - sig)). GELU_TANH: torch's backward. SILU_CLAMPED: zero
 * through a clamp that binds (torch's clamp passes the gradient at the limit itself). */
__device__ __forceinline__ void glu_grad_one(mt_glu_params p, float da, float g, float u, float *dg, float *du) {
    switch (p.act) {
    case MT_GLU_GELU_TANH: {
        float t = tanhf(GELU_BETA * (g + GELU_KAPPA * (g * g * g)));
        float dgelu = 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * g * g);
        *dg = da * u * dgelu;
        *du = da * 0.5f * g * (1.0f + t);
        return;
    }
    case MT_GLU_SILU_CLAMPED: {
        float gc = fminf(g, p.limit), up1 = fminf(fmaxf(u, -p.limit), p.limit) + 1.0f;
        float sig = sigmoid(p.alpha * gc);
        *dg = g <= p.limit ? da * up1 * sig * (1.0f + p.alpha * gc * (1.0f - sig)) : 0.0f;
        *du = u >= -p.limit && u <= p.limit ? da * gc * sig : 0.0f;
        return;
    }
    default: {
        float sig = sigmoid(g);
        *dg = da * u * sig * (1.0f + g * (1.0f - sig));
        *du = da * g * sig;
        return;
    }
    }
}

#endif
