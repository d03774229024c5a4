/* The backend interface's functions: the one place that reads the memory and stream groups of a
 * backend's table, and so the one place that holds the fallbacks of its optional entries. */
#include "backend/backend.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The entries not marked OPTIONAL in backend.h, by the name a reader finds there. */
#define REQUIRED(group, entry) {#group "." #entry, offsetof(mt_backend_ops, group.entry)}
static const struct {
    const char *name;
    size_t offset;
} required[] = {
    {"destroy", offsetof(mt_backend_ops, destroy)},
    REQUIRED(mem, dev_alloc), REQUIRED(mem, dev_free), REQUIRED(mem, host_alloc),
    REQUIRED(mem, host_free), REQUIRED(mem, dev_mem_info),
    REQUIRED(stream, stream_create), REQUIRED(stream, stream_destroy), REQUIRED(stream, event_create),
    REQUIRED(stream, event_destroy), REQUIRED(stream, event_record), REQUIRED(stream, stream_wait),
    REQUIRED(stream, event_sync), REQUIRED(stream, copy), REQUIRED(stream, zero),
    REQUIRED(op, matmul), REQUIRED(op, matmul_dx), REQUIRED(op, matmul_dw), REQUIRED(op, rmsnorm),
    REQUIRED(op, rmsnorm_dx), REQUIRED(op, rope), REQUIRED(op, attention), REQUIRED(op, attention_dx),
    REQUIRED(op, attention_workspace), REQUIRED(op, accumulate_f32),
    REQUIRED(op, round_f32), REQUIRED(op, swiglu), REQUIRED(op, swiglu_dx), REQUIRED(op, add),
    REQUIRED(op, gate_split), REQUIRED(op, gate_join), REQUIRED(op, out_gate), REQUIRED(op, out_gate_dx),
    REQUIRED(op, gather_cols), REQUIRED(op, scatter_cols),
    REQUIRED(op, embedding), REQUIRED(op, embedding_dw), REQUIRED(op, lmhead_loss), REQUIRED(op, lmhead_dw),
    REQUIRED(op, lmhead_workspace), REQUIRED(op, logits), REQUIRED(op, sumsq),
};
#undef REQUIRED

/* Whether an optional group (a table of function pointers, counted as such) has every entry or none;
 * sets the error naming it when not. */
static int whole_group(const void *group, size_t bytes, const char *backend, const char *name) {
    int set = 0, entries = (int)(bytes / sizeof(void (*)(void)));
    for (int i = 0; i < entries; i++) {
        void (*entry)(void);
        memcpy(&entry, (const char *)group + (size_t)i * sizeof entry, sizeof entry);
        set += entry != NULL;
    }
    if (set == 0 || set == entries) return 1;
    mt_fail(MT_ERR_INVALID, "the %s backend has %d of the %d %s entries: give all or none", backend, set, entries,
            name);
    return 0;
}

mt_status mt_backend_init(mt_backend *be, const mt_backend_ops *ops) {
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        void (*entry)(void);
        memcpy(&entry, (const char *)ops + required[i].offset, sizeof entry);
        if (!entry)
            return mt_fail(MT_ERR_INVALID, "the %s backend has no %s, which backend.h requires", ops->name,
                           required[i].name);
    }
    if (!ops->op.clip_scale != !ops->op.adamw)
        return mt_fail(MT_ERR_INVALID, "the %s backend has one of op.clip_scale and op.adamw: give both or "
                       "neither", ops->name);
    /* The moe, gdn and prof groups: every entry or none. */
    if (!whole_group(&ops->moe, sizeof ops->moe, ops->name, "moe") ||
        !whole_group(&ops->gdn, sizeof ops->gdn, ops->name, "gdn") ||
        !whole_group(&ops->prof, sizeof ops->prof, ops->name, "prof"))
        return MT_ERR_INVALID;
    const mt_coll_iface *c = &ops->coll;
    int coll = !!c->comm_init + !!c->comm_init_world + !!c->all_reduce + !!c->reduce_scatter + !!c->broadcast +
               !!c->comm_abort + !!c->comm_free;
    if (coll != 0 && coll != 7)
        return mt_fail(MT_ERR_INVALID, "the %s backend has some of the coll entries: give all seven or none", ops->name);
    int acc = !!c->acc_open + !!c->acc_close + !!c->acc_ordered;
    if ((acc != 0 && acc != 3) || (acc && !coll))
        return mt_fail(MT_ERR_INVALID, "the %s backend has some of acc_open, acc_close and acc_ordered, or them "
                       "without the collectives: give all three with the collectives, or none", ops->name);
    be->ops = ops;
    be->profiling = 0;
    return MT_OK;
}

void mt_backend_destroy(mt_backend *be) {
    if (be) be->ops->destroy(be);
}

const struct mt_device_info *mt_backend_device_info(mt_backend *be) {
    return be->ops->device_info ? be->ops->device_info(be) : NULL;
}

