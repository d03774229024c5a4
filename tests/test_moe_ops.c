/* The mixture-of-experts reference kernels (backend/cpu/ops/moe_*.c) against PyTorch
 * (tests/reference/moe_ops_ref.py, float64 with autograd for every backward): routing with and
 * without renormalisation and the load-balancing loss's gradient, the permutation, gather, the
 * grouped GEMMs by segment with experts left empty, the fused SwiGLU, combine, the shared expert's
 * gate, and the load-balancing loss over several layers together with its gradient through the
 * router. One Python start runs every case. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"
#include "ref_ops.h"

#define SCRIPT "tests/reference/moe_ops_ref.py"
/* fp32 kernels against float64: sums of at most a few hundred O(1) terms, each rounded at 6e-8
 * relative, stay below 1e-6 relative per tensor (measured: the worst case here is 7e-7, the aux loss's dlogits); a wrong
 * or missing term is off by O(0.1). */
#define REL_TOL 1e-5

static ref_ops_set set;

/* Each token's k distinct experts, the last two experts left without any. */
static void random_experts(const char *title, int n, int E, int k, int32_t *experts) {
    uint64_t state = ref_ops_seed(title);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int32_t e, again;
            do {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                e = (int32_t)((state >> 33) % (uint64_t)(E - 2));
                again = 0;
                for (int i = 0; i < j; i++) again |= experts[t * k + i] == e;
            } while (again);
            experts[t * k + j] = e;
        }
}

/* ---- the cases ---- */

static void route_case(const char *title, int n, int E, int k, int renorm, int aux) {
    char params[128];
    snprintf(params, sizeof params, "n=%d\nE=%d\nk=%d\nrenorm=%d\n", n, E, k, renorm);
    ref_ops_case *c = ref_ops_new_case(&set, title, "route", params);
    float *logits = ref_ops_input(c, "logits", (size_t)n * E, -2, 2), *dweights = ref_ops_input(c, "dweights", (size_t)n * k, -1, 1);
    float *aux_grad = aux ? ref_ops_input(c, "aux_grad", E, -0.5f, 0.5f) : NULL;
    float *weights = malloc((size_t)n * k * 4), *prob_sum = calloc(E, 4), *dlogits = malloc((size_t)n * E * 4);
    int32_t *experts = malloc((size_t)n * k * 4), *counts = calloc(E, 4);
    mt_cpu_moe_route(weights, experts, counts, prob_sum, logits, n, E, k, renorm);
    mt_cpu_moe_route_dx(dlogits, dweights, logits, experts, aux_grad, n, E, k, renorm);
    ref_ops_expect_f(c, "weights", weights, (size_t)n * k);
    ref_ops_expect_i(c, "experts", experts, (size_t)n * k);
    ref_ops_expect_i(c, "counts", counts, E);
    ref_ops_expect_f(c, "prob_sum", prob_sum, E);
    ref_ops_expect_f(c, "dlogits", dlogits, (size_t)n * E);
    free(logits);
    free(dweights);
    free(aux_grad);
}

static void permute_case(const char *title, int n, int E, int k, int seg) {
    char params[128];
    snprintf(params, sizeof params, "n=%d\nE=%d\nk=%d\nseg=%d\n", n, E, k, seg);
    ref_ops_case *c = ref_ops_new_case(&set, title, "permute", params);
    int S = (n + seg - 1) / seg;
    int32_t *experts = malloc((size_t)n * k * 4), *order = malloc((size_t)n * k * 4);
    int32_t *slot_row = malloc((size_t)n * k * 4), *offsets = malloc(((size_t)E * S + 1) * 4);
    random_experts(title, n, E, k, experts);
    ref_ops_write(c, "experts", experts, (size_t)n * k, 1);
    mt_cpu_moe_permute(order, slot_row, offsets, experts, n, E, k, seg);
    ref_ops_expect_i(c, "order", order, (size_t)n * k);
    ref_ops_expect_i(c, "slot_row", slot_row, (size_t)n * k);
    ref_ops_expect_i(c, "offsets", offsets, (size_t)E * S + 1);
    free(experts);
}

/* A layer's permutation of random experts, written as the script's inputs it names. */
static void permutation(ref_ops_case *c, int n, int E, int k, int seg, int32_t **order, int32_t **slot_row,
                        int32_t **offsets) {
    int S = (n + seg - 1) / seg;
    int32_t *experts = malloc((size_t)n * k * 4);
    *order = malloc((size_t)n * k * 4);
    *slot_row = malloc((size_t)n * k * 4);
    *offsets = malloc(((size_t)E * S + 1) * 4);
    random_experts(c->title, n, E, k, experts);
    mt_cpu_moe_permute(*order, *slot_row, *offsets, experts, n, E, k, seg);
    ref_ops_write(c, "order", *order, (size_t)n * k, 1);
    ref_ops_write(c, "slot_row", *slot_row, (size_t)n * k, 1);
    ref_ops_write(c, "offsets", *offsets, (size_t)E * S + 1, 1);
    free(experts);
}

