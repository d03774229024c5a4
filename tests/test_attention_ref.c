/* The cpu attention (backend/cpu/ops/attention.c) with backend.h's variants -- sliding window,
 * scale, soft cap, sinks -- against PyTorch (tests/reference/attention_ref.py: float64, the
 * backward by autograd, transformers' masks): out, lse, dq, dk, dv and dsinks, alone and together,
 * with packed examples and with a window of queries (tiled attention). One Python start runs every
 * case. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "ops_check.h"
#include "ref_fixture.h"

#define SCRIPT "tests/reference/attention_ref.py"
/* fp32 kernels against float64: softmax sums of at most 150 terms and head_dim-long dots stay near
 * 1e-6 relative per tensor; a key wrongly in or out of a window, an uncapped score or a missing
 * sink moves a tensor by far more than 1e-3. */
#define REL_TOL 1e-5

enum { MAX_CASES = 10, OUTPUTS = 6 };

typedef struct {
    const char *name;
    size_t count;
    float *got;
} output;

typedef struct {
    const char *title;
    mt_ref_fixture fx;
    output out[OUTPUTS];
    int outputs;
    float *inputs[6];
} ref_case;

static ref_case cases[MAX_CASES];
static int num_cases;

static void write_array(const ref_case *c, const char *name, const void *data, size_t count, int ints) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s", c->fx.dir, name, ints ? "i32" : "f32");
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s: cannot write", path);
    cr_assert_eq(fwrite(data, 4, count, f), count);
    fclose(f);
}

/* A random input of the case, written for the script; freed with the case. */
static float *input(ref_case *c, int slot, const char *name, size_t count, unsigned seed, float lo, float hi) {
    float *x = malloc(count * sizeof *x);
    ops_fill(x, count, seed, lo, hi);
    write_array(c, name, x, count, 0);
    c->inputs[slot] = x;
    return x;
}

static void expect(ref_case *c, const char *name, float *got, size_t count) {
    c->out[c->outputs++] = (output){name, count, got};
}

/* One case: dims and params (sinks: whether it has them; the pointers are the case's), over
 * segments of the given lengths (NULL: none). */
