/* The CUDA mixture-of-experts ops (backend.h's moe group) against the CPU reference kernels on the
 * same bf16-rounded inputs, where the op table's small cases cannot reach: model-sized routing (E up
 * to 256, top 8), ties in the top k, permutations of half a million slots, experts that get no token
 * or every token, segments that end mid-tile, rows 2048 wide, and the determinism of everything the
 * routing produces (run twice: the same bits). The grouped GEMMs are test_cuda_moe_gemm.c's.
 *
 * Tolerances (||got - ref|| / ||ref||): ids, counts and the permutation exact; routing weights and
 * probability sums 1e-5 (fp32 softmax of the same logits, another order of adds); bf16 outputs 1e-2;
 * combine's dweights 1e-4 (fp32 dots of bf16 values in another order). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "moe_check.h"

#define BF16_TOL 1e-2
#define SUM_TOL 1e-5
#define DOT_TOL 1e-4

/* ---- routing ---- */

typedef struct {
    int n, E, k, renorm, aux;
} route_shape;

/* Logits on a 1/64 grid in [-4, 4): ties where two land on the same value, else far enough apart that
 * no rounding can reorder them. */
static void grid_logits(float *x, size_t count, uint64_t *state) {
    for (size_t i = 0; i < count; i++) x[i] = (float)((int)(moe_next(state) % 512) - 256) / 64.0f;
}

/* route and route_dx on the GPU against the CPU; returns the GPU's experts (host). */
static int32_t *check_route(moe_dev *d, route_shape r, float *logits, const char *the_case) {
    size_t slots = (size_t)r.n * r.k, nE = (size_t)r.n * r.E;
    uint64_t state = 7;
    float *dweights = moe_floats(slots), *aux = moe_floats(r.E), *prob = moe_floats(r.E);
    int32_t *counts = moe_ints(r.E);
    moe_fill(dweights, slots, -1, 1, &state);
    moe_fill(aux, r.E, 0.01f, 0.5f, &state);
    for (int e = 0; e < r.E; e++) counts[e] = 3, prob[e] = 0.5f;
    void *d_logits = moe_put_act(d, logits, nE), *d_dw = moe_put_f32(d, dweights, slots);
    void *d_aux = r.aux ? moe_put_f32(d, aux, r.E) : NULL;
    void *d_counts = moe_put_i32(d, counts, r.E), *d_prob = moe_put_f32(d, prob, r.E);
    void *d_w = moe_zeros(d, slots * 4), *d_experts = moe_zeros(d, slots * 4), *d_dlogits = moe_zeros(d, moe_act_bytes(d, nE));
    d->be->ops->moe.route(d->be, d->s, d_w, d_experts, d_counts, d_prob, d_logits, r.n, r.E, r.k, r.renorm);
    d->be->ops->moe.route_dx(d->be, d->s, d_dlogits, d_dw, d_logits, d_experts, d_aux, r.n, r.E, r.k, r.renorm);
    moe_sync(d, the_case);

    float *w = moe_floats(slots), *w_ref = moe_floats(slots), *dl = moe_floats(nE), *dl_ref = moe_floats(nE);
    float *prob_ref = moe_floats(r.E), *prob_got = moe_floats(r.E);
    int32_t *experts = moe_ints(slots), *experts_ref = moe_ints(slots), *counts_got = moe_ints(r.E);
    memcpy(prob_ref, prob, r.E * sizeof *prob);
    moe_get_f32(d, w, d_w, slots);
    moe_get_i32(d, experts, d_experts, slots);
    moe_get_i32(d, counts_got, d_counts, r.E);
    moe_get_f32(d, prob_got, d_prob, r.E);
    moe_get_act(d, dl, d_dlogits, nE);
    mt_cpu_moe_route(w_ref, experts_ref, counts, prob_ref, logits, r.n, r.E, r.k, r.renorm);
    mt_cpu_moe_route_dx(dl_ref, dweights, logits, experts_ref, r.aux ? aux : NULL, r.n, r.E, r.k, r.renorm);
    moe_expect_same_ids("experts", the_case, experts, experts_ref, slots);
    moe_expect_same_ids("counts", the_case, counts_got, counts, r.E);
    moe_expect_close("weights", the_case, w, w_ref, slots, r.k, SUM_TOL);
    moe_expect_close("prob_sum", the_case, prob_got, prob_ref, r.E, r.E, SUM_TOL);
    moe_expect_close("dlogits", the_case, dl, dl_ref, nE, r.E, BF16_TOL);
    return experts;
}

