#include "train/run_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "train/option_table.h"
#include "util/status.h"

static mt_status keep(mt_run_file_strings *s, const char *text, size_t len, char **out) {
    char **grown = realloc(s->v, (s->n + 1) * sizeof *grown);
    char *copy = malloc(len + 1);
    if (grown) s->v = grown;
    if (!grown || !copy) {
        free(copy);
        return mt_fail(MT_ERR_NOMEM, "cannot hold a run file's values");
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    s->v[s->n++] = copy;
    *out = copy;
    return MT_OK;
}

static const char *node_kind(const yaml_node_t *n) {
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a value";
}

static int is_null(const yaml_node_t *v) {
    const char *t = (const char *)v->data.scalar.value;
    return v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (!*t || !strcmp(t, "~") || !strcasecmp(t, "null"));
}

/* YAML 1.1's booleans, which a flag takes. */
static int boolean(const char *t, int *value) {
    static const char *const yes[] = {"true", "yes", "on", "y"}, *const no[] = {"false", "no", "off", "n"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(t, yes[i])) return *value = 1, 1;
        if (!strcasecmp(t, no[i])) return *value = 0, 1;
    }
    return 0;
}

/* A list for an option that takes several files (data: the datasets of a mix; val-data), joined
 * with commas as the command line gives them. */
static mt_status set_list(const char *path, yaml_document_t *doc, const yaml_node_t *v, const mt_option *opt,
                          mt_train_options *o, mt_run_file_strings *strings) {
    size_t line = v->start_mark.line + 1, len = 0;
    char joined[16384];
    for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
        yaml_node_t *item = yaml_document_get_node(doc, *i);
        if (item->type != YAML_SCALAR_NODE || is_null(item))
            return mt_fail(MT_ERR_INVALID, "%s:%zu: %s: an item of the list is %s; each is a file", path,
                           item->start_mark.line + 1, opt->name,
                           item->type == YAML_SCALAR_NODE ? "empty" : node_kind(item));
        int w = snprintf(joined + len, sizeof joined - len, "%s%s", len ? "," : "",
                         (const char *)item->data.scalar.value);
        if (w < 0 || (size_t)w >= sizeof joined - len)
            return mt_fail(MT_ERR_INVALID, "%s:%zu: %s: the list is too long", path, line, opt->name);
        len += (size_t)w;
    }
    if (!len) return mt_fail(MT_ERR_INVALID, "%s:%zu: %s: the list is empty", path, line, opt->name);
    char *kept = NULL;
    MT_TRY(keep(strings, joined, len, &kept));
    mt_status st = mt_train_option_set(o, opt->name, kept);
    return st == MT_OK ? MT_OK : mt_fail_context(st, "%s:%zu", path, line);
}

static mt_status set_key(const char *path, yaml_document_t *doc, yaml_node_pair_t *pair, mt_train_options *o,
                         mt_run_file_strings *strings, const char **seen, size_t n_seen) {
    yaml_node_t *k = yaml_document_get_node(doc, pair->key), *v = yaml_document_get_node(doc, pair->value);
    size_t line = k->start_mark.line + 1;
    if (k->type != YAML_SCALAR_NODE)
        return mt_fail(MT_ERR_INVALID, "%s:%zu: a key is %s; the keys are option names", path, line, node_kind(k));
    const char *name = (const char *)k->data.scalar.value;
    const char *bare = strncmp(name, "--", 2) ? name : name + 2;
    const mt_option *opt = mt_option_find(bare);
    if (!opt || !strcmp(bare, "help"))
        return mt_fail(MT_ERR_INVALID, "%s:%zu: unknown key '%s': the keys are the long options of 'megatrain train "
                       "--help', without the dashes", path, line, name);
    for (size_t i = 0; i < n_seen; i++)
        if (!strcmp(seen[i], opt->name))
            return mt_fail(MT_ERR_INVALID, "%s:%zu: key '%s' is given twice", path, line, name);
    if (v->type == YAML_SEQUENCE_NODE && (!strcmp(opt->name, "data") || !strcmp(opt->name, "val-data")))
        return set_list(path, doc, v, opt, o, strings);
    if (v->type != YAML_SCALAR_NODE)
        return mt_fail(MT_ERR_INVALID, "%s:%zu: %s: the value is %s; a single value goes here", path,
                       v->start_mark.line + 1, name, node_kind(v));
    if (is_null(v)) return MT_OK; /* key: (nothing): left as the default */
    const char *text = (const char *)v->data.scalar.value;
    mt_status st;
    if (opt->type == MT_OPT_FLAG) {
        int on;
        if (!boolean(text, &on))
            return mt_fail(MT_ERR_INVALID, "%s:%zu: %s: '%s' is not true or false", path, v->start_mark.line + 1,
                           name, text);
        if (!on) return MT_OK; /* a flag is off unless given */
        st = mt_train_option_set(o, opt->name, NULL);
    } else {
        char *kept = NULL;
        MT_TRY(keep(strings, text, v->data.scalar.length, &kept));
        st = mt_train_option_set(o, opt->name, kept);
    }
    if (st != MT_OK) return mt_fail_context(st, "%s:%zu", path, v->start_mark.line + 1);
    return MT_OK;
}

