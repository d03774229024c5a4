/* The planner's machine: the CUDA backend's compute-capability check (a pure function, so that a
 * GPU older than 8.0 is refused in a test without one), the table of GPUs' bf16 peaks, the PCIe
 * link read from a fake sysfs tree, the host AdamW's measured rate, and `plan` naming where each
 * rate came from. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/device_info.h"
#include "cli_run.h"
#include "hf_test_files.h"
#include "train/machine_rates.h"
#include "util/pcie_link.h"

#define TIMEOUT_S 60.0

Test(machine_rates, capability_below_8_0_is_refused_naming_the_gpu_and_why) {
    static const struct {
        int major, minor;
    } refused[] = {{7, 5}, {7, 0}, {6, 1}, {3, 5}, {0, 0}}, accepted[] = {{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}, {12, 1}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        cr_assert_eq(mt_device_check_capability(1, "Tesla T4", refused[i].major, refused[i].minor), MT_ERR_DEVICE,
                     "%d.%d was accepted", refused[i].major, refused[i].minor);
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", refused[i].major, refused[i].minor);
        cr_assert_not_null(strstr(mt_error(), "Tesla T4"), "%s", mt_error());
        cr_assert_not_null(strstr(mt_error(), "CUDA device 1"), "%s", mt_error());
        cr_assert_not_null(strstr(mt_error(), cc), "the message lacks %s: %s", cc, mt_error());
        cr_assert_not_null(strstr(mt_error(), "8.0"), "%s", mt_error());
        cr_assert_not_null(strstr(mt_error(), "bf16 tensor cores"), "%s", mt_error());
    }
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++)
        cr_assert_eq(mt_device_check_capability(0, "x", accepted[i].major, accepted[i].minor), MT_OK, "%d.%d: %s",
                     accepted[i].major, accepted[i].minor, mt_error());
    cr_assert_eq(mt_device_check_capability(0, "", 7, 5), MT_ERR_DEVICE);
    cr_assert_not_null(strstr(mt_error(), "unnamed"), "%s", mt_error());
}

Test(machine_rates, device_info_text_names_everything) {
    mt_device_info d = {.name = "NVIDIA H200", .cc_major = 9, .cc_minor = 0, .sm_count = 132,
                        .memory_bytes = (int64_t)140 << 30, .pci_bus_id = "0000:1B:00.0", .pcie_gen = 5,
                        .pcie_width = 16, .pcie_h2d_bytes_per_s = 53.1e9, .pcie_d2h_bytes_per_s = 54.9e9};
    char text[512];
    mt_device_info_text(&d, text, sizeof text);
    cr_assert_str_eq(text, "NVIDIA H200 (compute capability 9.0, 132 SMs, 140.0 GiB, PCIe 0000:1B:00.0 gen 5 x16: "
                     "53.1 GB/s to the device, 54.9 GB/s from it)");
}

/* The model each CUDA device name finds, and its peak in TFLOP/s; NULL: none. */
static void expect_peak(const char *name, const char *model, double tflops) {
    const char *found = "(unset)";
    double peak = mt_gpu_bf16_peak(name, &found);
    if (!model) {
        cr_assert_eq(peak, 0, "%s matched %s", name, found);
        cr_assert_null(found);
        return;
    }
    cr_assert_not_null(found, "%s matched nothing", name);
    cr_assert_str_eq(found, model, "%s", name);
    cr_assert_float_eq(peak, tflops * 1e12, 1e6, "%s: %g", name, peak);
}

