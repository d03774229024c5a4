/* bench --profile's report: the profile's rows (backend.h's mt_prof_row, summed over the timed
 * steps) as two tables, the blocks' ops and the rest of the step, in Markdown and JSON
 * (docs/profile.md). */
#ifndef MT_TRAIN_PROFILE_REPORT_H
#define MT_TRAIN_PROFILE_REPORT_H

#include <stdio.h>

#include "backend/backend.h"

/* What the report says of the run beside the rows. */
typedef struct {
    const char *model, *device; /* device: the GPU's name, or "" */
    int steps, layers;          /* timed steps; the model's blocks */
    double tokens_per_step;
    double step_seconds; /* the timed steps' wall-clock seconds, summed */
    double tflops;       /* bench's figure: the median step's, counted from the active parameters */
} mt_profile_run;

/* Whether a row is one of the blocks' (its phase a block's: forward, backward, the recomputation). */
int mt_profile_row_in_block(const mt_prof_row *r);

/* Writes PREFIX.md (the tables) and PREFIX.json, and the tables to out; MT_ERR_IO naming the file
 * that cannot be written. */
mt_status mt_profile_report(const mt_prof_row *rows, int count, const mt_profile_run *run, const char *prefix,
                            FILE *out);

#endif
