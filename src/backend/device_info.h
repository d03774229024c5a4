/* What a GPU backend found at start: the device's name, compute capability, memory and the PCIe
 * link it measured, for the start-up log line and the planner's rates (train/machine_rates.h).
 * A backend without a device of its own (cpu) has none: mt_backend_device_info returns NULL. */
#ifndef MT_BACKEND_DEVICE_INFO_H
#define MT_BACKEND_DEVICE_INFO_H

#include <stdint.h>

#include "util/status.h"

typedef struct mt_device_info {
    char name[256];        /* "NVIDIA H200", "NVIDIA GeForce RTX 4090" */
    int cc_major, cc_minor; /* compute capability */
    int sm_count;
    int64_t memory_bytes;  /* total device memory */
    char pci_bus_id[32];   /* "0000:1B:00.0" */
    int pcie_gen, pcie_width; /* the link's generation and lanes as the host reports them; 0: unknown */
    /* Pinned host-to-device and device-to-host copy rates measured at start (bytes/s). */
    double pcie_h2d_bytes_per_s, pcie_d2h_bytes_per_s;
} mt_device_info;

/* The oldest compute capability the CUDA backend runs on: 8.0 (Ampere), the first with bf16
 * tensor cores, which every GEMM and the attention use. */
#define MT_CUDA_MIN_CC_MAJOR 8
#define MT_CUDA_MIN_CC_MINOR 0

/* MT_OK for a GPU of compute capability major.minor >= 8.0; below it MT_ERR_DEVICE with a
 * message naming the GPU, its capability and why (no bf16 tensor cores). `device` is the CUDA
 * device index, for the message. */
mt_status mt_device_check_capability(int device, const char *name, int major, int minor);

/* "NVIDIA H200 (compute capability 9.0, 132 SMs, 139.8 GiB, PCIe 0000:1B:00.0 gen 5 x16:
 * 53.1 GB/s to the device, 54.9 GB/s from it)", into buf. */
const char *mt_device_info_text(const mt_device_info *info, char *buf, size_t cap);

#endif