Test(cuda, moe_route_matches_cpu_at_model_shapes) {
    const route_shape shapes[] = {
        {3000, 64, 8, 0, 1},  /* OLMoE */
        {3000, 128, 8, 1, 1}, /* Qwen3-MoE, renormalised */
        {2000, 60, 4, 0, 0},  /* Qwen1.5-MoE */
        {2000, 8, 2, 1, 1},   /* Mixtral */
        {1500, 256, 8, 1, 1}, /* 256 experts */
        {700, 40, 1, 0, 1},   /* top 1 */
    };
    moe_dev d;
    moe_open(&d, NULL, 0);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        route_shape r = shapes[i];
        char the_case[128];
        snprintf(the_case, sizeof the_case, "route of %d tokens, %d experts, top %d%s%s", r.n, r.E, r.k,
                 r.renorm ? ", renormalised" : "", r.aux ? ", aux gradient" : "");
        uint64_t state = 100 + i;
        float *logits = moe_floats((size_t)r.n * r.E);
        grid_logits(logits, (size_t)r.n * r.E, &state);
        check_route(&d, r, logits, the_case);
    }
    moe_close(&d);
}

/* Equal probabilities go to the lower expert index, within a lane (experts 1, 33, 65, 97 share lane 1)
 * and across lanes, as torch.topk's order and the CPU reference. */
Test(cuda, moe_route_ties_go_to_the_lower_expert) {
    enum { N = 4, E = 128, K = 8 };
    float logits[N * E];
    for (int i = 0; i < N * E; i++) logits[i] = -1.0f;
    for (int e = 0; e < E; e++) logits[e] = 0.0f; /* token 0: all equal */
    const int lane_mates[] = {97, 65, 33, 1}, spread[] = {120, 64, 63, 2};
    for (int i = 0; i < 4; i++) {
        logits[E + lane_mates[i]] = 2.0f; /* token 1: four equal, one lane */
        logits[E + spread[i]] = 1.0f;     /* then four equal, four lanes */
    }
    for (int e = 0; e < E; e += 2) logits[2 * E + e] = 1.5f; /* token 2: the even experts */
    logits[3 * E + 77] = 3.0f;                                /* token 3: one best, the rest tied */
    const int32_t expected[N][K] = {{0, 1, 2, 3, 4, 5, 6, 7},
                                    {1, 33, 65, 97, 2, 63, 64, 120},
                                    {0, 2, 4, 6, 8, 10, 12, 14},
                                    {77, 0, 1, 2, 3, 4, 5, 6}};
    moe_dev d;
    moe_open(&d, NULL, 0);
    for (int renorm = 0; renorm < 2; renorm++) {
        int32_t *experts = check_route(&d, (route_shape){N, E, K, renorm, 1}, logits,
                                       renorm ? "ties, renormalised" : "ties");
        moe_expect_same_ids("experts against the tie rule", "ties", experts, &expected[0][0], N * K);
    }
    moe_close(&d);
}

