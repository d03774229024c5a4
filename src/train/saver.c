#include "train/saver.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/checkpoint.h"
#include "train/memory_check.h"
#include "util/clock.h"
#include "util/memory.h"

/* A unit's way through a save: PENDING -> WRITING (the writer reads it from the store) -> DONE,
 * or PENDING -> COPYING (the guard copies it) -> STAGED -> DONE (written from the copy). */
typedef enum { UNIT_PENDING, UNIT_COPYING, UNIT_STAGED, UNIT_WRITING, UNIT_DONE } unit_state;

struct mt_saver {
    const mt_store *store;
    int64_t staging_option;
    double unit_delay;           /* test hook: the writer's pause before each unit, seconds */
    int U, num_blobs;
    mt_run_blob blobs[MT_RUN_MAX_BLOBS];
    size_t *first_item;          /* [(U + 1) * num_blobs]: where unit u's slice of blob b begins */
    size_t *unit_bytes;          /* [U]: all of unit u's slices */
    int *cover_first, *cover_last; /* [U]: the units an update of unit u writes into */
    char *bounce;                /* SAVER_BOUNCE bytes: the store's split masters pass through it */
    uint8_t *not_staged;         /* [U]: mt_saver_skip_staging's units */

    pthread_mutex_t lock;
    pthread_cond_t changed;      /* a unit's state or the staging use changed */
    unit_state *state;           /* [U] */
    char **copy;                 /* [U]: the staged copy of a unit, or NULL */
    int active;                  /* a save is writing: the guard has work */
    int64_t budget, staged;      /* staging bytes allowed, and held now */
    double guard_seconds;
    int64_t staged_total;

    /* the save in flight */
    pthread_t thread;
    int in_flight;
    int landed;                  /* the writer is through (under the lock) */
    char run_dir[PATH_MAX], path[PATH_MAX];
    mt_run_save_options options;
    int64_t step;
    int finite;                  /* every value written so far was finite (the writer's) */
    json_t *meta;
    mt_status result;            /* written by the writer thread, read after the join */
    char error[2048];
    double write_seconds;
};

/* The split masters go to disk through a buffer of this many bytes. */
#define SAVER_BOUNCE ((size_t)16 << 20)

static size_t slice_first(const mt_saver *s, int u, int b) { return s->first_item[(size_t)u * s->num_blobs + b]; }

static size_t slice_bytes(const mt_saver *s, int u, int b) {
    return (slice_first(s, u + 1, b) - slice_first(s, u, b)) * s->blobs[b].item_bytes;
}

/* Unit u's slice of blob b as the checkpoint holds it, in memory, or NULL where it is not (the
 * store's split masters: copy_slice joins them). */
static const char *slice_live(const mt_saver *s, int u, int b) {
    return mt_run_blob_at(&s->blobs[b], slice_first(s, u, b));
}

/* Unit u's slice of blob b into dst, as the checkpoint holds it. */
static void copy_slice(const mt_saver *s, int u, int b, char *dst) {
    const char *live = slice_live(s, u, b);
    if (live) mt_copy_parallel(dst, live, slice_bytes(s, u, b));
    else mt_run_blob_read(&s->blobs[b], slice_first(s, u, b), slice_first(s, u + 1, b) - slice_first(s, u, b), dst);
}

/* The unit holding element i. */
static int unit_of(const mt_layout *lay, int64_t i) {
    int u = 0;
    while (u + 1 < lay->num_units && lay->units[u + 1].offset <= i) u++;
    return u;
}

/* Unit u's slice of a blob: the items that begin inside the unit. Which units an update of unit u
 * writes: 8-bit moments are requantized in whole blocks, which may reach into the neighbours. */
