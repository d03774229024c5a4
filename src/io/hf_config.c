#include "io/hf_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "model/families.h"
#include "model/rope_config.h"
#include "model/wrappers.h"
#include "util/json_fields.h"
#include "util/json_kind.h"
#include "util/log.h"

/* architectures[0] decides; model_type, when present, must agree (it is all older files have). */
static mt_status parse_family(const mt_json_src *s, const mt_family **out) {
    const char *architecture = NULL, *model_type = NULL;
    const json_t *list = mt_json_field(s, "architectures");
    if (list) {
        if (!json_is_array(list) || json_array_size(list) == 0 || !json_is_string(json_array_get(list, 0)))
            return mt_json_wrong_type(s, "architectures", "a non-empty list of strings", list);
        architecture = json_string_value(json_array_get(list, 0));
    }
    MT_TRY(mt_json_get_string(s, "model_type", &model_type));
    if (!architecture && !model_type) return mt_json_missing(s, "architectures");
    *out = mt_family_find(architecture, model_type);
    if (!*out)
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' = '%s' is not supported (%s; the text model of %s)",
                       s->source, architecture ? "architectures" : "model_type",
                       architecture ? architecture : model_type, mt_family_architectures(),
                       mt_wrapper_architectures());
    if (model_type && strcmp(model_type, (*out)->model_type))
        return mt_fail(MT_ERR_INVALID, "%s: field 'model_type' ('%s') disagrees with architectures[0] ('%s')",
                       s->source, model_type, architecture);
    return MT_OK;
}

/* Every top-level field of a config.json megatrain knows. What it reads of every family (and what
 * any family reads, its `fields`, in `known`): */
static const char *const read_fields[] = {
    "architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "bos_token_id", "eos_token_id",
    "hidden_act", "mlp_bias", "quantization_config", "layer_types", NULL};
/* What changes nothing megatrain computes: the file's provenance and inference settings, the
 * initialization of a model transformers builds (megatrain's random weights are its own), the
 * layers a sliding window would have spared where the family uses none (Qwen2 reads it: its
 * window's layers), HF's slicing of the MLP in pretraining_tp parts (the same products). */
static const char *const metadata_fields[] = {
    "_name_or_path", "torch_dtype", "dtype", "transformers_version", "use_cache", "initializer_range",
    "pad_token_id", "pretraining_tp", "max_window_layers", "_from_model_config",
    "output_attentions", "output_hidden_states", "return_dict", "is_decoder", "id2label", "label2id",
    "tokenizer_class", "torchscript", "use_return_dict", NULL};
/* What changes the math where it is not the neutral value, which megatrain's math is: dropout
 * (megatrain trains without any). Any other value is refused, not ignored. */
static const struct {
    const char *name;
    double neutral;
} neutral_fields[] = {{"attention_dropout", 0}, {"hidden_dropout", 0}, {"dropout", 0}, {"resid_pdrop", 0},
                      {"embd_pdrop", 0}, {"attn_pdrop", 0}, {"hidden_dropout_prob", 0},
                      {"attention_probs_dropout_prob", 0}, {"embedding_dropout", 0}, {"residual_dropout", 0},
                      {NULL, 0}};

static int listed(const char *const *names, const char *key) {
    for (; *names; names++)
        if (!strcmp(*names, key)) return 1;
    return 0;
}

/* Read by every family or by any one (the others take it as they took it before: as if absent). */
static int known(const char *key) {
    if (listed(read_fields, key)) return 1;
    for (const mt_family *const *f = mt_families; *f; f++)
        if (listed((*f)->fields, key)) return 1;
    return 0;
}

/* Nothing in the file is passed over in silence: a field that would change the math is refused,
 * one megatrain does not know is named in a warning. */
static mt_status check_fields(const mt_json_src *s) {
    const char *key;
    const json_t *v;
    char unknown[512] = "";
    size_t at = 0;
    int count = 0;
    json_object_foreach((json_t *)s->obj, key, v) {
        int neutral_known = 0;
        for (int i = 0; neutral_fields[i].name; i++) {
            if (strcmp(key, neutral_fields[i].name)) continue;
            neutral_known = 1;
            if (json_is_null(v) || (json_is_number(v) && json_number_value(v) == neutral_fields[i].neutral)) continue;
            if (!json_is_number(v)) return mt_json_wrong_type(s, key, "a number", v);
            return mt_fail(MT_ERR_INVALID, "%s: field '%s' = %g is not supported (megatrain trains without dropout: "
                           "%g only)", s->source, key, json_number_value(v), neutral_fields[i].neutral);
        }
        if (neutral_known || known(key) || listed(metadata_fields, key)) continue;
        if (count++ < 8 && at < sizeof unknown)
            at += (size_t)snprintf(unknown + at, sizeof unknown - at, "%s%s", count > 1 ? ", " : "", key);
    }
    if (count)
        mt_log_warn("%s: field%s megatrain does not know, taken as if absent: %s%s", s->source, count > 1 ? "s" : "",
                    unknown, count > 8 ? ", ..." : "");
    return MT_OK;
}

