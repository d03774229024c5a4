#include "train/run_lock.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define LOCK_FILE ".lock"

/* The pid of the process holding a flock on fd's file, from /proc/locks (Linux), or 0. Nothing
 * is written into the lock file, so a run that is refused, or fails, changes nothing there. */
static long holder_pid(int fd) {
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "r") : NULL;
    if (!f) return 0;
    char line[256], kind[16];
    long pid, found = 0;
    unsigned major, minor;
    unsigned long inode;
    while (!found && fgets(line, sizeof line, f))
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", kind, &pid, &major, &minor, &inode) == 5 &&
            !strcmp(kind, "FLOCK") && inode == (unsigned long)st.st_ino && major == major(st.st_dev) &&
            minor == minor(st.st_dev))
            found = pid;
    fclose(f);
    return found;
}

mt_status mt_run_lock_acquire(const char *run_dir, mt_run_lock *lock) {
    char path[PATH_MAX];
    lock->fd = -1;
    if (snprintf(path, sizeof path, "%s/%s", run_dir, LOCK_FILE) >= (int)sizeof path)
        return mt_fail(MT_ERR_INVALID, "%s: run directory path too long", run_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open the run's lock file: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        long pid = holder_pid(fd);
        close(fd);
        if (err != EWOULDBLOCK)
            return mt_fail(MT_ERR_IO, "%s: cannot lock the run directory: %s", path, strerror(err));
        char holder[48] = "";
        if (pid > 0) snprintf(holder, sizeof holder, " (pid %ld)", pid);
        return mt_fail(MT_ERR_IO, "%s is in use by another megatrain run%s: wait for it to end, or choose "
                       "another --out", run_dir, holder);
    }
    lock->fd = fd;
    return MT_OK;
}

void mt_run_lock_release(mt_run_lock *lock) {
    if (lock->fd >= 0) close(lock->fd); /* closing the last descriptor drops the flock */
    lock->fd = -1;
}
