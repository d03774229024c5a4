/* Learning-rate schedules: a pure function from the optimizer step to the learning rate.
 *
 * Steps count from 1, like mt_adamw_params.step: lr(step) is the rate of the step-th update.
 * Both kinds start with a linear warmup over warmup_steps (none when 0) from max_lr/warmup_steps
 * up to max_lr at step == warmup_steps. Then
 *   constant: max_lr for ever;
 *   cosine:   max_lr down to min_lr = max_lr * min_lr_ratio along half a cosine, reaching min_lr
 *             at step == total_steps and staying there. */
#ifndef MT_OPTIM_SCHEDULE_H
#define MT_OPTIM_SCHEDULE_H

#include <stdint.h>

#include "util/status.h"

typedef enum { MT_LR_CONSTANT, MT_LR_COSINE } mt_lr_kind;

typedef struct {
    mt_lr_kind kind;
    float max_lr;
    int64_t warmup_steps;
    int64_t total_steps;  /* cosine only: the step at which min_lr is reached */
    float min_lr_ratio;   /* cosine only: in [0, 1] */
} mt_lr_schedule;

/* Fails naming the field that is out of range. */
mt_status mt_lr_schedule_validate(const mt_lr_schedule *s);

/* The learning rate of update number `step` (>= 1; smaller steps are taken as 1). */
float mt_lr_at(const mt_lr_schedule *s, int64_t step);

/* "constant" or "cosine" to a kind; fails naming the unknown name. */
mt_status mt_lr_kind_parse(const char *name, mt_lr_kind *kind);
const char *mt_lr_kind_name(mt_lr_kind kind);

#endif
