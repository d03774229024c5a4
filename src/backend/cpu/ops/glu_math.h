/* The gated linear units' arithmetic (backend.h's mt_glu), shared by the dense op (swiglu.c) and
 * the experts' fused rows (moe_experts.c): one element's a = act(g) * u, and its gradient. */
#ifndef MT_BACKEND_CPU_OPS_GLU_MATH_H
#define MT_BACKEND_CPU_OPS_GLU_MATH_H

#include <math.h>

#include "backend/backend.h"

/* torch's tanh approximation of GELU: 0.5 x (1 + tanh(BETA (x + KAPPA x^3))), BETA = sqrt(2/pi) */
#define GELU_BETA 0.7978845608028654f
#define GELU_KAPPA 0.044715f

static inline float glu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The clamped gate and up of gpt-oss's SwiGLU. */
static inline float glu_gate_clamped(mt_glu_params p, float g) { return g > p.limit ? p.limit : g; }
static inline float glu_up_clamped(mt_glu_params p, float u) {
    return u > p.limit ? p.limit : u < -p.limit ? -p.limit : u;
}

static inline float glu_one(mt_glu_params p, float g, float u) {
    switch (p.act) {
    case MT_GLU_GELU_TANH: {
        float inner = GELU_BETA * (g + GELU_KAPPA * (g * g * g));
        return 0.5f * g * (1.0f + tanhf(inner)) * u;
    }
    case MT_GLU_SILU_CLAMPED: {
        float gc = glu_gate_clamped(p, g);
        return (glu_up_clamped(p, u) + 1.0f) * (gc * glu_sigmoid(p.alpha * gc));
    }
    case MT_GLU_SILU:
    default:
        return g * glu_sigmoid(g) * u;
    }
}

/* SILU: d silu(g)/dg = sig * (1 + g * (1 - sig)). GELU_TANH: torch's backward, 0.5 (1 + t) +
 * 0.5 g (1 - t^2) BETA (1 + 3 KAPPA g^2). SILU_CLAMPED: zero through a clamp that binds (torch's
 * clamp passes the gradient at the limit itself). */
static inline void glu_grad_one(mt_glu_params p, float da, float g, float u, float *dg, float *du) {
    switch (p.act) {
    case MT_GLU_GELU_TANH: {
        float t = tanhf(GELU_BETA * (g + GELU_KAPPA * (g * g * g)));
        float gelu = 0.5f * g * (1.0f + t);
        float dgelu = 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * g * g);
        *dg = da * u * dgelu;
        *du = da * gelu;
        return;
    }
    case MT_GLU_SILU_CLAMPED: {
        float gc = glu_gate_clamped(p, g), up1 = glu_up_clamped(p, u) + 1.0f;
        float sig = glu_sigmoid(p.alpha * gc);
        *dg = g <= p.limit ? da * up1 * sig * (1.0f + p.alpha * gc * (1.0f - sig)) : 0.0f;
        *du = u >= -p.limit && u <= p.limit ? da * gc * sig : 0.0f;
        return;
    }
    case MT_GLU_SILU:
    default: {
        float sig = glu_sigmoid(g);
        float silu = g * sig;
        float dsilu = sig * (1.0f + g * (1.0f - sig));
        *dg = da * u * dsilu;
        *du = da * silu;
        return;
    }
    }
}

#endif