/* The whole routing twice on the same logits: every output the same bits (no float atomics). */
Test(cuda, moe_routing_is_deterministic) {
    enum { N = 4096, E = 128, K = 8, SEG = 1024 };
    size_t slots = (size_t)N * K;
    uint64_t state = 5;
    float *logits = moe_floats((size_t)N * E);
    moe_fill(logits, (size_t)N * E, -3, 3, &state);
    moe_dev d;
    moe_open(&d, NULL, 0);
    void *d_logits = moe_put_act(&d, logits, (size_t)N * E);
    float *w[2], *prob[2];
    int32_t *experts[2], *order[2], *slot_row[2], *offsets[2], *counts[2];
    size_t groups = (size_t)E * (N / SEG) + 1;
    for (int run = 0; run < 2; run++) {
        void *d_w = moe_zeros(&d, slots * 4), *d_e = moe_zeros(&d, slots * 4), *d_c = moe_zeros(&d, E * 4);
        void *d_p = moe_zeros(&d, E * 4), *d_o = moe_zeros(&d, slots * 4), *d_sr = moe_zeros(&d, slots * 4);
        void *d_off = moe_zeros(&d, groups * 4);
        d.be->ops->moe.route(d.be, d.s, d_w, d_e, d_c, d_p, d_logits, N, E, K, 1);
        d.be->ops->moe.permute(d.be, d.s, d_o, d_sr, d_off, d_e, N, E, K, SEG);
        moe_sync(&d, "routing");
        w[run] = moe_floats(slots), prob[run] = moe_floats(E);
        experts[run] = moe_ints(slots), order[run] = moe_ints(slots), slot_row[run] = moe_ints(slots);
        offsets[run] = moe_ints(groups), counts[run] = moe_ints(E);
        moe_get_f32(&d, w[run], d_w, slots);
        moe_get_f32(&d, prob[run], d_p, E);
        moe_get_i32(&d, experts[run], d_e, slots);
        moe_get_i32(&d, counts[run], d_c, E);
        moe_get_i32(&d, order[run], d_o, slots);
        moe_get_i32(&d, slot_row[run], d_sr, slots);
        moe_get_i32(&d, offsets[run], d_off, groups);
    }
    const char *c = "two runs of route and permute";
    moe_expect_same_floats("weights", c, w[1], w[0], slots);
    moe_expect_same_floats("prob_sum", c, prob[1], prob[0], E);
    moe_expect_same_ids("experts", c, experts[1], experts[0], slots);
    moe_expect_same_ids("counts", c, counts[1], counts[0], E);
    moe_expect_same_ids("order", c, order[1], order[0], slots);
    moe_expect_same_ids("slot_row", c, slot_row[1], slot_row[0], slots);
    moe_expect_same_ids("offsets", c, offsets[1], offsets[0], groups);
    moe_close(&d);
}

/* ---- permute ---- */

typedef enum { SPREAD, SKEWED, ALL_TO_ONE, SAME_K } pick;

/* Experts for a permutation test: random among the first E - 3 (three get no token), skewed, every
 * slot to expert 17 (k = 1), or every token the same k experts (0, 3, 6, ...). */
static void pick_experts(int32_t *experts, int n, int E, int k, pick p, uint64_t *state) {
    if (p == ALL_TO_ONE || p == SAME_K) {
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++) experts[(size_t)t * k + j] = p == ALL_TO_ONE ? 17 : 3 * j;
        return;
    }
    moe_random_experts(experts, n, k, E - 3, p == SKEWED, state);
}

Test(cuda, moe_permute_matches_cpu) {
    const struct {
        int n, E, k, seg;
        pick p;
        const char *name;
    } cases[] = {
        {4096, 64, 8, 4096, SPREAD, "OLMoE's routing, one segment"},
        {5000, 128, 8, 1024, SPREAD, "segments of 1024, the last a part"},
        {300, 16, 4, 7, SKEWED, "43 segments of 7 tokens, skewed"},
        {3000, 64, 1, 1000, ALL_TO_ONE, "every token to one expert"},
        {2500, 32, 8, 2500, SAME_K, "every token the same 8 experts (rows across tiles)"},
        {65536, 128, 8, 4096, SKEWED, "half a million slots, 16 segments, skewed"},
    };
    moe_dev d;
    moe_open(&d, NULL, 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = cases[i].n, E = cases[i].E, k = cases[i].k, seg = cases[i].seg, S = (n + seg - 1) / seg;
        size_t slots = (size_t)n * k, groups = (size_t)E * S + 1;
        char the_case[160];
        snprintf(the_case, sizeof the_case, "permute, %s: %d tokens, %d experts, top %d, segments of %d",
                 cases[i].name, n, E, k, seg);
        uint64_t state = 40 + i;
        int32_t *experts = moe_ints(slots);
        pick_experts(experts, n, E, k, cases[i].p, &state);
        int32_t *order = moe_ints(slots), *slot_row = moe_ints(slots), *offsets = moe_ints(groups);
        int32_t *order_ref = moe_ints(slots), *slot_row_ref = moe_ints(slots), *offsets_ref = moe_ints(groups);
        void *d_e = moe_put_i32(&d, experts, slots), *d_o = moe_zeros(&d, slots * 4), *d_sr = moe_zeros(&d, slots * 4);
        void *d_off = moe_zeros(&d, groups * 4);
        d.be->ops->moe.permute(d.be, d.s, d_o, d_sr, d_off, d_e, n, E, k, seg);
        moe_sync(&d, the_case);
        moe_get_i32(&d, order, d_o, slots);
        moe_get_i32(&d, slot_row, d_sr, slots);
        moe_get_i32(&d, offsets, d_off, groups);
        mt_cpu_moe_permute(order_ref, slot_row_ref, offsets_ref, experts, n, E, k, seg);
        moe_expect_same_ids("offsets", the_case, offsets, offsets_ref, groups);
        moe_expect_same_ids("order", the_case, order, order_ref, slots);
        moe_expect_same_ids("slot_row", the_case, slot_row, slot_row_ref, slots);
        moe_close(&d);
        moe_open(&d, NULL, 0); /* fresh buffers for the next case: the largest are 2 MiB each */
    }
    moe_close(&d);
}

