/* Runs the op table's cases on a backend (ops_table.h): inputs rounded to the backend's types,
 * device buffers with guard bytes, the op on a stream, then every output against the reference. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_check.h"
#include "ops_table.h"
#include "util/bf16.h"

/* Bytes after every buffer that no op may touch. */
enum { GUARD = 64 };

static uint8_t guard_byte(size_t i) { return (uint8_t)(0xa5 ^ (i * 29)); }

/* One case set up on a backend: its tensors on the host (want: the reference's) and the device. */
typedef struct {
    const ops_case *c;
    mt_backend *be;
    mt_stream *s;
    mt_event *done;
    ops_tensor t[OPS_MAX_TENSORS];
    int count;
    ops_host want, got;
    void *dev[OPS_MAX_TENSORS];
    uint8_t *sent[OPS_MAX_TENSORS]; /* the bytes uploaded, guard included */
    size_t bytes[OPS_MAX_TENSORS];  /* without the guard */
} ops_run;

static mt_dtype dtype_of(const ops_run *r, ops_type type) {
    return type == OPS_ACT ? r->be->ops->act_dtype : type == OPS_W ? r->be->ops->weight_dtype : MT_DTYPE_F32;
}

static size_t element_size(const ops_run *r, ops_type type) {
    return type == OPS_I32 ? sizeof(int32_t) : mt_dtype_size(dtype_of(r, type));
}

/* splitmix64: the same values on every run and machine. */
static float uniform(uint64_t *state, float lo, float hi) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(lo + (hi - lo) * ((double)(z >> 11) / 9007199254740992.0));
}

/* The value the device holds for x in a buffer of `dtype`. */
static float as_stored(float x, mt_dtype dtype) { return dtype == MT_DTYPE_BF16 ? mt_bf16_to_f32(mt_f32_to_bf16(x)) : x; }

static void encode(const ops_run *r, int i, uint8_t *dst) {
    const ops_tensor *t = &r->t[i];
    if (t->type == OPS_I32) {
        memcpy(dst, r->want.ids[i], t->count * sizeof(int32_t));
        return;
    }
    for (size_t k = 0; k < t->count; k++) {
        float x = r->want.x[i][k];
        if (dtype_of(r, t->type) == MT_DTYPE_BF16) {
            uint16_t h = mt_f32_to_bf16(x);
            memcpy(dst + 2 * k, &h, 2);
        } else {
            memcpy(dst + 4 * k, &x, 4);
        }
    }
}

static void decode(const ops_run *r, int i, const uint8_t *src, float *out) {
    for (size_t k = 0; k < r->t[i].count; k++) {
        if (dtype_of(r, r->t[i].type) == MT_DTYPE_BF16) {
            uint16_t h;
            memcpy(&h, src + 2 * k, 2);
            out[k] = mt_bf16_to_f32(h);
        } else {
            memcpy(&out[k], src + 4 * k, 4);
        }
    }
}

static void sync(ops_run *r) {
    mt_event_record(r->be, r->done, r->s);
    mt_event_sync(r->be, r->done);
    cr_assert_eq(mt_backend_check(r->be), MT_OK, "%s: device error: %s", r->c->name, mt_error());
}

