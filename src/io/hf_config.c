#include "io/hf_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "model/families.h"
#include "model/rope_config.h"
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
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' = '%s' is not supported (%s)", s->source,
                       architecture ? "architectures" : "model_type", architecture ? architecture : model_type,
                       mt_family_architectures());
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

static mt_status check_unsupported(const mt_json_src *s, const mt_family *f) {
    const char *act = f->hidden_act;
    int mlp_bias = 0;
    MT_TRY(mt_json_get_string(s, "hidden_act", &act));
    if (strcmp(act, f->hidden_act))
        return mt_fail(MT_ERR_INVALID, "%s: field 'hidden_act' = '%s' is not supported (%s only)", s->source, act,
                       f->hidden_act);
    MT_TRY(mt_json_get_bool(s, "mlp_bias", &mlp_bias));
    if (mlp_bias) return mt_fail(MT_ERR_INVALID, "%s: field 'mlp_bias' = true is not supported", s->source);
    if (mt_json_field(s, "quantization_config"))
        return mt_fail(MT_ERR_INVALID, "%s: field 'quantization_config': quantized checkpoints are not supported",
                       s->source);
    return MT_OK;
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

/* Takes ownership of `root`, the document jansson parsed (NULL when it failed, with `err`). */
static mt_status parse_document(json_t *root, const json_error_t *err, const char *source, mt_config *cfg) {
    if (!root)
        return mt_fail(MT_ERR_INVALID, "%s: not readable as JSON: %s (line %d, column %d)", source, err->text,
                       err->line, err->column);
    mt_json_src s = {source, root, ""};
    mt_status st = json_is_object(root)
                       ? parse_root(&s, cfg)
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
    return parse_root(&s, cfg);
}

mt_status mt_hf_config_write(const mt_config *cfg, const char *torch_dtype, const char *dir) {
    const mt_family *f = mt_family_of(cfg->arch);
    if (!f) return mt_fail(MT_ERR_INVALID, "%s/config.json: unknown architecture %d", dir, (int)cfg->arch);
    MT_TRY(dump(config_json(cfg, f, torch_dtype), dir, "config.json"));
    return dump(generation_config_json(cfg), dir, "generation_config.json");
}