/* ---- gather, combine and their backwards ---- */

static void check_gather_combine(int n, int E, int k, int d_width, int accumulate, const char *name) {
    size_t slots = (size_t)n * k, nd = (size_t)n * d_width, sd = slots * d_width;
    char the_case[160];
    snprintf(the_case, sizeof the_case, "%s: %d tokens, top %d of %d, width %d%s", name, n, k, E, d_width,
             accumulate ? ", gather_dx accumulating" : "");
    uint64_t state = (uint64_t)n * 31 + d_width;
    int32_t *experts = moe_ints(slots), *order = moe_ints(slots), *slot_row = moe_ints(slots);
    int32_t *offsets = moe_ints((size_t)E + 1);
    moe_random_experts(experts, n, k, k == E ? E : E - 2, 0, &state);
    mt_cpu_moe_permute(order, slot_row, offsets, experts, n, E, k, n);
    float *x = moe_floats(nd), *dxs = moe_floats(sd), *dx = moe_floats(nd), *ys = moe_floats(sd);
    float *weights = moe_floats(slots), *dy = moe_floats(nd);
    moe_fill(x, nd, -1, 1, &state);
    moe_fill(dxs, sd, -1, 1, &state);
    moe_fill(dx, nd, -1, 1, &state);
    moe_fill(ys, sd, -1, 1, &state);
    moe_fill(weights, slots, 0, 1, &state);
    moe_fill(dy, nd, -1, 1, &state);
    moe_dev d;
    moe_open(&d, NULL, 0);
    void *d_x = moe_put_act(&d, x, nd), *d_dxs = moe_put_act(&d, dxs, sd), *d_dx = moe_put_act(&d, dx, nd);
    void *d_ys = moe_put_act(&d, ys, sd), *d_dy = moe_put_act(&d, dy, nd), *d_w = moe_put_f32(&d, weights, slots);
    void *d_order = moe_put_i32(&d, order, slots), *d_sr = moe_put_i32(&d, slot_row, slots);
    void *d_xs = moe_zeros(&d, moe_act_bytes(&d, sd)), *d_y = moe_zeros(&d, moe_act_bytes(&d, nd)), *d_dys = moe_zeros(&d, moe_act_bytes(&d, sd));
    void *d_dweights = moe_zeros(&d, slots * 4);
    const mt_moe_iface *m = &d.be->ops->moe;
    m->gather(d.be, d.s, d_xs, d_x, d_order, n, k, d_width);
    m->gather_dx(d.be, d.s, d_dx, d_dxs, d_sr, n, k, d_width, accumulate);
    m->combine(d.be, d.s, d_y, d_ys, d_w, d_sr, n, k, d_width);
    m->combine_dx(d.be, d.s, d_dys, d_dweights, d_dy, d_ys, d_w, d_sr, n, k, d_width);
    moe_sync(&d, the_case);
    float *got = moe_floats(sd > nd ? sd : nd), *want = moe_floats(sd > nd ? sd : nd);
    float *dw_got = moe_floats(slots), *dw_want = moe_floats(slots);
    moe_get_act(&d, got, d_xs, sd);
    mt_cpu_moe_gather(want, x, order, n, k, d_width);
    moe_expect_same_floats("xs (copies)", the_case, got, want, sd);
    moe_get_act(&d, got, d_dx, nd);
    memcpy(want, dx, nd * sizeof *want);
    mt_cpu_moe_gather_dx(want, dxs, slot_row, n, k, d_width, accumulate);
    moe_expect_close("dx", the_case, got, want, nd, d_width, BF16_TOL);
    moe_get_act(&d, got, d_y, nd);
    mt_cpu_moe_combine(want, ys, weights, slot_row, n, k, d_width);
    moe_expect_close("y", the_case, got, want, nd, d_width, BF16_TOL);
    moe_get_act(&d, got, d_dys, sd);
    moe_get_f32(&d, dw_got, d_dweights, slots);
    mt_cpu_moe_combine_dx(want, dw_want, dy, ys, weights, slot_row, n, k, d_width);
    moe_expect_close("dys", the_case, got, want, sd, d_width, BF16_TOL);
    moe_expect_close("dweights", the_case, dw_got, dw_want, slots, k, DOT_TOL);
    moe_close(&d);
}

