/* The model's shape: a decoder as config.json describes it. Which family it is (arch) decides how
 * its fields are read, checked and planned layer by layer (model/families.h). */
#ifndef MT_MODEL_CONFIG_H
#define MT_MODEL_CONFIG_H

#include <stdint.h>

#include "util/status.h"

/* The families, a row each of model/families.c's registry. */
typedef enum {
    MT_ARCH_LLAMA, MT_ARCH_MISTRAL, MT_ARCH_QWEN2, MT_ARCH_QWEN3,
    /* mixtures of experts */
    MT_ARCH_QWEN3_MOE, MT_ARCH_QWEN2_MOE, MT_ARCH_MIXTRAL, MT_ARCH_OLMOE,
    MT_ARCH_GEMMA3, MT_ARCH_GEMMA2, MT_ARCH_GPT_OSS,
    /* hybrids of Gated DeltaNet and gated attention */
    MT_ARCH_QWEN3_5, MT_ARCH_QWEN3_5_MOE, MT_ARCH_QWEN3_NEXT,
} mt_arch;

/* RMSNorm of q and k before RoPE: none, over each head's head_dim values (Qwen3, Qwen3-MoE), or
 * over the whole projection (OLMoE: q's heads x head_dim, k's kv_heads x head_dim values). */
typedef enum { MT_QK_NORM_NONE, MT_QK_NORM_HEAD, MT_QK_NORM_FULL } mt_qk_norm;

/* The largest shapes this code takes: every size the layout, the store and the engine compute
 * from them stays far inside 64-bit (and their per-call counts inside 32-bit) arithmetic. */
#define MT_CONFIG_MAX_HIDDEN (1 << 16)
#define MT_CONFIG_MAX_INTERMEDIATE (1 << 20)
#define MT_CONFIG_MAX_LAYERS 4096
#define MT_CONFIG_MAX_HEADS 4096
#define MT_CONFIG_MAX_VOCAB (1 << 24)
#define MT_CONFIG_MAX_POSITION (1 << 24)
#define MT_CONFIG_MAX_PARAMS ((int64_t)1 << 40)

/* The largest number of experts and of experts a token goes to that this code takes. */
#define MT_CONFIG_MAX_EXPERTS 1024
#define MT_CONFIG_MAX_TOP_K 64

typedef struct {
    mt_arch arch;
    int hidden_size;         /* D */
    int intermediate_size;   /* F, the SwiGLU width */
    int num_layers;          /* L transformer blocks */
    int num_heads;           /* query heads */
    int num_kv_heads;        /* key/value heads (GQA when fewer than num_heads) */
    int head_dim;            /* may differ from hidden_size / num_heads (Qwen3) */
    int vocab_size;          /* V */
    int max_position;        /* max_position_embeddings */
    float rms_norm_eps;
    float rope_theta;
    int tie_embeddings;      /* LM head shares the embedding matrix */
    int attention_bias;      /* q/k/v projections carry a bias (Qwen2; gpt-oss: o_proj too) */
    int qk_norm;             /* mt_qk_norm: RMSNorm of q and k before RoPE (Qwen3, OLMoE) */
    int attention_sinks;     /* a learned logit a query head: a softmax column with no value (gpt-oss) */
    /* rope_scaling of type "llama3", or with rope_scaling_linear "linear" (the factor only);
     * factor == 0 means none. */
    float rope_scaling_factor;
    int rope_scaling_linear;
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    int rope_original_max_position;        /* llama3's and yarn's */
    int rope_scaling_yarn;                 /* or, with it, "yarn" (factor, original and the three below) */
    float rope_beta_fast, rope_beta_slow;  /* yarn's */
    int rope_truncate;                     /* yarn's: the correction range rounded to whole dimensions */
    float rope_attention_factor;           /* yarn's cos and sin scale; 0: 0.1 ln(factor) + 1 */
    int bos_token_id, eos_token_id;  /* -1 when absent */
    /* Mixture of experts (num_experts > 0): a sparse block's feed-forward routes each token to
     * experts_per_token of num_experts SwiGLU experts of moe_intermediate_size (model/kinds/ffn_moe.c).
     * Block l is sparse when (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers;
     * the others keep a dense MLP of intermediate_size. */
    int num_experts, experts_per_token, moe_intermediate_size;
    int norm_topk_prob;      /* the chosen experts' weights divided by their sum (Qwen3-MoE, Mixtral) */
    int shared_expert_intermediate_size; /* Qwen2-MoE's shared expert and its sigmoid gate; 0: none */
    int decoder_sparse_step;
    uint64_t mlp_only_layers[MT_CONFIG_MAX_LAYERS / 64]; /* bit l: block l stays dense */
    /* The router's load-balancing loss takes part in training, weighted by router_aux_loss_coef
     * (config.json's output_router_logits, as transformers adds it to the loss). */
    int output_router_logits;
    float router_aux_loss_coef;
    /* Sliding-window attention: a local layer's queries see the last sliding_window keys of their
     * sequence (0: no layer is local). Which layers are local is the family's reading of its config
     * (Mistral v0.1: every one; Qwen2: from max_window_layers on; layer_types). */
    int sliding_window;
    uint64_t local_layers[MT_CONFIG_MAX_LAYERS / 64]; /* bit l: block l is local */
    /* Local layers' own RoPE base, without rope_scaling (Gemma 3's rope_local_base_freq); 0: they
     * share rope_theta and its scaling. */
    float rope_local_theta;
    /* The scores' scale is 1/sqrt(query_pre_attn_scalar) (Gemma); 0: 1/sqrt(head_dim). */
    float query_pre_attn_scalar;
    /* Soft caps, cap * tanh(x / cap), of the attention scores and of the head's logits (Gemma 2);
     * 0: none. */
    float attn_logit_softcap, final_logit_softcap;
    /* Gated DeltaNet (Qwen3-Next, Qwen3.5: model/kinds/gdn.c): the blocks whose mixer it is
     * (layer_types' linear_attention), its q/k heads and value heads (a multiple of them) and their
     * sizes, linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
     * linear_value_head_dim. */
    uint64_t linear_layers[MT_CONFIG_MAX_LAYERS / 64];
    int linear_k_heads, linear_v_heads, linear_k_dim, linear_v_dim;
    /* RoPE turns the first partial_rotary_factor of each head's head_dim (0: all of it). */
    float partial_rotary_factor;
    /* q_proj gives each head a gate too; attention's output times its sigmoid (attn_output_gate). */
    int attn_output_gate;
    /* The experts' clamped SwiGLU (gpt-oss's swiglu_limit and swiglu_alpha); 0: the plain SwiGLU. */
    float swiglu_limit, swiglu_alpha;
} mt_config;

