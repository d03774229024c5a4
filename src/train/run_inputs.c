#include "train/run_inputs.h"

#include <glob.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/file_identity.h"
#include "io/hf_config.h"
#include "train/data_mix.h"
#include "util/fs.h"
#include "util/log.h"

/* The files of one input, into paths[MAX_FILES][PATH_MAX]; returns how many. */
enum { MAX_FILES = 256 };
typedef int (*list_fn)(const char *path, char (*paths)[PATH_MAX]);

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Adds path as file n (paths NULL: counts only); returns the new count. */
static int add(char (*paths)[PATH_MAX], int n, const char *path) {
    if (n >= MAX_FILES || strlen(path) >= PATH_MAX) return n;
    if (paths) memcpy(paths[n], path, strlen(path) + 1);
    return n + 1;
}

/* --data: a file, or the datasets of a mix (train/data_mix.h). */
static int data_files(const char *list, char (*paths)[PATH_MAX]) {
    mt_data_source data[MT_MAX_DATA];
    int n = 0, files = 0;
    if (mt_data_list_parse(list, data, &n) != MT_OK) return 0; /* refused where the data is read */
    for (int k = 0; k < n; k++)
        if (is_file(data[k].path)) files = add(paths, files, data[k].path);
    return files;
}

/* --chat-template: the file itself. */
static int template_file(const char *path, char (*paths)[PATH_MAX]) { return is_file(path) ? add(paths, 0, path) : 0; }

/* --val-data: a comma-separated list of files. */
static int listed_files(const char *list, char (*paths)[PATH_MAX]) {
    int n = 0;
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        char one[PATH_MAX];
        snprintf(one, sizeof one, "%.*s", (int)(k < PATH_MAX - 1 ? k : PATH_MAX - 1), p);
        if (is_file(one)) n = add(paths, n, one);
        p += k + (p[k] == ',');
    }
    return n;
}

/* tokenizer.json (the path itself, or in the directory), and tokenizer_config.json and
 * chat_template.jinja beside it. */
static int tokenizer_files(const char *path, char (*paths)[PATH_MAX]) {
    char json[PATH_MAX + 32], config[PATH_MAX + 32], jinja[PATH_MAX + 32];
    snprintf(json, sizeof json, is_dir(path) ? "%s/tokenizer.json" : "%s", path);
    const char *slash = strrchr(json, '/');
    int dir = slash ? (int)(slash - json + 1) : 0;
    snprintf(config, sizeof config, "%.*stokenizer_config.json", dir, json);
    snprintf(jinja, sizeof jinja, "%.*schat_template.jinja", dir, json);
    int n = add(paths, 0, json);
    if (is_file(config)) n = add(paths, n, config);
    return is_file(jinja) ? add(paths, n, jinja) : n;
}

/* config.json, the safetensors index and the safetensors files, in name order. */
static int model_files(const char *path, char (*paths)[PATH_MAX]) {
    char name[PATH_MAX + 64];
    int n = 0;
    snprintf(name, sizeof name, "%s/config.json", path);
    if (is_file(name)) n = add(paths, n, name);
    snprintf(name, sizeof name, "%s/model.safetensors.index.json", path);
    if (is_file(name)) n = add(paths, n, name);
    snprintf(name, sizeof name, "%s/*.safetensors", path);
    glob_t g;
    if (glob(name, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) /* what is not a file the loader refuses, naming it */
            if (is_file(g.gl_pathv[i])) n = add(paths, n, g.gl_pathv[i]);
        globfree(&g);
    }
    return n;
}

typedef struct {
    const char *name;   /* in "inputs", and the option's name */
    size_t option;      /* offset of its path in mt_train_options */
    list_fn files;
    int data;           /* data a run reads from its files (a resume may take it changed when told) */
} input_kind;

static const input_kind kinds[] = {
    {"data", offsetof(mt_train_options, data_path), data_files, 1},
    {"val-data", offsetof(mt_train_options, val_data), listed_files, 1},
    {"tokenizer", offsetof(mt_train_options, tokenizer), tokenizer_files, 0},
    {"chat-template", offsetof(mt_train_options, chat_template), template_file, 0},
    {"init-from", offsetof(mt_train_options, init_from), model_files, 0},
};
enum { KINDS = sizeof kinds / sizeof kinds[0] };

static const char *path_of(const input_kind *k, const mt_train_options *o) {
    return *(const char *const *)((const char *)o + k->option);
}

/* {"path", "files": [...]} of one input into *out; fails naming a file that cannot be read. */
static mt_status identify(const input_kind *k, const char *path, json_t **out) {
    char (*files)[PATH_MAX] = malloc(MAX_FILES * sizeof *files);
    int n = files ? k->files(path, files) : 0;
    json_t *list = json_array();
    *out = files ? json_pack("{s:s, s:o}", "path", path, "files", list) : NULL;
    if (!*out) {
        free(files);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot build its identity", path);
    }
    for (int i = 0; i < n; i++) {
        json_t *id;
        mt_status st = mt_file_identity(files[i], &id);
        if (st == MT_OK && json_array_append_new(list, id) != 0) st = mt_fail(MT_ERR_NOMEM, "%s: out of memory", path);
        if (st != MT_OK) {
            json_decref(*out);
            *out = NULL;
            free(files);
            return st;
        }
    }
    free(files);
    return MT_OK;
}

