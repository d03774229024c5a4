/* The run's metrics log: <run>/metrics.jsonl, one JSON object per line, appended and flushed as
 * each event happens (so a crash loses at most the line being written). Events are whatever the
 * caller builds; training steps carry "step", "loss" and, when measured, "val_loss", plus lr,
 * grad_norm, tokens_per_s, elapsed_s and so on. Each number of an event with a step also goes to
 * the run's TensorBoard event file (io/tb_events.h), under its name. */
#ifndef MT_IO_METRICS_H
#define MT_IO_METRICS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct mt_metrics mt_metrics;

/* Opens (creating or appending to) <run_dir>/metrics.jsonl, first dropping the lines of steps
 * after `through_step` (the steps of an abandoned stretch: the run resumes from a checkpoint of
 * that step and logs them again) and a line torn by a crash, so that the file holds each step
 * once. The file is rewritten beside itself and renamed into place only when a line goes. */
mt_status mt_metrics_open(const char *run_dir, int64_t through_step, mt_metrics **metrics);
/* Appends `event` (a JSON object) as one line and flushes it. */
mt_status mt_metrics_log(mt_metrics *metrics, const json_t *event);
void mt_metrics_close(mt_metrics *metrics);

/* A curve read back from the log: value against step. */
typedef struct {
    double *step;
    double *value;
    size_t n;
} mt_curve;

/* Reads the "loss" and "val_loss" curves of a metrics.jsonl. A step at or below an earlier one
 * (a run resumed from an older checkpoint) replaces the abandoned tail; a torn last line from a
 * crash is skipped. Free the curves with mt_curve_free. */
mt_status mt_metrics_load_curves(const char *path, mt_curve *train, mt_curve *val);
/* Reads the curve of one key (a --val-data file's "val_loss/FILE") the same way. */
mt_status mt_metrics_load_curve(const char *path, const char *key, mt_curve *curve);
void mt_curve_free(mt_curve *curve);

#endif