/* Fills `cfg` with a built-in shape, one of the families' presets (model/families.c;
 * mt_config_preset_names lists them). Fails naming the preset when it is unknown. */
mt_status mt_config_preset(const char *name, mt_config *cfg);
/* Comma-separated preset names, for help text. */
const char *mt_config_preset_names(void);

/* Checks the shape against what the model code supports, limits above included; the message
 * names the field. */
mt_status mt_config_validate(const mt_config *cfg);
/* `value` of config field `name` in [lo, hi], else a message naming it. */
mt_status mt_config_in_range(const char *name, int value, int lo, int hi);

/* Parameter counts (of a validated config: they cannot overflow): block l's, every block's, those
 * of every block that one token's forward multiplies with (a mixture of experts uses top_k of its
 * experts), and the whole model's. */
int64_t mt_config_block_params(const mt_config *cfg, int l);
int64_t mt_config_blocks_params(const mt_config *cfg);
int64_t mt_config_blocks_active_params(const mt_config *cfg);
int64_t mt_config_total_params(const mt_config *cfg);
/* The widest dense SwiGLU MLP among the blocks' feed-forwards, a shared expert's included (what the
 * block workspace sizes for); 0 when there is none. */
int mt_config_dense_mlp_width(const mt_config *cfg);
/* Whether block l's feed-forward is a mixture of experts (its family's plan says:
 * model/families.h), and how many blocks' are. */
int mt_config_layer_is_moe(const mt_config *cfg, int l);
int mt_config_moe_layers(const mt_config *cfg);
/* Whether block l's attention is local (a sliding window), and marks it so. A config read with more
 * layers than MT_CONFIG_MAX_LAYERS is refused by mt_config_validate; until then its layers past the
 * bound are never local. */
static inline int mt_config_layer_is_local(const mt_config *cfg, int l) {
    return l >= 0 && l < MT_CONFIG_MAX_LAYERS && (int)(cfg->local_layers[l / 64] >> (l % 64)) & 1;
}
static inline void mt_config_set_local(mt_config *cfg, int l) {
    if (l >= 0 && l < MT_CONFIG_MAX_LAYERS) cfg->local_layers[l / 64] |= (uint64_t)1 << (l % 64);
}
/* Whether block l's mixer is Gated DeltaNet, and marks it so (bounds as the local layers'). */
static inline int mt_config_layer_is_linear(const mt_config *cfg, int l) {
    return l >= 0 && l < MT_CONFIG_MAX_LAYERS && (int)(cfg->linear_layers[l / 64] >> (l % 64)) & 1;
}
static inline void mt_config_set_linear(mt_config *cfg, int l) {
    if (l >= 0 && l < MT_CONFIG_MAX_LAYERS) cfg->linear_layers[l / 64] |= (uint64_t)1 << (l % 64);
}
/* Whether the architecture's family is a mixture of experts (its config needs num_experts). */
int mt_arch_is_moe(mt_arch arch);
/* Forward FLOPs a token in every block besides the linear layers (attention's, of the keys each
 * query sees: a local layer's within its window), at seq tokens a sequence. */
double mt_config_blocks_extra_flops(const mt_config *cfg, int seq);

#endif
