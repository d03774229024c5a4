#include "train/memory_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/store.h"
#include "util/host_memory.h"
#include "util/size.h"

/* One of a few rotating buffers: a message holds several sizes. */
static const char *size_text(int64_t bytes) {
    static _Thread_local char buf[4][32];
    static _Thread_local int next;
    char *b = buf[next++ % 4];
    return mt_size_text(bytes, b, sizeof buf[0]);
}

int64_t mt_host_available(void) { return mt_host_memory_available().bytes; }

static void add_class(mt_memory_fit *fit, const char *name, int64_t bytes) {
    if (bytes <= 0 || fit->host_classes == MT_MEMORY_MAX_CLASSES) return;
    fit->host[fit->host_classes++] = (mt_memory_class){name, bytes};
    fit->host_needed += bytes;
}

mt_memory_fit mt_memory_fit_of(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                               mt_moments_format moments) {
    mt_store_bytes s = mt_store_size(layout, be->ops->weight_dtype, moments);
    mt_engine_bytes d = mt_engine_size(be, &layout->cfg, eo);
    mt_host_memory host = mt_host_memory_available();
    mt_memory_fit fit = {.host_available = host.bytes, .device_available = -1};
    snprintf(fit.host_source, sizeof fit.host_source, "%s", host.source);
    if (eo->forward_only) { /* a forward-only engine's store holds the working weights alone */
        add_class(&fit, "working weights", s.weights);
    } else {
        add_class(&fit, s.low ? "fp32 master: high halves (the bf16 weights)" : "fp32 master (the weights)", s.weights);
        add_class(&fit, "fp32 master: low halves", s.low);
        add_class(&fit, MT_MEMORY_MOMENTS, s.moments);
    }
    add_class(&fit, eo->max_grad_norm > 0 || eo->keep_grads ? MT_MEMORY_KEPT_GRADS : "gradient ring",
              d.host_grads);
    add_class(&fit, "staging", d.host_staging);
    add_class(&fit, "activation checkpoints", d.host_checkpoints);
    if (mt_backend_has_own_memory(be)) {
        fit.device_needed = d.total;
        fit.device_available = (int64_t)mt_dev_available(be);
    } else {
        add_class(&fit, "engine buffers", d.total);
    }
    return fit;
}

mt_memory_fit mt_memory_fit_ranks(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                                  mt_moments_format moments, int ranks) {
    mt_memory_fit fit = mt_memory_fit_of(layout, be, eo, moments);
    mt_engine_bytes d = mt_engine_follower_size(be, &layout->cfg, eo);
    int64_t each = d.host_grads + d.host_staging + d.host_checkpoints + (mt_backend_has_own_memory(be) ? 0 : d.total);
    add_class(&fit, "the other ranks' buffers", (int64_t)(ranks - 1) * each);
    return fit;
}

void mt_memory_fit_processes(mt_memory_fit *fit, int processes_here) {
    static _Thread_local char name[64];
    snprintf(name, sizeof name, "this host's %d other processes", processes_here - 1);
    add_class(fit, name, (int64_t)(processes_here - 1) * fit->host_needed);
}

/* "fp32 master: high halves (the bf16 weights) 16.06 GB + ..." */
static void classes_text(const mt_memory_class *classes, int count, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s %s", i ? " + " : "", classes[i].name,
                               size_text(classes[i].bytes));
}

mt_status mt_memory_check_host(const char *what, const mt_memory_class *classes, int count) {
    int64_t needed = 0;
    mt_host_memory host = mt_host_memory_available();
    for (int i = 0; i < count; i++) needed += classes[i].bytes;
    if (host.bytes < 0 || needed <= host.bytes) return MT_OK;
    char parts[640];
    classes_text(classes, count, parts, sizeof parts);
    return mt_fail(MT_ERR_NOMEM, "%s needs %s of host memory (%s), %s available (%s): choose a smaller "
                   "model or a machine with more memory (where the machine's memory grows as it is used, "
                   "--host-mem says how much it will give)", what, size_text(needed), parts, size_text(host.bytes),
                   host.source);
}

mt_status mt_memory_check_fit(const mt_memory_fit *f, const char *what) {
    MT_TRY(mt_memory_check_host(what, f->host, f->host_classes));
    if (f->device_available >= 0 && f->device_needed > f->device_available)
        return mt_fail(MT_ERR_NOMEM, "%s needs %s of device memory, %s free; lower --batch, "
                       "--seq, --micro-batches, --slots or --device-blocks, or give --gpu-mem", what,
                       size_text(f->device_needed), size_text(f->device_available));
    return MT_OK;
}

mt_status mt_memory_check_fit_of(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                                 mt_moments_format moments, const char *what) {
    mt_memory_fit fit = mt_memory_fit_of(layout, be, eo, moments);
    return mt_memory_check_fit(&fit, what);
}

mt_status mt_memory_check(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                          mt_moments_format moments) {
    return mt_memory_check_fit_of(layout, be, eo, moments, "the run");
}

static void print_one(FILE *out, const char *label, const char *what, int64_t needed, int64_t available,
                      const char *source) {
    fprintf(out, "%-9s %s needs %s", label, what, size_text(needed));
    if (available < 0) fprintf(out, ", available unknown\n");
    else fprintf(out, ", %s available%s%s%s: %s\n", size_text(available), source[0] ? " (" : "", source,
                 source[0] ? ")" : "", needed <= available ? "fits" : "does NOT fit");
}

void mt_memory_fit_print(const mt_memory_fit *f, FILE *out) {
    print_one(out, "fit", "host", f->host_needed, f->host_available, f->host_source);
    if (f->device_available >= 0) print_one(out, "", "device", f->device_needed, f->device_available, "");
}
