#include "train/run_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "train/option_table.h"
#include "util/fs.h"
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

/* The keys whose values are paths, taken relative to the run file's directory. */
static int is_path_key(const char *name) {
    static const char *const paths[] = {"data", "val-data", "tokenizer", "config", "init-from", "out", NULL};
    for (const char *const *p = paths; *p; p++)
        if (!strcmp(name, *p)) return 1;
    return 0;
}

/* `value` with each of its comma-separated (--data, --val-data) paths that is relative put under `dir`,
 * and a leading "~/" under $HOME as a shell would, into a kept string. */
static mt_status under_dir(mt_run_file_strings *s, const char *dir, const char *key, const char *value,
                           char **out) {
    int list = !strcmp(key, "data") || !strcmp(key, "val-data");
    const char *home = getenv("HOME");
    size_t room = strlen(dir) + (home ? strlen(home) : 0) + 2, cap = strlen(value) + room, at = 0;
    for (const char *p = value; list && *p; p++) cap += *p == ',' ? room : 0;
    char *joined = malloc(cap);
    if (!joined) return mt_fail(MT_ERR_NOMEM, "cannot hold a run file's values");
    for (const char *p = value;;) {
        size_t n = list ? strcspn(p, ",") : strlen(p);
        int in_home = home && n >= 2 && !strncmp(p, "~/", 2), relative = !in_home && n > 0 && p[0] != '/';
        const char *base = in_home ? home : relative ? dir : "";
        if (in_home) p++, n--; /* "~/x": "/x" after $HOME */
        at += (size_t)snprintf(joined + at, cap - at, "%s%s%.*s", base, relative ? "/" : "", (int)n, p);
        if (!p[n]) break;
        joined[at++] = ',';
        p += n + 1;
    }
    mt_status st = keep(s, joined, at, out);
    free(joined);
    return st;
}

/* The option name nearest to an unknown key by edit distance, or NULL when none is near. */
static const char *nearest_key(const char *key) {
    const char *best = NULL;
    size_t n = strlen(key), best_d = n / 3 + 2;
    for (const mt_option *opt = mt_options; n < 64 && opt->name; opt++) {
        size_t m = strlen(opt->name), row[64];
        if (m >= 64) continue;
        for (size_t j = 0; j <= m; j++) row[j] = j;
        for (size_t i = 1; i <= n; i++) {
            size_t diag = row[0];
            row[0] = i;
            for (size_t j = 1; j <= m; j++) {
                size_t up = row[j], best_here = diag + (key[i - 1] != opt->name[j - 1]);
                if (up + 1 < best_here) best_here = up + 1;
                if (row[j - 1] + 1 < best_here) best_here = row[j - 1] + 1;
                row[j] = best_here;
                diag = up;
            }
        }
        if (row[m] < best_d) best_d = row[m], best = opt->name;
    }
    return best;
}

static const mt_option *key_option(const char *name) {
    const mt_option *opt = mt_option_find(strncmp(name, "--", 2) ? name : name + 2);
    return opt && strcmp(opt->name, "help") ? opt : NULL;
}

/* Every key that names no option, in one message with the nearest known key of each. */
static mt_status check_keys(const char *path, yaml_document_t *doc, const yaml_node_t *root) {
    char message[MT_ERROR_MAX / 2];
    size_t at = 0;
    int unknown = 0;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        size_t line = k->start_mark.line + 1;
        if (k->type != YAML_SCALAR_NODE)
            return mt_fail(MT_ERR_INVALID, "%s:%zu: a key is %s; the keys are option names", path, line, node_kind(k));
        const char *name = (const char *)k->data.scalar.value;
        if (key_option(name)) continue;
        const char *near = nearest_key(strncmp(name, "--", 2) ? name : name + 2);
        if (at < sizeof message)
            at += (size_t)snprintf(message + at, sizeof message - at, "%s'%s' (line %zu%s%s%s)", unknown ? ", " : "",
                                   name, line, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        unknown++;
    }
    if (!unknown) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "%s: unknown key%s %s: the keys are the long options of 'megatrain train --help', "
                   "without the dashes", path, unknown > 1 ? "s" : "", message);
}

static int takes_on_off(const mt_option *opt) {
    for (const char *const *c = opt->choices; c && *c; c++)
        if (!strcmp(*c, "on")) return 1;
    return 0;
}

/* A list for an option that takes several files (data: the datasets of a mix; val-data), joined
 * with commas as the command line gives them, each relative path under the file's directory. */
static mt_status set_list(const char *path, const char *dir, yaml_document_t *doc, const yaml_node_t *v,
                          const mt_option *opt, mt_train_options *o, mt_run_file_strings *strings) {
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
    MT_TRY(under_dir(strings, dir, opt->name, joined, &kept));
    mt_status st = mt_train_option_set(o, opt->name, kept);
    return st == MT_OK ? MT_OK : mt_fail_context(st, "%s:%zu", path, line);
}

