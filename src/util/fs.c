#include "util/fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

mt_status mt_path_absolute(const char *path, char *out, size_t cap) {
    char joined[8192];
    char cwd[4096] = "";
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
        return mt_fail(MT_ERR_IO, "%s: cannot make the path absolute: the working directory: %s", path, strerror(errno));
    if (snprintf(joined, sizeof joined, "%s/%s", cwd, path) >= (int)sizeof joined)
        return mt_fail(MT_ERR_INVALID, "%.64s...: path too long", path);
    /* Component by component into out, which always starts with "/". */
    size_t at = 0;
    for (char *part = strtok(joined, "/"); part; part = strtok(NULL, "/")) {
        if (!strcmp(part, ".")) continue;
        if (!strcmp(part, "..")) {
            while (at > 0 && out[--at] != '/') continue;
            continue;
        }
        size_t n = strlen(part);
        if (at + 1 + n + 1 > cap) return mt_fail(MT_ERR_INVALID, "%.64s...: path too long", path);
        out[at++] = '/';
        memcpy(out + at, part, n);
        at += n;
    }
    if (at == 0) {
        if (cap < 2) return mt_fail(MT_ERR_INVALID, "%s: path too long", path);
        out[at++] = '/';
    }
    out[at] = '\0';
    return MT_OK;
}

mt_status mt_mkdir_p_noting(const char *path, char *made, size_t cap) {
    char probe[4096];
    struct stat st;
    made[0] = '\0';
    snprintf(probe, sizeof probe, "%s", path);
    while (probe[0] && lstat(probe, &st) != 0) {
        snprintf(made, cap, "%s", probe);
        char *slash = strrchr(probe, '/');
        if (!slash || slash == probe) break;
        *slash = '\0';
    }
    return mt_mkdir_p(path);
}

void mt_rmdir_made(const char *path, const char *made) {
    if (!made[0]) return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    size_t outer = strlen(made);
    while (strlen(dir) >= outer && rmdir(dir) == 0) {
        char *slash = strrchr(dir, '/');
        if (!slash || strlen(dir) == outer) break;
        *slash = '\0';
    }
}

const char *mt_file_kind(unsigned mode) {
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISREG(mode)) return "a regular file";
    return "not a regular file";
}
