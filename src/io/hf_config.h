/* Hugging Face config.json <-> mt_config.
 *
 * Reads LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM configs and the
 * mixtures of experts Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, MixtralForCausalLM and
 * OlmoeForCausalLM, filling fields a file leaves out with transformers' defaults (each Config
 * class's), and refuses (naming the field) anything that would change the math the model code
 * implements: another architecture or activation, MLP biases, an active sliding window or a layer
 * that is not full attention, a rope_scaling other than llama3, quantization, an attention_bias
 * that adds an o_proj bias (Qwen3, Qwen3-MoE, OLMoE), Mixtral's router_jitter_noise, OLMoE's
 * clip_qkv, an mlp_only_layers entry outside the model. */
#ifndef MT_IO_HF_CONFIG_H
#define MT_IO_HF_CONFIG_H

#include <jansson.h>
#include <stddef.h>

#include "model/config.h"

/* Parses config.json text; `source` names it in error messages (usually the file path). */
mt_status mt_hf_config_parse(const char *text, size_t len, const char *source, mt_config *cfg);
/* Reads and parses the config.json at `path`. */
mt_status mt_hf_config_read(const char *path, mt_config *cfg);
/* The config as a config.json document (a new reference; NULL for an unknown architecture),
 * and back: the same checks as mt_hf_config_parse, `source` naming where the document lives. */
json_t *mt_hf_config_to_json(const mt_config *cfg, const char *torch_dtype);
mt_status mt_hf_config_from_json(const json_t *doc, const char *source, mt_config *cfg);
/* Writes config.json and generation_config.json into `dir`, which must exist. `torch_dtype` is
 * what the weights are stored as: "bfloat16" or "float32". */
mt_status mt_hf_config_write(const mt_config *cfg, const char *torch_dtype, const char *dir);

#endif