static void gather_case(const char *title, int n, int E, int k, int d, int accumulate) {
    char params[128];
    snprintf(params, sizeof params, "n=%d\nk=%d\nd=%d\naccumulate=%d\n", n, k, d, accumulate);
    ref_ops_case *c = ref_ops_new_case(&set, title, "gather", params);
    int32_t *order, *slot_row, *offsets;
    permutation(c, n, E, k, n, &order, &slot_row, &offsets);
    float *x = ref_ops_input(c, "x", (size_t)n * d, -1, 1), *dxs = ref_ops_input(c, "dxs", (size_t)n * k * d, -1, 1);
    float *dx = ref_ops_input(c, "dx", (size_t)n * d, -1, 1), *xs = malloc((size_t)n * k * d * 4);
    mt_cpu_moe_gather(xs, x, order, n, k, d);
    mt_cpu_moe_gather_dx(dx, dxs, slot_row, n, k, d, accumulate);
    ref_ops_expect_f(c, "xs", xs, (size_t)n * k * d);
    ref_ops_expect_f(c, "dx", dx, (size_t)n * d);
    free(x);
    free(dxs);
    free(order);
    free(slot_row);
    free(offsets);
}

static void grouped_case(const char *title, int n, int E, int k, int seg, int in, int out) {
    int S = (n + seg - 1) / seg, rows = n * k;
    char params[160];
    snprintf(params, sizeof params, "rows=%d\nE=%d\nS=%d\nin=%d\nout=%d\n", rows, E, S, in, out);
    ref_ops_case *c = ref_ops_new_case(&set, title, "grouped", params);
    int32_t *order, *slot_row, *offsets;
    permutation(c, n, E, k, seg, &order, &slot_row, &offsets);
    float *x = ref_ops_input(c, "x", (size_t)rows * in, -1, 1), *w = ref_ops_input(c, "w", (size_t)E * out * in, -0.3f, 0.3f);
    float *dy = ref_ops_input(c, "dy", (size_t)rows * out, -1, 1), *dw = ref_ops_input(c, "dw", (size_t)E * out * in, -1, 1);
    float *y = malloc((size_t)rows * out * 4), *dx = malloc((size_t)rows * in * 4);
    mt_cpu_moe_matmul(y, x, w, NULL, offsets, rows, E, S, in, out);
    mt_cpu_moe_matmul_dx(dx, dy, w, offsets, rows, E, S, in, out);
    mt_cpu_moe_matmul_dw(dw, NULL, dy, x, offsets, rows, E, S, in, out);
    ref_ops_expect_f(c, "y", y, (size_t)rows * out);
    ref_ops_expect_f(c, "dx", dx, (size_t)rows * in);
    ref_ops_expect_f(c, "dw", dw, (size_t)E * out * in);
    free(x);
    free(w);
    free(dy);
    free(order);
    free(slot_row);
    free(offsets);
}

static void swiglu_case(const char *title, int rows, int F) {
    char params[64];
    snprintf(params, sizeof params, "rows=%d\nF=%d\n", rows, F);
    ref_ops_case *c = ref_ops_new_case(&set, title, "swiglu", params);
    float *gu = ref_ops_input(c, "gu", (size_t)rows * 2 * F, -4, 4), *da = ref_ops_input(c, "da", (size_t)rows * F, -1, 1);
    float *a = malloc((size_t)rows * F * 4), *dgu = malloc((size_t)rows * 2 * F * 4);
    mt_cpu_moe_swiglu(a, gu, rows, F, MT_GLU_SWIGLU);
    mt_cpu_moe_swiglu_dx(dgu, da, gu, rows, F, MT_GLU_SWIGLU);
    ref_ops_expect_f(c, "a", a, (size_t)rows * F);
    ref_ops_expect_f(c, "dgu", dgu, (size_t)rows * 2 * F);
    free(gu);
    free(da);
}

static void combine_case(const char *title, int n, int E, int k, int d) {
    char params[64];
    snprintf(params, sizeof params, "n=%d\nk=%d\nd=%d\n", n, k, d);
    ref_ops_case *c = ref_ops_new_case(&set, title, "combine", params);
    int32_t *order, *slot_row, *offsets;
    permutation(c, n, E, k, n, &order, &slot_row, &offsets);
    float *ys = ref_ops_input(c, "ys", (size_t)n * k * d, -1, 1), *weights = ref_ops_input(c, "weights", (size_t)n * k, 0, 1);
    float *dy = ref_ops_input(c, "dy", (size_t)n * d, -1, 1);
    float *y = malloc((size_t)n * d * 4), *dys = malloc((size_t)n * k * d * 4), *dweights = malloc((size_t)n * k * 4);
    mt_cpu_moe_combine(y, ys, weights, slot_row, n, k, d);
    mt_cpu_moe_combine_dx(dys, dweights, dy, ys, weights, slot_row, n, k, d);
    ref_ops_expect_f(c, "y", y, (size_t)n * d);
    ref_ops_expect_f(c, "dys", dys, (size_t)n * k * d);
    ref_ops_expect_f(c, "dweights", dweights, (size_t)n * k);
    free(ys);
    free(weights);
    free(dy);
    free(order);
    free(slot_row);
    free(offsets);
}