static void plan_units(mt_saver *s) {
    const mt_layout *lay = s->store->layout;
    int64_t n = lay->total_numel;
    int64_t reach = s->store->moments.format == MT_MOMENTS_8BIT ? MT_MOMENTS_BLOCK : 1;
    for (int u = 0; u <= s->U; u++) {
        int64_t at = u < s->U ? lay->units[u].offset : n;
        for (int b = 0; b < s->num_blobs; b++) {
            int64_t g = (int64_t)s->blobs[b].granule;
            s->first_item[(size_t)u * s->num_blobs + b] = (size_t)((at + g - 1) / g);
        }
    }
    for (int u = 0; u < s->U; u++) {
        s->unit_bytes[u] = 0;
        for (int b = 0; b < s->num_blobs; b++) s->unit_bytes[u] += slice_bytes(s, u, b);
        int64_t lo = lay->units[u].offset / reach * reach;
        int64_t hi = (lay->units[u].offset + lay->units[u].numel + reach - 1) / reach * reach;
        s->cover_first[u] = unit_of(lay, lo);
        s->cover_last[u] = unit_of(lay, (hi < n ? hi : n) - 1);
    }
}

mt_status mt_saver_create(mt_saver **out, const mt_store *store, int64_t staging_bytes) {
    mt_saver *s = mt_calloc(1, sizeof *s, "the checkpoint saver");
    if (!s) return MT_ERR_NOMEM;
    s->store = store;
    s->staging_option = staging_bytes;
    s->U = store->layout->num_units;
    s->num_blobs = mt_run_blobs(store, s->blobs);
    s->first_item = mt_calloc((size_t)(s->U + 1) * s->num_blobs, sizeof *s->first_item, "the checkpoint saver");
    s->unit_bytes = mt_calloc((size_t)s->U, sizeof *s->unit_bytes, "the checkpoint saver");
    s->cover_first = mt_calloc((size_t)s->U, sizeof *s->cover_first, "the checkpoint saver");
    s->cover_last = mt_calloc((size_t)s->U, sizeof *s->cover_last, "the checkpoint saver");
    s->state = mt_calloc((size_t)s->U, sizeof *s->state, "the checkpoint saver");
    s->copy = mt_calloc((size_t)s->U, sizeof *s->copy, "the checkpoint saver");
    s->not_staged = mt_calloc((size_t)s->U, 1, "the checkpoint saver");
    s->bounce = mt_malloc(SAVER_BOUNCE, "the checkpoint saver's staging of the masters");
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    if (!s->first_item || !s->unit_bytes || !s->cover_first || !s->cover_last || !s->state || !s->copy ||
        !s->not_staged || !s->bounce) {
        mt_saver_destroy(s);
        return MT_ERR_NOMEM;
    }
    plan_units(s);
    *out = s;
    return MT_OK;
}

/* ---- the optimizer's side ---- */

/* With the lock held, unit x PENDING and its copy within budget: copies it outside the lock (the
 * COPYING state keeps the writer off it). 0 when no memory could be had. */
static int stage_unit(mt_saver *s, int x) {
    char *copy = mt_pages_alloc(s->unit_bytes[x], "a staged copy of a unit");
    if (!copy) return 0;
    s->state[x] = UNIT_COPYING;
    s->staged += (int64_t)s->unit_bytes[x];
    pthread_mutex_unlock(&s->lock);
    size_t at = 0;
    for (int b = 0; b < s->num_blobs; b++) {
        copy_slice(s, x, b, copy + at);
        at += slice_bytes(s, x, b);
    }
    pthread_mutex_lock(&s->lock);
    s->copy[x] = copy;
    s->state[x] = UNIT_STAGED;
    s->staged_total += (int64_t)s->unit_bytes[x];
    pthread_cond_broadcast(&s->changed);
    return 1;
}

/* With the lock held: returns once unit x's saved state is out of the optimizer's way. */
static void secure_unit(mt_saver *s, int x) {
    for (;;) {
        if (s->state[x] == UNIT_DONE || s->state[x] == UNIT_STAGED) return;
        if (s->state[x] == UNIT_PENDING && s->staged + (int64_t)s->unit_bytes[x] <= s->budget && stage_unit(s, x))
            return;
        pthread_cond_wait(&s->changed, &s->lock);
    }
}

void mt_saver_guard(void *ctx, int unit) {
    mt_saver *s = ctx;
    pthread_mutex_lock(&s->lock);
    if (s->active) {
        double t0 = mt_now();
        for (int x = s->cover_first[unit]; x <= s->cover_last[unit]; x++) secure_unit(s, x);
        s->guard_seconds += mt_now() - t0;
    }
    pthread_mutex_unlock(&s->lock);
}

