/* Small filesystem helpers shared by the library. */
#ifndef MT_UTIL_FS_H
#define MT_UTIL_FS_H

#include "util/status.h"

/* Creates `path` and any missing parents (mkdir -p); fails naming the component that could not
 * be made. */
mt_status mt_mkdir_p(const char *path);

#endif
