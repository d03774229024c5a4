/* Wrappers: a model directory whose text model is a family's (model/families.h) inside a larger
 * model (Gemma3ForConditionalGeneration: a vision tower and a projector around Gemma3ForCausalLM's
 * text model). megatrain trains the text model; what the wrapper holds besides is kept as it was
 * and written back on export, under its own names, so that the exported directory still loads as
 * the wrapper. A wrapper is a row: its architecture, the config key that nests the text model's
 * config, the family that computes it, and the layouts of tensor names its checkpoints use. */
#ifndef MT_MODEL_WRAPPERS_H
#define MT_MODEL_WRAPPERS_H

#include <stddef.h>

/* One way a wrapper's checkpoints name its tensors: the text model's "model.<x>" as text + "<x>",
 * its lm_head.weight as lm_head, and the prefixes of what it holds besides (NULL-terminated). */
typedef struct {
    const char *text;
    const char *lm_head;
    const char *kept[4];
} mt_wrapper_layout;

#define MT_WRAPPER_LAYOUTS 2

typedef struct mt_wrapper {
    const char *architecture; /* config.json's architectures[0] */
    const char *model_type;
    const char *text_key;          /* the config key holding the text model's config */
    const char *text_architecture; /* the family computing it (its architectures[0]) */
    /* The text config class's defaults (a JSON object) for what every family's reader requires
     * and the nested config may omit. */
    const char *text_defaults;
    mt_wrapper_layout layouts[MT_WRAPPER_LAYOUTS]; /* the hub's, then transformers 5's (text NULL: none) */
    const char *kept_files[4]; /* files of its directory written back as they are where it has them
                                * (its image processor's configs), NULL-terminated */
} mt_wrapper;

/* Every wrapper, NULL-terminated (wrappers.c). */
extern const mt_wrapper *const mt_wrappers[];

/* The wrapper of an architecture (architectures[0]) or, when NULL, of a model_type; NULL if none. */
const mt_wrapper *mt_wrapper_find(const char *architecture, const char *model_type);

/* The wrappers' architectures, comma-separated, for messages. */
const char *mt_wrapper_architectures(void);

/* A checkpoint's tensor `name` under layout l: 1 with the text model's name for it in out[cap]
 * when it is the text model's, else 0. */
int mt_wrapper_text_name(const mt_wrapper_layout *l, const char *name, char *out, size_t cap);
/* The text model's tensor `text_name` as layout l names it, into out[cap]. */
void mt_wrapper_hub_name(const mt_wrapper_layout *l, const char *text_name, char *out, size_t cap);
/* Whether `name` is one of what layout l keeps as it is (not the text model's). */
int mt_wrapper_kept(const mt_wrapper_layout *l, const char *name);

#endif
