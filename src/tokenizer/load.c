/* Loading: tokenizer.json's components (each parsed by its own file), tokenizer_config.json's
 * BOS/EOS, add_bos_token and chat template, chat_template.jinja; the accessors of the public API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/internal.h"
#include "tokenizer/utf8.h"

mt_status mt_json_string(const json_t *obj, const char *key, int required, const char *what, const char **out) {
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return required ? mt_fail(MT_ERR_INVALID, "%s: field '%s' is missing", what, key) : MT_OK;
    if (!json_is_string(v))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' must be a string, found %s", what, key, mt_json_kind(v));
    if (strlen(json_string_value(v)) != json_string_length(v))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' holds a NUL character", what, key);
    *out = json_string_value(v);
    return MT_OK;
}

mt_status mt_json_bool(const json_t *obj, const char *key, int fallback, const char *what, int *out) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = fallback;
        return MT_OK;
    }
    if (!json_is_boolean(v))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' must be a boolean, found %s", what, key, mt_json_kind(v));
    *out = json_is_true(v);
    return MT_OK;
}

mt_status mt_json_pattern(const json_t *obj, const char *key, const char *what, mt_regex *re, int *empty) {
    const json_t *p = json_object_get(obj, key);
    if (!json_is_object(p))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' must be an object {\"String\": ...} or {\"Regex\": ...}",
                       what, key);
    const json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    const json_t *v = s ? s : r;
    if (!v || !json_is_string(v) || (s && r))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' must hold one string under \"String\" or \"Regex\"", what,
                       key);
    *empty = json_string_length(v) == 0;
    if (*empty) return MT_OK;
    return mt_regex_compile(re, json_string_value(v), json_string_length(v), s != NULL, what);
}

mt_status mt_json_char(const json_t *obj, const char *key, const char *fallback, const char *what, char out[5],
                       size_t *len) {
    const char *s;
    MT_TRY(mt_json_string(obj, key, fallback == NULL, what, &s));
    if (!s) s = fallback;
    size_t n = strlen(s), cp_len = 0;
    if (n) mt_utf8_decode(s, n, &cp_len);
    if (n == 0 || cp_len != n || mt_utf8_check(s, n, NULL))
        return mt_fail(MT_ERR_INVALID, "%s: field '%s' must be one character, found \"%s\"", what, key, s);
    memcpy(out, s, n);
    out[n] = 0;
    *len = n;
    return MT_OK;
}

mt_status mt_json_steps(mt_tokenizer *tok, const json_t *spec, const char *kind, const char *list_key,
                        const char *what, mt_step_parser parse) {
    if (!json_is_object(spec))
        return mt_fail(MT_ERR_INVALID, "%s: a %s must be an object, found %s", what, kind, mt_json_kind(spec));
    const char *type;
    MT_TRY(mt_json_string(spec, "type", 1, what, &type));
    if (strcmp(type, "Sequence")) return parse(tok, spec, type, what);
    const json_t *list = json_object_get(spec, list_key);
    if (!json_is_array(list))
        return mt_fail(MT_ERR_INVALID, "%s: Sequence %s needs a '%s' list", what, kind, list_key);
    size_t i;
    const json_t *item;
    json_array_foreach(list, i, item) MT_TRY(mt_json_steps(tok, item, kind, list_key, what, parse));
    return MT_OK;
}

mt_status mt_array_append(void *array_ptr, size_t *n, size_t size, const void *item, const char *what) {
    void *array;
    memcpy(&array, array_ptr, sizeof array);
    char *grown = realloc(array, (*n + 1) * size);
    if (!grown) return mt_fail(MT_ERR_NOMEM, "%s: cannot grow a list to %zu entries", what, *n + 1);
    memcpy(grown + *n * size, item, size);
    memcpy(array_ptr, &grown, sizeof grown);
    ++*n;
    return MT_OK;
}

mt_status mt_str_reserve(mt_str *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return MT_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) return mt_fail(MT_ERR_NOMEM, "tokenizer: cannot grow a string to %zu bytes", cap);
    b->s = s;
    b->cap = cap;
    b->s[b->len] = 0; /* always a C string, even before anything is put */
    return MT_OK;
}

mt_status mt_str_put(mt_str *b, const char *s, size_t n) {
    MT_TRY(mt_str_reserve(b, n));
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return MT_OK;
}

void mt_str_free(mt_str *b) {
    free(b->s);
    *b = (mt_str){0};
}

/* ---- ids and strings ---- */

