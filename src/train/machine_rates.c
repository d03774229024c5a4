#include "train/machine_rates.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device_info.h"
#include "optim/adamw.h"
#include "util/clock.h"
#include "util/cpu_list.h"
#include "util/memory.h"
#include "util/pcie_link.h"

/* The lent H200 machine's rates (docs/memory.md), assumed where nothing better is known: PCIe and
 * GEMM as measured there; the host AdamW as bench/adamw measured it there (3.74 G params/s on 15
 * threads, 2026-11-22). */
#define H200_GEMM_FLOP_PER_S 700e12
#define H200_PCIE_BYTES_PER_S 51e9
#define H200_ADAMW_PARAMS_PER_S 3.74e9

/* bf16 dense tensor-core peaks with fp32 accumulation (the GEMMs' mode), without sparsity, from
 * NVIDIA's datasheets and architecture whitepapers. GeForce cards accumulate fp32 at half their
 * fp16-accumulate rate, which is the figure here. */
static const struct {
    const char *model;
    double tflops;
} gpu_peaks[] = {
    /* Ampere */
    {"A100", 312}, {"A800", 312}, {"A30", 165}, {"A40", 149.7}, {"A10", 125},
    {"RTX A6000", 154.8}, {"RTX A5000", 111.1}, {"RTX A4000", 76.7},
    {"RTX 3060", 25.6}, {"RTX 3060 Ti", 32.4}, {"RTX 3070", 40.6}, {"RTX 3070 Ti", 43.5},
    {"RTX 3080", 59.5}, {"RTX 3080 Ti", 68.2}, {"RTX 3090", 71}, {"RTX 3090 Ti", 80},
    /* Ada */
    {"L4", 121}, {"L40", 181}, {"L40S", 362}, {"RTX 6000 Ada", 364.2},
    {"RTX 4060", 30.2}, {"RTX 4060 Ti", 44.1}, {"RTX 4070", 58.4}, {"RTX 4070 Ti", 80.2},
    {"RTX 4070 Ti SUPER", 88.2}, {"RTX 4080", 97.5}, {"RTX 4080 SUPER", 104.4}, {"RTX 4090", 165.2},
    /* Hopper */
    {"H100", 989.4}, {"H100 PCIe", 756.5}, {"H100 NVL", 835.5}, {"H800", 989.4}, {"H200", 989.4},
    {"H200 NVL", 835.5}, {"GH200", 989.4},
    /* Blackwell */
    {"B200", 2250}, {"B100", 1750}, {"GB200", 2500}, {"RTX 5070", 61.7}, {"RTX 5070 Ti", 87.9},
    {"RTX 5080", 112.6}, {"RTX 5090", 209.5},
};

/* `model` occurs in `name` with no letter or digit right before or after it. */
static int has_word(const char *name, const char *model) {
    size_t len = strlen(model);
    for (const char *at = strstr(name, model); at; at = strstr(at + 1, model)) {
        int before = at > name && isalnum((unsigned char)at[-1]);
        int after = isalnum((unsigned char)at[len]);
        if (!before && !after) return 1;
    }
    return 0;
}

double mt_gpu_bf16_peak(const char *name, const char **model) {
    int best = -1;
    for (int i = 0; i < (int)(sizeof gpu_peaks / sizeof gpu_peaks[0]); i++)
        if (name && has_word(name, gpu_peaks[i].model) &&
            (best < 0 || strlen(gpu_peaks[i].model) > strlen(gpu_peaks[best].model)))
            best = i;
    if (model) *model = best >= 0 ? gpu_peaks[best].model : NULL;
    return best >= 0 ? gpu_peaks[best].tflops * 1e12 : 0;
}

/* ---- the host AdamW ---- */

/* A sysfs size such as "32768K" in bytes; 0 when unreadable. */
static int64_t read_size(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char text[64] = "";
    int64_t bytes = 0;
    if (fgets(text, sizeof text, f)) {
        char *end;
        long long value = strtoll(text, &end, 10);
        int64_t unit = *end == 'K' ? 1024 : *end == 'M' ? 1 << 20 : *end == 'G' ? (int64_t)1 << 30 : 1;
        bytes = value > 0 ? (int64_t)value * unit : 0;
    }
    fclose(f);
    return bytes;
}

static int read_int(const char *path) {
    FILE *f = fopen(path, "r");
    int value = 0;
    if (f) {
        if (fscanf(f, "%d", &value) != 1) value = 0;
        fclose(f);
    }
    return value;
}