static void gate_case(const char *title, int n, int d) {
    char params[64];
    snprintf(params, sizeof params, "n=%d\nd=%d\n", n, d);
    ref_ops_case *c = ref_ops_new_case(&set, title, "gate_add", params);
    float *a = ref_ops_input(c, "a", (size_t)n * d, -1, 1), *x = ref_ops_input(c, "x", (size_t)n * d, -1, 1);
    float *g = ref_ops_input(c, "g", n, -4, 4), *dy = ref_ops_input(c, "dy", (size_t)n * d, -1, 1);
    float *y = malloc((size_t)n * d * 4), *dx = malloc((size_t)n * d * 4), *dg = malloc((size_t)n * 4);
    mt_cpu_moe_gate_add(y, a, x, g, n, d);
    mt_cpu_moe_gate_add_dx(dx, dg, dy, x, g, n, d);
    ref_ops_expect_f(c, "y", y, (size_t)n * d);
    ref_ops_expect_f(c, "dx", dx, (size_t)n * d);
    ref_ops_expect_f(c, "dg", dg, n);
    free(a);
    free(x);
    free(g);
    free(dy);
}

/* What the engine does with a forward's layers: each layer's route adds its counts and the
 * probabilities' sum, aux_loss makes the loss and the gradient per probability, and each layer's
 * route_dx takes it through the softmax (no routing weights' gradient here). */
static void aux_case(const char *title, int layers, int n, int E, int k, float scale) {
    char params[128];
    /* %f: a point, so the script reads a float */
    snprintf(params, sizeof params, "layers=%d\nn=%d\nE=%d\nk=%d\nscale=%.6f\n", layers, n, E, k, (double)scale);
    ref_ops_case *c = ref_ops_new_case(&set, title, "aux", params);
    size_t nE = (size_t)n * E;
    float *logits = ref_ops_input(c, "logits", (size_t)layers * nE, -2, 2), *weights = malloc((size_t)n * k * 4);
    float *prob_sum = calloc(E, 4), *grad = malloc((size_t)E * 4), *loss = calloc(1, 4);
    float *zeros = calloc((size_t)n * k, 4), *dlogits = malloc((size_t)layers * nE * 4);
    int32_t *counts = calloc((size_t)layers * E, 4), *experts = malloc((size_t)layers * n * k * 4);
    for (int l = 0; l < layers; l++)
        mt_cpu_moe_route(weights, experts + (size_t)l * n * k, counts + (size_t)l * E, prob_sum, logits + l * nE, n,
                         E, k, 0);
    mt_cpu_moe_aux_loss(loss, grad, counts, prob_sum, layers, n, E, scale, scale);
    for (int l = 0; l < layers; l++)
        mt_cpu_moe_route_dx(dlogits + l * nE, zeros, logits + l * nE, experts + (size_t)l * n * k, grad, n, E, k, 0);
    ref_ops_expect_f(c, "loss", loss, 1);
    ref_ops_expect_f(c, "dlogits", dlogits, (size_t)layers * nE);
    free(logits);
    free(weights);
    free(prob_sum);
    free(grad);
    free(zeros);
    free(counts);
    free(experts);
}

Test(moe_ops, reference_kernels_match_pytorch) {
    route_case("route, 60 experts top 4, aux", 37, 60, 4, 0, 1);
    route_case("route, 128 experts top 8, renormalised, aux", 29, 128, 8, 1, 1);
    route_case("route, 8 experts top 2, renormalised", 13, 8, 2, 1, 0);
    permute_case("permute, one segment", 37, 16, 4, 37);
    permute_case("permute, segments with a part", 50, 9, 3, 16);
    gather_case("gather, accumulating", 23, 12, 3, 40, 1);
    gather_case("gather, overwriting", 17, 7, 2, 37, 0);
    grouped_case("grouped GEMMs, empty experts", 29, 10, 3, 29, 72, 44);
    grouped_case("grouped GEMMs by segment", 40, 6, 2, 16, 48, 30);
    swiglu_case("fused swiglu", 37, 67);
    combine_case("combine", 21, 10, 4, 40);
    gate_case("shared expert's gate", 19, 72);
    aux_case("load-balancing loss, 3 layers", 3, 41, 16, 4, 0.5f);
    aux_case("load-balancing loss, 2 layers, 64 experts top 8", 2, 33, 64, 8, 1.0f);

    ref_ops_run(&set, SCRIPT, REL_TOL);
}
