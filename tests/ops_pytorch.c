/* Reference kernels against a PyTorch script (ops_pytorch.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_check.h"
#include "ops_pytorch.h"

static ops_ref_case cases[OPS_REF_MAX_CASES];
static int num_cases;

uint64_t ops_ref_seed(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

ops_ref_case *ops_ref_new_case(const char *title, const char *op, const char *params) {
    cr_assert_lt(num_cases, OPS_REF_MAX_CASES);
    ops_ref_case *c = &cases[num_cases++];
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

void ops_ref_write(ops_ref_case *c, const char *name, const void *data, size_t count, int ints) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s", c->fx.dir, name, ints ? "i32" : "f32");
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(data, 4, count, f), count);
    fclose(f);
}

/* A random float input, written for the script; the caller frees it. */
float *ops_ref_input(ops_ref_case *c, const char *name, size_t count, float lo, float hi) {
    float *x = malloc(count * sizeof *x);
    ops_fill(x, count, ops_ref_seed(c->title) ^ ops_ref_seed(name), lo, hi);
    ops_ref_write(c, name, x, count, 0);
    return x;
}

void ops_ref_expect_f(ops_ref_case *c, const char *name, float *got, size_t count) {
    cr_assert_lt(c->outputs, OPS_REF_MAX_ARRAYS);
    c->out[c->outputs++] = (ops_ref_output){name, count, got, NULL};
}
void ops_ref_expect_i(ops_ref_case *c, const char *name, int32_t *got, size_t count) {
    cr_assert_lt(c->outputs, OPS_REF_MAX_ARRAYS);
    c->out[c->outputs++] = (ops_ref_output){name, count, NULL, got};
}

static double *read_f64(const char *dir, const char *name, size_t count) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.ref.f64", dir, name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: not written by the script", path);
    double *x = malloc(count * sizeof *x);
    size_t got = fread(x, sizeof *x, count, f);
    cr_assert_eq(got, count, "%s: %zu values, expected %zu", path, got, count);
    fclose(f);
    return x;
}

static void compare(const ops_ref_case *c, double rel_tol) {
    for (int o = 0; o < c->outputs; o++) {
        const ops_ref_output *out = &c->out[o];
        char path[512];
        if (out->i) {
            snprintf(path, sizeof path, "%s/%s.ref.i32", c->fx.dir, out->name);
            FILE *f = fopen(path, "rb");
            cr_assert(f, "%s: not written by the script", path);
            int32_t *want = malloc(out->count * sizeof *want);
            cr_assert_eq(fread(want, 4, out->count, f), out->count, "%s: short", path);
            fclose(f);
            size_t k = 0;
            while (k < out->count && want[k] == out->i[k]) k++;
            cr_expect_eq(k, out->count, "%s: %s[%zu] is %d, PyTorch's %d", c->title, out->name, k,
                         out->i[k % out->count], want[k % out->count]);
            free(want);
        } else {
            double *want = read_f64(c->fx.dir, out->name, out->count), err2 = 0, norm2 = 0;
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

void ops_ref_run(const char *script, double rel_tol) {
    mt_ref_job jobs[OPS_REF_MAX_CASES];
    for (int i = 0; i < num_cases; i++) jobs[i] = (mt_ref_job){cases[i].op, &cases[i].fx};
    cr_assert_eq(mt_ref_run_script(script, jobs, num_cases), MT_OK, "%s", mt_error());
    for (int i = 0; i < num_cases; i++) {
        compare(&cases[i], rel_tol);
        for (int o = 0; o < cases[i].outputs; o++) {
            free(cases[i].out[o].f);
            free(cases[i].out[o].i);
        }
        mt_ref_fixture_remove(&cases[i].fx);
    }
    num_cases = 0;
}
