#include "io/metrics.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_metrics {
    FILE *file;
    char path[PATH_MAX];
};

mt_status mt_metrics_open(const char *run_dir, mt_metrics **metrics) {
    mt_metrics *m = mt_calloc(1, sizeof *m, "the metrics log");
    if (!m) return MT_ERR_NOMEM;
    if (snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", run_dir) >= (int)sizeof m->path) {
        free(m);
        return mt_fail(MT_ERR_INVALID, "%s: metrics path too long", run_dir);
    }
    m->file = fopen(m->path, "a+");
    if (!m->file) {
        mt_status st = mt_fail(MT_ERR_IO, "%s: cannot open: %s", m->path, strerror(errno));
        free(m);
        return st;
    }
    /* A crash may have torn the last line: start the next event on a line of its own. */
    if (fseek(m->file, -1, SEEK_END) == 0) {
        int last = fgetc(m->file);
        fseek(m->file, 0, SEEK_END); /* C requires a seek between reading and writing */
        if (last != '\n') fputc('\n', m->file);
    }
    *metrics = m;
    return MT_OK;
}

mt_status mt_metrics_log(mt_metrics *metrics, const json_t *event) {
    char *line = json_dumps(event, JSON_COMPACT | JSON_REAL_PRECISION(7));
    if (!line) return mt_fail(MT_ERR_INVALID, "%s: event is not serializable JSON", metrics->path);
    int ok = fputs(line, metrics->file) >= 0 && fputc('\n', metrics->file) != EOF &&
             fflush(metrics->file) == 0;
    free(line);
    if (!ok) return mt_fail(MT_ERR_IO, "%s: write failed: %s", metrics->path, strerror(errno));
    return MT_OK;
}

void mt_metrics_close(mt_metrics *metrics) {
    if (!metrics) return;
    fclose(metrics->file);
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