/* ---- memory ---- */

void *mt_dev_alloc(mt_backend *be, size_t bytes, const char *what) { return be->ops->mem.dev_alloc(be, bytes, what); }
void mt_dev_free(mt_backend *be, void *ptr) { be->ops->mem.dev_free(be, ptr); }
void *mt_host_alloc(mt_backend *be, size_t bytes, const char *what) { return be->ops->mem.host_alloc(be, bytes, what); }
void mt_host_free(mt_backend *be, void *ptr) { be->ops->mem.host_free(be, ptr); }

size_t mt_host_peak(mt_backend *be) {
    return be->ops->mem.host_peak ? be->ops->mem.host_peak(be) : SIZE_MAX;
}

size_t mt_dev_peak(mt_backend *be) {
    size_t peak = 0;
    be->ops->mem.dev_mem_info(be, NULL, &peak);
    return peak;
}

size_t mt_dev_available(mt_backend *be) {
    if (!mt_backend_has_own_memory(be)) return SIZE_MAX;
    size_t free_bytes = 0;
    be->ops->mem.dev_mem_info(be, &free_bytes, NULL);
    return free_bytes;
}

size_t mt_dev_in_use(mt_backend *be) {
    return be->ops->mem.dev_in_use ? be->ops->mem.dev_in_use(be) : mt_dev_peak(be);
}

/* ---- streams, events, copies ---- */

mt_stream *mt_stream_create(mt_backend *be) { return be->ops->stream.stream_create(be); }
void mt_stream_destroy(mt_backend *be, mt_stream *s) { be->ops->stream.stream_destroy(be, s); }
mt_event *mt_event_create(mt_backend *be) { return be->ops->stream.event_create(be); }
void mt_event_destroy(mt_backend *be, mt_event *e) { be->ops->stream.event_destroy(be, e); }
void mt_event_record(mt_backend *be, mt_event *e, mt_stream *s) { be->ops->stream.event_record(be, e, s); }
void mt_stream_wait(mt_backend *be, mt_stream *s, mt_event *e) { be->ops->stream.stream_wait(be, s, e); }
void mt_event_sync(mt_backend *be, mt_event *e) { be->ops->stream.event_sync(be, e); }

void mt_copy_async(mt_backend *be, void *dst, const void *src, size_t bytes, mt_stream *s) {
    be->ops->stream.copy(be, dst, src, bytes, s);
}

void mt_zero_async(mt_backend *be, void *dst, size_t bytes, mt_stream *s) { be->ops->stream.zero(be, dst, bytes, s); }

/* ---- the optional entries and their fallbacks ---- */

int mt_event_done(mt_backend *be, mt_event *e) {
    if (be->ops->stream.event_done) return be->ops->stream.event_done(be, e);
    be->ops->stream.event_sync(be, e);
    return 1;
}

double mt_event_elapsed(mt_backend *be, mt_event *start, mt_event *end) {
    return be->ops->stream.event_elapsed ? be->ops->stream.event_elapsed(be, start, end) : 0.0;
}

void mt_launch(mt_backend *be, mt_stream *s, void (*fn)(void *arg), void *arg) {
    if (be->ops->stream.launch) be->ops->stream.launch(be, s, fn, arg);
    else fn(arg);
}

void mt_copy_in_launch(mt_backend *be, void *dst, const void *src, size_t bytes, mt_stream *s) {
    if (be->ops->stream.launch) memcpy(dst, src, bytes);
    else mt_copy_async(be, dst, src, bytes, s);
}

void mt_zero_in_launch(mt_backend *be, void *dst, size_t bytes, mt_stream *s) {
    if (be->ops->stream.launch) memset(dst, 0, bytes);
    else mt_zero_async(be, dst, bytes, s);
}

mt_status mt_backend_check(mt_backend *be) { return be->ops->stream.check ? be->ops->stream.check(be) : MT_OK; }

/* ---- the profile ---- */

mt_status mt_profile_start(mt_backend *be) {
    if (!mt_backend_has_profile(be))
        return mt_fail(MT_ERR_INVALID, "the %s backend cannot profile its ops (it has no device timers); the "
                       "profile needs the cuda backend", be->ops->name);
    be->profiling = 1;
    return MT_OK;
}

void mt_profile_stop(mt_backend *be) { be->profiling = 0; }

mt_status mt_profile_collect(mt_backend *be) { return mt_backend_has_profile(be) ? be->ops->prof.collect(be) : MT_OK; }

const mt_prof_row *mt_profile_rows(mt_backend *be, int *count) {
    *count = 0;
    return mt_backend_has_profile(be) ? be->ops->prof.rows(be, count) : NULL;
}

void mt_profile_clear(mt_backend *be) {
    if (mt_backend_has_profile(be)) be->ops->prof.clear(be);
}
