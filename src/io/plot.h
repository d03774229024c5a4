/* Line charts as SVG, for the loss curves a run leaves beside its metrics log: axes with "nice"
 * ticks (1, 2, 5 x 10^k), grid, axis labels, a title, one polyline per series and a legend. */
#ifndef MT_IO_PLOT_H
#define MT_IO_PLOT_H

#include <stddef.h>

#include "util/status.h"

typedef struct {
    const char *label;  /* legend text */
    const double *x, *y;
    size_t n;           /* points; non-finite ones are skipped */
    int markers;        /* also draw a dot at each point (for sparse series such as val loss) */
} mt_plot_series;

typedef struct {
    const char *title, *x_label, *y_label;
} mt_plot_labels;

/* Writes the chart to `path` atomically (a temp file beside it, then rename). */
mt_status mt_plot_svg(const char *path, const mt_plot_labels *labels,
                      const mt_plot_series *series, int count);

#endif
