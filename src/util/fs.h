/* Small filesystem helpers shared by the library. */
#ifndef MT_UTIL_FS_H
#define MT_UTIL_FS_H

#include <stddef.h>

#include "util/status.h"

/* Creates `path` and any missing parents (mkdir -p); fails naming the component that could not
 * be made. */
mt_status mt_mkdir_p(const char *path);

/* `path` made absolute against the working directory, lexically ("." and empty components
 * dropped, ".." taking off the component before it; symlinks are not resolved, so the path stays
 * the one the user named) into out[cap]. */
mt_status mt_path_absolute(const char *path, char *out, size_t cap);

#endif
