/* Hugging Face config.json <-> mt_config.
 *
 * Reads the config.json of every family of the registry (model/families.h: LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM,
 * MixtralForCausalLM, OlmoeForCausalLM): the fields every family has here, RoPE's in
 * model/rope_config.c, the family's own in its file, each filling what a file leaves out with
 * transformers' defaults (the family's Config class's). Refuses (naming the field) anything that
 * would change the math the model code implements: another architecture or activation, MLP
 * biases, quantization, dropout, and what each family refuses (an active sliding window, a layer
 * that is not full attention, a rope_scaling other than llama3, an attention_bias that adds an
 * o_proj bias, Mixtral's router_jitter_noise, OLMoE's clip_qkv, ...). Names a field it does not
 * know in a warning. A wrapper's fields besides its text config are its own, kept as they are. */
#ifndef MT_IO_HF_CONFIG_H
#define MT_IO_HF_CONFIG_H

#include <jansson.h>
#include <stddef.h>

#include "model/config.h"
#include "model/wrappers.h"

/* Parses config.json text; `source` names it in error messages (usually the file path). A
 * wrapper's (model/wrappers.h: Gemma3ForConditionalGeneration) reads as its text model's: the
 * config under its text key, the wrapper's text defaults where that is silent; messages then name
 * the key ("config.json (text_config): ..."). */
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
/* The same for a model that a wrapper holds: `wrapper` is the wrapper's config.json as it was read,
 * written back with its text config this one's (and its dtype, where it names one, torch_dtype). */
mt_status mt_hf_config_write_wrapped(const mt_config *cfg, const char *torch_dtype, const json_t *wrapper,
                                     const char *dir);
/* The wrapper the config.json at `path` names (*w NULL: none); an unreadable file fails. */
mt_status mt_hf_config_wrapper(const char *path, const mt_wrapper **w);

#endif
