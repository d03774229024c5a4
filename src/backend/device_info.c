#include "backend/device_info.h"

#include <stdio.h>

mt_status mt_device_check_capability(int device, const char *name, int major, int minor) {
    if (major > MT_CUDA_MIN_CC_MAJOR || (major == MT_CUDA_MIN_CC_MAJOR && minor >= MT_CUDA_MIN_CC_MINOR))
        return MT_OK;
    return mt_fail(MT_ERR_DEVICE, "CUDA device %d (%s) has compute capability %d.%d; megatrain needs %d.%d or "
                   "newer (Ampere, Ada, Hopper, Blackwell): its kernels and GEMMs use bf16 tensor cores, "
                   "which older GPUs lack (--backend cpu runs without one)", device, name && name[0] ? name : "unnamed",
                   major, minor, MT_CUDA_MIN_CC_MAJOR, MT_CUDA_MIN_CC_MINOR);
}

const char *mt_device_info_text(const mt_device_info *d, char *buf, size_t cap) {
    char link[64] = "";
    if (d->pcie_gen > 0 && d->pcie_width > 0) snprintf(link, sizeof link, " gen %d x%d", d->pcie_gen, d->pcie_width);
    snprintf(buf, cap, "%s (compute capability %d.%d, %d SMs, %.1f GiB, PCIe %s%s: %.1f GB/s to the device, "
             "%.1f GB/s from it)", d->name, d->cc_major, d->cc_minor, d->sm_count,
             (double)d->memory_bytes / 1073741824.0, d->pci_bus_id[0] ? d->pci_bus_id : "(bus unknown)", link,
             d->pcie_h2d_bytes_per_s / 1e9, d->pcie_d2h_bytes_per_s / 1e9);
    return buf;
}