int64_t mt_llc_bytes(const char *cpu_dir) {
    char path[4096];
    int best_level = 0;
    int64_t size = 0;
    int sharing = 1;
    for (int i = 0; i < 16; i++) {
        snprintf(path, sizeof path, "%s/cpu0/cache/index%d/level", cpu_dir, i);
        int level = read_int(path);
        if (level <= best_level) continue;
        snprintf(path, sizeof path, "%s/cpu0/cache/index%d/size", cpu_dir, i);
        int64_t bytes = read_size(path);
        if (!bytes) continue;
        snprintf(path, sizeof path, "%s/cpu0/cache/index%d/shared_cpu_list", cpu_dir, i);
        best_level = level, size = bytes, sharing = mt_list_file_count(path);
    }
    snprintf(path, sizeof path, "%s/online", cpu_dir);
    int online = mt_list_file_count(path);
    if (sharing < 1) sharing = 1;
    if (online < sharing) online = sharing;
    return size * ((online + sharing - 1) / sharing); /* one such cache per group of sharing CPUs */
}

/* The sysfs directory of the CPUs (tests point MT_TEST_SYSFS_CPU at a tree of their own). */
static const char *cpu_sysfs_dir(void) {
    const char *dir = getenv("MT_TEST_SYSFS_CPU");
    return dir && dir[0] ? dir : "/sys/devices/system/cpu";
}

/* The probe's arrays (gradient, split masters, moments: 16 bytes a parameter) four times the
 * last-level cache, so that each pass streams from memory as the optimizer does on the store:
 * 8 M parameters (128 MB) at least, 128 M (2 GiB) at most. */
enum { PROBE_ARRAY_BYTES = 16 };
static size_t probe_params(int64_t llc) {
    int64_t want = 4 * llc / PROBE_ARRAY_BYTES, least = (int64_t)8 << 20, most = (int64_t)128 << 20;
    return (size_t)(want < least ? least : want > most ? most : want);
}

/* The last measurement, for the same threads: a process measures once (a probe takes about a
 * second on a large host: touching its arrays, then the passes). */
static struct {
    pthread_mutex_t lock;
    int threads;
    double seconds, params_per_s;
    size_t params;
} measured = {.lock = PTHREAD_MUTEX_INITIALIZER};

static mt_status measure(int threads, double seconds, double *params_per_s, size_t *params);

mt_status mt_host_adamw_rate(int threads, double seconds, double *params_per_s, size_t *params) {
    pthread_mutex_lock(&measured.lock);
    mt_status rc = MT_OK;
    if (measured.threads != threads || measured.seconds < seconds) {
        rc = measure(threads, seconds, &measured.params_per_s, &measured.params);
        if (rc == MT_OK) measured.threads = threads, measured.seconds = seconds;
    }
    if (rc == MT_OK) {
        *params_per_s = measured.params_per_s;
        if (params) *params = measured.params;
    }
    pthread_mutex_unlock(&measured.lock);
    return rc;
}

static mt_status measure(int threads, double seconds, double *params_per_s, size_t *params) {
    size_t n = probe_params(mt_llc_bytes(cpu_sysfs_dir()));
    float *state = mt_pages_alloc(3 * n * sizeof(float), "the host AdamW measurement");
    uint16_t *halves = state ? mt_pages_alloc(2 * n * sizeof(uint16_t), "the host AdamW measurement") : NULL;
    if (!halves) {
        mt_pages_free(state, 3 * n * sizeof(float));
        return MT_ERR_NOMEM;
    }
    float *m = state, *v = state + n, *grad = state + 2 * n;
    mt_master w = {.hi = halves, .lo = halves + n};
    /* Touched by the threads that will update them, as the store's first touch does. */
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) m[i] = v[i] = grad[i] = 0, w.hi[i] = w.lo[i] = 0;
    mt_adamw_params p = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                         .step = 1, .grad_scale = 1.0f};
    /* One untimed pass, then passes until `seconds` and three passes have gone by. */
    mt_adamw_update_parallel(MT_ADAMW_FULL, &p, 1, w, m, v, grad, n, threads);
    double start = mt_now(), elapsed = 0;
    int passes = 0;
    do {
        p.step++;
        mt_adamw_update_parallel(MT_ADAMW_FULL, &p, 1, w, m, v, grad, n, threads);
        passes++;
        elapsed = mt_now() - start;
    } while (elapsed < seconds || passes < 3);
    mt_pages_free(state, 3 * n * sizeof(float));
    mt_pages_free(halves, 2 * n * sizeof(uint16_t));
    *params_per_s = (double)n * passes / elapsed;
    *params = n;
    return MT_OK;
}

/* The optimizer's threads as the engine will choose them (engine_optimizer.c): --opt-threads, one
 * per --opt-cores core (by default with a GPU every core but the first), else all cores but one. */
static int optimizer_threads(const mt_engine_options *eo) {
    mt_cpu_team team;
    if (mt_engine_optimizer_team(eo, &team) != MT_OK) return eo->opt_threads > 0 ? eo->opt_threads : 1;
    free(team.cores);
    return team.threads;
}

/* ---- each rate ---- */