int32_t mt_tokenizer_token_id(const mt_tokenizer *tok, const char *token) {
    size_t len = strlen(token);
    for (size_t i = 0; i < tok->added.n; i++)
        if (tok->added.tokens[i].len == len && !memcmp(tok->added.tokens[i].content, token, len))
            return tok->added.tokens[i].id;
    return mt_strmap_get(&tok->bpe.vocab, token, len);
}

/* The per-id string table: model tokens, then added tokens over them (as tokenizers looks an id up
 * in the added vocabulary first). */
static mt_status build_id_table(mt_tokenizer *tok) {
    uint32_t size = 0;
    const mt_strmap *v = &tok->bpe.vocab;
    for (size_t i = 0; i <= v->mask; i++)
        if (v->slots[i].value >= 0 && (uint32_t)v->slots[i].value + 1 > size) size = (uint32_t)v->slots[i].value + 1;
    for (size_t i = 0; i < tok->added.n; i++)
        if ((uint32_t)tok->added.tokens[i].id + 1 > size) size = (uint32_t)tok->added.tokens[i].id + 1;
    if (size == 0) return mt_fail(MT_ERR_INVALID, "%s: the vocabulary is empty", tok->path);
    tok->vocab_size = size;
    tok->id_text = mt_calloc(size, sizeof *tok->id_text, "the tokenizer's id table");
    tok->id_len = mt_calloc(size, sizeof *tok->id_len, "the tokenizer's id table");
    tok->id_special = mt_calloc(size, 1, "the tokenizer's id table");
    if (!tok->id_text || !tok->id_len || !tok->id_special) return MT_ERR_NOMEM;
    for (size_t i = 0; i <= v->mask; i++) {
        const mt_strmap_slot *s = &v->slots[i];
        if (s->value < 0) continue;
        tok->id_text[s->value] = v->arena + s->key_off;
        tok->id_len[s->value] = s->key_len;
    }
    for (size_t i = 0; i < tok->added.n; i++) {
        const mt_added_token *a = &tok->added.tokens[i];
        tok->id_text[a->id] = a->content;
        tok->id_len[a->id] = (uint32_t)a->len;
        tok->id_special[a->id] = (unsigned char)a->special;
    }
    return MT_OK;
}

/* ---- tokenizer_config.json ---- */

/* bos_token / eos_token: a string, or an AddedToken object with "content". -1 when unset or not in
 * the vocabulary. */
static mt_status config_token(const mt_tokenizer *tok, const json_t *cfg, const char *key, const char *what,
                              int32_t *id) {
    *id = -1;
    const json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return MT_OK;
    const char *s;
    if (json_is_object(v)) MT_TRY(mt_json_string(v, "content", 1, what, &s));
    else MT_TRY(mt_json_string(cfg, key, 1, what, &s));
    *id = mt_tokenizer_token_id(tok, s);
    return MT_OK;
}

/* chat_template: a string, or a list of {"name", "template"} of which "default" is the one used. */
static mt_status config_template(mt_tokenizer *tok, const json_t *cfg, const char *what) {
    const json_t *v = json_object_get(cfg, "chat_template");
    const char *t = NULL;
    if (!v || json_is_null(v)) return MT_OK;
    if (json_is_string(v)) {
        MT_TRY(mt_json_string(cfg, "chat_template", 1, what, &t));
    } else if (json_is_array(v)) {
        size_t i;
        const json_t *item;
        json_array_foreach(v, i, item) {
            const char *name;
            if (!json_is_object(item))
                return mt_fail(MT_ERR_INVALID, "%s: chat_template[%zu] must be an object, found %s", what, i,
                               mt_json_kind(item));
            MT_TRY(mt_json_string(item, "name", 1, what, &name));
            if (!strcmp(name, "default")) MT_TRY(mt_json_string(item, "template", 1, what, &t));
        }
    } else {
        return mt_fail(MT_ERR_INVALID, "%s: field 'chat_template' must be a string or a list, found %s", what,
                       mt_json_kind(v));
    }
    if (t && (!(tok->chat_template = strdup(t)) || !(tok->chat_template_source = strdup(what))))
        return mt_fail(MT_ERR_NOMEM, "%s: cannot copy chat_template", what);
    return MT_OK;
}