Test(cuda, moe_gather_and_combine_match_cpu) {
    check_gather_combine(1024, 64, 8, 2048, 0, "OLMoE's width");
    check_gather_combine(777, 128, 8, 2048, 1, "Qwen3-MoE's width");
    check_gather_combine(300, 9, 3, 37, 1, "an odd width (element by element)");
    check_gather_combine(50, 4, 4, 264, 0, "every token to every expert");
}

/* ---- the experts' SwiGLU and a shared expert's gate ---- */

static void check_swiglu(int rows, int F) {
    char the_case[96];
    snprintf(the_case, sizeof the_case, "swiglu of %d fused rows of 2 x %d", rows, F);
    size_t ra = (size_t)rows * F, rg = 2 * ra;
    uint64_t state = (uint64_t)rows + F;
    float *gu = moe_floats(rg), *da = moe_floats(ra), *a = moe_floats(ra), *dgu = moe_floats(rg);
    float *a_ref = moe_floats(ra), *dgu_ref = moe_floats(rg);
    moe_fill(gu, rg, -3, 3, &state);
    moe_fill(da, ra, -1, 1, &state);
    moe_dev d;
    moe_open(&d, NULL, 0);
    void *d_gu = moe_put_act(&d, gu, rg), *d_da = moe_put_act(&d, da, ra);
    void *d_a = moe_zeros(&d, moe_act_bytes(&d, ra)), *d_dgu = moe_zeros(&d, moe_act_bytes(&d, rg));
    d.be->ops->moe.swiglu(d.be, d.s, d_a, d_gu, rows, F, MT_GLU_SWIGLU);
    d.be->ops->moe.swiglu_dx(d.be, d.s, d_dgu, d_da, d_gu, rows, F, MT_GLU_SWIGLU);
    moe_sync(&d, the_case);
    moe_get_act(&d, a, d_a, ra);
    moe_get_act(&d, dgu, d_dgu, rg);
    mt_cpu_moe_swiglu(a_ref, gu, rows, F, MT_GLU_SWIGLU);
    mt_cpu_moe_swiglu_dx(dgu_ref, da, gu, rows, F, MT_GLU_SWIGLU);
    moe_expect_close("a", the_case, a, a_ref, ra, F, BF16_TOL);
    moe_expect_close("dgu", the_case, dgu, dgu_ref, rg, 2 * F, BF16_TOL);
    moe_close(&d);
}

