/* Up-front refusal: before a run allocates, the bytes its plan needs are compared with what the
 * machine has, so that a model too large for it fails at once, naming both numbers, rather than
 * being killed by the kernel (or failing an allocation) after minutes of loading. */
#ifndef MT_TRAIN_MEMORY_CHECK_H
#define MT_TRAIN_MEMORY_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/layout.h"

typedef struct {
    /* The host store and the engine's host staging; plus the engine's device buffers when the
     * backend's device memory is host memory (cpu). */
    int64_t host_needed;
    int64_t host_available;    /* MemAvailable, capped by a cgroup v2 memory.max; -1: unknown */
    int64_t device_needed;     /* 0 when the device memory is host memory */
    int64_t device_available;  /* the backend's free device memory; -1: none separate */
} mt_memory_fit;

/* Host memory available now: MemAvailable, capped by a cgroup v2 memory.max; -1 when unknown. */
int64_t mt_host_available(void);

/* What a run of this layout, backend and engine shape needs, and what the machine has now. */
mt_memory_fit mt_memory_fit_of(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                               mt_moments_format moments);

/* MT_ERR_NOMEM, naming both numbers, when the run's need exceeds what is available. */
mt_status mt_memory_check(const mt_layout *layout, mt_backend *be, const mt_engine_options *eo,
                          mt_moments_format moments);

/* One line per memory (host, and the device when separate): needed, available, and whether it
 * fits. */
void mt_memory_fit_print(const mt_memory_fit *fit, FILE *out);

#endif