static const input_kind *kind_named(const char *name) {
    for (int i = 0; i < KINDS; i++)
        if (!strcmp(kinds[i].name, name)) return &kinds[i];
    return NULL;
}

/* A model directory of a wrapper (model/wrappers.h) names it in its identity: the run's export
 * writes that wrapper back, from there. */
static mt_status note_wrapper(const char *dir, json_t *id) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const mt_wrapper *w = NULL;
    if (is_file(path)) MT_TRY(mt_hf_config_wrapper(path, &w));
    if (w && json_object_set_new(id, "wrapper", json_string(w->architecture)) != 0)
        return mt_fail(MT_ERR_NOMEM, "%s: cannot build its identity", dir);
    return MT_OK;
}

mt_status mt_run_inputs_identify(const mt_train_options *o, json_t **inputs) {
    *inputs = json_object();
    if (!*inputs) return mt_fail(MT_ERR_NOMEM, "cannot build the run's inputs");
    for (int i = 0; i < KINDS; i++) {
        const char *path = path_of(&kinds[i], o);
        if (!path || !path[0] || (kinds[i].data && !kinds[i].files(path, NULL))) continue;
        json_t *id;
        mt_status st = identify(&kinds[i], path, &id);
        if (st == MT_OK && !strcmp(kinds[i].name, "init-from")) st = note_wrapper(path, id);
        if (st == MT_OK && json_object_set_new(*inputs, kinds[i].name, id) != 0)
            st = mt_fail(MT_ERR_NOMEM, "cannot build the run's inputs");
        if (st != MT_OK) {
            json_decref(*inputs);
            *inputs = NULL;
            return st;
        }
    }
    return MT_OK;
}

/* 0 when the input `now` describes holds the files `stored` did, unchanged; else 1 with what
 * differs in why[cap]. */
static int input_differs(const json_t *stored, const json_t *now, char *why, size_t cap) {
    const json_t *was = json_object_get(stored, "files"), *is = json_object_get(now, "files");
    size_t i;
    const json_t *file;
    char what[512];
    json_array_foreach(was, i, file) {
        const char *name = json_string_value(json_object_get(file, "path"));
        const json_t *match = NULL, *f;
        size_t j;
        json_array_foreach(is, j, f)
            if (name && json_equal(json_object_get(f, "path"), json_object_get(file, "path"))) match = f;
        if (!match) {
            snprintf(why, cap, "%s is gone", name ? name : "a file of it");
            return 1;
        }
        if (mt_file_identity_differs(file, match, what, sizeof what)) {
            snprintf(why, cap, "%s: %s", name, what);
            return 1;
        }
    }
    if (json_array_size(is) != json_array_size(was)) {
        snprintf(why, cap, "it holds %zu files now, %zu when the run stored it", json_array_size(is),
                 json_array_size(was));
        return 1;
    }
    return 0;
}

static int same_path(const json_t *a, const json_t *b) {
    const char *x = json_string_value(json_object_get(a, "path")), *y = json_string_value(json_object_get(b, "path"));
    return x && y && !strcmp(x, y);
}

/* --init-from on resume: only the run's own directory, unchanged. */
static mt_status check_init_from(const json_t *saved, const json_t *stored, const mt_train_options *given,
                                 const char *checkpoint) {
    char asked[PATH_MAX], was[PATH_MAX] = "", why[1024];
    MT_TRY(mt_path_absolute(given->init_from, asked, sizeof asked));
    const char *run_init = json_string_value(json_object_get(saved, "init-from"));
    if (run_init) MT_TRY(mt_path_absolute(run_init, was, sizeof was));
    const char *advice = "a resumed run continues from its checkpoint's weights, never from a model directory's: "
                         "leave --init-from out, or start a new run in another --out";
    if (!run_init)
        return mt_fail(MT_ERR_INVALID, "--init-from %s: %s is a run that was not initialized from a model directory; %s",
                       given->init_from, checkpoint, advice);
    if (strcmp(asked, was))
        return mt_fail(MT_ERR_INVALID, "--init-from %s: %s is a run initialized from %s; %s", given->init_from,
                       checkpoint, was, advice);
    if (!stored) return MT_OK;
    json_t *now;
    MT_TRY(identify(kind_named("init-from"), asked, &now));
    int differs = input_differs(stored, now, why, sizeof why);
    json_decref(now);
    if (differs)
        return mt_fail(MT_ERR_INVALID, "--init-from %s changed since %s was initialized from it: %s; %s",
                       given->init_from, checkpoint, why, advice);
    return MT_OK;
}

