/* The host parameter store: the home of every parameter and optimizer state.
 *
 * One allocation per class, each laid out by mt_layout (unit by unit, tensor by tensor):
 *   weights   what the device reads, in the backend's weight type, in memory the device copies
 *             from at full speed (pinned on cuda); the optimizer writes it, the h2d stream reads it.
 *             With bf16 weights (cuda) these are the fp32 masters' high halves (util/split_f32.h:
 *             each master rounded to bf16, ties away from zero); with fp32 weights (cpu) they are
 *             the masters themselves
 *   low       bf16 weights only: the masters' low halves, which with the high halves are every bit
 *             of the fp32 masters (optim/master.h); so the masters and the weights the device reads
 *             take 4 bytes a parameter, not 4 + 2
 *   moments   Adam's m and v: fp32, or as an option bf16 or 8-bit (optim/moments.h)
 * Gradients coming home belong to the engine (engine.h), which keeps all of them or a ring. */
#ifndef MT_ENGINE_STORE_H
#define MT_ENGINE_STORE_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/layout.h"
#include "optim/master.h"
#include "optim/moments.h"
#include "util/cpu_list.h"

typedef struct {
    const mt_layout *layout;
    mt_backend *be;
    mt_dtype weight_dtype;
    void *weights;  /* the high halves (bf16) or the fp32 masters */
    uint16_t *low;  /* the low halves (bf16 weights), else NULL */
    mt_moments moments;
} mt_store;

/* Bytes of host memory the store takes, by class, without allocating: the weights the device
 * reads (the masters' high halves, or the fp32 masters), the masters' low halves (none with fp32
 * weights), the moments. */
typedef struct {
    int64_t weights, low, moments;
} mt_store_bytes;
mt_store_bytes mt_store_size(const mt_layout *layout, mt_dtype weight_dtype, mt_moments_format moments);

/* A store with fp32 moments, the default. */
mt_status mt_store_create(mt_store *store, const mt_layout *layout, mt_backend *be);
mt_status mt_store_create_with_moments(mt_store *store, const mt_layout *layout, mt_backend *be,
                                       mt_moments_format moments);
/* The same, the masters' low halves (fp32 weights: the masters) and the moments first touched
 * (faulted in, zero) by `team` in the host AdamW's split: for each tensor, thread t of the team
 * touches the elements thread t of the optimizer starts on (optim/adamw.h, mt_adamw_share; it
 * takes others' only once its own are done, optim/shares.h), pinned to the core it will run on. The kernel puts a page on the NUMA node of the thread that
 * touches it first, so each optimizer thread's share lies on its own node. NULL: the OpenMP
 * threads, unpinned, in the same split. (Pinned weights are touched before they are pinned,
 * backend/pinned_pieces.h.) */
mt_status mt_store_create_touched(mt_store *store, const mt_layout *layout, mt_backend *be,
                                  mt_moments_format moments, const mt_cpu_team *team);
/* A store of working weights alone (no low halves, no moments), for what only
 * runs the model forward (sampling, with a forward-only engine): written by the caller, e.g. from
 * a checkpoint's masters (train/run_state.h, mt_run_load_weights). */
mt_status mt_store_create_weights(mt_store *store, const mt_layout *layout, mt_backend *be);
void mt_store_free(mt_store *store);

/* Master weights initialized as transformers does for Llama: matrices ~ N(0, 0.02), norm weights
 * 1, biases 0. The moments stay as mt_store_create left them: zero. */
void mt_store_init_random(mt_store *store, uint64_t seed);

/* The masters from element `at` of the layout on, as the AdamW kernels take them. */
mt_master mt_store_masters(const mt_store *store, int64_t at);
/* n masters from element `at` into fp32 dst, and from fp32 src (the weights the device reads
 * follow: they are the masters' high halves, or the masters). */
void mt_store_read_masters(const mt_store *store, int64_t at, size_t n, float *dst);
void mt_store_write_masters(mt_store *store, int64_t at, size_t n, const float *src);
/* The masters as one fp32 array where the store keeps them so (fp32 weights), else NULL. */
static inline float *mt_store_f32(const mt_store *store) { return store->low ? NULL : (float *)store->weights; }

/* Start of unit u in a class. */
void *mt_store_unit_weights(const mt_store *store, int u);
static inline float *mt_store_unit_f32(const mt_store *store, float *cls, int u) {
    return cls + store->layout->units[u].offset;
}

#endif