static mt_status read_document(const char *path, yaml_document_t *doc, mt_train_options *o,
                               mt_run_file_strings *strings) {
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) return MT_OK; /* an empty file sets nothing */
    if (root->type != YAML_MAPPING_NODE)
        return mt_fail(MT_ERR_INVALID, "%s:%zu: the run file is %s; it must be a mapping of option names to values "
                       "(steps: 1000)", path, root->start_mark.line + 1, node_kind(root));
    size_t n = (size_t)(root->data.mapping.pairs.top - root->data.mapping.pairs.start), i = 0;
    const char **seen = calloc(n ? n : 1, sizeof *seen);
    if (!seen) return mt_fail(MT_ERR_NOMEM, "cannot read a run file");
    mt_status st = MT_OK;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; st == MT_OK && p < root->data.mapping.pairs.top; p++) {
        st = set_key(path, doc, p, o, strings, seen, i);
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (st == MT_OK) {
            const char *name = (const char *)k->data.scalar.value;
            seen[i++] = mt_option_find(strncmp(name, "--", 2) ? name : name + 2)->name;
        }
    }
    free(seen);
    return st;
}

mt_status mt_run_file_read(const char *path, mt_train_options *o, mt_run_file_strings *strings) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot open the run file: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    mt_status st = MT_OK;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return mt_fail(MT_ERR_NOMEM, "cannot read a run file");
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        st = mt_fail(MT_ERR_INVALID, "%s:%zu: not YAML: %s%s%s", path, parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "unreadable", parser.context ? " " : "",
                     parser.context ? parser.context : "");
    } else {
        st = read_document(path, &doc, o, strings);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    fclose(f);
    return st;
}

void mt_run_file_free(mt_run_file_strings *strings) {
    for (size_t i = 0; i < strings->n; i++) free(strings->v[i]);
    free(strings->v);
    *strings = (mt_run_file_strings){0};
}

/* ---- writing ---- */

static int scalar(yaml_emitter_t *e, const char *text) {
    yaml_event_t ev;
    return yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text), 1, 1,
                                        YAML_ANY_SCALAR_STYLE) &&
           yaml_emitter_emit(e, &ev);
}

static int emit_settings(yaml_emitter_t *e, const mt_train_options *o) {
    yaml_event_t ev;
    if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) || !yaml_emitter_emit(e, &ev)) return 0;
    if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) || !yaml_emitter_emit(e, &ev)) return 0;
    if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) || !yaml_emitter_emit(e, &ev))
        return 0;
    for (const mt_option *opt = mt_options; opt->name; opt++) {
        int out = !strcmp(opt->name, "out");
        if ((opt->policy == MT_OPT_PROCESS && !out) || mt_option_is_unset(opt, o)) continue;
        char value[4096];
        mt_option_format(opt, o, value, sizeof value);
        if (opt->type == MT_OPT_FLAG) snprintf(value, sizeof value, "%s", strcmp(value, "0") ? "true" : "false");
        if (!scalar(e, opt->name) || !scalar(e, value)) return 0;
    }
    if (!yaml_mapping_end_event_initialize(&ev) || !yaml_emitter_emit(e, &ev)) return 0;
    if (!yaml_document_end_event_initialize(&ev, 1) || !yaml_emitter_emit(e, &ev)) return 0;
    return yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev);
}

mt_status mt_run_file_write(const char *path, const mt_train_options *o) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return mt_fail(MT_ERR_INVALID, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    fputs("# The settings this run resolved: 'megatrain train THIS-FILE --out OTHER-DIR' runs it again\n"
          "# (a flag on the command line wins over the file).\n", f);
    yaml_emitter_t e;
    int ok = yaml_emitter_initialize(&e);
    if (ok) {
        yaml_emitter_set_output_file(&e, f);
        yaml_emitter_set_unicode(&e, 1);
        ok = emit_settings(&e, o) && yaml_emitter_flush(&e);
        yaml_emitter_delete(&e);
    }
    ok = ok && fflush(f) == 0;
    int closed = fclose(f) == 0;
    if (!ok || !closed || rename(tmp, path) != 0) {
        mt_status st = mt_fail(MT_ERR_IO, "%s: cannot write the run file: %s", path, errno ? strerror(errno) : "libyaml failed");
        remove(tmp);
        return st;
    }
    return MT_OK;
}
