#include "io/metrics.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/tb_events.h"

struct mt_metrics {
    FILE *file;
    char path[PATH_MAX];
    mt_tb_events *tb; /* the same numbers for TensorBoard */
};

/* A line to keep: an event of a step up to `through_step`, or one without a step. A torn line
 * (not JSON) goes. */
static int keep_line(const char *line, int64_t through_step) {
    json_t *event = json_loads(line, 0, NULL);
    if (!event) return 0;
    json_t *step = json_object_get(event, "step");
    int keep = !json_is_number(step) || json_number_value(step) <= (double)through_step;
    json_decref(event);
    return keep;
}

/* Copies the lines of `in` to keep into `out`, each ending with a newline. */
static int copy_kept(FILE *in, FILE *out, int64_t through_step) {
    char *line = NULL;
    size_t cap = 0;
    int ok = 1;
    for (ssize_t n; ok && (n = getline(&line, &cap, in)) >= 0;)
        if (keep_line(line, through_step))
            ok = fputs(line, out) >= 0 && (line[n - 1] == '\n' || fputc('\n', out) != EOF);
    free(line);
    return ok;
}

/* 1 when some line of `in` must go. */
static int any_line_goes(FILE *in, int64_t through_step) {
    char *line = NULL;
    size_t cap = 0;
    int goes = 0;
    while (!goes && getline(&line, &cap, in) >= 0) goes = !keep_line(line, through_step);
    free(line);
    return goes;
}

/* Rewrites `path` with only the lines to keep, when some must go: a copy beside it, fsynced,
 * renamed over it. A missing file is left missing. */
static mt_status drop_lines_after(const char *path, int64_t through_step) {
    FILE *in = fopen(path, "r");
    if (!in && errno == ENOENT) return MT_OK;
    if (!in) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!any_line_goes(in, through_step)) {
        fclose(in);
        return MT_OK;
    }
    rewind(in);
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    mt_status st = out ? MT_OK : mt_fail(MT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (st == MT_OK && (!copy_kept(in, out, through_step) || fflush(out) != 0 || fsync(fileno(out)) != 0))
        st = mt_fail(MT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (out && fclose(out) != 0 && st == MT_OK) st = mt_fail(MT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    fclose(in);
    if (st == MT_OK && rename(tmp, path) != 0)
        st = mt_fail(MT_ERR_IO, "%s: cannot replace it with %s: %s", path, tmp, strerror(errno));
    if (st != MT_OK && out) unlink(tmp);
    return st;
}

mt_status mt_metrics_open(const char *run_dir, int64_t through_step, mt_metrics **metrics) {
    mt_metrics *m = mt_calloc(1, sizeof *m, "the metrics log");
    if (!m) return MT_ERR_NOMEM;
    if (snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", run_dir) >= (int)sizeof m->path) {
        free(m);
        return mt_fail(MT_ERR_INVALID, "%s: metrics path too long", run_dir);
    }
    mt_status st = drop_lines_after(m->path, through_step);
    if (st != MT_OK) {
        free(m);
        return st;
    }
    m->file = fopen(m->path, "a+");
    if (!m->file) {
        st = mt_fail(MT_ERR_IO, "%s: cannot open: %s", m->path, strerror(errno));
        free(m);
        return st;
    }
    /* A torn last line that survived (nothing else had to go): start on a line of its own. */
    if (fseek(m->file, -1, SEEK_END) == 0) {
        int last = fgetc(m->file);
        fseek(m->file, 0, SEEK_END); /* C requires a seek between reading and writing */
        if (last != '\n') fputc('\n', m->file);
    }
    st = mt_tb_open(run_dir, &m->tb);
    if (st != MT_OK) {
        mt_metrics_close(m);
        return st;
    }
    *metrics = m;
    return MT_OK;
}

/* An event of a step as TensorBoard scalars: each number of it but the step, under its name. */
static mt_status log_scalars(mt_metrics *metrics, const json_t *event) {
    const json_t *step = json_object_get(event, "step");
    if (!json_is_integer(step) || !metrics->tb) return MT_OK;
    enum { MAX = 64 };
    const char *tags[MAX];
    double values[MAX];
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)event, key, v)
        if (n < MAX && json_is_number(v) && strcmp(key, "step")) tags[n] = key, values[n++] = json_number_value(v);
    return n ? mt_tb_scalars(metrics->tb, json_integer_value(step), tags, values, n) : MT_OK;
}

