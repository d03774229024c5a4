#include "ops_check.h"

#include <criterion/criterion.h>
#include <math.h>

/* splitmix64: a tiny generator with good output from any seed. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ops_fill(float *x, size_t count, uint64_t seed, float lo, float hi) {
    uint64_t state = seed;
    for (size_t i = 0; i < count; i++) {
        double unit = (double)(next_random(&state) >> 11) / 9007199254740992.0; /* [0, 1) */
        x[i] = (float)(lo + (hi - lo) * unit);
    }
}

double ops_probe(const float *y, const float *weights, size_t count) {
    double s = 0.0;
    for (size_t i = 0; i < count; i++) s += (double)y[i] * weights[i];
    return s;
}

void ops_assert_close(const char *what, const float *got, const double *want, size_t count,
                      double atol, double rtol) {
    for (size_t i = 0; i < count; i++)
        cr_assert(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]),
                  "%s[%zu]: got %.9g, want %.9g", what, i, got[i], want[i]);
}

void ops_assert_close_f(const char *what, const float *got, const float *want, size_t count,
                        double atol, double rtol) {
    for (size_t i = 0; i < count; i++)
        cr_assert(fabs((double)got[i] - want[i]) <= atol + rtol * fabs(want[i]),
                  "%s[%zu]: got %.9g, want %.9g", what, i, got[i], want[i]);
}

double ops_rel_err(const float *got, const float *want, size_t count) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < count; i++) {
        double d = (double)got[i] - want[i];
        diff += d * d;
        norm += (double)want[i] * want[i];
    }
    return sqrt(diff / (norm > 0.0 ? norm : 1e-30));
}

void ops_check_grad(const char *what, float *param, const float *grad, size_t count, float step,
                    ops_loss_fn loss, void *ctx, double atol, double rtol) {
    for (size_t i = 0; i < count; i++) {
        float saved = param[i];
        float up = saved + step, down = saved - step;
        param[i] = up;
        double loss_up = loss(ctx);
        param[i] = down;
        double loss_down = loss(ctx);
        param[i] = saved;
        double fd = (loss_up - loss_down) / ((double)up - down);
        cr_assert(fabs(grad[i] - fd) <= atol + rtol * fabs(fd),
                  "%s[%zu]: analytic %.9g, finite difference %.9g", what, i, grad[i], fd);
    }
}
