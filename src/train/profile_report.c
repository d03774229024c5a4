/* bench --profile's report (profile_report.h). The rows come in the order the backend first saw
 * them, which is the order of the ops in a block; the blocks' table takes them phase by phase
 * (forward, recomputation, backward), the JSON as they come. A block row's share is of the blocks'
 * time, any other row's of the steps' wall-clock time, of which what no span covers is the device's
 * idle time outside every span (between jobs, and at the step's ends). */
#include "train/profile_report.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/block.h"

static const char *const block_phases[] = {MT_PHASE_FORWARD, MT_PHASE_RECOMPUTE, MT_PHASE_BACKWARD};
enum { BLOCK_PHASES = sizeof block_phases / sizeof *block_phases };

int mt_profile_row_in_block(const mt_prof_row *r) {
    for (int i = 0; i < BLOCK_PHASES; i++)
        if (!strcmp(r->phase, block_phases[i])) return 1;
    return 0;
}

typedef struct {
    double blocks, accounted, gemm, gemm_flops; /* seconds, and the GEMMs' FLOPs, over the timed steps */
} totals;

static totals totals_of(const mt_prof_row *rows, int count) {
    totals t = {0};
    for (int i = 0; i < count; i++) {
        t.accounted += rows[i].seconds;
        if (!mt_profile_row_in_block(&rows[i])) continue;
        t.blocks += rows[i].seconds;
        if (rows[i].flops > 0) t.gemm += rows[i].seconds, t.gemm_flops += rows[i].flops;
    }
    return t;
}

static double share(double part, double whole) { return whole > 0 ? part / whole : 0; }
static double tflops(double flops, double seconds) { return seconds > 0 ? flops / seconds / 1e12 : 0; }

static void write_md(FILE *f, const mt_prof_row *rows, int count, const mt_profile_run *run) {
    totals t = totals_of(rows, count);
    double steps = run->steps > 0 ? run->steps : 1, per_block = steps * (run->layers > 0 ? run->layers : 1);
    fprintf(f, "# Profile: %s%s%s\n\n", run->model, *run->device ? " on " : "", run->device);
    fprintf(f, "%d timed steps of %.0f tokens: %.3f s a step by the wall clock (their mean), %.1f TFLOP/s counted "
            "from the active parameters (the median step's). The blocks' spans %.3f s a step (%.1f%% of the step), "
            "their GEMMs %.1f%% of the blocks at %.1f TFLOP/s. Totals over the timed steps and the %d blocks; a "
            "row's time is its spans' own, less the spans inside them (docs/profile.md).\n\n", run->steps,
            run->tokens_per_step, run->step_seconds / steps, run->tflops, t.blocks / steps,
            100 * share(t.blocks, run->step_seconds), 100 * share(t.gemm, t.blocks), tflops(t.gemm_flops, t.gemm),
            run->layers);
    fprintf(f, "## The blocks\n\n| phase | op | calls | total ms | ms a block | share of the blocks | TFLOP/s |\n"
            "|---|---|---:|---:|---:|---:|---:|\n");
    for (int p = 0; p < BLOCK_PHASES; p++)
        for (int i = 0; i < count; i++) {
            const mt_prof_row *r = &rows[i];
            if (strcmp(r->phase, block_phases[p])) continue;
            fprintf(f, "| %s | %s | %ld | %.1f | %.3f | %.1f%% | ", r->phase, r->op, r->calls, 1e3 * r->seconds,
                    1e3 * r->seconds / per_block, 100 * share(r->seconds, t.blocks));
            if (r->flops > 0) fprintf(f, "%.1f |\n", tflops(r->flops, r->seconds));
            else fprintf(f, " |\n");
        }
    fprintf(f, "| | all | | %.1f | %.3f | 100.0%% | |\n\n", 1e3 * t.blocks, 1e3 * t.blocks / per_block);
    fprintf(f, "## The rest of the step\n\n| phase | op | calls | total ms | share of the step |\n"
            "|---|---|---:|---:|---:|\n| | the blocks (above) | | %.1f | %.1f%% |\n", 1e3 * t.blocks,
            100 * share(t.blocks, run->step_seconds));
    for (int i = 0; i < count; i++) {
        const mt_prof_row *r = &rows[i];
        if (mt_profile_row_in_block(r)) continue;
        fprintf(f, "| %s | %s | %ld | %.1f | %.1f%% |\n", r->phase, r->op, r->calls, 1e3 * r->seconds,
                100 * share(r->seconds, run->step_seconds));
    }
    double idle = run->step_seconds - t.accounted;
    fprintf(f, "| | device idle outside every span | | %.1f | %.1f%% |\n", 1e3 * idle,
            100 * share(idle, run->step_seconds));
    fprintf(f, "| | the steps (wall clock) | | %.1f | 100.0%% |\n", 1e3 * run->step_seconds);
}

