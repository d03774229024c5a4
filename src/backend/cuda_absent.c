/* Without CUDA (make CUDA=0), the cuda backend's constructor exists and says so. */
#ifndef MT_WITH_CUDA
#include "backend/backend.h"

mt_status mt_backend_cuda_create(mt_backend **out, int device) {
    *out = NULL;
    return mt_fail(MT_ERR_DEVICE, "megatrain was built without CUDA (make CUDA=1)");
}
#endif