Test(machine_rates, gpu_table_matches_whole_words_and_the_longest_name) {
    expect_peak("NVIDIA H100 80GB HBM3", "H100", 989.4);
    expect_peak("NVIDIA H100 PCIe", "H100 PCIe", 756.5);
    expect_peak("NVIDIA H200", "H200", 989.4);
    expect_peak("NVIDIA GH200 480GB", "GH200", 989.4);
    expect_peak("NVIDIA A100-SXM4-80GB", "A100", 312);
    expect_peak("NVIDIA A100 80GB PCIe", "A100", 312);
    expect_peak("NVIDIA A10", "A10", 125);
    expect_peak("NVIDIA L4", "L4", 121);
    expect_peak("NVIDIA L40S", "L40S", 362);
    expect_peak("NVIDIA GeForce RTX 3080", "RTX 3080", 59.5);
    expect_peak("NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti", 68.2);
    expect_peak("NVIDIA GeForce RTX 3090", "RTX 3090", 71);
    expect_peak("NVIDIA GeForce RTX 4090", "RTX 4090", 165.2);
    expect_peak("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER", 104.4);
    expect_peak("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 364.2);
    expect_peak("NVIDIA B200", "B200", 2250);
    expect_peak("NVIDIA GeForce RTX 5090", "RTX 5090", 209.5);
    expect_peak("Tesla T4", NULL, 0);
    expect_peak("NVIDIA GeForce RTX 40900", NULL, 0);
    expect_peak("NVIDIA XH100", NULL, 0);
    expect_peak("", NULL, 0);
    expect_peak(NULL, NULL, 0);
}

/* ---- PCIe from sysfs ---- */

static char root[PATH_MAX];

static void write_file(const char *dir, const char *name, const char *text) {
    char path[PATH_MAX];
    hf_test_write_text(hf_test_path(path, dir, name), text);
}

/* A device directory under the root's device tree, with its vendor, class and link files (NULL:
 * none), linked from root/devices/<address> as sysfs links /sys/bus/pci/devices. */
static void fake_device(const char *tree_path, const char *address, const char *vendor, const char *class,
                        const char *speed, const char *width) {
    char dir[2 * PATH_MAX], link[2 * PATH_MAX], cmd[5 * PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tree/%s", root, tree_path);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/devices'", dir, root);
    cr_assert_eq(system(cmd), 0);
    if (vendor) write_file(dir, "vendor", vendor);
    if (class) write_file(dir, "class", class);
    if (speed) write_file(dir, "max_link_speed", speed);
    if (width) write_file(dir, "max_link_width", width);
    if (address) {
        snprintf(link, sizeof link, "%s/devices/%s", root, address);
        cr_assert_eq(symlink(dir, link), 0, "symlink %s", link);
    }
}

static void make_tree(void) {
    hf_test_mkdtemp(root);
    /* A gen 5 root port, a gen 4 x16 GPU and its audio function below it, an Intel NIC. */
    fake_device("pci0000:00/0000:00:01.0", "0000:00:01.0", "0x8086\n", "0x060400\n", "32.0 GT/s PCIe\n", "16\n");
    fake_device("pci0000:00/0000:00:01.0/0000:01:00.0", "0000:01:00.0", "0x10de\n", "0x030000\n", "16.0 GT/s PCIe\n",
                "16\n");
    fake_device("pci0000:00/0000:00:01.0/0000:01:00.1", "0000:01:00.1", "0x10de\n", "0x040300\n", "16.0 GT/s PCIe\n",
                "16\n");
    fake_device("pci0000:00/0000:00:02.0", "0000:00:02.0", "0x8086\n", "0x020000\n", "8.0 GT/s PCIe\n", "4\n");
}

static void remove_tree(void) { hf_test_rmtree(root); }

static const char *devices(void) {
    static char dir[PATH_MAX];
    return hf_test_path(dir, root, "devices");
}

TestSuite(pcie_sysfs, .init = make_tree, .fini = remove_tree);

Test(pcie_sysfs, the_nvidia_gpu_and_its_link) {
    mt_pcie_link link;
    cr_assert_eq(mt_pcie_link_read(devices(), NULL, &link), MT_OK, "%s", mt_error());
    cr_assert_str_eq(link.address, "0000:01:00.0");
    cr_assert_eq(link.gen, 4);
    cr_assert_eq(link.width, 16);
    cr_assert_float_eq(link.bytes_per_s, 16e9 * 128 / 130 * 16 / 8, 1, "%g", link.bytes_per_s);
    /* CUDA's upper-case address finds the same device. */
    cr_assert_eq(mt_pcie_link_read(devices(), "0000:01:00.0", &link), MT_OK, "%s", mt_error());
    cr_assert_eq(link.gen, 4);
}

Test(pcie_sysfs, the_slot_caps_the_link) {
    /* A gen 4 x16 card in a gen 3 x8 slot runs at gen 3 x8. */
    fake_device("pci0000:00/0000:00:03.0", NULL, "0x8086\n", "0x060400\n", "8.0 GT/s PCIe\n", "8\n");
    fake_device("pci0000:00/0000:00:03.0/0000:02:00.0", "0000:02:00.0", "0x10de\n", "0x030200\n", "16.0 GT/s PCIe\n",
                "16\n");
    mt_pcie_link link;
    cr_assert_eq(mt_pcie_link_read(devices(), "0000:02:00.0", &link), MT_OK, "%s", mt_error());
    cr_assert_eq(link.gen, 3);
    cr_assert_eq(link.width, 8);
    cr_assert_float_eq(link.bytes_per_s, 8e9 * 128 / 130 * 8 / 8, 1);
    /* The first NVIDIA GPU by address is still the one at 01:00.0. */
    cr_assert_eq(mt_pcie_link_read(devices(), NULL, &link), MT_OK, "%s", mt_error());
    cr_assert_str_eq(link.address, "0000:01:00.0");
}

Test(pcie_sysfs, missing_or_malformed_link_files_are_an_error) {
    fake_device("pci0000:00/0000:03:00.0", "0000:03:00.0", "0x10de\n", "0x030000\n", NULL, "16\n");
    fake_device("pci0000:00/0000:04:00.0", "0000:04:00.0", "0x10de\n", "0x030000\n", "fast\n", "16\n");
    fake_device("pci0000:00/0000:05:00.0", "0000:05:00.0", "0x10de\n", "0x030000\n", "3.0 GT/s PCIe\n", "16\n");
    fake_device("pci0000:00/0000:06:00.0", "0000:06:00.0", "0x10de\n", "0x030000\n", "16.0 GT/s PCIe\n", "0\n");
    static const char *const bad[] = {"0000:03:00.0", "0000:04:00.0", "0000:05:00.0", "0000:06:00.0", "0000:09:00.0"};
    mt_pcie_link link;
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(mt_pcie_link_read(devices(), bad[i], &link), MT_ERR_IO, "%s was read", bad[i]);
        cr_assert_not_null(strstr(mt_error(), bad[i]), "%s", mt_error());
        cr_assert_not_null(strstr(mt_error(), "max_link_speed"), "%s", mt_error());
    }
}