static json_t *row_json(const mt_prof_row *r, totals t, double step_seconds) {
    int in_block = mt_profile_row_in_block(r);
    json_t *j = json_pack("{s:s, s:s, s:b, s:I, s:f, s:f}", "phase", r->phase, "op", r->op, "in_block", in_block,
                          "calls", (json_int_t)r->calls, "total_ms", 1e3 * r->seconds, "share",
                          share(r->seconds, in_block ? t.blocks : step_seconds));
    if (j && json_object_set_new(j, "tflops", r->flops > 0 ? json_real(tflops(r->flops, r->seconds)) : json_null())) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *report_json(const mt_prof_row *rows, int count, const mt_profile_run *run) {
    totals t = totals_of(rows, count);
    json_t *list = json_array();
    for (int i = 0; list && i < count; i++) {
        json_t *r = row_json(&rows[i], t, run->step_seconds);
        if (!r || json_array_append_new(list, r)) {
            json_decref(list);
            list = NULL;
        }
    }
    if (!list) return NULL;
    return json_pack("{s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o}", "model", run->model, "device",
                     run->device, "steps", run->steps, "layers", run->layers, "tokens_per_step", run->tokens_per_step,
                     "step_ms", 1e3 * run->step_seconds, "tflops", run->tflops, "blocks_ms", 1e3 * t.blocks,
                     "gemm_tflops", tflops(t.gemm_flops, t.gemm), "accounted_ms", 1e3 * t.accounted, "idle_ms",
                     1e3 * (run->step_seconds - t.accounted), "rows", list);
}

/* PREFIX + suffix, malloc'd. */
static char *path_of(const char *prefix, const char *suffix) {
    size_t n = strlen(prefix) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s", prefix, suffix);
    return p;
}

static mt_status write_file(const char *prefix, const char *suffix, const mt_prof_row *rows, int count,
                            const mt_profile_run *run) {
    char *path = path_of(prefix, suffix);
    if (!path) return mt_fail(MT_ERR_NOMEM, "--profile %s: out of memory", prefix);
    FILE *f = fopen(path, "w");
    if (!f) {
        mt_status rc = mt_fail(MT_ERR_IO, "--profile: cannot write %s: %s", path, strerror(errno));
        free(path);
        return rc;
    }
    int bad = 0;
    if (!strcmp(suffix, ".md")) {
        write_md(f, rows, count, run);
    } else {
        json_t *j = report_json(rows, count, run);
        bad = !j || json_dumpf(j, f, JSON_INDENT(1)) != 0 || fputc('\n', f) == EOF;
        json_decref(j);
    }
    bad |= ferror(f) != 0;
    bad |= fclose(f) != 0;
    mt_status rc = bad ? mt_fail(MT_ERR_IO, "--profile: cannot write %s: %s", path, strerror(errno)) : MT_OK;
    free(path);
    return rc;
}

mt_status mt_profile_report(const mt_prof_row *rows, int count, const mt_profile_run *run, const char *prefix,
                            FILE *out) {
    MT_TRY(write_file(prefix, ".md", rows, count, run));
    MT_TRY(write_file(prefix, ".json", rows, count, run));
    fputc('\n', out);
    write_md(out, rows, count, run);
    fflush(out);
    return MT_OK;
}
