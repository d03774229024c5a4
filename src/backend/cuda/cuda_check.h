/* One check macro per device library. Each evaluates `expr` once and, when it fails, records
 * the failed expression, the library's own message, the source file and the line with mt_fail
 * and returns MT_ERR_DEVICE from the enclosing function (which returns mt_status). */
#ifndef MT_BACKEND_CUDA_CHECK_H
#define MT_BACKEND_CUDA_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime.h>

/* status.h is a C header: the .cu files see its functions with C linkage. */
#ifdef __cplusplus
extern "C" {
#endif
#include "util/status.h"
#ifdef __cplusplus
}
#endif

#define MT_CUDA_CHECK(expr)                                                                 \
    do {                                                                                    \
        cudaError_t mt_cuda_err_ = (expr);                                                  \
        if (mt_cuda_err_ != cudaSuccess)                                                    \
            return mt_fail(MT_ERR_DEVICE, "%s failed: %s (%s:%d)", #expr,                   \
                           cudaGetErrorString(mt_cuda_err_), __FILE__, __LINE__);           \
    } while (0)

#define MT_CUBLAS_CHECK(expr)                                                               \
    do {                                                                                    \
        cublasStatus_t mt_cublas_err_ = (expr);                                             \
        if (mt_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                        \
            return mt_fail(MT_ERR_DEVICE, "%s failed: %s (%s:%d)", #expr,                   \
                           cublasLtGetStatusString(mt_cublas_err_), __FILE__, __LINE__);    \
    } while (0)

#endif
