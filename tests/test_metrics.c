/* The metrics log (metrics.jsonl) and the loss-curve SVG drawn from it. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "io/metrics.h"
#include "io/plot.h"

static char run[64];

static void make_run(void) {
    snprintf(run, sizeof run, "/tmp/mt-metrics-XXXXXX");
    cr_assert_not_null(mkdtemp(run));
}

static void remove_run(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", run);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(metrics, .init = make_run, .fini = remove_run);

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s exists", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)n + 1);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return text;
}

static void log_step(mt_metrics *m, int step, double loss) {
    json_t *e = json_pack("{s:i, s:f, s:f}", "step", step, "loss", loss, "lr", 3e-4);
    cr_assert_eq(mt_metrics_log(m, e), MT_OK, "%s", mt_error());
    json_decref(e);
}

Test(metrics, lines_are_flushed_and_read_back) {
    mt_metrics *m;
    cr_assert_eq(mt_metrics_open(run, 0, &m), MT_OK, "%s", mt_error());
    log_step(m, 1, 5.5);
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    char *text = slurp(path); /* read while still open: the line must already be there */
    cr_assert_str_eq(text, "{\"step\":1,\"loss\":5.5,\"lr\":0.0003}\n");
    free(text);
    log_step(m, 2, 5.0);
    json_t *val = json_pack("{s:i, s:f}", "step", 2, "val_loss", 5.25);
    cr_assert_eq(mt_metrics_log(m, val), MT_OK);
    json_decref(val);
    log_step(m, 3, 4.5);
    mt_metrics_close(m);

    mt_curve train, vc;
    cr_assert_eq(mt_metrics_load_curves(path, &train, &vc), MT_OK, "%s", mt_error());
    cr_assert_eq(train.n, 3);
    cr_assert(train.step[2] == 3 && train.value[2] == 4.5);
    cr_assert_eq(vc.n, 1);
    cr_assert(vc.step[0] == 2 && vc.value[0] == 5.25);
    mt_curve_free(&train);
    mt_curve_free(&vc);
}

Test(metrics, resumed_run_replaces_the_abandoned_tail) {
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    /* Steps 1..4 logged, then a crash tore the next line; the run resumed from step 2. */
    FILE *f = fopen(path, "w");
    fputs("{\"step\":1,\"loss\":4}\n{\"step\":2,\"loss\":3}\n{\"step\":3,\"loss\":2}\n"
          "{\"step\":4,\"loss\":1}\n{\"step\":5,\"lo", f);
    fclose(f);
    mt_metrics *m;
    cr_assert_eq(mt_metrics_open(run, 2, &m), MT_OK);
    log_step(m, 3, 2.5);
    mt_metrics_close(m);
    mt_curve train, vc;
    cr_assert_eq(mt_metrics_load_curves(path, &train, &vc), MT_OK, "%s", mt_error());
    cr_assert_eq(train.n, 3, "steps 1, 2 and the resumed 3");
    cr_assert(train.step[2] == 3 && train.value[2] == 2.5);
    cr_assert_eq(vc.n, 0);
    mt_curve_free(&train);
    mt_curve_free(&vc);
}

/* The file itself holds each step once after a resume: the lines of the steps past the resumed
 * checkpoint (and a torn one) are gone before the resumed run logs them again; lines without a
 * step stay. */
Test(metrics, resume_drops_the_abandoned_steps_from_the_file) {
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "w");
    fputs("{\"note\":\"start\"}\n{\"step\":1,\"loss\":4}\n{\"step\":2,\"loss\":3}\n{\"step\":2,\"val_loss\":3.5}\n"
          "{\"step\":3,\"loss\":2}\n{\"step\":3,\"val_loss\":2.5}\n{\"step\":4,\"loss\":1}\n{\"step\":5,\"lo", f);
    fclose(f);
    mt_metrics *m;
    cr_assert_eq(mt_metrics_open(run, 2, &m), MT_OK, "%s", mt_error());
    log_step(m, 3, 2.25);
    mt_metrics_close(m);
    char *text = slurp(path);
    cr_assert_str_eq(text, "{\"note\":\"start\"}\n{\"step\":1,\"loss\":4}\n{\"step\":2,\"loss\":3}\n"
                           "{\"step\":2,\"val_loss\":3.5}\n{\"step\":3,\"loss\":2.25,\"lr\":0.0003}\n");
    free(text);
    /* Nothing to drop: the file is appended to as it is. */
    cr_assert_eq(mt_metrics_open(run, 3, &m), MT_OK, "%s", mt_error());
    log_step(m, 4, 2.0);
    mt_metrics_close(m);
    text = slurp(path);
    cr_assert_not_null(strstr(text, "{\"step\":3,\"loss\":2.25,\"lr\":0.0003}\n{\"step\":4,"), "%s", text);
    free(text);
}