Test(pcie_sysfs, no_nvidia_gpu) {
    char dir[PATH_MAX];
    hf_test_path(dir, root, "empty");
    mkdir(dir, 0755);
    mt_pcie_link link;
    cr_assert_eq(mt_pcie_link_read(dir, NULL, &link), MT_ERR_IO);
    cr_assert_not_null(strstr(mt_error(), "no NVIDIA GPU"), "%s", mt_error());
    hf_test_path(dir, root, "absent");
    cr_assert_eq(mt_pcie_link_read(dir, NULL, &link), MT_ERR_IO);
    cr_assert_not_null(strstr(mt_error(), dir), "%s", mt_error());
}

Test(machine_rates, pcie_line_coding) {
    cr_assert_float_eq(mt_pcie_bytes_per_s(2.5, 1), 0.25e9, 1);
    cr_assert_float_eq(mt_pcie_bytes_per_s(5, 16), 8e9, 1);
    cr_assert_float_eq(mt_pcie_bytes_per_s(32, 16), 32e9 * 128 / 130 * 2, 1);
    cr_assert_float_eq(mt_pcie_bytes_per_s(64, 16), 64e9 * 242 / 256 * 2, 1);
    cr_assert_eq(mt_pcie_bytes_per_s(3, 16), 0);
    cr_assert_eq(mt_pcie_bytes_per_s(16, 0), 0);
}

Test(machine_rates, host_adamw_rate_is_measured) {
    double rate = 0;
    size_t params = 0;
    cr_assert_eq(mt_host_adamw_rate(1, 0.01, &rate, &params), MT_OK, "%s", mt_error());
    cr_assert(isfinite(rate) && rate > 0, "%g parameters/s", rate);
    /* Its arrays (16 bytes a parameter) are four times the last-level cache, within 128 MB and 2 GiB. */
    int64_t llc = mt_llc_bytes("/sys/devices/system/cpu"), want = 4 * llc / 16;
    if (want < (8 << 20)) want = 8 << 20;
    if (want > (128 << 20)) want = 128 << 20;
    cr_assert_eq((int64_t)params, want, "%zu parameters for %lld bytes of cache", params, (long long)llc);
}

/* The last-level cache from a CPU sysfs tree: the highest level of cpu0's caches, times the
 * groups of CPUs that share one (an L3 per 8 of 16 CPUs here: two). */
Test(pcie_sysfs, last_level_cache_from_sysfs) {
    char cpu[PATH_MAX], dir[PATH_MAX + 64], cmd[3 * PATH_MAX];
    hf_test_path(cpu, root, "cpu");
    static const struct { int index, level; const char *size, *shared; } caches[] = {
        {0, 1, "48K\n", "0,8\n"}, {2, 2, "2048K\n", "0,8\n"}, {3, 3, "32768K\n", "0-7\n"}};
    for (int i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/cpu0/cache/index%d", cpu, caches[i].index);
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        cr_assert_eq(system(cmd), 0);
        char level[8];
        snprintf(level, sizeof level, "%d\n", caches[i].level);
        write_file(dir, "level", level);
        write_file(dir, "size", caches[i].size);
        write_file(dir, "shared_cpu_list", caches[i].shared);
    }
    write_file(cpu, "online", "0-15\n");
    cr_assert_eq(mt_llc_bytes(cpu), (int64_t)2 * 32 << 20);
    write_file(cpu, "online", "0-7\n");
    cr_assert_eq(mt_llc_bytes(cpu), (int64_t)32 << 20);
    cr_assert_eq(mt_llc_bytes(root), 0, "no CPU tree: nothing known");
}