static void gemm_rate(const mt_train_options *o, const mt_device_info *dev, mt_machine_rates *r) {
    const char *model;
    double peak = dev ? mt_gpu_bf16_peak(dev->name, &model) : 0;
    if (o->rate_gemm > 0) {
        r->gemm_flop_per_s = o->rate_gemm * 1e12;
        snprintf(r->gemm_source, sizeof r->gemm_source, "given: --rate-gemm");
    } else if (peak > 0) {
        r->gemm_flop_per_s = peak * MT_GEMM_PEAK_FRACTION;
        snprintf(r->gemm_source, sizeof r->gemm_source, "looked up: %s, %.0f%% of its %.0f TFLOP/s bf16 dense peak",
                 dev->name, MT_GEMM_PEAK_FRACTION * 100, peak / 1e12);
    } else {
        r->gemm_flop_per_s = H200_GEMM_FLOP_PER_S;
        snprintf(r->gemm_source, sizeof r->gemm_source, "assumed: the H200's; %s%s%s: give --rate-gemm",
                 dev ? "no figure for the " : "no GPU in this run", dev ? dev->name : "", dev ? " in the table" : "");
    }
}

static void pcie_rate(const mt_train_options *o, const mt_device_info *dev, mt_machine_rates *r) {
    mt_pcie_link link;
    if (o->rate_pcie > 0) {
        r->pcie_h2d_bytes_per_s = r->pcie_d2h_bytes_per_s = o->rate_pcie * 1e9;
        snprintf(r->pcie_source, sizeof r->pcie_source, "given: --rate-pcie");
    } else if (dev && dev->pcie_h2d_bytes_per_s > 0 && dev->pcie_d2h_bytes_per_s > 0) {
        r->pcie_h2d_bytes_per_s = dev->pcie_h2d_bytes_per_s;
        r->pcie_d2h_bytes_per_s = dev->pcie_d2h_bytes_per_s;
        snprintf(r->pcie_source, sizeof r->pcie_source, "measured: pinned copies to and from the %s", dev->name);
    } else if (mt_pcie_link_read(mt_pcie_sysfs_dir(), dev ? dev->pci_bus_id : NULL, &link) == MT_OK) {
        r->pcie_h2d_bytes_per_s = r->pcie_d2h_bytes_per_s = link.bytes_per_s * MT_PCIE_LINK_FRACTION;
        snprintf(r->pcie_source, sizeof r->pcie_source, "looked up: PCIe %d.0 x%d at %s (sysfs), %.0f%% of its "
                 "%.1f GB/s", link.gen, link.width, link.address, MT_PCIE_LINK_FRACTION * 100, link.bytes_per_s / 1e9);
    } else {
        r->pcie_h2d_bytes_per_s = r->pcie_d2h_bytes_per_s = H200_PCIE_BYTES_PER_S;
        snprintf(r->pcie_source, sizeof r->pcie_source, "assumed: the H200's; no GPU link found: give --rate-pcie");
    }
}

static mt_status adamw_rate(const mt_train_options *o, const mt_engine_options *eo, mt_machine_rates *r) {
    r->adamw_threads = optimizer_threads(eo);
    if (o->rate_adamw > 0) {
        r->adamw_params_per_s = o->rate_adamw * 1e9;
        snprintf(r->adamw_source, sizeof r->adamw_source, "given: --rate-adamw");
    } else {
        size_t params;
        MT_TRY(mt_host_adamw_rate(r->adamw_threads, 0.05, &r->adamw_params_per_s, &params));
        int64_t llc = mt_llc_bytes(cpu_sysfs_dir());
        snprintf(r->adamw_source, sizeof r->adamw_source, "measured: the host AdamW on %d thread%s over %.0f MB, "
                 "past the %.0f MB of last-level cache", r->adamw_threads, r->adamw_threads == 1 ? "" : "s",
                 (double)params * PROBE_ARRAY_BYTES / 1e6, (double)llc / 1e6);
    }
    r->host_bytes_per_s = r->adamw_params_per_s * MT_ADAMW_BYTES_PER_PARAM;
    return MT_OK;
}

mt_status mt_machine_rates_of(const mt_train_options *o, mt_backend *be, const mt_engine_options *eo,
                              mt_machine_rates *rates) {
    memset(rates, 0, sizeof *rates);
    const mt_device_info *dev = mt_backend_device_info(be);
    gemm_rate(o, dev, rates);
    pcie_rate(o, dev, rates);
    return adamw_rate(o, eo, rates);
}

void mt_machine_rates_print(const mt_machine_rates *r, FILE *out) {
    fprintf(out, "rates     GEMM %.0f TFLOP/s (%s)\n", r->gemm_flop_per_s / 1e12, r->gemm_source);
    fprintf(out, "          PCIe %.1f GB/s to the device, %.1f GB/s from it (%s)\n", r->pcie_h2d_bytes_per_s / 1e9,
            r->pcie_d2h_bytes_per_s / 1e9, r->pcie_source);
    fprintf(out, "          host AdamW %.2f G parameters/s = %.0f GB/s of memory traffic (%s)\n",
            r->adamw_params_per_s / 1e9, r->host_bytes_per_s / 1e9, r->adamw_source);
}