mt_status mt_metrics_log(mt_metrics *metrics, const json_t *event) {
    char *line = json_dumps(event, JSON_COMPACT | JSON_REAL_PRECISION(7));
    if (!line) return mt_fail(MT_ERR_INVALID, "%s: event is not serializable JSON", metrics->path);
    int ok = fputs(line, metrics->file) >= 0 && fputc('\n', metrics->file) != EOF &&
             fflush(metrics->file) == 0;
    free(line);
    if (!ok) return mt_fail(MT_ERR_IO, "%s: write failed: %s", metrics->path, strerror(errno));
    return log_scalars(metrics, event);
}

void mt_metrics_close(mt_metrics *metrics) {
    if (!metrics) return;
    fclose(metrics->file);
    mt_tb_close(metrics->tb);
    free(metrics);
}

void mt_curve_free(mt_curve *curve) {
    free(curve->step);
    free(curve->value);
    *curve = (mt_curve){0};
}

/* Appends (step, value), first dropping points at or after `step` (an abandoned tail). */
static mt_status curve_add(mt_curve *c, size_t *cap, double step, double value) {
    while (c->n > 0 && c->step[c->n - 1] >= step) c->n--;
    if (c->n == *cap) {
        size_t grown = *cap ? 2 * *cap : 256;
        double *s = realloc(c->step, grown * sizeof *s);
        if (s) c->step = s;
        double *v = s ? realloc(c->value, grown * sizeof *v) : NULL;
        if (!v) return mt_fail(MT_ERR_NOMEM, "cannot grow a metrics curve to %zu points", grown);
        c->value = v;
        *cap = grown;
    }
    c->step[c->n] = step;
    c->value[c->n++] = value;
    return MT_OK;
}

mt_status mt_metrics_load_curve(const char *path, const char *key, mt_curve *curve) {
    *curve = (mt_curve){0};
    FILE *f = fopen(path, "r");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 0, line_cap = 0;
    char *line = NULL;
    mt_status st = MT_OK;
    while (st == MT_OK && getline(&line, &line_cap, f) >= 0) {
        json_t *event = json_loads(line, 0, NULL);
        json_t *step = json_object_get(event, "step"), *value = json_object_get(event, key);
        if (json_is_number(step) && json_is_number(value))
            st = curve_add(curve, &cap, json_number_value(step), json_number_value(value));
        json_decref(event); /* NULL for a torn line: skipped */
    }
    free(line);
    fclose(f);
    if (st != MT_OK) mt_curve_free(curve);
    return st;
}

mt_status mt_metrics_load_curves(const char *path, mt_curve *train, mt_curve *val) {
    *train = *val = (mt_curve){0};
    FILE *f = fopen(path, "r");
    if (!f) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t train_cap = 0, val_cap = 0, line_cap = 0;
    char *line = NULL;
    mt_status st = MT_OK;
    while (st == MT_OK && getline(&line, &line_cap, f) >= 0) {
        json_t *event = json_loads(line, 0, NULL);
        json_t *step = json_object_get(event, "step");
        json_t *loss = json_object_get(event, "loss");
        json_t *val_loss = json_object_get(event, "val_loss");
        if (json_is_number(step) && json_is_number(loss))
            st = curve_add(train, &train_cap, json_number_value(step), json_number_value(loss));
        if (st == MT_OK && json_is_number(step) && json_is_number(val_loss))
            st = curve_add(val, &val_cap, json_number_value(step), json_number_value(val_loss));
        json_decref(event); /* NULL for a torn line: skipped */
    }
    free(line);
    fclose(f);
    if (st != MT_OK) {
        mt_curve_free(train);
        mt_curve_free(val);
    }
    return st;
}
