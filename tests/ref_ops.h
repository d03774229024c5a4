/* Test helper: single ops of the CPU reference kernels against a PyTorch script of tests/reference
 * (moe_ops_ref.py, op_variants_ref.py), float64 with autograd for every backward.
 *
 * A case is a fixture directory (ref_fixture.h) holding case.txt (key=value lines: the sizes) and
 * the op's inputs as little-endian float32 (.f32) or int32 (.i32) files; the test computes the
 * op's outputs with the kernels and names each, the script writes its own as NAME.ref.f64 or
 * NAME.ref.i32, and ref_ops_run compares them by name. One Python start runs every case of a
 * set. */
#ifndef MT_TESTS_REF_OPS_H
#define MT_TESTS_REF_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "ref_fixture.h"

enum { REF_OPS_MAX_CASES = 24, REF_OPS_MAX_OUTPUTS = 10 };

/* An array the kernels computed, compared with the script's of the same name. */
typedef struct {
    const char *name;
    size_t count;
    float *f;   /* a float output, or */
    int32_t *i; /* an int32 one (compared exactly) */
} ref_ops_output;

typedef struct {
    const char *title, *op;
    mt_ref_fixture fx;
    ref_ops_output out[REF_OPS_MAX_OUTPUTS];
    int outputs;
} ref_ops_case;

typedef struct {
    ref_ops_case cases[REF_OPS_MAX_CASES];
    int count;
} ref_ops_set;

/* A seed from a string (FNV-1a): each case's inputs differ by its title and their names. */
uint64_t ref_ops_seed(const char *s);

/* A new case of the script's op `op`, with case.txt holding `params`. */
ref_ops_case *ref_ops_new_case(ref_ops_set *set, const char *title, const char *op, const char *params);
/* Writes an input for the script: count floats, or int32 ids with `ints`. */
void ref_ops_write(ref_ops_case *c, const char *name, const void *data, size_t count, int ints);
/* A random float input in [lo, hi), written for the script; the caller frees it. */
float *ref_ops_input(ref_ops_case *c, const char *name, size_t count, float lo, float hi);
/* Names an output (malloc'ed; ref_ops_run frees it). */
void ref_ops_expect_f(ref_ops_case *c, const char *name, float *got, size_t count);
void ref_ops_expect_i(ref_ops_case *c, const char *name, int32_t *got, size_t count);

/* Runs the script over every case of the set, expects each float output within rel_tol of the
 * script's (||got - want|| / ||want||) and each int32 output equal, then frees the outputs and
 * removes the fixtures. */
void ref_ops_run(ref_ops_set *set, const char *script, double rel_tol);

#endif
