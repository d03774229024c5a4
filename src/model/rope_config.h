/* RoPE's fields of a config.json: transformers 4's rope_theta and rope_scaling at the top level,
 * transformers 5's rope_parameters (which holds rope_theta too, and may be given by layer type:
 * full_attention's, and sliding_attention's theta as the local layers' own); the scaling types the
 * model computes (default, linear, llama3, yarn), any other refused by name. io/hf_config.c reads and writes them for
 * every family; a family whose RoPE is another kind's adds its reading here. */
#ifndef MT_MODEL_ROPE_CONFIG_H
#define MT_MODEL_ROPE_CONFIG_H

#include <jansson.h>

#include "model/config.h"
#include "util/json_fields.h"

/* rope_scaling and rope_parameters into c (rope_theta already read from the top level). */
mt_status mt_rope_config_read(const mt_json_src *s, mt_config *c);
/* rope_scaling: null, or linear's, llama3's or yarn's fields. */
void mt_rope_config_write(const mt_config *c, json_t *o);

#endif