mt_status mt_run_inputs_check(const json_t *saved, json_t *now, const mt_train_options *given,
                              const char *checkpoint, int *data_changed) {
    const json_t *stored = json_object_get(saved, "inputs");
    *data_changed = 0;
    if (given->init_from) MT_TRY(check_init_from(saved, json_object_get(stored, "init-from"), given, checkpoint));
    if (!json_is_object(stored)) {
        mt_log_info("%s was written before checkpoints kept what identifies their inputs: the data, the tokenizer "
                    "and the model directory are taken as they are now, unchecked (this run's checkpoints keep them)",
                    checkpoint);
        return MT_OK;
    }
    char why[MT_ERROR_MAX];
    for (int i = 0; i < KINDS; i++) {
        if (!kinds[i].data) continue;
        const char *name = kinds[i].name;
        const json_t *was = json_object_get(stored, name), *is = json_object_get(now, name);
        int changed = was && is && !same_path(was, is); /* another file, as the user asks */
        if (was && is && !changed && input_differs(was, is, why, sizeof why)) {
            const char *path = json_string_value(json_object_get(was, "path"));
            if (!given->accept_changed_data)
                return mt_fail(MT_ERR_INVALID, "--%s %s changed since %s stored it: %s; %s: restore it, or resume "
                               "with --accept-changed-data to take it as it is now", name, path, checkpoint, why,
                               strcmp(name, "data") ? "the run's validation losses would measure other text"
                                                    : "the run's place in it (and what it trained on) no longer holds");
            mt_log_warn("--%s %s changed since %s stored it (%s): taken as it is now (--accept-changed-data)", name,
                        path, checkpoint, why);
            changed = 1;
        }
        if (changed && !strcmp(name, "data")) *data_changed = 1;
    }
    /* The tokenizer and the chat template file made the data's ids and masks: they cannot change. */
    static const char *const fixed[] = {"tokenizer", "chat-template"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        const json_t *was = json_object_get(stored, fixed[i]), *is = json_object_get(now, fixed[i]);
        if (was && is && same_path(was, is) && input_differs(was, is, why, sizeof why))
            return mt_fail(MT_ERR_INVALID, "the run's %s %s changed since %s stored it: %s; a run's %s cannot change "
                           "(the model learned %s): restore it, or start a new run", fixed[i],
                           json_string_value(json_object_get(was, "path")), checkpoint, why, fixed[i],
                           i == 0 ? "its ids" : "the conversations as it renders them");
    }
    /* The model directory the run was initialized from is the one it stored, whatever it holds now. */
    const json_t *init = json_object_get(stored, "init-from");
    if (init && json_object_set(now, "init-from", (json_t *)init) != 0)
        return mt_fail(MT_ERR_NOMEM, "cannot build the run's inputs");
    return MT_OK;
}

/* Input `kind` at `path` against the identity the settings keep; `harm` says what a change would do. */
static mt_status check_unchanged(const json_t *settings, const char *kind, const char *path, const char *checkpoint,
                                 const char *harm) {
    const json_t *stored = json_object_get(json_object_get(settings, "inputs"), kind);
    if (!stored || !path[0]) return MT_OK;
    json_t *now;
    char why[MT_ERROR_MAX];
    MT_TRY(identify(kind_named(kind), path, &now));
    int differs = !same_path(stored, now) || input_differs(stored, now, why, sizeof why);
    if (!same_path(stored, now)) snprintf(why, sizeof why, "the run stored %s", json_string_value(json_object_get(stored, "path")));
    json_decref(now);
    if (differs)
        return mt_fail(MT_ERR_INVALID, "%s: the run's %s %s changed since the run stored it: %s; %s: restore it",
                       checkpoint, kind, path, why, harm);
    return MT_OK;
}

mt_status mt_run_inputs_check_tokenizer(const json_t *settings, const char *path, const char *checkpoint) {
    return check_unchanged(settings, "tokenizer", path, checkpoint, "its ids would decode as other text");
}

mt_status mt_run_inputs_check_template(const json_t *settings, const char *path, const char *checkpoint) {
    return check_unchanged(settings, "chat-template", path, checkpoint,
                           "the model would be given conversations in another form than it learned");
}

mt_status mt_run_inputs_wrapped_from(const json_t *settings, const char *checkpoint, char *dir, size_t cap) {
    const json_t *init = json_object_get(json_object_get(settings, "inputs"), "init-from");
    const char *path = json_string_value(json_object_get(init, "path"));
    dir[0] = '\0';
    if (!json_is_string(json_object_get(init, "wrapper")) || !path) return MT_OK;
    MT_TRY(check_unchanged(settings, "init-from", path, checkpoint,
                           "what the export writes back of it (its vision tower, ...) would be others"));
    snprintf(dir, cap, "%s", path);
    return MT_OK;
}
