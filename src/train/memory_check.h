/* Up-front refusal: before a command allocates a model (train, bench, sample, export), the bytes
 * its plan needs are compared with what the machine has, so that a model too large for it fails
 * at once, naming the bytes of each class and what is available, rather than being killed by the
 * kernel (or failing an allocation) after minutes of loading. plan prints the same verdict.
 *
 * What is available is util/host_memory.h's: MemAvailable and the hypervisor's balloon, capped by
 * the process's memory cgroups, never MemTotal; --host-mem replaces it, and so, for tests of the
 * refusal, does the environment variable MT_TEST_HOST_AVAILABLE (a size, e.g. "2GiB"). */
#ifndef MT_TRAIN_MEMORY_CHECK_H
#define MT_TRAIN_MEMORY_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/layout.h"

/* One class of host memory a command needs: "fp32 master" and its bytes. */
typedef struct {
    const char *name;
    int64_t bytes;
} mt_memory_class;

#define MT_MEMORY_MAX_CLASSES 10
/* The names of the classes plan's advice looks up. */
#define MT_MEMORY_KEPT_GRADS "gradients kept for the clip"
#define MT_MEMORY_MOMENTS "Adam moments"

typedef struct {
    /* The host store and the engine's host staging; plus the engine's device buffers when the
     * backend's device memory is host memory (cpu). */
    int64_t host_needed;
    mt_memory_class host[MT_MEMORY_MAX_CLASSES]; /* host_needed by class */
    int host_classes;
    int64_t host_available;    /* see above; -1: unknown */
    char host_source[192];     /* how it was found (util/host_memory.h) */
    int64_t device_needed;     /* 0 when the device memory is host memory */
    int64_t device_available;  /* the backend's free device memory; -1: none separate */
} mt_memory_fit;

/* Host memory available now (see above); -1 when unknown. */
int64_t mt_host_available(void);

/* What a run of this layout, backend and engine shape needs, and what the machine has now. */
mt_memory_fit mt_memory_fit_of(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                               mt_moments_format moments);

/* MT_ERR_NOMEM, naming the bytes of each class and what is available, when the need exceeds it;
 * `what` says whose need it is ("the run", "export"). */
mt_status mt_memory_check_fit(const mt_memory_fit *fit, const char *what);
/* mt_memory_fit_of with `ranks` engines on one store (engine/ranks.h): every rank's host staging and
 * checkpoints (and on the cpu backend its engine buffers); the store and the gradients once. */
mt_memory_fit mt_memory_fit_ranks(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                                  mt_moments_format moments, int ranks);

/* Adds what the other processes of a world on this host (torchrun's LOCAL_WORLD_SIZE) take: each a
 * store and buffers of its own, as large as this one's. */
void mt_memory_fit_processes(mt_memory_fit *fit, int processes_here);

/* mt_memory_fit_of, then mt_memory_check_fit for "the run" (or `what`). */
mt_status mt_memory_check(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                          mt_moments_format moments);
mt_status mt_memory_check_fit_of(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                                 mt_moments_format moments, const char *what);
/* The host check alone, for a command whose need is a list of classes. */
mt_status mt_memory_check_host(const char *what, const mt_memory_class *classes, int count);

/* One line per memory (host, and the device when separate): needed, available, and whether it
 * fits. */
void mt_memory_fit_print(const mt_memory_fit *fit, FILE *out);

#endif