static void attention_case(const char *title, mt_attn_dims d, mt_attn_params params, int sinks, const int *lengths,
                           int segments) {
    cr_assert_lt(num_cases, MAX_CASES);
    ref_case *c = &cases[num_cases++];
    memset(c, 0, sizeof *c);
    c->title = title;
    cr_assert_eq(mt_ref_fixture_create(&c->fx), MT_OK, "%s", mt_error());
    char path[512];
    snprintf(path, sizeof path, "%s/case.txt", c->fx.dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "batch=%d\nseq=%d\nheads=%d\nkv_heads=%d\nhead_dim=%d\nq0=%d\nq_len=%d\n", d.batch, d.seq, d.heads,
            d.kv_heads, d.head_dim, d.q0, d.q_len);
    fprintf(f, "window=%d\nscale=%.9f\nsoftcap=%.9f\nsinks=%d\nsegmented=%d\n", params.window, params.scale,
            params.softcap, sinks, lengths != NULL);
    fclose(f);

    size_t q_rows = (size_t)d.batch * mt_attn_q_rows(d), rows = (size_t)d.batch * d.seq;
    size_t qn = q_rows * d.heads * d.head_dim, kvn = rows * d.kv_heads * d.head_dim;
    unsigned seed = (unsigned)num_cases * 10;
    float *q = input(c, 0, "q", qn, seed + 1, -2, 2), *k = input(c, 1, "k", kvn, seed + 2, -2, 2);
    float *v = input(c, 2, "v", kvn, seed + 3, -1, 1), *dout = input(c, 3, "dout", qn, seed + 4, -1, 1);
    if (sinks) {
        params.sinks = input(c, 4, "sinks", d.heads, seed + 5, -1, 3);
        float *before = input(c, 5, "dsinks", d.heads, seed + 6, -1, 1);
        params.dsinks = malloc(d.heads * sizeof *params.dsinks);
        memcpy(params.dsinks, before, d.heads * sizeof *params.dsinks);
    }
    mt_segments store, *seg = NULL;
    int32_t *pos = NULL, *starts = NULL;
    if (lengths) {
        pos = malloc(rows * sizeof *pos), starts = malloc((segments + 1) * sizeof *starts);
        int row = 0;
        for (int s = 0; s < segments; s++) {
            starts[s] = row;
            for (int i = 0; i < lengths[s]; i++) pos[row++] = i;
        }
        starts[segments] = row;
        cr_assert_eq((size_t)row, rows, "%s: the segments hold %d rows", title, row);
        write_array(c, "positions", pos, rows, 1);
        store = (mt_segments){pos, starts, segments, 0};
        seg = &store;
    }
    float *out = malloc(qn * 4), *lse = malloc(q_rows * d.heads * 4), *dq = malloc(qn * 4);
    float *dk = calloc(kvn, 4), *dv = calloc(kvn, 4);
    void *ws = malloc(mt_cpu_attention_workspace(d));
    mt_cpu_attention(out, lse, q, k, v, d, &params, seg);
    mt_cpu_attention_dx(dq, dk, dv, dout, out, lse, q, k, v, d, &params, seg, ws);
    free(ws), free(pos), free(starts);
    expect(c, "out", out, qn);
    expect(c, "lse", lse, q_rows * d.heads);
    expect(c, "dq", dq, qn);
    expect(c, "dk", dk, kvn);
    expect(c, "dv", dv, kvn);
    if (sinks) expect(c, "dsinks", params.dsinks, d.heads);
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

static void compare(const ref_case *c) {
    for (int o = 0; o < c->outputs; o++) {
        const output *out = &c->out[o];
        double *want = read_f64(c->fx.dir, out->name, out->count), err2 = 0, norm2 = 0;
        for (size_t i = 0; i < out->count; i++) {
            double e = out->got[i] - want[i];
            err2 += e * e;
            norm2 += want[i] * want[i];
        }
        double rel = norm2 > 0 ? sqrt(err2 / norm2) : sqrt(err2);
        cr_expect(rel < REL_TOL, "%s: %s is off PyTorch's by %.3g relative (bound %g)", c->title, out->name, rel,
                  REL_TOL);
        free(want);
    }
}

static const int PACKED_2x150[] = {40, 70, 40, 150}; /* a segment longer than the window, one shorter */
static const int PACKED_1x150[] = {30, 90, 30};      /* segments before, across and after q0 = 60 */

Test(attention_ref, variants_match_pytorch) {
    num_cases = 0;
    const mt_attn_dims gqa = {.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 16};
    attention_case("a window of 40 across key tiles", gqa, (mt_attn_params){.window = 40}, 0, NULL, 0);
    attention_case("a window of 2", (mt_attn_dims){1, 9, 2, 1, 8, 0, 0}, (mt_attn_params){.window = 2}, 0, NULL, 0);
    attention_case("a scale and a soft cap", gqa, (mt_attn_params){.scale = 0.6f, .softcap = 2.0f}, 0, NULL, 0);
    attention_case("sinks, their gradient added", gqa, (mt_attn_params){0}, 1, NULL, 0);
    attention_case("everything over packed examples", gqa,
                   (mt_attn_params){.window = 50, .scale = 0.3f, .softcap = 3.0f}, 1, PACKED_2x150, 4);
    attention_case("a window of 40 and sinks in a window of queries from 70",
                   (mt_attn_dims){2, 150, 4, 2, 16, 70, 53}, (mt_attn_params){.window = 40}, 1, NULL, 0);
    attention_case("a window of 25 over packed examples in a window of queries from 60",
                   (mt_attn_dims){1, 150, 3, 1, 16, 60, 53}, (mt_attn_params){.window = 25, .softcap = 4.0f}, 1,
                   PACKED_1x150, 3);

    mt_ref_job jobs[MAX_CASES];
    for (int i = 0; i < num_cases; i++) jobs[i] = (mt_ref_job){"attention", &cases[i].fx};
    cr_assert_eq(mt_ref_run_script(SCRIPT, jobs, num_cases), MT_OK, "%s", mt_error());
    for (int i = 0; i < num_cases; i++) {
        compare(&cases[i]);
        for (int o = 0; o < cases[i].outputs; o++) free(cases[i].out[o].got);
        for (int s = 0; s < 6; s++) free(cases[i].inputs[s]);
        mt_ref_fixture_remove(&cases[i].fx);
    }
}
