/* The interpretation of a config, layer by layer: what each block's kinds compute. A family's plan
 * (model/families.h) fills it; the kinds, on both sides of the line between the model and the
 * engine, read only this, never the family. A value the model code does not compute yet is
 * refused by mt_model_spec_check, naming the field. */
#ifndef MT_MODEL_LAYER_SPEC_H
#define MT_MODEL_LAYER_SPEC_H

#include "util/glu.h"
#include "util/status.h"

/* The mixers: attention, or Gated DeltaNet (Qwen3-Next, Qwen3.5: a linear-attention recurrence
 * whose sizes are the config's linear_* fields). */
typedef enum { MT_MIXER_ATTENTION, MT_MIXER_GDN, MT_MIXER_KINDS } mt_mixer_kind;
/* Gated DeltaNet's causal convolution's kernel (linear_conv_kernel_dim: the one computed). */
enum { MT_GDN_CONV_KERNEL = 4 };
typedef enum { MT_FFN_DENSE, MT_FFN_MOE, MT_FFN_KINDS } mt_ffn_kind;

/* A RoPE table: theta and its scaling (transformers' rope_type), with the fields each type reads. */
typedef enum { MT_ROPE_DEFAULT, MT_ROPE_LLAMA3, MT_ROPE_LINEAR, MT_ROPE_YARN } mt_rope_type;
typedef struct {
    mt_rope_type type;
    float theta;
    float factor;                     /* llama3, linear, yarn */
    float low_freq_factor, high_freq_factor; /* llama3 */
    int original_max_position;        /* llama3, yarn */
    float beta_fast, beta_slow;       /* yarn */
    float partial;                    /* the share of head_dim turned (partial_rotary_factor); 0: all */
    int truncate;                     /* yarn: the correction range rounded out to whole dimensions */
    float attention_factor;           /* yarn: cos and sin scaled by it; 0: 0.1 ln(factor) + 1 */
} mt_rope_spec;

/* Attention's variants. */
enum {
    MT_ATTN_QK_NORM_HEAD = 1u << 0, /* RMSNorm of q and k over each head's head_dim values */
    MT_ATTN_QK_NORM_FULL = 1u << 1, /* ... over the whole projection (q's heads x head_dim values) */
    MT_ATTN_BIAS_QKV = 1u << 2,     /* the q/k/v projections carry biases */
    MT_ATTN_BIAS_O = 1u << 3,       /* o_proj carries a bias */
    MT_ATTN_SINKS = 1u << 4,        /* a learned sink logit a head */
    MT_ATTN_POST_NORM = 1u << 5,    /* an RMSNorm of the mixer's output before the residual */
    MT_ATTN_OUT_GATE = 1u << 6,     /* q_proj gives each head's query and a gate; the output times
                                     * sigmoid(gate) before o_proj (Qwen3-Next, Qwen3.5) */
};
typedef struct {
    int window;          /* 0: causal over the whole sequence; else the last `window` keys */
    int rope;            /* index into mt_model_spec.rope */
    float q_scale;       /* the scores' scale; 0: 1/sqrt(head_dim) (mt_layer_spec_of: times the
                          * square of its RoPE table's attention factor where that is not 1) */
    float logit_softcap; /* 0: none; else scores become cap * tanh(score / cap) */
    unsigned flags;      /* MT_ATTN_* */
} mt_attn_spec;

enum {
    MT_FFN_POST_NORM = 1u << 0,     /* an RMSNorm of the feed-forward's output before the residual */
    MT_FFN_EXPERT_BIAS = 1u << 1,   /* the experts' projections carry biases */
    MT_FFN_ROUTER_BIAS = 1u << 2,   /* the router carries a bias */
    MT_FFN_SHARED_EXPERT = 1u << 3, /* a shared expert behind a sigmoid gate (Qwen2-MoE) */
    MT_FFN_RENORM = 1u << 4,        /* the chosen experts' weights divided by their sum */
};
typedef struct {
    mt_glu act;
    float clamp, alpha;  /* MT_GLU_SILU_CLAMPED's */
    unsigned flags;      /* MT_FFN_* */
} mt_ffn_spec;

/* Gated DeltaNet's variants. */
enum {
    MT_GDN_FUSED = 1u << 0, /* Qwen3-Next's in_proj_qkvz and in_proj_ba, their rows grouped by q/k head */
};
typedef struct {
    unsigned flags; /* MT_GDN_* */
} mt_gdn_spec;

typedef struct {
    mt_mixer_kind mixer;
    mt_attn_spec attn;
    mt_gdn_spec gdn;
    mt_ffn_kind ffn;
    mt_ffn_spec ffn_spec;
    float norm_eps;
    int norm_unit_offset; /* the norms scale by (1 + w) rather than w */
} mt_layer_spec;

#define MT_MODEL_MAX_ROPES 2

/* What is the whole model's: the ends and the RoPE tables the layers index. */
typedef struct {
    float norm_eps;       /* the final norm's */
    int norm_unit_offset; /* the final norm scales by (1 + w) */
    float embed_scale;   /* the embedding's rows are multiplied by it (1: none) */
    float logit_softcap; /* the head's logits become cap * tanh(logit / cap); 0: none */
    int num_ropes;
    mt_rope_spec rope[MT_MODEL_MAX_ROPES];
} mt_model_spec;

/* Refuses what no op computes yet, naming the field and the layer. */
mt_status mt_model_spec_check(const mt_model_spec *m);
mt_status mt_layer_spec_check(const mt_layer_spec *s, const mt_model_spec *m, int l);

/* The values of each head table r turns: head_dim, or transformers' int(head_dim x partial). */
int mt_rope_rotary_dim(const mt_rope_spec *r, int head_dim);
/* The RoPE inverse frequencies of table r, mt_rope_rotary_dim / 2 of them, its scaling applied. */
void mt_rope_inv_freq(const mt_rope_spec *r, int head_dim, float *inv_freq);
/* The factor table r multiplies cos and sin by (transformers' attention_scaling: YaRN's, 1 for the
 * others). q and k both turned through it scale their scores by its square, which is how the
 * attention applies it: mt_layer_spec_of folds it into attn.q_scale, so that no kernel scales. */
float mt_rope_attention_factor(const mt_rope_spec *r);

#endif