static int holds_mxfp4(const mt_family *f) {
    for (int k = 0; f->names && k < MT_T_COUNT; k++)
        if (f->names->form[k].mxfp4) return 1;
    return 0;
}

/* quantization_config: MXFP4 where the family's checkpoints hold roles in it (gpt-oss's experts,
 * decoded as they load: io/hub_form.h); any other method, or any family else, refused. */
static mt_status check_quantization(const mt_json_src *s, const mt_family *f) {
    const json_t *q = mt_json_field(s, "quantization_config");
    if (!q || json_is_null(q)) return MT_OK;
    const json_t *method = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
    if (!json_is_string(method))
        return mt_json_wrong_type(s, "quantization_config", "an object with a string 'quant_method'", q);
    const char *m = json_string_value(method);
    if (strcmp(m, "mxfp4"))
        return mt_fail(MT_ERR_INVALID, "%s: field 'quantization_config': quant_method '%s' is not supported (mxfp4 "
                       "only, for %s)", s->source, m, holds_mxfp4(f) ? f->architecture : "gpt-oss");
    if (!holds_mxfp4(f))
        return mt_fail(MT_ERR_INVALID, "%s: field 'quantization_config': %s checkpoints are not quantized (MXFP4 is "
                       "read for gpt-oss's experts only)", s->source, f->architecture);
    return MT_OK;
}

static mt_status check_unsupported(const mt_json_src *s, const mt_family *f) {
    const char *act = f->hidden_act;
    int mlp_bias = 0;
    MT_TRY(mt_json_get_string(s, "hidden_act", &act));
    if (strcmp(act, f->hidden_act))
        return mt_fail(MT_ERR_INVALID, "%s: field 'hidden_act' = '%s' is not supported (%s only)", s->source, act,
                       f->hidden_act);
    MT_TRY(mt_json_get_bool(s, "mlp_bias", &mlp_bias));
    if (mlp_bias) return mt_fail(MT_ERR_INVALID, "%s: field 'mlp_bias' = true is not supported", s->source);
    return check_quantization(s, f);
}

static mt_status parse_root(const mt_json_src *s, mt_config *cfg) {
    const mt_family *f = NULL;
    MT_TRY(parse_family(s, &f));
    MT_TRY(check_fields(s));
    MT_TRY(check_unsupported(s, f));
    memset(cfg, 0, sizeof *cfg);
    cfg->arch = f->arch;
    cfg->max_position = f->default_max_position;
    cfg->rms_norm_eps = f->default_eps;
    cfg->rope_theta = f->default_theta;
    cfg->bos_token_id = cfg->eos_token_id = -1;
    cfg->num_kv_heads = cfg->head_dim = 0; /* 0: derived below */
    MT_TRY(mt_json_get_int(s, "hidden_size", 1, &cfg->hidden_size));
    MT_TRY(mt_json_get_int(s, "intermediate_size", !f->experts_only, &cfg->intermediate_size));
    MT_TRY(mt_json_get_int(s, "num_hidden_layers", 1, &cfg->num_layers));
    MT_TRY(mt_json_get_int(s, "num_attention_heads", 1, &cfg->num_heads));
    MT_TRY(mt_json_get_int(s, "vocab_size", 1, &cfg->vocab_size));
    MT_TRY(mt_json_get_int(s, "num_key_value_heads", 0, &cfg->num_kv_heads));
    MT_TRY(mt_json_get_int(s, "head_dim", 0, &cfg->head_dim));
    MT_TRY(mt_json_get_int(s, "max_position_embeddings", 0, &cfg->max_position));
    MT_TRY(mt_json_get_float(s, "rms_norm_eps", 0, &cfg->rms_norm_eps));
    MT_TRY(mt_json_get_float(s, "rope_theta", 0, &cfg->rope_theta));
    MT_TRY(mt_json_get_bool(s, "tie_word_embeddings", &cfg->tie_embeddings));
    MT_TRY(f->read(s, cfg));
    MT_TRY(mt_json_get_token_id(s, "bos_token_id", &cfg->bos_token_id));
    MT_TRY(mt_json_get_token_id(s, "eos_token_id", &cfg->eos_token_id));
    MT_TRY(mt_rope_config_read(s, cfg));
    if (cfg->num_kv_heads == 0) cfg->num_kv_heads = cfg->num_heads;
    if (cfg->head_dim == 0) cfg->head_dim = f->default_head_dim;
    if (cfg->head_dim == 0 && cfg->num_heads > 0) cfg->head_dim = cfg->hidden_size / cfg->num_heads;
    mt_status st = mt_config_validate(cfg);
    return st == MT_OK ? MT_OK : mt_fail_context(st, "%s", s->source);
}

