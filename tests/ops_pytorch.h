/* Test helper: reference kernels against a PyTorch script of tests/reference, one Python start for
 * every case. A case is a fixture directory holding case.txt (key=value lines: the sizes) and the
 * op's inputs as little-endian float32 (.f32) or int32 (.i32) files; the script writes each output
 * as NAME.ref.f64 or NAME.ref.i32, which are compared with what the kernels gave, by name. */
#ifndef MT_TESTS_OPS_PYTORCH_H
#define MT_TESTS_OPS_PYTORCH_H

#include <stddef.h>
#include <stdint.h>

#include "ref_fixture.h"

enum { OPS_REF_MAX_CASES = 16, OPS_REF_MAX_ARRAYS = 12 };

typedef struct {
    const char *name;
    size_t count;
    float *f;   /* a float output, or */
    int32_t *i; /* an int32 one */
} ops_ref_output;

typedef struct {
    const char *title, *op;
    mt_ref_fixture fx;
    ops_ref_output out[OPS_REF_MAX_ARRAYS];
    int outputs;
} ops_ref_case;

/* A new case of op (the script's name for it) with case.txt = params. */
ops_ref_case *ops_ref_new_case(const char *title, const char *op, const char *params);
/* An FNV-1a hash of a string: the seed of a case's named input. */
uint64_t ops_ref_seed(const char *s);
/* Writes an input for the script (ints: int32, else float32). */
void ops_ref_write(ops_ref_case *c, const char *name, const void *data, size_t count, int ints);
/* A random float input in [lo, hi), written for the script; the caller frees it. */
float *ops_ref_input(ops_ref_case *c, const char *name, size_t count, float lo, float hi);
/* An output the kernels computed (malloc'd; freed by ops_ref_run). */
void ops_ref_expect_f(ops_ref_case *c, const char *name, float *got, size_t count);
void ops_ref_expect_i(ops_ref_case *c, const char *name, int32_t *got, size_t count);
/* Runs the script over every case made since the last run, asserts each float output within rel_tol
 * (||got - want|| / ||want||) and each int32 one exactly, and removes the fixtures. */
void ops_ref_run(const char *script, double rel_tol);

#endif
