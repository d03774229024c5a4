/* SwiGLU's arithmetic, shared by the dense op (swiglu.cu) and the experts' fused rows
 * (moe_experts.cu): a = silu(g) * u in fp32, and its gradient. */
#ifndef MT_BACKEND_CUDA_SWIGLU_MATH_CUH
#define MT_BACKEND_CUDA_SWIGLU_MATH_CUH

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

__device__ __forceinline__ float swiglu_one(float g, float u) { return g * sigmoid(g) * u; }

/* d silu(g)/dg = sig * (1 + g * (1 - sig)) */
__device__ __forceinline__ void swiglu_grad_one(float da, float g, float u, float *dg, float *du) {
    float sig = sigmoid(g);
    *dg = da * u * sig * (1.0f + g * (1.0f - sig));
    *du = da * g * sig;
}

#endif
