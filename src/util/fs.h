/* Small filesystem helpers shared by the library. */
#ifndef MT_UTIL_FS_H
#define MT_UTIL_FS_H

#include <stddef.h>

#include "util/status.h"

/* Creates `path` and any missing parents (mkdir -p); fails naming the component that could not
 * be made. */
mt_status mt_mkdir_p(const char *path);

/* mt_mkdir_p, noting in made[cap] the outermost directory it created ("" when none), so that a
 * command that fails can take back what it made (mt_rmdir_made). */
mt_status mt_mkdir_p_noting(const char *path, char *made, size_t cap);
/* Removes `path` and its parents up to `made` (from mt_mkdir_p_noting), each only when empty. */
void mt_rmdir_made(const char *path, const char *made);

/* "a FIFO (named pipe)", "a directory", "a character device", ...: what a file that is not a
 * regular one is, from its st_mode. */
const char *mt_file_kind(unsigned mode);

/* `path` made absolute against the working directory, lexically ("." and empty components
 * dropped, ".." taking off the component before it; symlinks are not resolved, so the path stays
 * the one the user named) into out[cap]. */
mt_status mt_path_absolute(const char *path, char *out, size_t cap);

#endif
