/* The registry of model families: one row a family, each in its own file under
 * src/model/families/, holding everything that is that family's: how its config.json reads and
 * writes (its fields, transformers' defaults for them, what it refuses by name), its presets, its
 * Hugging Face names where they differ from the tensor roles' (model/tensor_roles.def), its rules
 * on a config, and its plan: what each layer computes (model/layer_spec.h). Adding a family is a
 * new file and a row in families.c; see docs/architecture.md. */
#ifndef MT_MODEL_FAMILIES_H
#define MT_MODEL_FAMILIES_H

#include <jansson.h>

#include "model/config.h"
#include "model/layer_spec.h"
#include "model/tensor_roles.h"
#include "util/json_fields.h"

typedef struct {
    const char *name;
    mt_config cfg;
} mt_preset;

/* A family's Hugging Face names where they are not the tensor roles' (model/tensor_roles.def):
 * a block tensor's suffix by role (NULL: the role's), and how its checkpoints on the hub name the
 * experts' matrices one at a time ("model.layers.<l>.<prefix>.experts.<e>.<gate|up|down>.weight")
 * and the router (NULL: under its own name), and the roles it holds in another form (whole, then). */
typedef struct {
    const char *suffix[MT_T_COUNT];
    const char *prefix, *gate, *up, *down;
    const char *router; /* "model.layers.<l>." + this */
    mt_hub_form form[MT_T_COUNT]; /* how the hub holds a role (model/tensor_roles.h); zero: as the layout */
} mt_family_names;

typedef struct mt_family {
    mt_arch arch;
    const char *architecture; /* config.json's architectures[0] */
    const char *model_type;
    /* transformers' defaults (the Config class's) for what config.json may omit */
    int default_max_position;
    int default_head_dim; /* 0: hidden_size / num_attention_heads */
    float default_eps, default_theta;
    int moe; /* a mixture of experts: its config needs num_experts */
    int experts_only; /* every block's feed-forward experts: config.json may leave intermediate_size out */
    const char *hidden_act; /* the MLP's activation, as config.json's hidden_act names it */
    const mt_preset *presets;
    int num_presets;
    /* The config.json fields its read takes beyond those every family has (NULL-terminated). */
    const char *const *fields;
    /* After the common fields: its own, with its defaults and refusals by name. */
    mt_status (*read)(const mt_json_src *s, mt_config *c);
    /* Its own fields into config.json, after hidden_act and before the token ids. */
    void (*write)(const mt_config *c, json_t *o);
    /* Its rules on a config (mt_config_validate), the message naming the field. */
    mt_status (*validate)(const mt_config *c);
    /* Block l's spec (every field set) and the model's. */
    void (*plan)(const mt_config *c, int l, mt_layer_spec *s);
    void (*plan_model)(const mt_config *c, mt_model_spec *m);
    const mt_family_names *names; /* NULL: the roles' and transformers' mlp.experts.<e>.gate_proj, ... */
} mt_family;

/* Every family, NULL-terminated (families.c). */
extern const mt_family *const mt_families[];

/* The family of an architecture (architectures[0]) or, when NULL, of a model_type; NULL if none. */
const mt_family *mt_family_find(const char *architecture, const char *model_type);
const mt_family *mt_family_of(mt_arch arch);
/* The architectures megatrain reads, comma-separated, for messages. */
const char *mt_family_architectures(void);

/* Block l's spec and the model's, as cfg's family plans them. */
mt_layer_spec mt_layer_spec_of(const mt_config *cfg, int l);
mt_model_spec mt_model_spec_of(const mt_config *cfg);

/* What plans share: the attention and the SwiGLU feed-forward every family so far has, from the
 * config's fields (attention_bias, qk_norm, attention_sinks, rms_norm_eps; the experts' where block l
 * is sparse). */
void mt_family_plan_common(const mt_config *c, int l, mt_layer_spec *s);
/* One RoPE table from rope_theta and rope_scaling (llama3 when its factor is set). */
void mt_family_plan_model_common(const mt_config *c, mt_model_spec *m);

/* What the families' readers and writers share. A sliding window shorter than the context changes
 * attention: refused rather than ignored (`gated`: only where use_sliding_window is true). */
