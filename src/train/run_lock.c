#include "train/run_lock.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define LOCK_FILE ".lock"

/* The pid the holder wrote into the lock file, or 0 when it cannot be read. */
static long holder_pid(int fd) {
    char text[32] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) return 0;
    text[n] = '\0';
    return strtol(text, NULL, 10);
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
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    /* The pid is a courtesy for the message above; the lock itself is the flock. */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) { /* nothing to undo */ }
    lock->fd = fd;
    return MT_OK;
}

void mt_run_lock_release(mt_run_lock *lock) {
    if (lock->fd >= 0) close(lock->fd); /* closing the last descriptor drops the flock */
    lock->fd = -1;
}