/* ---- the writer's side ---- */

/* Appends `bytes` of blob b that are in memory as saved. */
static mt_status append(mt_saver *s, mt_ckpt_writer *w, int b, const char *data, size_t bytes) {
    s->finite &= mt_run_items_finite(&s->blobs[b], data, bytes / s->blobs[b].item_bytes);
    return mt_checkpoint_append(w, b, data, bytes);
}

/* Appends unit u's slice of blob b from the store, through the bounce buffer (SAVER_BOUNCE bytes)
 * where the store does not keep it as saved. */
static mt_status append_live(mt_saver *s, mt_ckpt_writer *w, int u, int b) {
    const char *live = slice_live(s, u, b);
    if (live) return append(s, w, b, live, slice_bytes(s, u, b));
    size_t item = s->blobs[b].item_bytes, per = SAVER_BOUNCE / item;
    for (size_t first = slice_first(s, u, b), end = slice_first(s, u + 1, b); first < end; first += per) {
        size_t count = end - first < per ? end - first : per;
        mt_run_blob_read(&s->blobs[b], first, count, s->bounce);
        MT_TRY(append(s, w, b, s->bounce, count * item));
    }
    return MT_OK;
}

/* Appends unit u's slices (from its copy, or from the store) unless the save failed already, then
 * marks it done, freeing its copy. */
static mt_status write_unit(mt_saver *s, mt_ckpt_writer *w, int u, mt_status st) {
    if (s->unit_delay > 0) {
        struct timespec pause = {(time_t)s->unit_delay, (long)((s->unit_delay - (double)(time_t)s->unit_delay) * 1e9)};
        nanosleep(&pause, NULL);
    }
    pthread_mutex_lock(&s->lock);
    while (s->state[u] == UNIT_COPYING) pthread_cond_wait(&s->changed, &s->lock);
    const char *copy = s->copy[u];
    if (!copy) s->state[u] = UNIT_WRITING;
    pthread_mutex_unlock(&s->lock);
    size_t at = 0;
    for (int b = 0; st == MT_OK && b < s->num_blobs; b++) {
        size_t bytes = slice_bytes(s, u, b);
        st = copy ? append(s, w, b, copy + at, bytes) : append_live(s, w, u, b);
        at += bytes;
    }
    pthread_mutex_lock(&s->lock);
    s->state[u] = UNIT_DONE;
    if (copy) {
        mt_pages_free(s->copy[u], s->unit_bytes[u]);
        s->copy[u] = NULL;
        s->staged -= (int64_t)s->unit_bytes[u];
    }
    if (u == s->U - 1) s->active = 0;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* The order in which the next step's optimizer takes the units without clipping: the head, the
 * embedding, then the blocks from the last (engine_optimizer.c). */
static int update_order(const mt_saver *s, int i) { return i == 0 ? s->U - 1 : i == 1 ? 0 : s->U - i; }

/* Copies pending units ahead of the disk while the budget lasts, in the order the optimizer will
 * want them: a copy takes a fraction of a unit's write time, and a unit copied is one the
 * optimizer never waits for. The guard copies what this leaves. */
static void stage_ahead(mt_saver *s) {
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->U; i++) {
        int x = update_order(s, i);
        if (!s->not_staged[x] && s->state[x] == UNIT_PENDING && s->staged + (int64_t)s->unit_bytes[x] <= s->budget) stage_unit(s, x);
    }
    pthread_mutex_unlock(&s->lock);
}