mt_status mt_family_read_window(const mt_json_src *s, const mt_config *c, int default_window, int gated);
/* A sliding window the family computes: sliding_window (default_window when absent, none when
 * null or not shorter than the context) makes layers local, all of them or, with a `gate` field
 * (Qwen2's use_sliding_window, false by default), those from max_window_layers on (transformers'
 * rule; default_first_local when absent); then transformers 5's layer_types, where present,
 * decides each layer (mt_family_read_layer_types). */
mt_status mt_family_read_sliding_window(const mt_json_src *s, mt_config *c, int default_window, const char *gate,
                                        int default_first_local);
/* layer_types: a string a layer, full_attention or sliding_attention (local: the config's
 * sliding_window); anything else refused naming the layer. */
mt_status mt_family_read_layer_types(const mt_json_src *s, mt_config *c);
/* sliding_window (null when none) and, with a window, layer_types. */
void mt_family_write_sliding_window(const mt_config *c, json_t *o);
/* transformers 5's layer_types: anything but full attention refused. */
mt_status mt_family_read_full_attention(const mt_json_src *s);
/* attention_bias = true refused: it would add q/k/v and o_proj biases. */
mt_status mt_family_refuse_attention_bias(const mt_json_src *s, const char *architecture);
/* A mixture of experts' Config class defaults: experts, those of a token, their width (0: they are
 * intermediate_size wide and every block is sparse; else moe_intermediate_size,
 * decoder_sparse_step and mlp_only_layers are read), the shared expert's, the aux loss's weight. */
typedef struct {
    int experts, top_k, width, shared;
    float aux_coef;
} mt_experts_defaults;
/* The experts under transformers' names (num_experts, or num_local_experts as Mixtral and
 * transformers 5's Qwen3MoeConfig write it), its defaults filled in. */
mt_status mt_family_read_experts(const mt_json_src *s, mt_config *c, const mt_experts_defaults *d);
void mt_family_write_experts(const mt_config *c, json_t *o, const char *experts_key);
/* moe_intermediate_size, decoder_sparse_step and mlp_only_layers (the Qwen mixtures'). */
void mt_family_write_sparse_layers(const mt_config *c, json_t *o);

/* Gemma's block, Gemma 3's and Gemma 2's (families/gemma3.c, gemma2.c): the plan (the common one,
 * then the four norms, (1 + w), GeGLU, 1/sqrt(query_pre_attn_scalar), the soft caps, the local
 * layers' window and RoPE table), the model's (the embedding scaled by sqrt(hidden_size), the
 * final soft cap, the local RoPE table when rope_local_theta is set), the names of its norms, and
 * the config fields both read and write: hidden_activation (`act` only), tie_word_embeddings (true
 * when absent), query_pre_attn_scalar and the soft caps (their defaults when absent, none when
 * null). */
extern const mt_family_names mt_family_gemma_names;
void mt_family_plan_gemma(const mt_config *c, int l, mt_layer_spec *s);
void mt_family_plan_model_gemma(const mt_config *c, mt_model_spec *m);
mt_status mt_family_read_gemma(const mt_json_src *s, mt_config *c, const char *act, float default_scalar,
                               float default_attn_cap, float default_final_cap);
void mt_family_write_gemma(const mt_config *c, json_t *o, const char *act);

/* The hybrid of Gated DeltaNet and gated attention, Qwen3.5's (families/qwen3_5.c) and Qwen3-Next's:
 * its config fields (layer_types or full_attention_interval, the linear_* sizes, partial_rotary_factor,
 * attn_output_gate; attention_bias refused naming `architecture`) read and written, its rules (the
 * Gated DeltaNet's heads, an even partial RoPE), its plan ((1 + w) norms, the linear layers' mixer,
 * the others' output gate) and the model's. */
mt_status mt_family_read_hybrid(const mt_json_src *s, mt_config *c, const char *architecture);
void mt_family_write_hybrid(const mt_config *c, json_t *o);
mt_status mt_family_validate_hybrid(const mt_config *c);
void mt_family_plan_hybrid(const mt_config *c, int l, mt_layer_spec *s);
void mt_family_plan_model_hybrid(const mt_config *c, mt_model_spec *m);

/* What the families' rules share, each failing with a message naming the field. */
mt_status mt_family_require_qk_norm(const mt_config *c, mt_qk_norm want);
mt_status mt_family_no_o_bias(const mt_config *c);
mt_status mt_family_no_shared_expert(const mt_config *c);
mt_status mt_family_experts_full_width(const mt_config *c);

#endif
