/* The element types the layers compute in, shared by every layer of the code: the backends
 * (their activation and weight types), the optimizer (the working weights it writes), the host
 * store and the engine. */
#ifndef MT_UTIL_DTYPE_H
#define MT_UTIL_DTYPE_H

#include <stddef.h>

typedef enum { MT_DTYPE_F32, MT_DTYPE_BF16 } mt_dtype;

static inline size_t mt_dtype_size(mt_dtype t) { return t == MT_DTYPE_F32 ? 4 : 2; }

#endif