static void *writer_main(void *arg) {
    mt_saver *s = arg;
    double t0 = mt_now();
    mt_ckpt_blob_size sizes[MT_RUN_MAX_BLOBS];
    for (int b = 0; b < s->num_blobs; b++)
        sizes[b] = (mt_ckpt_blob_size){s->blobs[b].name, s->blobs[b].items * s->blobs[b].item_bytes};
    mt_ckpt_writer *w = NULL;
    mt_status st = mt_checkpoint_begin(&w, s->path, sizes, s->num_blobs);
    /* After a failure every unit still goes through write_unit, which releases the guard's waits. */
    for (int u = 0; u < s->U; u++) {
        if (st == MT_OK) stage_ahead(s);
        st = write_unit(s, w, u, st);
    }
    if (st == MT_OK) {
        st = mt_run_meta_set_finite(s->meta, s->finite);
        if (st == MT_OK) st = mt_checkpoint_finish(w, s->meta);
        else mt_checkpoint_abandon(w);
    }
    if (st == MT_OK) st = mt_run_rotate(s->run_dir, &s->options, s->step);
    s->result = st;
    snprintf(s->error, sizeof s->error, "%s", st == MT_OK ? "" : mt_error());
    s->write_seconds = mt_now() - t0;
    pthread_mutex_lock(&s->lock);
    s->landed = 1;
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Half of what the host has free now: the rest stays for the page cache the writes go through
 * and for whatever else the machine runs. */
static int64_t staging_budget(const mt_saver *s) {
    if (s->staging_option >= 0) return s->staging_option;
    int64_t available = mt_host_available();
    return available > 0 ? available / 2 : 0;
}

mt_status mt_saver_start(mt_saver *s, const char *run_dir, const mt_run_progress *progress,
                         const mt_run_save_options *options) {
    if (s->in_flight) return mt_fail(MT_ERR_INVALID, "%s: a checkpoint is still being written", run_dir);
    MT_TRY(mt_checkpoint_path(s->path, sizeof s->path, run_dir, progress->step));
    if (snprintf(s->run_dir, sizeof s->run_dir, "%s", run_dir) >= (int)sizeof s->run_dir)
        return mt_fail(MT_ERR_INVALID, "%s: run directory path too long", run_dir);
    s->meta = mt_run_meta(s->store, progress, options->settings);
    if (!s->meta) return mt_fail(MT_ERR_NOMEM, "%s: cannot build the checkpoint metadata", s->path);
    s->options = *options;
    s->options.settings = NULL; /* in s->meta already */
    s->step = progress->step;
    s->finite = 1;
    pthread_mutex_lock(&s->lock);
    for (int u = 0; u < s->U; u++) s->state[u] = UNIT_PENDING;
    s->budget = staging_budget(s);
    s->guard_seconds = 0;
    s->staged_total = 0;
    s->active = 1;
    s->landed = 0;
    pthread_mutex_unlock(&s->lock);
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        pthread_mutex_lock(&s->lock);
        s->active = 0;
        pthread_mutex_unlock(&s->lock);
        json_decref(s->meta);
        s->meta = NULL;
        return mt_fail(MT_ERR_NOMEM, "%s: cannot start the checkpoint writer thread", s->path);
    }
    s->in_flight = 1;
    return MT_OK;
}

int mt_saver_in_flight(const mt_saver *s) { return s->in_flight; }

int mt_saver_landed(mt_saver *s) {
    pthread_mutex_lock(&s->lock);
    int landed = s->in_flight && s->landed;
    pthread_mutex_unlock(&s->lock);
    return landed;
}

void mt_saver_slow_down(mt_saver *s, double seconds_per_unit) { s->unit_delay = seconds_per_unit; }

void mt_saver_skip_staging(mt_saver *s, int unit) { s->not_staged[unit] = 1; }

mt_status mt_saver_wait(mt_saver *s, mt_save_report *report) {
    if (!s->in_flight) return mt_fail(MT_ERR_INVALID, "no checkpoint is being written");
    pthread_join(s->thread, NULL);
    s->in_flight = 0;
    json_decref(s->meta);
    s->meta = NULL;
    pthread_mutex_lock(&s->lock);
    *report = (mt_save_report){.step = s->step, .write_seconds = s->write_seconds,
                               .guard_seconds = s->guard_seconds, .staged_bytes = s->staged_total,
                               .finite = s->finite};
    pthread_mutex_unlock(&s->lock);
    return s->result == MT_OK ? MT_OK : mt_fail(s->result, "%s", s->error);
}

void mt_saver_destroy(mt_saver *s) {
    if (!s) return;
    if (s->in_flight) {
        pthread_join(s->thread, NULL);
        json_decref(s->meta);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->changed);
    free(s->first_item);
    free(s->unit_bytes);
    free(s->cover_first);
    free(s->cover_last);
    free(s->state);
    free(s->copy);
    free(s->not_staged);
    free(s->bounce);
    free(s);
}
