/* The memory plan of a run, resolved once before anything is allocated (docs/memory.md): where
 * every class of bytes lives (each unit's fp32 master and moments and who updates them, the
 * gradients that wait for the clipping norm, activation checkpoints, weight slots), the step's
 * micro-batch split and LM-head chunk, and the floor of one step's time. train, bench and plan
 * read this record and nothing else: plan prints it, train logs it, bench writes it to its JSON.
 *
 * The planner fits the run's shape into --gpu-mem the way engine/budget.c does, then spends what
 * that budget (or, without one, the device's free memory less a margin) leaves where it saves the
 * most step time per byte: each unit whose state the device keeps and updates takes its host
 * AdamW (28 to 36 bytes of host memory traffic a parameter: optim/adamw.h's parts) and its PCIe
 * traffic off the step. */
#ifndef MT_PLAN_PLACEMENT_H
#define MT_PLAN_PLACEMENT_H

#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "engine/store.h"

/* The machine's rates the plan weighs bytes and time with, and where they come from. */
typedef struct {
    double gemm_flop_per_s;  /* bf16 GEMMs */
    double pcie_bytes_per_s; /* pinned copies, host to device */
    double pcie_d2h_bytes_per_s; /* and device to host */
    double host_bytes_per_s; /* host memory as the host AdamW moves it */
    const char *source;
} mt_rates;

/* The lent H200 machine's measured rates: what the tests weigh with (runs use their machine's,
 * train/machine_rates.h). */
mt_rates mt_placement_rates(void);

#define MT_PLACE_AUTO (-1)

/* What a run asks for and what the machine offers. */
typedef struct {
    mt_engine_options eo;      /* the run's engine options as given: shape, clipping, slots, chunk */
    mt_moments_format moments;
    int64_t gpu_mem;           /* --gpu-mem: a hard budget for the device bytes; 0: none */
    int ends;                  /* the embedding and head on the device: MT_PLACE_AUTO, 0 or 1 */
    int device_blocks;         /* blocks whose state the device keeps: MT_PLACE_AUTO or a count */
    int device_memory;         /* the device has memory of its own (else its bytes are host bytes) */
    int device_optimizer;      /* and the optimizer ops (clip_scale, adamw) */
    int64_t device_free;       /* its free memory now; -1: unknown */
    int64_t host_available;    /* host memory available (train/memory_check.h); -1: unknown */
    mt_rates rates;
} mt_placement_request;

typedef struct {
    mt_engine_options eo;      /* what the engine runs */
    mt_moments_format moments;
    int64_t device_limit;      /* the device bytes the plan may spend on units' state; 0: none */
    int budget_given;          /* that limit is --gpu-mem (else the free memory less a margin) */
    int64_t device_free;       /* as asked */
    mt_engine_bytes dev;       /* the engine's bytes by class */
    mt_store_bytes store;      /* the host store's */
    int layers, units, units_on_device;
    /* The floor of one step's time: GEMM FLOPs, PCIe bytes each way, the host optimizer's bytes in
     * all and (with clipping) those after the norm, which follow the backward's GEMMs; floor_s is
     * the largest term. */
    double params, tokens, flops, gemm_s, pcie_in, pcie_out, pcie_s, host_params;
    double opt_bytes_per_param, opt_s, after_norm_bytes_per_param, after_norm_s, floor_s;
    /* The tokens a step needs for its GEMMs to take as long as its PCIe copies (the FLOPs grow with
     * the tokens, the copies do not): below it the copies set the step's pace, as for a mixture of
     * experts, whose experts are most of the bytes and little of a token's FLOPs. */
    double pcie_cover_tokens;
    mt_rates rates;
} mt_placement;

/* Resolves the plan, or refuses a run whose device bytes cannot fit --gpu-mem (MT_ERR_NOMEM naming
 * each class) or that asks for something the backend or moments cannot do (MT_ERR_INVALID). What
 * the host and, without a budget, the device have now is train/memory_check.h's to hold it to. */
mt_status mt_placement_resolve(mt_backend *be, const mt_config *cfg, const mt_placement_request *rq,
                               mt_placement *out);

/* The weight slots the streamed blocks use: --slots, at most the blocks that stream. */
int mt_placement_slots(const mt_placement *p);
/* One line: where the optimizer state and the waiting gradients live, slots, split, chunk,
 * checkpoints: "optimizer state: embedding and head and 20 of 28 blocks on the device, ...". */
void mt_placement_describe(const mt_placement *p, char *buf, size_t cap);
/* The plan as `megatrain plan` prints it: placement, budget, device and host bytes by class, the
 * floor's terms. */
void mt_placement_print(const mt_placement *p, FILE *out);
/* The host bytes of the plan: the store and the engine's host classes. */
int64_t mt_placement_host_bytes(const mt_placement *p);
/* Where the waiting gradients live: "device" (every unit on the device), "host fp32" or
 * "device N units, host fp32 M units"; for tables. */
void mt_placement_grads_where(const mt_placement *p, char *buf, size_t cap);

#endif