/* Declares, fills, rounds and uploads the case's tensors. */
static void set_up(ops_run *r, mt_backend *be, const ops_case *c) {
    memset(r, 0, sizeof *r);
    r->c = c;
    r->be = be;
    r->s = mt_stream_create(be);
    r->done = mt_event_create(be);
    cr_assert(r->s && r->done, "%s", mt_error());
    r->count = c->kind->declare(c, r->t);
    cr_assert(r->count <= OPS_MAX_TENSORS);
    for (int i = 0; i < r->count; i++) {
        ops_tensor *t = &r->t[i];
        if (t->role == OPS_SCRATCH) t->count = c->kind->workspace(be, c);
        if (!t->count || t->role == OPS_SCRATCH) continue;
        if (t->type == OPS_I32) {
            r->want.ids[i] = calloc(t->count, sizeof(int32_t));
            if (t->role == OPS_OUT || t->role == OPS_INOUT) r->got.ids[i] = calloc(t->count, sizeof(int32_t));
            continue;
        }
        r->want.x[i] = calloc(t->count, sizeof(float));
        r->got.x[i] = calloc(t->count, sizeof(float));
        cr_assert(r->want.x[i] && r->got.x[i]);
        uint64_t state = (uint64_t)c->seed * 977 + (uint64_t)i;
        if (t->role != OPS_OUT)
            for (size_t k = 0; k < t->count; k++) r->want.x[i][k] = t->lo == t->hi ? t->lo : uniform(&state, t->lo, t->hi);
    }
    if (c->kind->prepare) c->kind->prepare(c, &r->want);
    for (int i = 0; i < r->count; i++) {
        ops_tensor *t = &r->t[i];
        if (!t->count) continue;
        r->bytes[i] = t->role == OPS_SCRATCH ? t->count : t->count * element_size(r, t->type);
        if (r->want.x[i])
            for (size_t k = 0; k < t->count; k++) r->want.x[i][k] = as_stored(r->want.x[i][k], dtype_of(r, t->type));
        r->sent[i] = calloc(r->bytes[i] + GUARD, 1);
        cr_assert(r->sent[i]);
        if (t->role != OPS_SCRATCH) encode(r, i, r->sent[i]);
        for (size_t k = 0; k < GUARD; k++) r->sent[i][r->bytes[i] + k] = guard_byte(k);
        r->dev[i] = mt_dev_alloc(be, r->bytes[i] + GUARD, "an op test buffer");
        cr_assert(r->dev[i], "%s", mt_error());
        mt_copy_async(be, r->dev[i], r->sent[i], r->bytes[i] + GUARD, r->s);
    }
    sync(r);
}

typedef struct {
    ops_run *r;
    int calls;
} call_ctx;

static void call_op(void *arg) {
    call_ctx *ctx = arg;
    for (int i = 0; i < ctx->calls; i++) ctx->r->c->kind->call(ctx->r->be, ctx->r->s, ctx->r->c, ctx->r->dev);
}

/* Issues the op `calls` times in the stream's order (on cpu, on the stream's worker: backend.h);
 * ctx must live until the stream has run it. */
static void issue(ops_run *r, call_ctx *ctx, int calls) {
    *ctx = (call_ctx){r, calls};
    mt_launch(r->be, r->s, call_op, ctx);
}

/* Reads every buffer back: guards intact, inputs unchanged, outputs into got. */
static void read_back(ops_run *r) {
    for (int i = 0; i < r->count; i++) {
        const ops_tensor *t = &r->t[i];
        if (!t->count) continue;
        uint8_t *back = malloc(r->bytes[i] + GUARD);
        cr_assert(back);
        mt_copy_async(r->be, back, r->dev[i], r->bytes[i] + GUARD, r->s);
        sync(r);
        for (size_t k = 0; k < GUARD; k++)
            cr_assert_eq(back[r->bytes[i] + k], guard_byte(k), "%s: the op wrote past %s (guard byte %zu)", r->c->name,
                         t->name, k);
        if (t->role == OPS_IN)
            cr_assert(!memcmp(back, r->sent[i], r->bytes[i]), "%s: the op changed its input %s", r->c->name, t->name);
        if (t->role == OPS_OUT || t->role == OPS_INOUT) {
            if (t->type == OPS_I32) memcpy(r->got.ids[i], back, r->bytes[i]);
            else decode(r, i, back, r->got.x[i]);
        }
        free(back);
    }
}

static void tear_down(ops_run *r) {
    for (int i = 0; i < r->count; i++) {
        if (r->dev[i]) mt_dev_free(r->be, r->dev[i]);
        free(r->sent[i]);
        free(r->want.x[i]);
        free(r->want.ids[i]);
        free(r->got.x[i]);
        free(r->got.ids[i]);
    }
    mt_event_destroy(r->be, r->done);
    mt_stream_destroy(r->be, r->s);
}

/* The first index where got and want differ in bits, NaNs aside (a GPU makes every NaN the
 * canonical one, x86 keeps the input's payload), or count. */
static size_t first_difference(const float *got, const float *want, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) && !(isnan(got[i]) && isnan(want[i]))) return i;
    return count;
}

size_t *ops_case_indices(size_t count) {
    size_t *indices = cr_malloc(count * sizeof *indices);
    for (size_t i = 0; indices && i < count; i++) indices[i] = i;
    return indices;
}