Test(metrics, open_fails_naming_the_file) {
    char missing[128];
    snprintf(missing, sizeof missing, "%s/no/such/dir", run);
    mt_metrics *m;
    cr_assert_eq(mt_metrics_open(missing, 0, &m), MT_ERR_IO);
    cr_assert_not_null(strstr(mt_error(), "no/such/dir/metrics.jsonl"), "%s", mt_error());
}

static int count(const char *haystack, const char *needle) {
    int n = 0;
    for (const char *p = haystack; (p = strstr(p, needle)); p++) n++;
    return n;
}

Test(metrics, loss_plot_is_well_formed_svg) {
    double steps[50], loss[50], vsteps[5] = {10, 20, 30, 40, 50}, vloss[5];
    for (int i = 0; i < 50; i++) steps[i] = i + 1, loss[i] = 5.5 * exp(-i / 20.0) + 1.2;
    for (int i = 0; i < 5; i++) vloss[i] = 5.5 * exp(-vsteps[i] / 20.0) + 1.4;
    loss[7] = NAN; /* a NaN step is skipped, not drawn at a bogus place */
    mt_plot_series series[] = {{"train <loss>", steps, loss, 50, 0},
                               {"val loss", vsteps, vloss, 5, 1}};
    mt_plot_labels labels = {"demo & loss", "step", "loss"};
    char path[128];
    snprintf(path, sizeof path, "%s/loss.svg", run);
    cr_assert_eq(mt_plot_svg(path, &labels, series, 2), MT_OK, "%s", mt_error());
    char *svg = slurp(path);
    cr_assert_eq(strncmp(svg, "<svg ", 5), 0);
    cr_assert_not_null(strstr(svg, "</svg>\n"));
    cr_assert_eq(count(svg, "<polyline"), 2, "both curves");
    cr_assert_eq(count(svg, "<circle"), 5, "val points are marked");
    cr_assert_eq(count(svg, "<text"), count(svg, "</text>"));
    cr_assert_not_null(strstr(svg, "train &lt;loss&gt;"), "legend text is escaped");
    cr_assert_not_null(strstr(svg, "demo &amp; loss"));
    cr_assert_null(strstr(svg, "nan"));
    cr_assert_not_null(strstr(svg, ">50</text>"), "x axis ends on a round tick");
    free(svg);
}

Test(metrics, plot_replaces_atomically) {
    char path[128];
    snprintf(path, sizeof path, "%s/loss.svg", run);
    FILE *f = fopen(path, "w");
    fputs("old picture", f);
    fclose(f);
    struct stat before;
    cr_assert_eq(stat(path, &before), 0);
    double x[2] = {0, 1}, y[2] = {2, 1};
    mt_plot_series s = {"train", x, y, 2, 0};
    mt_plot_labels labels = {"t", "step", "loss"};
    cr_assert_eq(mt_plot_svg(path, &labels, &s, 1), MT_OK, "%s", mt_error());
    struct stat after;
    cr_assert_eq(stat(path, &after), 0);
    /* A rename puts a new inode at the path; rewriting in place would keep the old one. */
    cr_assert_neq(before.st_ino, after.st_ino);
    char *svg = slurp(path);
    cr_assert_eq(strncmp(svg, "<svg", 4), 0);
    free(svg);
    DIR *d = opendir(run);
    for (struct dirent *e; (e = readdir(d));)
        cr_assert_null(strstr(e->d_name, ".tmp-"), "no temp file is left: %s", e->d_name);
    closedir(d);
    /* Writing into a missing directory fails and names the path. */
    snprintf(path, sizeof path, "%s/missing/loss.svg", run);
    cr_assert_eq(mt_plot_svg(path, &labels, &s, 1), MT_ERR_IO);
    cr_assert_not_null(strstr(mt_error(), path));
}

