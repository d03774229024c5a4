/* Picks the compute backend a run asked for: "cpu", "cuda", or "auto" (cuda when a GPU is
 * usable, else cpu). */
#ifndef MT_TRAIN_BACKEND_SELECT_H
#define MT_TRAIN_BACKEND_SELECT_H

#include <stdint.h>

#include "backend/backend.h"

mt_status mt_backend_open(const char *name, int threads, mt_backend **out);

/* For plan: the same, but "cuda" where no GPU can be opened plans with a model of one of
 * --gpu-mem bytes (backend/gpu_model.h), saying so; without --gpu-mem that is refused. */
mt_status mt_backend_open_for_plan(const char *name, int threads, int64_t gpu_mem, mt_backend **out);

#endif
