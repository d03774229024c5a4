/* What the CUDA backend learns about its GPU at start (backend/device_info.h): name, compute
 * capability, memory and PCI address from the runtime, the link's generation and lanes from sysfs,
 * and the PCIe rates from timed pinned copies each way. */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "util/pcie_link.h"

/* Copies long enough that launch latency is a few percent of them; the best of a few. */
enum { PROBE_BYTES = 64 << 20, PROBE_REPEATS = 3 };

mt_status mt_cuda_probe_device(int device, mt_device_info *info) {
    memset(info, 0, sizeof *info);
    struct cudaDeviceProp prop;
    MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->sm_count = prop.multiProcessorCount;
    info->memory_bytes = (int64_t)prop.totalGlobalMem;
    if (cudaDeviceGetPCIBusId(info->pci_bus_id, sizeof info->pci_bus_id, device) != cudaSuccess) {
        cudaGetLastError();
        info->pci_bus_id[0] = '\0';
    }
    mt_pcie_link link;
    if (info->pci_bus_id[0] && mt_pcie_link_read(mt_pcie_sysfs_dir(), info->pci_bus_id, &link) == MT_OK) {
        info->pcie_gen = link.gen;
        info->pcie_width = link.width;
    }
    return MT_OK;
}

/* The best of PROBE_REPEATS timed copies of `bytes` from src to dst on s, after one untimed. */
static mt_status time_copy(cudaStream_t s, cudaEvent_t start, cudaEvent_t end, void *dst, const void *src,
                           size_t bytes, double *bytes_per_s) {
    float best = 0;
    for (int i = 0; i <= PROBE_REPEATS; i++) {
        MT_CUDA_CHECK(cudaEventRecord(start, s));
        MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
        MT_CUDA_CHECK(cudaEventRecord(end, s));
        MT_CUDA_CHECK(cudaEventSynchronize(end));
        float ms;
        MT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
        if (i > 0 && ms > 0 && (best == 0 || ms < best)) best = ms;
    }
    *bytes_per_s = best > 0 ? bytes / (best * 1e-3) : 0;
    return MT_OK;
}

static mt_status measure(cudaStream_t s, cudaEvent_t start, cudaEvent_t end, void *host, void *dev,
                         mt_device_info *info) {
    MT_TRY(time_copy(s, start, end, dev, host, PROBE_BYTES, &info->pcie_h2d_bytes_per_s));
    return time_copy(s, start, end, host, dev, PROBE_BYTES, &info->pcie_d2h_bytes_per_s);
}

mt_status mt_cuda_measure_pcie(mt_device_info *info) {
    void *host = NULL, *dev = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t start = NULL, end = NULL;
    cudaError_t err = cudaHostAlloc(&host, PROBE_BYTES, cudaHostAllocDefault);
    if (err == cudaSuccess) err = cudaMalloc(&dev, PROBE_BYTES);
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = cudaEventCreate(&start);
    if (err == cudaSuccess) err = cudaEventCreate(&end);
    mt_status status = err == cudaSuccess ? MT_OK
                       : mt_fail(MT_ERR_DEVICE, "cannot set up the PCIe measurement (%d MiB pinned and on the "
                                 "device): %s", PROBE_BYTES >> 20, cudaGetErrorString(err));
    if (status == MT_OK) {
        memset(host, 0, PROBE_BYTES);
        status = measure(s, start, end, host, dev, info);
    }
    if (end) cudaEventDestroy(end);
    if (start) cudaEventDestroy(start);
    if (s) cudaStreamDestroy(s);
    if (dev) cudaFree(dev);
    if (host) cudaFreeHost(host);
    cudaGetLastError();
    return status;
}
