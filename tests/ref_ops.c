#include "ref_ops.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_check.h"

uint64_t ref_ops_seed(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

ref_ops_case *ref_ops_new_case(ref_ops_set *set, const char *title, const char *op, const char *params) {
    cr_assert_lt(set->count, REF_OPS_MAX_CASES);
    ref_ops_case *c = &set->cases[set->count++];
    memset(c, 0, sizeof *c);
    c->title = title;
    c->op = op;
    cr_assert_eq(mt_ref_fixture_create(&c->fx), MT_OK, "%s", mt_error());
    char path[512];
    snprintf(path, sizeof path, "%s/case.txt", c->fx.dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(params, f);
    fclose(f);
    return c;
}

void ref_ops_write(ref_ops_case *c, const char *name, const void *data, size_t count, int ints) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s", c->fx.dir, name, ints ? "i32" : "f32");
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(data, 4, count, f), count);
    fclose(f);
}

float *ref_ops_input(ref_ops_case *c, const char *name, size_t count, float lo, float hi) {
    float *x = malloc(count * sizeof *x);
    ops_fill(x, count, ref_ops_seed(c->title) ^ ref_ops_seed(name), lo, hi);
    ref_ops_write(c, name, x, count, 0);
    return x;
}

void ref_ops_expect_f(ref_ops_case *c, const char *name, float *got, size_t count) {
    cr_assert_lt(c->outputs, REF_OPS_MAX_OUTPUTS);
    c->out[c->outputs++] = (ref_ops_output){name, count, got, NULL};
}

void ref_ops_expect_i(ref_ops_case *c, const char *name, int32_t *got, size_t count) {
    cr_assert_lt(c->outputs, REF_OPS_MAX_OUTPUTS);
    c->out[c->outputs++] = (ref_ops_output){name, count, NULL, got};
}

/* The script's output NAME.ref.EXT of count items of `size` bytes (malloc'ed). */
static void *read_ref(const ref_ops_case *c, const char *name, const char *ext, size_t size, size_t count) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.ref.%s", c->fx.dir, name, ext);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: not written by the script", path);
    void *x = malloc(count * size);
    size_t got = fread(x, size, count, f);
    cr_assert_eq(got, count, "%s: %zu values, expected %zu", path, got, count);
    fclose(f);
    return x;
}

static void compare(const ref_ops_case *c, double rel_tol) {
    for (int o = 0; o < c->outputs; o++) {
        const ref_ops_output *out = &c->out[o];
        if (out->i) {
            int32_t *want = read_ref(c, out->name, "i32", sizeof *want, out->count);
            size_t k = 0;
            while (k < out->count && want[k] == out->i[k]) k++;
            cr_expect_eq(k, out->count, "%s: %s[%zu] is %d, PyTorch's %d", c->title, out->name, k,
                         out->i[k % out->count], want[k % out->count]);
            free(want);
        } else {
            double *want = read_ref(c, out->name, "f64", sizeof *want, out->count), err2 = 0, norm2 = 0;
            for (size_t i = 0; i < out->count; i++) {
                double e = out->f[i] - want[i];
                err2 += e * e;
                norm2 += want[i] * want[i];
            }
            double rel = norm2 > 0 ? sqrt(err2 / norm2) : sqrt(err2);
            cr_expect(rel < rel_tol, "%s: %s is off PyTorch's by %.3g relative (bound %g)", c->title, out->name, rel,
                      rel_tol);
            free(want);
        }
    }
}

void ref_ops_run(ref_ops_set *set, const char *script, double rel_tol) {
    mt_ref_job jobs[REF_OPS_MAX_CASES];
    for (int i = 0; i < set->count; i++) jobs[i] = (mt_ref_job){set->cases[i].op, &set->cases[i].fx};
    cr_assert_eq(mt_ref_run_script(script, jobs, set->count), MT_OK, "%s", mt_error());
    for (int i = 0; i < set->count; i++) {
        ref_ops_case *c = &set->cases[i];
        compare(c, rel_tol);
        for (int o = 0; o < c->outputs; o++) {
            free(c->out[o].f);
            free(c->out[o].i);
        }
        mt_ref_fixture_remove(&c->fx);
    }
    set->count = 0;
}
