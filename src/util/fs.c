#include "util/fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

mt_status mt_mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return mt_fail(MT_ERR_INVALID, "%.64s...: path too long", path);
    for (char *p = buf + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0') continue;
        *p = '\0';
        struct stat st;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return mt_fail(MT_ERR_IO, "%s: cannot create the directory: %s", buf, strerror(errno));
        if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
            return mt_fail(MT_ERR_IO, "%s: %s", buf, strerror(ENOTDIR));
        *p = c;
        if (c == '\0') return MT_OK;
    }
}
