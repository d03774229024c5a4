/* Learning-rate schedules: warmup, cosine decay, constant, and bad settings. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "optim/schedule.h"

/* Rates are computed in double and rounded to float once: within 1e-6 relative. */
#define CLOSE(got, want) (fabs((double)(got) - (want)) <= 1e-6 * fabs(want))

static const mt_lr_schedule cosine = {
    .kind = MT_LR_COSINE, .max_lr = 3e-4f, .warmup_steps = 10, .total_steps = 110,
    .min_lr_ratio = 0.1f,
};

Test(schedule, warmup_is_linear_up_to_max) {
    double max_lr = cosine.max_lr;
    cr_assert(CLOSE(mt_lr_at(&cosine, 1), max_lr / 10), "step 1: %g", (double)mt_lr_at(&cosine, 1));
    cr_assert(CLOSE(mt_lr_at(&cosine, 5), max_lr / 2));
    cr_assert_eq(mt_lr_at(&cosine, 10), cosine.max_lr);
    cr_assert(CLOSE(mt_lr_at(&cosine, 0), max_lr / 10), "steps below 1 count as 1");
}

Test(schedule, cosine_decays_to_min_ratio) {
    double max_lr = cosine.max_lr, min_lr = max_lr * cosine.min_lr_ratio;
    /* Halfway through the decay the cosine is at zero: the mean of max and min. */
    cr_assert(CLOSE(mt_lr_at(&cosine, 60), (max_lr + min_lr) / 2), "midpoint: %g",
              (double)mt_lr_at(&cosine, 60));
    /* A quarter of the way: (1 + cos(pi/4)) / 2 of the range above min. */
    cr_assert(CLOSE(mt_lr_at(&cosine, 35), min_lr + (max_lr - min_lr) * (1 + sqrt(0.5)) / 2));
    cr_assert(CLOSE(mt_lr_at(&cosine, 110), min_lr));
    cr_assert(CLOSE(mt_lr_at(&cosine, 1000), min_lr), "after the end the rate stays at min");
    for (int64_t step = 11; step <= 110; step++)
        cr_assert_leq(mt_lr_at(&cosine, step), mt_lr_at(&cosine, step - 1),
                      "not decreasing at step %lld", (long long)step);
}

Test(schedule, constant_after_warmup) {
    mt_lr_schedule s = {.kind = MT_LR_CONSTANT, .max_lr = 1e-3f, .warmup_steps = 4};
    cr_assert(CLOSE(mt_lr_at(&s, 2), 5e-4));
    cr_assert_eq(mt_lr_at(&s, 4), 1e-3f);
    cr_assert_eq(mt_lr_at(&s, 1000000), 1e-3f);
    s.warmup_steps = 0;
    cr_assert_eq(mt_lr_at(&s, 1), 1e-3f, "no warmup: full rate from the first step");
}

Test(schedule, cosine_without_decay_steps) {
    /* total == warmup: nothing left to decay over, so min right after warmup (no 0/0). */
    mt_lr_schedule s = cosine;
    s.total_steps = s.warmup_steps;
    cr_assert_eq(mt_lr_schedule_validate(&s), MT_OK);
    cr_assert(CLOSE(mt_lr_at(&s, 11), (double)s.max_lr * s.min_lr_ratio));
}

Test(schedule, validate_names_the_bad_field) {
    static const struct { mt_lr_schedule s; const char *field; } bad[] = {
        {{.kind = MT_LR_COSINE, .max_lr = -1.0f, .total_steps = 10}, "max_lr"},
        {{.kind = MT_LR_COSINE, .max_lr = NAN, .total_steps = 10}, "max_lr"},
        {{.kind = MT_LR_CONSTANT, .max_lr = 1e-3f, .warmup_steps = -1}, "warmup_steps"},
        {{.kind = MT_LR_COSINE, .max_lr = 1e-3f, .warmup_steps = 20, .total_steps = 10},
         "total_steps"},
        {{.kind = MT_LR_COSINE, .max_lr = 1e-3f, .total_steps = 10, .min_lr_ratio = 1.5f},
         "min_lr_ratio"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(mt_lr_schedule_validate(&bad[i].s), MT_ERR_INVALID, "case %zu", i);
        cr_assert_not_null(strstr(mt_error(), bad[i].field), "case %zu: '%s'", i, mt_error());
    }
    cr_assert_eq(mt_lr_schedule_validate(&cosine), MT_OK);
}

Test(schedule, kind_names_round_trip) {
    mt_lr_kind kind;
    cr_assert_eq(mt_lr_kind_parse("cosine", &kind), MT_OK);
    cr_assert_eq(kind, MT_LR_COSINE);
    cr_assert_str_eq(mt_lr_kind_name(kind), "cosine");
    cr_assert_eq(mt_lr_kind_parse("constant", &kind), MT_OK);
    cr_assert_str_eq(mt_lr_kind_name(kind), "constant");
    cr_assert_eq(mt_lr_kind_parse("linear", &kind), MT_ERR_INVALID);
    cr_assert_not_null(strstr(mt_error(), "linear"));
}
