/* The gated linear units an MLP or an expert computes: what a model's layer spec names
 * (model/layer_spec.h) and the backends' GLU ops take (backend/backend.h). */
#ifndef MT_UTIL_GLU_H
#define MT_UTIL_GLU_H

/* The gated linear unit's activation: a = act(g) * u over a gate g and an up projection u. */
typedef enum {
    MT_GLU_SILU,         /* silu(g) * u (Llama's SwiGLU) */
    MT_GLU_GELU_TANH,    /* gelu_tanh(g) * u, torch's tanh approximation (Gemma's GeGLU) */
    MT_GLU_SILU_CLAMPED, /* gpt-oss: g' = min(g, limit), u' = clamp(u, -limit, limit),
                          * a = (u' + 1) * g' * sigmoid(alpha * g'); the gradient is zero through
                          * a clamp that binds (g > limit, |u| > limit), as torch's clamp gives */
} mt_glu;

#endif
