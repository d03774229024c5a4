/* The rates the planner's time floor is stated against (docs/memory.md), for the machine it runs
 * on: the GPU's bf16 GEMM rate, the PCIe rates each way, and the host optimizer's rate. Each is,
 * in this order of preference:
 *   given      --rate-gemm, --rate-pcie or --rate-adamw (a plan for another machine);
 *   measured   PCIe by the CUDA backend at start (timed pinned copies each way); the host AdamW
 *              by a short timed run of the project's own AdamW on the threads the run will use,
 *              over arrays past the last-level cache;
 *   looked up  the GEMM rate from a table of known GPUs' bf16 dense tensor peaks (by name), at
 *              the fraction of it cuBLASLt reached on the H200; without a usable GPU, the PCIe
 *              rate from the NVIDIA GPU's link in sysfs (generation and lanes);
 *   assumed    what is left: the lent H200 machine's figures, said so. */
#ifndef MT_TRAIN_MACHINE_RATES_H
#define MT_TRAIN_MACHINE_RATES_H

#include <stdio.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "megatrain.h"

typedef struct {
    double gemm_flop_per_s;          /* bf16 GEMMs on the GPU, as reached (not the peak) */
    double pcie_h2d_bytes_per_s;     /* host to device */
    double pcie_d2h_bytes_per_s;     /* device to host */
    double adamw_params_per_s;       /* the host AdamW: split masters, fp32 moments */
    double host_bytes_per_s;         /* the memory traffic that is: MT_ADAMW_BYTES_PER_PARAM each */
    int adamw_threads;               /* the threads it ran (or will run) on */
    char gemm_source[400], pcie_source[400], adamw_source[400]; /* where each came from */
} mt_machine_rates;

/* Bytes the host AdamW moves per parameter with split masters and fp32 moments: reads gradient,
 * masters (both halves), m, v (16); writes masters, m, v (12): optim/adamw.h's FULL part. */
#define MT_ADAMW_BYTES_PER_PARAM 28.0
/* The share of a GPU's bf16 dense peak its GEMMs reach: cuBLASLt's 700 TFLOP/s of the H200's
 * 989 measured there (docs/memory.md). */
#define MT_GEMM_PEAK_FRACTION 0.71
/* The share of a PCIe link's rate after line coding that pinned copies reach (51 of 63 GB/s on the
 * H200's gen 5 x16). */
#define MT_PCIE_LINK_FRACTION 0.8

/* The rates for a run of these options on this backend (see above). The engine options give the
 * optimizer's threads. */
mt_status mt_machine_rates_of(const mt_train_options *o, mt_backend *be, const mt_engine_options *eo,
                              mt_machine_rates *rates);

/* Three lines, "rates     GEMM 700 TFLOP/s (looked up: ...)", PCIe and host AdamW. */
void mt_machine_rates_print(const mt_machine_rates *rates, FILE *out);

/* The bf16 dense tensor-core peak (FLOP/s) of the GPU whose CUDA name contains a known model
 * ("NVIDIA GeForce RTX 4090", "NVIDIA H100 PCIe") as whole words, the longest such match; the
 * table's name for it in *model. 0 for a GPU not in the table. */
double mt_gpu_bf16_peak(const char *name, const char **model);

/* Parameters a second the host AdamW updates on `threads` threads over arrays four times the
 * last-level cache (mt_llc_bytes; within 128 MB and 2 GiB), as it does on the store: timed for
 * `seconds` and three passes at least. *params (may be NULL): how many it updated a pass. Measured
 * once a process for the same threads (and no longer a time asked). */
mt_status mt_host_adamw_rate(int threads, double seconds, double *params_per_s, size_t *params);
/* The bytes of last-level cache of the machine whose CPUs' sysfs directory is cpu_dir
 * (/sys/devices/system/cpu): the size of the highest cache level of cpu0 times the caches of that
 * level (the online CPUs over those sharing cpu0's); 0 when sysfs says nothing. */
int64_t mt_llc_bytes(const char *cpu_dir);

#endif