/* The wrapper a config.json names: by architectures[0], or where it has none by model_type. */
static const mt_wrapper *wrapper_of(const json_t *doc) {
    const json_t *first = json_array_get(json_object_get(doc, "architectures"), 0),
                 *type = json_object_get(doc, "model_type");
    if (json_is_string(first)) return mt_wrapper_find(json_string_value(first), NULL);
    return json_is_string(type) ? mt_wrapper_find(NULL, json_string_value(type)) : NULL;
}

/* A wrapper's config.json (model/wrappers.h): the text model's config nested under its key, read
 * as its family's with the wrapper's text defaults where it is silent. The rest is the wrapper's
 * own, which megatrain does not compute: written back as it was (mt_hf_config_write_wrapped). */
static mt_status parse_wrapped(const mt_json_src *s, const mt_wrapper *w, mt_config *cfg) {
    const char *model_type = NULL;
    MT_TRY(mt_json_get_string(s, "model_type", &model_type));
    if (model_type && strcmp(model_type, w->model_type))
        return mt_fail(MT_ERR_INVALID, "%s: field 'model_type' ('%s') disagrees with architectures[0] ('%s')",
                       s->source, model_type, w->architecture);
    const json_t *text = mt_json_field(s, w->text_key);
    if (!text)
        return mt_fail(MT_ERR_INVALID, "%s: required field '%s' is missing (%s holds its text model's config "
                       "there)", s->source, w->text_key, w->architecture);
    if (!json_is_object(text)) return mt_json_wrong_type(s, w->text_key, "an object", text);
    json_t *merged = json_loads(w->text_defaults, 0, NULL);
    char source[4096];
    snprintf(source, sizeof source, "%s (%s)", s->source, w->text_key);
    if (!merged || json_object_update(merged, (json_t *)text) != 0 ||
        json_object_set_new(merged, "architectures", json_pack("[s]", w->text_architecture)) != 0) {
        json_decref(merged);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot read it", source);
    }
    mt_json_src t = {source, merged, ""};
    mt_status st = parse_root(&t, cfg);
    json_decref(merged);
    return st;
}

static mt_status parse_any(const mt_json_src *s, mt_config *cfg) {
    const mt_wrapper *w = wrapper_of(s->obj);
    return w ? parse_wrapped(s, w, cfg) : parse_root(s, cfg);
}

/* Takes ownership of `root`, the document jansson parsed (NULL when it failed, with `err`). */
static mt_status parse_document(json_t *root, const json_error_t *err, const char *source, mt_config *cfg) {
    if (!root)
        return mt_fail(MT_ERR_INVALID, "%s: not readable as JSON: %s (line %d, column %d)", source, err->text,
                       err->line, err->column);
    mt_json_src s = {source, root, ""};
    mt_status st = json_is_object(root)
                       ? parse_any(&s, cfg)
                       : mt_fail(MT_ERR_INVALID, "%s: must hold a JSON object, found %s", source, mt_json_kind(root));
    json_decref(root);
    return st;
}

mt_status mt_hf_config_parse(const char *text, size_t len, const char *source, mt_config *cfg) {
    json_error_t err;
    return parse_document(json_loadb(text, len, JSON_REJECT_DUPLICATES, &err), &err, source, cfg);
}

mt_status mt_hf_config_read(const char *path, mt_config *cfg) {
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    /* jansson's text already says "unable to open <path>: <strerror>"; this is I/O, not bad JSON. */
    if (!root && json_error_code(&err) == json_error_cannot_open_file) return mt_fail(MT_ERR_IO, "%s", err.text);
    return parse_document(root, &err, path, cfg);
}