int ops_case_runs_on(mt_backend *be, const ops_case *c) {
    return (!c->kind->needs_moe || mt_backend_has_moe(be)) && (!c->kind->needs_gdn || mt_backend_has_gdn(be));
}
static const char *optional_group(const ops_case *c) { return c->kind->needs_moe ? "moe" : "gdn"; }

void ops_run_case(mt_backend *be, const ops_case *c) {
    if (!ops_case_runs_on(be, c))
        cr_skip_test("%s: the %s backend has no %s ops", c->name, be->ops->name, optional_group(c));
    ops_run r;
    set_up(&r, be, c);
    call_ctx ctx;
    issue(&r, &ctx, 1);
    sync(&r);
    read_back(&r);
    int reference_backend = be->ops->kind == MT_DEVICE_CPU;
    if (c->kind->check) c->kind->check(c, &r.got);
    c->kind->reference(c, &r.want, &r.got, !reference_backend);
    for (int i = 0; i < r.count; i++) /* the reference as the backend stores it */
        if ((r.t[i].role == OPS_OUT || r.t[i].role == OPS_INOUT) && r.want.x[i])
            for (size_t k = 0; k < r.t[i].count; k++)
                r.want.x[i][k] = as_stored(r.want.x[i][k], dtype_of(&r, r.t[i].type));
    for (int i = 0; i < r.count; i++) {
        const ops_tensor *t = &r.t[i];
        if ((t->role != OPS_OUT && t->role != OPS_INOUT) || !t->count) continue;
        if (t->type == OPS_I32) { /* ids and counts: exact on every backend */
            size_t k = 0;
            while (k < t->count && r.got.ids[i][k] == r.want.ids[i][k]) k++;
            cr_expect_eq(k, t->count, "%s on %s: %s[%zu] is %d, the reference %d", c->name, be->ops->name, t->name, k,
                         r.got.ids[i][k % t->count], r.want.ids[i][k % t->count]);
            continue;
        }
        if (reference_backend || t->tol == 0) {
            size_t k = first_difference(r.got.x[i], r.want.x[i], t->count);
            cr_expect_eq(k, t->count, "%s on %s: %s[%zu] is %.9g, the reference %.9g (bitwise)", c->name, be->ops->name,
                         t->name, k, (double)r.got.x[i][k % t->count], (double)r.want.x[i][k % t->count]);
        } else {
            double err = ops_rel_err(r.got.x[i], r.want.x[i], t->count);
            cr_expect_lt(err, t->tol, "%s on %s: %s is off the reference by %.3g (relative), more than %.3g", c->name,
                         be->ops->name, t->name, err, t->tol);
        }
    }
    tear_down(&r);
}

double ops_case_bytes(mt_backend *be, const ops_case *c) {
    ops_run r = {.c = c, .be = be};
    r.count = c->kind->declare(c, r.t);
    double bytes = 0;
    for (int i = 0; i < r.count; i++)
        if (r.t[i].role != OPS_SCRATCH) bytes += (double)r.t[i].count * element_size(&r, r.t[i].type);
    return bytes;
}

double ops_time_case(mt_backend *be, const ops_case *c, int reps) {
    cr_assert(ops_case_runs_on(be, c), "%s: the %s backend has no %s ops", c->name, be->ops->name, optional_group(c));
    ops_run r;
    set_up(&r, be, c);
    mt_event *start = mt_event_create(be), *end = mt_event_create(be);
    call_ctx warm_up, timed;
    issue(&r, &warm_up, 1);
    mt_event_record(be, start, r.s);
    issue(&r, &timed, reps);
    mt_event_record(be, end, r.s);
    sync(&r);
    double seconds = mt_event_elapsed(be, start, end) / reps;
    read_back(&r);
    for (int i = 0; i < r.count; i++)
        if ((r.t[i].role == OPS_OUT || r.t[i].role == OPS_INOUT) && r.t[i].type != OPS_I32)
            for (size_t k = 0; k < r.t[i].count; k++)
                cr_assert(isfinite(r.got.x[i][k]), "%s: %s[%zu] = %g", c->name, r.t[i].name, k, (double)r.got.x[i][k]);
    mt_event_destroy(be, start);
    mt_event_destroy(be, end);
    tear_down(&r);
    return seconds;
}