static mt_status set_key(const char *path, const char *dir, yaml_document_t *doc, yaml_node_pair_t *pair,
                         mt_train_options *o, mt_run_file_strings *strings, const char **seen, size_t n_seen) {
    yaml_node_t *k = yaml_document_get_node(doc, pair->key), *v = yaml_document_get_node(doc, pair->value);
    const char *name = (const char *)k->data.scalar.value;
    const mt_option *opt = key_option(name);
    for (size_t i = 0; i < n_seen; i++)
        if (!strcmp(seen[i], opt->name))
            return mt_fail(MT_ERR_INVALID, "%s:%zu: key '%s' is given twice", path, k->start_mark.line + 1, name);
    if (v->type == YAML_SEQUENCE_NODE && (!strcmp(opt->name, "data") || !strcmp(opt->name, "val-data")))
        return set_list(path, dir, doc, v, opt, o, strings);
    if (v->type != YAML_SCALAR_NODE)
        return mt_fail(MT_ERR_INVALID, "%s:%zu: %s: the value is %s; a single value goes here", path,
                       v->start_mark.line + 1, name, node_kind(v));
    if (is_null(v)) return MT_OK; /* key: (nothing): left as the default */
    const char *text = (const char *)v->data.scalar.value;
    char *kept = NULL;
    int on;
    /* YAML 1.1 reads on and off as booleans, so true and false say on and off too (packing: true). */
    if (takes_on_off(opt) && mt_option_boolean(text, &on)) text = on ? "on" : "off";
    if (is_path_key(opt->name)) MT_TRY(under_dir(strings, dir, opt->name, text, &kept));
    else if (opt->type != MT_OPT_FLAG) MT_TRY(keep(strings, text, strlen(text), &kept));
    mt_status st = mt_train_option_set(o, opt->name, opt->type == MT_OPT_FLAG ? text : kept);
    if (st != MT_OK) return mt_fail_context(st, "%s:%zu", path, v->start_mark.line + 1);
    return MT_OK;
}

static mt_status read_document(const char *path, const char *dir, yaml_document_t *doc, mt_train_options *o,
                               mt_run_file_strings *strings) {
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root) return MT_OK; /* an empty file sets nothing */
    if (root->type != YAML_MAPPING_NODE)
        return mt_fail(MT_ERR_INVALID, "%s:%zu: the run file is %s; it must be a mapping of option names to values "
                       "(steps: 1000)", path, root->start_mark.line + 1, node_kind(root));
    MT_TRY(check_keys(path, doc, root));
    size_t n = (size_t)(root->data.mapping.pairs.top - root->data.mapping.pairs.start), i = 0;
    const char **seen = calloc(n ? n : 1, sizeof *seen);
    if (!seen) return mt_fail(MT_ERR_NOMEM, "cannot read a run file");
    mt_status st = MT_OK;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; st == MT_OK && p < root->data.mapping.pairs.top; p++) {
        st = set_key(path, dir, doc, p, o, strings, seen, i);
        if (st == MT_OK)
            seen[i++] = key_option((const char *)yaml_document_get_node(doc, p->key)->data.scalar.value)->name;
    }
    free(seen);
    return st;
}

static mt_status not_yaml(const char *path, const yaml_parser_t *parser) {
    return mt_fail(MT_ERR_INVALID, "%s:%zu: not YAML: %s%s%s", path, parser->problem_mark.line + 1,
                   parser->problem ? parser->problem : "unreadable", parser->context ? " " : "",
                   parser->context ? parser->context : "");
}

/* The file's one document into *doc; a second one is refused. */
static mt_status load_one_document(const char *path, yaml_parser_t *parser, yaml_document_t *doc) {
    if (!yaml_parser_load(parser, doc)) return not_yaml(path, parser);
    yaml_document_t next;
    if (!yaml_parser_load(parser, &next)) {
        yaml_document_delete(doc);
        return not_yaml(path, parser);
    }
    yaml_node_t *second = yaml_document_get_root_node(&next);
    size_t line = second ? second->start_mark.line + 1 : 0;
    yaml_document_delete(&next);
    if (!second) return MT_OK;
    yaml_document_delete(doc);
    return mt_fail(MT_ERR_INVALID, "%s:%zu: a second YAML document (after '---'): a run file is one mapping of "
                   "option names to values", path, line);
}

mt_status mt_run_file_read(const char *path, mt_train_options *o, mt_run_file_strings *strings) {
    /* A FIFO or a device would block the open or never end, as --data refuses them. */
    struct stat info;
    if (stat(path, &info) != 0) return mt_fail(MT_ERR_INVALID, "%s: cannot open the run file: %s", path, strerror(errno));
    if (!S_ISREG(info.st_mode))
        return mt_fail(MT_ERR_INVALID, "%s: the run file is %s, not a regular file", path,
                       S_ISDIR(info.st_mode) ? "a directory" : S_ISFIFO(info.st_mode) ? "a FIFO" :
                       S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode) ? "a device" : "a special file");
    FILE *f = fopen(path, "rb");
    if (!f) return mt_fail(MT_ERR_INVALID, "%s: cannot open the run file: %s", path, strerror(errno));
    /* Relative paths in the file are its directory's. */
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!dir || !yaml_parser_initialize(&parser)) {
        free(dir);
        fclose(f);
        return mt_fail(MT_ERR_NOMEM, "cannot read a run file");
    }
    yaml_parser_set_input_file(&parser, f);
    mt_status st = load_one_document(path, &parser, &doc);
    if (st == MT_OK) {
        st = read_document(path, dir, &doc, o, strings);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    free(dir);
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
        /* The run directory as an absolute path: the file runs it again from any directory. */
        if (out && mt_path_absolute(o->out_dir, value, sizeof value) != MT_OK) return 0;
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
          "# (an option on the command line wins over the file's key; its paths are absolute).\n", f);
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
