/* A model of a CUDA GPU that is not on this machine, for planning only (gpu_model.c): it has the
 * CUDA backend's types and sizes and `memory` bytes free, and runs nothing. Only the planner's
 * size queries may be called on it (mt_dev_available, the workspace sizes, the dtypes). */
#ifndef MT_BACKEND_GPU_MODEL_H
#define MT_BACKEND_GPU_MODEL_H

#include <stdint.h>

#include "backend/backend.h"

mt_status mt_backend_gpu_model_create(mt_backend **out, int64_t memory);

#endif