mt_status mt_chat_template_read(const char *path, char **text) {
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_INVALID, "%s: %s", path, strerror(errno)); /* a file the user named */
    char *buf = NULL;
    size_t len = 0;
    ssize_t got = getdelim(&buf, &len, '\0', f);
    int bad = ferror(f), more = got >= 0 && fgetc(f) != EOF;
    fclose(f);
    size_t n = got > 0 ? (size_t)got : 0, at;
    if (n == 0) { /* an empty file: getdelim's buffer, if any, holds nothing read */
        free(buf);
        buf = NULL;
    }
    mt_status st = MT_OK;
    if (bad) st = mt_fail(MT_ERR_IO, "%s: read failed", path);
    else if (more || (n && buf[n - 1] == '\0')) st = mt_fail(MT_ERR_INVALID, "%s: a chat template holds a NUL byte", path);
    else if (n && mt_utf8_check(buf, n, &at)) st = mt_fail(MT_ERR_INVALID, "%s: invalid UTF-8 at byte %zu", path, at);
    else if (!buf && !(buf = strdup(""))) st = mt_fail(MT_ERR_NOMEM, "%s: cannot hold the chat template", path);
    if (st != MT_OK) free(buf);
    else *text = buf;
    return st;
}

/* chat_template.jinja beside tokenizer.json, where transformers now saves the template: it wins over
 * tokenizer_config.json's, as transformers' loading does. */
static mt_status template_file(mt_tokenizer *tok, const char *dir) {
    char *path = NULL;
    struct stat st;
    if (asprintf(&path, "%s/chat_template.jinja", dir) < 0) return mt_fail(MT_ERR_NOMEM, "%s: cannot copy the path", dir);
    if (stat(path, &st) != 0) {
        free(path);
        return MT_OK;
    }
    char *text;
    mt_status status = mt_chat_template_read(path, &text);
    if (status == MT_OK) {
        free(tok->chat_template);
        free(tok->chat_template_source);
        tok->chat_template = text;
        tok->chat_template_source = path;
    } else {
        free(path);
    }
    return status;
}

static mt_status load_config(mt_tokenizer *tok, const char *path, int *has_add_bos) {
    struct stat st;
    *has_add_bos = 0;
    if (stat(path, &st) != 0) return MT_OK; /* optional */
    json_error_t jerr;
    /* Integers as reals: model_max_length is often 1e30 written out, too big for an integer. */
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &jerr);
    if (!cfg) return mt_fail(MT_ERR_INVALID, "%s: line %d column %d: %s", path, jerr.line, jerr.column, jerr.text);
    mt_status st_ = MT_OK;
    if (!json_is_object(cfg)) st_ = mt_fail(MT_ERR_INVALID, "%s: must hold a JSON object", path);
    if (!st_) st_ = config_token(tok, cfg, "bos_token", path, &tok->bos);
    if (!st_) st_ = config_token(tok, cfg, "eos_token", path, &tok->eos);
    if (!st_ && json_object_get(cfg, "add_bos_token") && !json_is_null(json_object_get(cfg, "add_bos_token"))) {
        *has_add_bos = 1;
        st_ = mt_json_bool(cfg, "add_bos_token", 0, path, &tok->adds_bos);
    }
    if (!st_) st_ = config_template(tok, cfg, path);
    json_decref(cfg);
    return st_;
}

/* Whether the post-processor (or a member of a Sequence of them) is a TemplateProcessing whose
 * single-sequence template starts with a special token; sets *first to that token's id. */
static int template_starts_with_special(const mt_tokenizer *tok, const json_t *pp, int32_t *first) {
    if (!json_is_object(pp)) return 0;
    const json_t *type = json_object_get(pp, "type");
    if (json_is_string(type) && !strcmp(json_string_value(type), "Sequence")) {
        size_t i;
        const json_t *item;
        json_array_foreach(json_object_get(pp, "processors"), i, item)
            if (template_starts_with_special(tok, item, first)) return 1;
        return 0;
    }
    if (!json_is_string(type) || strcmp(json_string_value(type), "TemplateProcessing")) return 0;
    const json_t *special = json_object_get(json_array_get(json_object_get(pp, "single"), 0), "SpecialToken");
    const json_t *id = json_object_get(special, "id");
    if (!json_is_string(id)) return 0;
    *first = mt_tokenizer_token_id(tok, json_string_value(id));
    return 1;
}

/* ---- load ---- */

static mt_status parse_root(mt_tokenizer *tok, const json_t *root) {
    if (!json_is_object(root)) return mt_fail(MT_ERR_INVALID, "%s: must hold a JSON object", tok->path);
    /* The normalizer first: normalized added tokens are matched in their normalized form. */
    MT_TRY(mt_norm_parse(tok, json_object_get(root, "normalizer")));
    MT_TRY(mt_pre_parse(tok, json_object_get(root, "pre_tokenizer")));
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return mt_fail(MT_ERR_INVALID, "%s: field 'model' must be an object, found %s", tok->path,
                       model ? mt_json_kind(model) : "nothing");
    MT_TRY(mt_bpe_parse(tok, model));
    MT_TRY(mt_added_parse(tok, json_object_get(root, "added_tokens")));
    tok->cut = mt_cut_analyse(tok);
    MT_TRY(mt_dec_parse(tok, json_object_get(root, "decoder")));
    return build_id_table(tok);
}