static json_t *config_json(const mt_config *c, const mt_family *f, const char *torch_dtype) {
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", f->architecture));
    json_object_set_new(o, "model_type", json_string(f->model_type));
    json_object_set_new(o, "torch_dtype", json_string(torch_dtype));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->num_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->num_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position));
    json_object_set_new(o, "rms_norm_eps", mt_json_float(c->rms_norm_eps));
    json_object_set_new(o, "rope_theta", mt_json_float(c->rope_theta));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    json_object_set_new(o, "hidden_act", json_string(f->hidden_act));
    f->write(c, o);
    json_object_set_new(o, "bos_token_id", mt_json_token_id(c->bos_token_id));
    json_object_set_new(o, "eos_token_id", mt_json_token_id(c->eos_token_id));
    mt_rope_config_write(c, o);
    return o;
}

static json_t *generation_config_json(const mt_config *c) {
    json_t *o = json_object();
    json_object_set_new(o, "_from_model_config", json_true());
    if (c->bos_token_id >= 0) json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    if (c->eos_token_id >= 0) json_object_set_new(o, "eos_token_id", json_integer(c->eos_token_id));
    return o;
}

/* Writes `doc` to dir/name and drops the reference to it. */
static mt_status dump(json_t *doc, const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = doc ? json_dump_file(doc, path, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : -1;
    json_decref(doc);
    if (rc != 0) return mt_fail(MT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return MT_OK;
}

json_t *mt_hf_config_to_json(const mt_config *cfg, const char *torch_dtype) {
    const mt_family *f = mt_family_of(cfg->arch);
    return f ? config_json(cfg, f, torch_dtype) : NULL;
}

mt_status mt_hf_config_from_json(const json_t *doc, const char *source, mt_config *cfg) {
    if (!json_is_object(doc))
        return mt_fail(MT_ERR_INVALID, "%s: must hold a JSON object, found %s", source, doc ? mt_json_kind(doc) : "nothing");
    mt_json_src s = {source, doc, ""};
    return parse_any(&s, cfg);
}

mt_status mt_hf_config_wrapper(const char *path, const mt_wrapper **w) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) return mt_fail(MT_ERR_IO, "%s: %s", path, err.text);
    *w = wrapper_of(root);
    json_decref(root);
    return MT_OK;
}

/* The wrapper's config.json with its text model's config this one (without the architectures the
 * hub's nested configs do not name) and, where it names one, its dtype the weights'. */
static json_t *wrapped_json(const json_t *wrapper, const mt_config *c, const mt_family *f, const char *torch_dtype) {
    const mt_wrapper *w = wrapper_of(wrapper);
    json_t *doc = w ? json_deep_copy(wrapper) : NULL, *text = doc ? config_json(c, f, torch_dtype) : NULL;
    if (!text) {
        json_decref(doc);
        return NULL;
    }
    json_object_del(text, "architectures");
    json_object_set_new(doc, w->text_key, text);
    static const char *const dtype_keys[] = {"torch_dtype", "dtype"};
    for (size_t i = 0; i < sizeof dtype_keys / sizeof *dtype_keys; i++)
        if (json_object_get(doc, dtype_keys[i])) json_object_set_new(doc, dtype_keys[i], json_string(torch_dtype));
    return doc;
}

mt_status mt_hf_config_write_wrapped(const mt_config *cfg, const char *torch_dtype, const json_t *wrapper,
                                     const char *dir) {
    const mt_family *f = mt_family_of(cfg->arch);
    if (!f) return mt_fail(MT_ERR_INVALID, "%s/config.json: unknown architecture %d", dir, (int)cfg->arch);
    json_t *doc = wrapper ? wrapped_json(wrapper, cfg, f, torch_dtype) : config_json(cfg, f, torch_dtype);
    if (!doc && wrapper)
        return mt_fail(MT_ERR_INVALID, "%s/config.json: the config.json it wraps the model in names no wrapper "
                       "megatrain knows (%s)", dir, mt_wrapper_architectures());
    MT_TRY(dump(doc, dir, "config.json"));
    return dump(generation_config_json(cfg), dir, "generation_config.json");
}

mt_status mt_hf_config_write(const mt_config *cfg, const char *torch_dtype, const char *dir) {
    return mt_hf_config_write_wrapped(cfg, torch_dtype, NULL, dir);
}
