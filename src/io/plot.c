#include "io/plot.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Canvas and plot-area geometry, in SVG user units (pixels). */
enum { WIDTH = 800, HEIGHT = 480, LEFT = 76, RIGHT = 24, TOP = 48, BOTTOM = 60 };

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"};
#define PALETTE_SIZE (int)(sizeof palette / sizeof palette[0])

/* An axis: the data range widened to whole ticks. */
typedef struct {
    double lo, hi, step;
} axis;

/* 1, 2 or 5 times a power of ten, near raw. */
static double nice_step(double raw) {
    double p = pow(10.0, floor(log10(raw)));
    double f = raw / p;
    return (f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0) * p;
}

static axis make_axis(double min, double max) {
    if (!(min <= max)) min = 0.0, max = 1.0; /* no finite data */
    if (min == max) {
        double pad = min != 0.0 ? fabs(min) * 0.1 : 1.0;
        min -= pad;
        max += pad;
    }
    axis a = {.step = nice_step((max - min) / 6.0)};
    a.lo = floor(min / a.step) * a.step;
    a.hi = ceil(max / a.step) * a.step;
    return a;
}

static void data_range(const mt_plot_series *series, int count, double *xmin, double *xmax,
                       double *ymin, double *ymax) {
    *xmin = *ymin = INFINITY;
    *xmax = *ymax = -INFINITY;
    for (int s = 0; s < count; s++) {
        for (size_t i = 0; i < series[s].n; i++) {
            double x = series[s].x[i], y = series[s].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            *xmin = fmin(*xmin, x), *xmax = fmax(*xmax, x);
            *ymin = fmin(*ymin, y), *ymax = fmax(*ymax, y);
        }
    }
}

/* Ticks sit at lo + i * step for i < tick_count, computed from the index so that rounding
 * never accumulates. */
static int tick_count(const axis *a) { return (int)floor((a->hi - a->lo) / a->step + 0.5) + 1; }

static double tick(const axis *a, int i) {
    double v = a->lo + i * a->step;
    return fabs(v) < a->step * 1e-9 ? 0.0 : v; /* not 2.8e-17 at the origin */
}

static double px(const axis *a, double x) {
    return LEFT + (x - a->lo) / (a->hi - a->lo) * (WIDTH - LEFT - RIGHT);
}

static double py(const axis *a, double y) {
    return HEIGHT - BOTTOM - (y - a->lo) / (a->hi - a->lo) * (HEIGHT - TOP - BOTTOM);
}

static void put_escaped(FILE *f, const char *text) {
    for (const char *c = text; *c; c++) {
        switch (*c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*c, f);
        }
    }
}

static void text(FILE *f, double x, double y, const char *anchor, const char *extra,
                 const char *content) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra);
    put_escaped(f, content);
    fputs("</text>\n", f);
}

/* Grid lines, tick labels and the axis titles. */
static void draw_axes(FILE *f, const axis *xa, const axis *ya, const mt_plot_labels *labels) {
    char label[32];
    fputs("<g stroke=\"#e5e5e5\" stroke-width=\"1\">\n", f);
    for (int i = 0; i < tick_count(xa); i++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", px(xa, tick(xa, i)),
                TOP, px(xa, tick(xa, i)), HEIGHT - BOTTOM);
    for (int i = 0; i < tick_count(ya); i++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", LEFT,
                py(ya, tick(ya, i)), WIDTH - RIGHT, py(ya, tick(ya, i)));
    fputs("</g>\n", f);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
            LEFT, TOP, WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    fputs("<g font-size=\"12\" fill=\"#333\">\n", f);
    for (int i = 0; i < tick_count(xa); i++) {
        snprintf(label, sizeof label, "%.6g", tick(xa, i));
        text(f, px(xa, tick(xa, i)), HEIGHT - BOTTOM + 18, "middle", "", label);
    }
    for (int i = 0; i < tick_count(ya); i++) {
        snprintf(label, sizeof label, "%.6g", tick(ya, i));
        text(f, LEFT - 8, py(ya, tick(ya, i)) + 4, "end", "", label);
    }
    fputs("</g>\n", f);
    text(f, (LEFT + WIDTH - RIGHT) / 2.0, HEIGHT - 16, "middle", " font-size=\"14\"", labels->x_label);
    char rotate[96];
    snprintf(rotate, sizeof rotate, " font-size=\"14\" transform=\"rotate(-90 20 %.1f)\"",
             (TOP + HEIGHT - BOTTOM) / 2.0);
    text(f, 20, (TOP + HEIGHT - BOTTOM) / 2.0, "middle", rotate, labels->y_label);
    text(f, WIDTH / 2.0, 28, "middle", " font-size=\"16\" font-weight=\"bold\"", labels->title);
}

static void draw_series(FILE *f, const axis *xa, const axis *ya, const mt_plot_series *s,
                        const char *color) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" "
               "stroke-linejoin=\"round\" points=\"", color);
    for (size_t i = 0; i < s->n; i++)
        if (isfinite(s->x[i]) && isfinite(s->y[i]))
            fprintf(f, "%.1f,%.1f ", px(xa, s->x[i]), py(ya, s->y[i]));
    fputs("\"/>\n", f);
    if (!s->markers) return;
    fprintf(f, "<g fill=\"%s\">\n", color);
    for (size_t i = 0; i < s->n; i++)
        if (isfinite(s->x[i]) && isfinite(s->y[i]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>\n", px(xa, s->x[i]),
                    py(ya, s->y[i]));
    fputs("</g>\n", f);
}

/* Top-right, inside the plot area: a swatch and a label per series. */
static void draw_legend(FILE *f, const mt_plot_series *series, int count) {
    int width = 150, row = 20, x = WIDTH - RIGHT - width - 10, y = TOP + 10;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"white\" "
               "fill-opacity=\"0.9\" stroke=\"#ccc\"/>\n", x, y, width, count * row + 8);
    for (int s = 0; s < count; s++) {
        int cy = y + 14 + s * row;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
                x + 8, cy, x + 32, cy, palette[s % PALETTE_SIZE]);
        text(f, x + 40, cy + 4, "start", " font-size=\"13\" fill=\"#222\"", series[s].label);
    }
}

static void draw(FILE *f, const mt_plot_labels *labels, const mt_plot_series *series, int count) {
    double xmin, xmax, ymin, ymax;
    data_range(series, count, &xmin, &xmax, &ymin, &ymax);
    axis xa = make_axis(xmin, xmax), ya = make_axis(ymin, ymax);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n",
            WIDTH, HEIGHT, WIDTH, HEIGHT);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, HEIGHT);
    draw_axes(f, &xa, &ya, labels);
    for (int s = 0; s < count; s++) draw_series(f, &xa, &ya, &series[s], palette[s % PALETTE_SIZE]);
    draw_legend(f, series, count);
    fputs("</svg>\n", f);
}

mt_status mt_plot_svg(const char *path, const mt_plot_labels *labels,
                      const mt_plot_series *series, int count) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp)
        return mt_fail(MT_ERR_INVALID, "%s: plot path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot create a temp file: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return mt_fail(MT_ERR_IO, "%s: fdopen failed: %s", tmp, strerror(errno));
    }
    fchmod(fd, 0644); /* mkstemp makes it private; a picture is for everyone */
    draw(f, labels, series, count);
    int ok = fflush(f) == 0 && !ferror(f) && fsync(fd) == 0;
    int err = errno;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) err = errno;
        unlink(tmp);
        return mt_fail(MT_ERR_IO, "%s: cannot write the plot: %s", path, strerror(err));
    }
    return MT_OK;
}