static void check_gate(int n, int d_width) {
    char the_case[96];
    snprintf(the_case, sizeof the_case, "shared expert's gate, %d tokens of %d", n, d_width);
    size_t nd = (size_t)n * d_width;
    uint64_t state = (uint64_t)n * 3 + d_width;
    float *y = moe_floats(nd), *x = moe_floats(nd), *g = moe_floats(n), *dy = moe_floats(nd);
    float *got = moe_floats(nd), *want = moe_floats(nd), *dg = moe_floats(n), *dg_ref = moe_floats(n);
    moe_fill(y, nd, -1, 1, &state);
    moe_fill(x, nd, -1, 1, &state);
    moe_fill(g, n, -4, 4, &state);
    moe_fill(dy, nd, -1, 1, &state);
    moe_dev d;
    moe_open(&d, NULL, 0);
    void *d_y = moe_put_act(&d, y, nd), *d_x = moe_put_act(&d, x, nd), *d_g = moe_put_act(&d, g, n);
    void *d_dy = moe_put_act(&d, dy, nd), *d_dx = moe_zeros(&d, moe_act_bytes(&d, nd)), *d_dg = moe_zeros(&d, moe_act_bytes(&d, n));
    d.be->ops->moe.gate_add(d.be, d.s, d_y, d_y, d_x, d_g, n, d_width); /* in place, as the engine calls it */
    d.be->ops->moe.gate_add_dx(d.be, d.s, d_dx, d_dg, d_dy, d_x, d_g, n, d_width);
    moe_sync(&d, the_case);
    moe_get_act(&d, got, d_y, nd);
    mt_cpu_moe_gate_add(want, y, x, g, n, d_width);
    moe_expect_close("y", the_case, got, want, nd, d_width, BF16_TOL);
    moe_get_act(&d, got, d_dx, nd);
    moe_get_act(&d, dg, d_dg, n);
    mt_cpu_moe_gate_add_dx(want, dg_ref, dy, x, g, n, d_width);
    moe_expect_close("dx", the_case, got, want, nd, d_width, BF16_TOL);
    moe_expect_close("dg", the_case, dg, dg_ref, n, 1, BF16_TOL);
    moe_close(&d);
}

Test(cuda, moe_swiglu_and_gate_match_cpu) {
    check_swiglu(4096, 1024);
    check_swiglu(37, 67);
    check_gate(1024, 2048);
    check_gate(19, 37);
}

/* ---- the load-balancing loss: the CPU's double arithmetic, so the CPU's bits ---- */

Test(cuda, moe_aux_loss_is_the_cpu_bits) {
    enum { LAYERS = 16, N = 4096, E = 64, K = 8 };
    uint64_t state = 11;
    int32_t *counts = moe_ints((size_t)LAYERS * E), *experts = moe_ints((size_t)N * K);
    for (int l = 0; l < LAYERS; l++) {
        moe_random_experts(experts, N, K, E, l % 2, &state);
        for (size_t i = 0; i < (size_t)N * K; i++) counts[(size_t)l * E + experts[i]]++;
    }
    float prob[E], grad[E], grad_ref[E], loss = 0.25f, loss_ref = 0.25f;
    moe_fill(prob, E, 0, 2.0f * LAYERS * N / E, &state);
    moe_dev d;
    moe_open(&d, NULL, 0);
    void *d_counts = moe_put_i32(&d, counts, (size_t)LAYERS * E), *d_prob = moe_put_f32(&d, prob, E);
    void *d_loss = moe_put_f32(&d, &loss, 1), *d_grad = moe_zeros(&d, E * 4);
    d.be->ops->moe.aux_loss(d.be, d.s, d_loss, d_grad, d_counts, d_prob, LAYERS, N, E, 0.01f, 0.003f);
    moe_sync(&d, "aux_loss");
    moe_get_f32(&d, &loss, d_loss, 1);
    moe_get_f32(&d, grad, d_grad, E);
    mt_cpu_moe_aux_loss(&loss_ref, grad_ref, counts, prob, LAYERS, N, E, 0.01f, 0.003f);
    moe_expect_same_floats("loss_sum", "16 layers of 4096 tokens, 64 experts", &loss, &loss_ref, 1);
    moe_expect_same_floats("grad", "16 layers of 4096 tokens, 64 experts", grad, grad_ref, E);
    moe_close(&d);
}
