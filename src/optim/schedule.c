#include "optim/schedule.h"

#include <math.h>
#include <string.h>

mt_status mt_lr_schedule_validate(const mt_lr_schedule *s) {
    if (s->kind != MT_LR_CONSTANT && s->kind != MT_LR_COSINE)
        return mt_fail(MT_ERR_INVALID, "lr schedule: unknown kind %d", (int)s->kind);
    if (!(s->max_lr >= 0.0f) || isinf(s->max_lr))
        return mt_fail(MT_ERR_INVALID, "lr schedule: max_lr %g must be finite and >= 0",
                       (double)s->max_lr);
    if (s->warmup_steps < 0)
        return mt_fail(MT_ERR_INVALID, "lr schedule: warmup_steps %lld must be >= 0",
                       (long long)s->warmup_steps);
    if (s->kind == MT_LR_COSINE) {
        if (s->total_steps < s->warmup_steps)
            return mt_fail(MT_ERR_INVALID,
                           "lr schedule: total_steps %lld must be >= warmup_steps %lld",
                           (long long)s->total_steps, (long long)s->warmup_steps);
        if (!(s->min_lr_ratio >= 0.0f && s->min_lr_ratio <= 1.0f))
            return mt_fail(MT_ERR_INVALID, "lr schedule: min_lr_ratio %g must be in [0, 1]",
                           (double)s->min_lr_ratio);
    }
    return MT_OK;
}

float mt_lr_at(const mt_lr_schedule *s, int64_t step) {
    if (step < 1) step = 1;
    double max_lr = s->max_lr;
    if (step <= s->warmup_steps) return (float)(max_lr * (double)step / (double)s->warmup_steps);
    if (s->kind == MT_LR_CONSTANT) return s->max_lr;
    double min_lr = max_lr * s->min_lr_ratio;
    int64_t decay_steps = s->total_steps - s->warmup_steps;
    if (step >= s->total_steps || decay_steps <= 0) return (float)min_lr;
    double progress = (double)(step - s->warmup_steps) / (double)decay_steps;
    return (float)(min_lr + (max_lr - min_lr) * 0.5 * (1.0 + cos(M_PI * progress)));
}

mt_status mt_lr_kind_parse(const char *name, mt_lr_kind *kind) {
    if (strcmp(name, "constant") == 0) *kind = MT_LR_CONSTANT;
    else if (strcmp(name, "cosine") == 0) *kind = MT_LR_COSINE;
    else return mt_fail(MT_ERR_INVALID, "lr schedule: unknown kind '%s' (constant, cosine)", name);
    return MT_OK;
}

const char *mt_lr_kind_name(mt_lr_kind kind) {
    return kind == MT_LR_COSINE ? "cosine" : "constant";
}
