/* The host parameter store: the home of every parameter and optimizer state.
 *
 * One allocation per class, each laid out by mt_layout (unit by unit, tensor by tensor):
 *   weights   working weights in the backend's weight type, in memory the device copies from
 *             at full speed (pinned on cuda); the optimizer writes them, the H2D stream reads them
 *   master    fp32 master weights
 *   moments   Adam's m and v: fp32, or as an option bf16 or 8-bit (optim/moments.h)
 * Gradients coming home belong to the engine (engine.h), which keeps all of them or a ring. */
#ifndef MT_ENGINE_STORE_H
#define MT_ENGINE_STORE_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/layout.h"
#include "optim/moments.h"
#include "util/cpu_list.h"

typedef struct {
    const mt_layout *layout;
    mt_backend *be;
    mt_dtype weight_dtype;
    void *weights;
    float *master;
    mt_moments moments;
} mt_store;

/* Bytes of host memory the store takes, by class, without allocating. */
typedef struct {
    int64_t weights, master, moments;
} mt_store_bytes;
mt_store_bytes mt_store_size(const mt_layout *layout, mt_dtype weight_dtype, mt_moments_format moments);

/* A store with fp32 moments, the default. */
mt_status mt_store_create(mt_store *store, const mt_layout *layout, mt_backend *be);
mt_status mt_store_create_with_moments(mt_store *store, const mt_layout *layout, mt_backend *be,
                                       mt_moments_format moments);
/* The same, the fp32 masters and the moments first touched (faulted in, zero) by `team` in the
 * host AdamW's split: for each tensor, thread t of the team touches the elements thread t of the
 * optimizer will update (optim/adamw.h, mt_adamw_share), pinned to the core it will run on. The
 * kernel puts a page on the NUMA node of the thread that touches it first, so each optimizer
 * thread's share lies on its own node. NULL: the OpenMP threads, unpinned, in the same split.
 * (The working weights are touched before they are pinned, backend/pinned_pieces.h.) */
mt_status mt_store_create_touched(mt_store *store, const mt_layout *layout, mt_backend *be,
                                  mt_moments_format moments, const mt_cpu_team *team);
/* A store of working weights alone (no fp32 master, no moments: master is NULL), for what only
 * runs the model forward (sampling, with a forward-only engine): written by the caller, e.g. from
 * a checkpoint's masters (train/run_state.h, mt_run_load_weights). */
mt_status mt_store_create_weights(mt_store *store, const mt_layout *layout, mt_backend *be);
void mt_store_free(mt_store *store);

/* Master weights initialized as transformers does for Llama: matrices ~ N(0, 0.02), norm weights
 * 1, biases 0; working weights written from the masters. The moments stay as mt_store_create
 * left them: zero. */
void mt_store_init_random(mt_store *store, uint64_t seed);
/* Rewrites the working weights of every unit from the fp32 masters. */
void mt_store_sync_weights(mt_store *store);

/* Start of unit u in a class. */
void *mt_store_unit_weights(const mt_store *store, int u);
static inline float *mt_store_unit_f32(const mt_store *store, float *cls, int u) {
    return cls + store->layout->units[u].offset;
}

#endif
