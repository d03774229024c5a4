/* A GPU's PCIe link as Linux's sysfs describes it (/sys/bus/pci/devices/<address>/): its
 * generation and lanes, and what it carries. GPUs drop their link to a slower speed when idle,
 * so the link's capability is read, not its current state: the least of the device's
 * max_link_speed/max_link_width and those of the port above it (the slot). */
#ifndef MT_UTIL_PCIE_LINK_H
#define MT_UTIL_PCIE_LINK_H

#include <stddef.h>

#include "util/status.h"

typedef struct {
    char address[32];     /* "0000:01:00.0" */
    double gt_per_s;      /* per lane: 2.5, 5, 8, 16, 32 or 64 */
    int gen;              /* 1 to 6, from gt_per_s */
    int width;            /* lanes */
    double bytes_per_s;   /* each way, after line coding, before protocol overhead */
} mt_pcie_link;

/* The sysfs directory of PCI devices, /sys/bus/pci/devices; MT_TEST_SYSFS_PCI replaces it (tests
 * give a fake tree). */
const char *mt_pcie_sysfs_dir(void);

/* The link of the device at `address` ("0000:1B:00.0", any case) under `devices_dir`, or with
 * address NULL of the first NVIDIA display or 3D controller there (by address). MT_ERR_IO
 * when there is none or its link files are missing or unreadable (the message says which). */
mt_status mt_pcie_link_read(const char *devices_dir, const char *address, mt_pcie_link *link);

/* Bytes a second one way of `width` lanes at `gt_per_s` per lane, after line coding (8b/10b up
 * to 5 GT/s, 128b/130b to 32 GT/s, FLIT at 64 GT/s); 0 for a speed PCIe does not have. */
double mt_pcie_bytes_per_s(double gt_per_s, int width);

#endif
