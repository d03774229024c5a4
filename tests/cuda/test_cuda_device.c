/* What the CUDA backend found at start (backend/device_info.h) is sane for the GPU it runs on,
 * and the planner's rates use it: the PCIe rates measured, the GEMM rate looked up for a GPU the
 * table knows. Run with --verbose for the figures. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <string.h>

#include "backend/device_info.h"
#include "train/machine_rates.h"

Test(cuda, device_info_is_sane) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "cuda backend: %s", mt_error());
    const mt_device_info *d = mt_backend_device_info(be);
    cr_assert_not_null(d, "the cuda backend reports no device");
    char text[512];
    cr_log_info("%s", mt_device_info_text(d, text, sizeof text));
    cr_assert(d->name[0], "no name");
    cr_assert_geq(d->cc_major, 8, "compute capability %d.%d", d->cc_major, d->cc_minor);
    cr_assert_gt(d->sm_count, 0);
    cr_assert_gt(d->memory_bytes, 0);
    cr_assert_geq((size_t)d->memory_bytes, mt_dev_available(be), "more memory free than there is");
    unsigned domain, bus, dev, fn;
    cr_assert_eq(sscanf(d->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn), 4, "PCI bus id '%s'", d->pci_bus_id);
    cr_assert(d->pcie_h2d_bytes_per_s > 1e9 && d->pcie_h2d_bytes_per_s < 200e9, "to the device: %g B/s",
              d->pcie_h2d_bytes_per_s);
    cr_assert(d->pcie_d2h_bytes_per_s > 1e9 && d->pcie_d2h_bytes_per_s < 200e9, "from the device: %g B/s",
              d->pcie_d2h_bytes_per_s);
    mt_backend_destroy(be);
}

Test(cuda, planner_rates_from_the_device) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cuda_create(&be, 0), MT_OK, "cuda backend: %s", mt_error());
    const mt_device_info *d = mt_backend_device_info(be);
    mt_train_options o = mt_train_defaults();
    mt_engine_options eo = mt_engine_defaults();
    o.rate_adamw = 1; /* not what this test is about */
    mt_machine_rates r;
    cr_assert_eq(mt_machine_rates_of(&o, be, &eo, &r), MT_OK, "%s", mt_error());
    cr_log_info("GEMM %.0f TFLOP/s (%s); PCIe %.1f / %.1f GB/s (%s)", r.gemm_flop_per_s / 1e12, r.gemm_source,
                r.pcie_h2d_bytes_per_s / 1e9, r.pcie_d2h_bytes_per_s / 1e9, r.pcie_source);
    cr_assert_eq(r.pcie_h2d_bytes_per_s, d->pcie_h2d_bytes_per_s);
    cr_assert_eq(r.pcie_d2h_bytes_per_s, d->pcie_d2h_bytes_per_s);
    cr_assert_eq(strncmp(r.pcie_source, "measured", 8), 0, "%s", r.pcie_source);
    if (mt_gpu_bf16_peak(d->name, NULL) > 0)
        cr_assert_eq(strncmp(r.gemm_source, "looked up", 9), 0, "%s", r.gemm_source);
    /* The lent machines' GPUs are in the table. */
    if (strstr(d->name, "H100") || strstr(d->name, "H200"))
        cr_assert_gt(mt_gpu_bf16_peak(d->name, NULL), 700e12, "%s", d->name);
    mt_backend_destroy(be);
}
