#include "util/pcie_link.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NVIDIA_VENDOR 0x10de
#define PCI_CLASS_DISPLAY 0x03 /* the class's top byte: VGA, 3D controller, ... */

const char *mt_pcie_sysfs_dir(void) {
    const char *fake = getenv("MT_TEST_SYSFS_PCI");
    return fake && fake[0] ? fake : "/sys/bus/pci/devices";
}

double mt_pcie_bytes_per_s(double gt_per_s, int width) {
    double coding = gt_per_s == 2.5 || gt_per_s == 5 ? 8.0 / 10 : gt_per_s == 8 || gt_per_s == 16 || gt_per_s == 32
                    ? 128.0 / 130 : gt_per_s == 64 ? 242.0 / 256 : 0;
    return width > 0 ? gt_per_s * 1e9 * coding * width / 8 : 0;
}

static int gen_of(double gt_per_s) {
    static const double speeds[] = {2.5, 5, 8, 16, 32, 64};
    for (int i = 0; i < 6; i++)
        if (gt_per_s == speeds[i]) return i + 1;
    return 0;
}

/* The first line of dir/file, or NULL (left in line[cap]). */
static const char *read_line(const char *dir, const char *file, char *line, size_t cap) {
    char path[PATH_MAX + 64];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) return NULL;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    const char *got = fgets(line, (int)cap, f);
    fclose(f);
    if (got) line[strcspn(line, "\n")] = '\0';
    return got;
}

static long read_hex(const char *dir, const char *file) {
    char line[64];
    if (!read_line(dir, file, line, sizeof line)) return -1;
    char *end;
    long v = strtol(line, &end, 16);
    return end == line ? -1 : v;
}

/* max_link_speed ("16.0 GT/s PCIe", "8 GT/s") and max_link_width ("16") of dir: 0 when absent or
 * not a speed PCIe has. */
static void link_caps(const char *dir, double *gt_per_s, int *width) {
    char line[64];
    *gt_per_s = 0;
    *width = 0;
    if (read_line(dir, "max_link_speed", line, sizeof line)) {
        char *end;
        double v = strtod(line, &end);
        if (end != line && gen_of(v)) *gt_per_s = v;
    }
    if (read_line(dir, "max_link_width", line, sizeof line)) {
        char *end;
        long v = strtol(line, &end, 10);
        if (end != line && v > 0 && v <= 32) *width = (int)v;
    }
}

static int is_nvidia_gpu(const char *dir) {
    long vendor = read_hex(dir, "vendor"), class = read_hex(dir, "class");
    return vendor == NVIDIA_VENDOR && class >= 0 && (class >> 16) == PCI_CLASS_DISPLAY;
}

/* The first NVIDIA GPU under devices_dir by address, into address[cap]. */
static mt_status first_nvidia_gpu(const char *devices_dir, char *address, size_t cap) {
    DIR *d = opendir(devices_dir);
    if (!d) return mt_fail(MT_ERR_IO, "%s: cannot list PCI devices", devices_dir);
    address[0] = '\0';
    struct dirent *e;
    char dir[PATH_MAX];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= cap) continue;
        if (snprintf(dir, sizeof dir, "%s/%s", devices_dir, e->d_name) >= (int)sizeof dir) continue; /* no such path */
        if (is_nvidia_gpu(dir) && (!address[0] || strcmp(e->d_name, address) < 0))
            memcpy(address, e->d_name, strlen(e->d_name) + 1); /* shorter than cap: checked above */
    }
    closedir(d);
    return address[0] ? MT_OK : mt_fail(MT_ERR_IO, "no NVIDIA GPU among the PCI devices of %s", devices_dir);
}

mt_status mt_pcie_link_read(const char *devices_dir, const char *address, mt_pcie_link *link) {
    memset(link, 0, sizeof *link);
    if (address) {
        /* CUDA writes the hex digits upper case, sysfs lower case. */
        size_t i = 0;
        for (; address[i] && i + 1 < sizeof link->address; i++) link->address[i] = (char)tolower((unsigned char)address[i]);
        link->address[i] = '\0';
    } else {
        MT_TRY(first_nvidia_gpu(devices_dir, link->address, sizeof link->address));
    }
    char dir[PATH_MAX], real[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", devices_dir, link->address) >= (int)sizeof dir)
        return mt_fail(MT_ERR_INVALID, "%s/%s: the path is too long", devices_dir, link->address);
    double gt, port_gt;
    int width, port_width;
    link_caps(dir, &gt, &width);
    if (!gt || !width)
        return mt_fail(MT_ERR_IO, "%s: no PCIe link speed and width (max_link_speed, max_link_width)", dir);
    /* The port above the device (its parent in the device tree) caps what the device could do. */
    if (realpath(dir, real)) {
        char *slash = strrchr(real, '/');
        if (slash) *slash = '\0';
        link_caps(real, &port_gt, &port_width);
        if (port_gt && port_gt < gt) gt = port_gt;
        if (port_width && port_width < width) width = port_width;
    }
    link->gt_per_s = gt;
    link->gen = gen_of(gt);
    link->width = width;
    link->bytes_per_s = mt_pcie_bytes_per_s(gt, width);
    return MT_OK;
}