static mt_status load(mt_tokenizer *tok, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return mt_fail(MT_ERR_IO, "%s: %s", path, strerror(errno));
    char *dir;
    if (S_ISDIR(st.st_mode)) {
        dir = strdup(path);
        if (dir && asprintf(&tok->path, "%s/tokenizer.json", path) < 0) tok->path = NULL;
    } else {
        tok->path = strdup(path);
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    }
    if (!dir || !tok->path) {
        free(dir);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot copy the path", path);
    }
    char *config = NULL;
    if (asprintf(&config, "%s/tokenizer_config.json", dir) < 0) config = NULL;
    if (!config) {
        free(dir);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot copy the path", path);
    }

    mt_status status = MT_OK;
    json_error_t jerr;
    json_t *root = json_load_file(tok->path, 0, &jerr);
    if (!root) {
        status = stat(tok->path, &st) != 0
                     ? mt_fail(MT_ERR_IO, "%s: %s", tok->path, strerror(errno))
                     : mt_fail(MT_ERR_INVALID, "%s: line %d column %d: %s", tok->path, jerr.line, jerr.column, jerr.text);
    }
    if (!status) status = parse_root(tok, root);
    int has_add_bos = 0;
    tok->bos = tok->eos = -1;
    if (!status) status = load_config(tok, config, &has_add_bos);
    if (!status) status = template_file(tok, dir);
    if (!status) {
        int32_t first = -1;
        int templ = template_starts_with_special(tok, json_object_get(root, "post_processor"), &first);
        if (!has_add_bos) tok->adds_bos = templ;
        if (tok->bos < 0 && templ) tok->bos = first;
        static const char *const eot_names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};
        tok->eot = -1;
        for (size_t i = 0; i < sizeof eot_names / sizeof *eot_names && tok->eot < 0; i++)
            tok->eot = mt_tokenizer_token_id(tok, eot_names[i]);
        if (tok->eot < 0) tok->eot = tok->eos;
    }
    json_decref(root);
    free(config);
    free(dir);
    return status;
}

mt_status mt_tokenizer_load(const char *path, mt_tokenizer **out) {
    *out = NULL;
    mt_tokenizer *tok = mt_calloc(1, sizeof *tok, "a tokenizer");
    if (!tok) return MT_ERR_NOMEM;
    mt_status status = load(tok, path);
    if (status) {
        mt_tokenizer_free(tok);
        return status;
    }
    *out = tok;
    return MT_OK;
}

void mt_tokenizer_free(mt_tokenizer *tok) {
    if (!tok) return;
    mt_norm_free(tok);
    mt_pre_free(tok);
    mt_dec_free(tok);
    mt_added_free(&tok->added);
    mt_bpe_free(&tok->bpe);
    free(tok->id_text);
    free(tok->id_len);
    free(tok->id_special);
    free(tok->chat_template);
    free(tok->chat_template_source);
    free(tok->path);
    free(tok);
}

const char *mt_tokenizer_token(const mt_tokenizer *tok, int32_t id) {
    return id >= 0 && (uint32_t)id < tok->vocab_size ? tok->id_text[id] : NULL;
}

int mt_tokenizer_is_special(const mt_tokenizer *tok, int32_t id) {
    return id >= 0 && (uint32_t)id < tok->vocab_size && tok->id_special[id];
}

uint32_t mt_tokenizer_vocab_size(const mt_tokenizer *tok) { return tok->vocab_size; }
int32_t mt_tokenizer_bos(const mt_tokenizer *tok) { return tok->bos; }
int32_t mt_tokenizer_eos(const mt_tokenizer *tok) { return tok->eos; }
int32_t mt_tokenizer_eot(const mt_tokenizer *tok) { return tok->eot; }
int mt_tokenizer_adds_bos(const mt_tokenizer *tok) { return tok->adds_bos; }
const char *mt_tokenizer_chat_template(const mt_tokenizer *tok) { return tok->chat_template; }
const char *mt_tokenizer_chat_template_source(const mt_tokenizer *tok) { return tok->chat_template_source; }
const char *mt_tokenizer_path(const mt_tokenizer *tok) { return tok->path; }
