/* Fitting the engine into a device-memory budget (--gpu-mem): the engine's device bytes depend
 * on the weight slots, the LM head's chunk and the activation checkpoints; this picks the
 * largest settings that fit, or refuses with the bytes by class. docs/memory.md is the plan. */
#ifndef MT_ENGINE_BUDGET_H
#define MT_ENGINE_BUDGET_H

#include "engine/engine.h"

/* Adjusts o until mt_engine_size fits in `budget` bytes (0: no budget): slots down to 2, then
 * sequences move from the micro-batch into more micro-batches (batch halves, micro_batches
 * doubles: the same tokens per step and the same PCIe traffic, a smaller workspace), then the
 * activation checkpoints move to pinned host memory one block at a time from the first
 * (ckpt_on_host: PCIe traffic in both passes, overlapped), then lm_chunk down to 128, then the
 * attention tile halves down to MT_BUDGET_MIN_TILE queries, then the block chunk halves down to
 * MT_BUDGET_MIN_CHUNK tokens. Fails with MT_ERR_NOMEM naming each class when even
 * the smallest settings do not fit; the message says what to lower. The units whose state the
 * device keeps (o->ends_on_device, o->device_blocks) stay as they are: plan/placement.c adds them
 * with what the budget leaves. */
#define MT_BUDGET_MIN_CHUNK 1024
/* Windows of 8192 queries are still long attention calls; a 1M-token sequence takes 128 of them. */
#define MT_BUDGET_MIN_TILE 8192
mt_status mt_engine_fit_budget(mt_backend *be, const mt_config *cfg, mt_engine_options *o, int64_t budget);

#endif
