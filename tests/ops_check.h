/* Test helpers for the op tests: seeded random inputs, closeness asserts, and a central
 * finite-difference check of an analytic gradient against a scalar loss. */
#ifndef MT_TESTS_OPS_CHECK_H
#define MT_TESTS_OPS_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* Fills x[count] with uniform values in [lo, hi) from a fixed seed: the same on every run. */
void ops_fill(float *x, size_t count, uint64_t seed, float lo, float hi);

/* The probe loss sum_i y[i] * weights[i], in double: its gradient with respect to y is
 * weights, so an op's backward fed dy = weights must match its finite differences. */
double ops_probe(const float *y, const float *weights, size_t count);

/* Asserts |got[i] - want[i]| <= atol + rtol * |want[i]| for every i, naming what and i. */
void ops_assert_close(const char *what, const float *got, const double *want, size_t count,
                      double atol, double rtol);
void ops_assert_close_f(const char *what, const float *got, const float *want, size_t count,
                        double atol, double rtol);

/* ||got - want|| / ||want||: the relative error of a whole tensor. */
double ops_rel_err(const float *got, const float *want, size_t count);

/* A scalar loss of the op's inputs, evaluated by running the float kernel; ctx holds the
 * inputs, one of which the check perturbs in place. */
typedef double (*ops_loss_fn)(void *ctx);

/* For each i, perturbs param[i] by +-step, takes the central difference of loss(ctx) over the
 * step actually representable in float, restores param[i], and asserts the analytic grad[i]
 * is within atol + rtol * |difference|. */
void ops_check_grad(const char *what, float *param, const float *grad, size_t count, float step,
                    ops_loss_fn loss, void *ctx, double atol, double rtol);

#endif