/* ---- TensorBoard event files, read back by tests/reference/read_tfevents.py (its own CRC32C
 * and protobuf decoding, not the writer's code) ---- */

/* The event files in the run directory, sorted, space-separated. */
static void event_files(char *out, size_t cap) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s/events.out.tfevents.* | sort", run);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    out[0] = '\0';
    char line[512];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        strncat(out, line, cap - strlen(out) - 2);
        strcat(out, " ");
    }
    pclose(p);
}

/* Runs the reader over the files; its output, one JSON event per line. */
static json_t *read_events(const char *files, int expect_ok) {
    char cmd[2048], out[256];
    snprintf(out, sizeof out, "%s/events.json", run);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/reference/read_tfevents.py %s > %s 2> %s.err", files, out, out);
    int rc = system(cmd);
    if (!expect_ok) {
        cr_assert_neq(rc, 0, "the reader accepted a damaged file");
        return NULL;
    }
    cr_assert_eq(rc, 0, "the reader refused the file (see %s.err)", out);
    json_t *events = json_array();
    FILE *f = fopen(out, "r");
    char line[4096];
    while (fgets(line, sizeof line, f)) json_array_append_new(events, json_loads(line, 0, NULL));
    fclose(f);
    return events;
}

Test(metrics, tensorboard_events_read_back_independently) {
    mt_metrics *m;
    cr_assert_eq(mt_metrics_open(run, 0, &m), MT_OK, "%s", mt_error());
    json_t *e = json_pack("{s:i, s:f, s:f, s:f, s:b, s:f}", "step", 1, "loss", 5.5, "lr", 3e-4, "grad_norm", 1.25,
                          "skipped", 0, "tokens_per_s", 12345.0);
    cr_assert_eq(mt_metrics_log(m, e), MT_OK);
    json_decref(e);
    log_step(m, 2, 5.0);
    e = json_pack("{s:i, s:f}", "step", 2, "val_loss", 5.25);
    cr_assert_eq(mt_metrics_log(m, e), MT_OK);
    json_decref(e);
    e = json_pack("{s:s}", "note", "no step: not a scalar event");
    cr_assert_eq(mt_metrics_log(m, e), MT_OK);
    json_decref(e);
    mt_metrics_close(m);
    /* a resumed run adds a file of its own */
    cr_assert_eq(mt_metrics_open(run, 2, &m), MT_OK, "%s", mt_error());
    log_step(m, 3, 4.5);
    mt_metrics_close(m);

    char files[1024];
    event_files(files, sizeof files);
    json_t *ev = read_events(files, 1);
    cr_assert_eq(json_array_size(ev), 6, "%zu events", json_array_size(ev));
    /* each file opens with its version */
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(ev, 0), "file_version")), "brain.Event:2");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(ev, 4), "file_version")), "brain.Event:2");
    json_t *first = json_object_get(json_array_get(ev, 1), "scalars");
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(ev, 1), "step")), 1);
    cr_expect_eq(json_object_size(first), 4, "loss, lr, grad_norm, tokens_per_s (not the flag)");
    cr_expect_float_eq(json_real_value(json_object_get(first, "loss")), 5.5, 1e-6);
    cr_expect_float_eq(json_real_value(json_object_get(first, "lr")), (float)3e-4, 1e-9);
    cr_expect_float_eq(json_real_value(json_object_get(first, "grad_norm")), 1.25, 1e-6);
    cr_expect_float_eq(json_real_value(json_object_get(first, "tokens_per_s")), 12345.0, 1e-3);
    json_t *val = json_array_get(ev, 3);
    cr_expect_eq(json_integer_value(json_object_get(val, "step")), 2);
    cr_expect_float_eq(json_real_value(json_object_get(json_object_get(val, "scalars"), "val_loss")), 5.25, 1e-6);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(ev, 5), "step")), 3);
    double wall = json_real_value(json_object_get(json_array_get(ev, 1), "wall_time"));
    cr_expect(wall > 1.6e9 && wall < 4e9, "wall_time %f is not a time", wall);
    json_decref(ev);

    /* the reader does check: one flipped byte in the data fails its CRC */
    char *last = strrchr(files, ' ');
    *last = '\0';
    last = strrchr(files, ' ') ? strrchr(files, ' ') + 1 : files;
    FILE *f = fopen(last, "r+b");
    cr_assert_not_null(f);
    fseek(f, 20, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 20, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    read_events(last, 0);
}
