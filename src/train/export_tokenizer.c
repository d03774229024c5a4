#include "train/export_tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/tokenize_chat.h"
#include "tokenizer/tokenizer.h"
#include "train/run_inputs.h"
#include "train/run_state.h"

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static mt_status read_whole(const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: %s", path, strerror(errno));
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    *text = size >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)size + 1) : NULL;
    int bad = !*text || fread(*text, 1, (size_t)size, f) != (size_t)size;
    fclose(f);
    if (bad) {
        free(*text);
        *text = NULL;
        return mt_fail(MT_ERR_IO, "%s: read failed", path);
    }
    *len = (size_t)size;
    return MT_OK;
}

/* Adds a file the export writes, taking `text` (malloc'd). */
static void add(mt_export_tokenizer *t, const char *name, char *text, size_t len) {
    t->text[t->n_files] = text;
    t->files[t->n_files++] = (mt_hf_file){name, text, len};
}

static mt_status add_json(mt_export_tokenizer *t, const char *name, const json_t *doc) {
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    if (!text) return mt_fail(MT_ERR_NOMEM, "cannot write the export's %s", name);
    add(t, name, text, strlen(text));
    return MT_OK;
}

/* The source's JSON file, or an empty object where it has none. Integers too large for
 * jansson (model_max_length written out as 1e30's digits) are read as reals. */
static mt_status load_json(const char *path, json_t **doc) {
    json_error_t err;
    *doc = is_file(path) ? json_load_file(path, 0, &err) : json_object();
    if (!*doc && is_file(path)) *doc = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    if (!*doc) return mt_fail(MT_ERR_INVALID, "%s: line %d column %d: %s", path, err.line, err.column, err.text);
    if (!json_is_object(*doc)) {
        json_decref(*doc);
        return mt_fail(MT_ERR_INVALID, "%s: must hold a JSON object", path);
    }
    return MT_OK;
}

/* tokenizer_config.json's special tokens as special_tokens_map.json lists them. */
static json_t *special_tokens_map(const json_t *config) {
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    json_t *map = json_object();
    for (size_t i = 0; map && i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(config, keys[i]);
        if (json_is_string(v) || json_is_object(v)) json_object_set(map, keys[i], v);
    }
    return map;
}

/* The run's chat template: its --chat-template file, else the tokenizer's own (NULL: none). */
static mt_status run_template(const json_t *settings, const mt_tokenizer *tok, const char *checkpoint, char **text) {
    const json_t *file = json_object_get(settings, "chat-template");
    *text = NULL;
    if (json_is_string(file)) {
        MT_TRY(mt_run_inputs_check_template(settings, json_string_value(file), checkpoint));
        return mt_chat_template_read(json_string_value(file), text);
    }
    const char *own = mt_tokenizer_chat_template(tok);
    if (own && !(*text = strdup(own))) return mt_fail(MT_ERR_NOMEM, "cannot copy a chat template");
    return MT_OK;
}

/* The ids generation ends at: eos, and the end of a turn of a template megatrain knows. */
static void stop_ids(mt_export_tokenizer *t, const mt_tokenizer *tok, const char *template) {
    if (mt_tokenizer_eos(tok) >= 0) t->stop_ids[t->n_stop_ids++] = mt_tokenizer_eos(tok);
    int32_t bos = mt_tokenizer_bos(tok), eos = mt_tokenizer_eos(tok);
    mt_chat_template known;
    if (!template || mt_chat_template_parse(template, bos >= 0 ? mt_tokenizer_token(tok, bos) : NULL,
                                            eos >= 0 ? mt_tokenizer_token(tok, eos) : NULL, "", &known) != MT_OK)
        return; /* a template megatrain does not render is exported as it is, its end of turn unknown */
    int32_t end = mt_tokenizer_token_id(tok, mt_chat_turn_end(&known));
    if (end >= 0 && end != mt_tokenizer_eos(tok)) t->stop_ids[t->n_stop_ids++] = end;
    mt_chat_template_free(&known);
}

static mt_status read_files(const char *checkpoint, const json_t *settings, const char *source,
                            mt_export_tokenizer *t) {
    char json_path[PATH_MAX + 32], dir[PATH_MAX + 32], path[PATH_MAX + 64];
    struct stat st;
    snprintf(json_path, sizeof json_path, stat(source, &st) == 0 && S_ISDIR(st.st_mode) ? "%s/tokenizer.json" : "%s",
             source);
    const char *slash = strrchr(json_path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - json_path) : 1, slash ? json_path : ".");
    mt_tokenizer *tok;
    MT_TRY(mt_tokenizer_load(source, &tok));
    char *text = NULL, *template = NULL;
    size_t len = 0;
    json_t *config = NULL, *map = NULL;
    mt_status st_ = read_whole(json_path, &text, &len);
    if (st_ == MT_OK) add(t, "tokenizer.json", text, len);
    if (st_ == MT_OK) st_ = run_template(settings, tok, checkpoint, &template);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (st_ == MT_OK) st_ = load_json(path, &config);
    if (st_ == MT_OK && !is_file(path)) {
        int32_t bos = mt_tokenizer_bos(tok), eos = mt_tokenizer_eos(tok);
        if (bos >= 0) json_object_set_new(config, "bos_token", json_string(mt_tokenizer_token(tok, bos)));
        if (eos >= 0) json_object_set_new(config, "eos_token", json_string(mt_tokenizer_token(tok, eos)));
    }
    /* The run's template, unless it is the source's own list of named templates. */
    int named_list = json_is_array(json_object_get(config, "chat_template")) &&
                     !json_is_string(json_object_get(settings, "chat-template"));
    if (st_ == MT_OK && template && !named_list) json_object_set_new(config, "chat_template", json_string(template));
    if (st_ == MT_OK) st_ = add_json(t, "tokenizer_config.json", config);
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    if (st_ == MT_OK) st_ = is_file(path) ? load_json(path, &map) : MT_OK;
    if (st_ == MT_OK && !map && !(map = special_tokens_map(config)))
        st_ = mt_fail(MT_ERR_NOMEM, "cannot build special_tokens_map.json");
    if (st_ == MT_OK) st_ = add_json(t, "special_tokens_map.json", map);
    if (st_ == MT_OK && template) {
        add(t, "chat_template.jinja", template, strlen(template));
        stop_ids(t, tok, template);
        template = NULL;
    } else if (st_ == MT_OK) {
        stop_ids(t, tok, NULL);
    }
    free(template);
    json_decref(config);
    json_decref(map);
    mt_tokenizer_free(tok);
    return st_;
}

mt_status mt_export_tokenizer_read(const char *checkpoint, mt_export_tokenizer *out) {
    *out = (mt_export_tokenizer){0};
    char source[4096];
    MT_TRY(mt_run_load_tokenizer(checkpoint, source, sizeof source));
    if (!source[0]) return MT_OK;
    int64_t step;
    json_t *settings;
    MT_TRY(mt_run_read_info(checkpoint, &step, &settings));
    mt_status st = mt_run_inputs_check_tokenizer(settings, source, checkpoint);
    if (st == MT_OK) st = read_files(checkpoint, settings, source, out);
    json_decref(settings);
    if (st != MT_OK) mt_export_tokenizer_free(out);
    return st;
}

void mt_export_tokenizer_free(mt_export_tokenizer *t) {
    for (size_t i = 0; i < t->n_files; i++) free(t->text[i]);
    *t = (mt_export_tokenizer){0};
}