/* ---- plan names each rate's source ---- */

static void expect_line(const char *out, const char *text) {
    cr_assert_not_null(strstr(out, text), "no '%s' in:\n%s", text, out);
}

Test(pcie_sysfs, plan_prints_the_rates_and_where_they_came_from) {
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3.2-1b", "--backend", "cpu", "--rate-gemm", "165",
               "--rate-pcie", "25", "--rate-adamw", "1.5", NULL);
    cr_assert_eq(r.exit_code, 0, "stderr:\n%s", r.err);
    expect_line(r.out, "rates     GEMM 165 TFLOP/s (given: --rate-gemm)");
    expect_line(r.out, "PCIe 25.0 GB/s to the device, 25.0 GB/s from it (given: --rate-pcie)");
    expect_line(r.out, "host AdamW 1.50 G parameters/s = 42 GB/s of memory traffic (given: --rate-adamw)");
    expect_line(r.out, "FLOP / 165 TFLOP/s");
    expect_line(r.out, "at 25.0 GB/s, out");
    expect_line(r.out, "over 42 GB/s host memory");
    mt_cli_result_free(&r);

    /* Nothing given, no GPU in the run: the PCIe link of the (fake) machine's NVIDIA GPU, the
     * host AdamW measured, and the GEMM rate assumed, saying how to give it. */
    setenv("MT_TEST_SYSFS_PCI", devices(), 1);
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3.2-1b", "--backend", "cpu", "--opt-threads", "1", NULL);
    unsetenv("MT_TEST_SYSFS_PCI");
    cr_assert_eq(r.exit_code, 0, "stderr:\n%s", r.err);
    expect_line(r.out, "rates     GEMM 700 TFLOP/s (assumed: the H200's; no GPU in this run: give --rate-gemm)");
    expect_line(r.out, "PCIe 25.2 GB/s to the device, 25.2 GB/s from it (looked up: PCIe 4.0 x16 at 0000:01:00.0 "
                "(sysfs), 80% of its 31.5 GB/s)");
    expect_line(r.out, "(measured: the host AdamW on 1 thread over ");
    expect_line(r.out, "past the ");
    mt_cli_result_free(&r);
}

/* Without a GPU, plan --backend cuda --gpu-mem sizes the run for a CUDA GPU of that memory: bf16
 * weights, the device's own memory; without --gpu-mem there is nothing to plan for. */
Test(machine_rates, plan_for_a_gpu_elsewhere) {
    mt_backend *probe;
    if (mt_backend_cuda_create(&probe, 0) == MT_OK) {
        mt_backend_destroy(probe);
        cr_skip_test("a GPU is here: plan --backend cuda plans with it");
    }
    mt_cli_result r;
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3.2-1b", "--backend", "cuda", "--gpu-mem", "10GiB",
               "--rate-gemm", "42", "--rate-pcie", "25", "--rate-adamw", "1.5", NULL);
    cr_assert_eq(r.exit_code, 0, "stderr:\n%s", r.err);
    expect_line(r.out, "cuda (a model of the GPU: none here) backend");
    expect_line(r.out, "budget    10.00 GiB: 2 weight slots");
    expect_line(r.out, "device needs");
    expect_line(r.out, "10.74 GB available");
    /* Clipping (the default), a step that clips: the masters after the norm (20), then the moments (20). */
    expect_line(r.out, "optimizer 40 bytes/parameter");
    expect_line(r.out, "with clipping, 20 of them once the norm is known");
    expect_line(r.out, "fp32 master: high halves (the bf16 weights)");
    expect_line(r.err, "planning for a CUDA GPU of --gpu-mem");
    mt_cli_result_free(&r);
    mt_cli_run(&r, TIMEOUT_S, "plan", "--preset", "llama-3.2-1b", "--backend", "cuda", NULL);
    cr_assert_eq(r.exit_code, 1, "stderr:\n%s", r.err);
    expect_line(r.err, "give --gpu-mem to plan for a GPU of that memory elsewhere");
    mt_cli_result_free(&r);
}
