#include "util/stop_signal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const int signals[3] = {SIGINT, SIGTERM, SIGHUP};
static volatile sig_atomic_t requested;

/* The temporary paths: written under the lock, read by the handler (a slot is marked used only
 * once its path is complete). */
enum { TEMPS = 256 };
static char temp_path[TEMPS][PATH_MAX];
static char temp_name[TEMPS][256], temp_part[TEMPS][32]; /* a pattern's; "" for a plain path */
static volatile sig_atomic_t temp_used[TEMPS];
static pthread_mutex_t temp_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every entry of the directory whose name starts with `name` and holds `part` ("" and "": all of
 * them, and then the directory itself). Async-signal-safe: open(2), getdents64(2), unlinkat(2),
 * rmdir(2) and string comparisons only. */
static void remove_in_dir(const char *path, const char *name, const char *part) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;
    char buf[4096];
    size_t n_name = strlen(name);
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0) break;
        for (long at = 0; at < n;) {
            struct dirent64 *e = (struct dirent64 *)(buf + at);
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !strncmp(e->d_name, name, n_name) &&
                strstr(e->d_name + n_name, part))
                unlinkat(fd, e->d_name, 0);
            at += e->d_reclen;
        }
    }
    close(fd);
    if (!name[0]) rmdir(path);
}

static void remove_temps(void) {
    for (int i = TEMPS - 1; i >= 0; i--) {
        if (!temp_used[i]) continue;
        if (temp_name[i][0]) remove_in_dir(temp_path[i], temp_name[i], temp_part[i]);
        else if (unlink(temp_path[i]) != 0 && (errno == EISDIR || errno == EPERM)) remove_in_dir(temp_path[i], "", "");
    }
}

static void on_signal(int sig) {
    if (requested) {
        remove_temps();
        _exit(128 + sig);
    }
    requested = sig;
}

void mt_stop_signals_install(mt_stop_signals *saved) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    requested = 0;
    for (int i = 0; i < 3; i++) {
        sigaction(signals[i], NULL, &saved->old[i]);
        /* A signal ignored by whoever started the command stays ignored: nohup's SIGHUP, a
         * background job's SIGINT. */
        if (saved->old[i].sa_handler != SIG_IGN) sigaction(signals[i], &sa, NULL);
    }
}

void mt_stop_signals_restore(const mt_stop_signals *saved) {
    for (int i = 0; i < 3; i++) sigaction(signals[i], &saved->old[i], NULL);
}

int mt_stop_requested(void) { return requested; }

int mt_train_stop_signal(void) { return requested; }

mt_status mt_stop_status(const char *what) {
    int sig = requested;
    return mt_fail(MT_ERR_INTERRUPTED, "stopped on request (signal %d, %s) while %s", sig, strsignal(sig), what);
}

static int add(const char *path, const char *name, const char *part) {
    if (strlen(path) >= PATH_MAX || strlen(name) >= sizeof temp_name[0] || strlen(part) >= sizeof temp_part[0])
        return -1;
    pthread_mutex_lock(&temp_lock);
    /* Above every slot in use: the handler removes from the top down, newest first, so a
     * directory goes after the files made in it. */
    int top = TEMPS - 1;
    while (top >= 0 && !temp_used[top]) top--;
    int slot = top + 1 < TEMPS ? top + 1 : -1;
    if (slot >= 0) {
        memcpy(temp_path[slot], path, strlen(path) + 1);
        memcpy(temp_name[slot], name, strlen(name) + 1);
        memcpy(temp_part[slot], part, strlen(part) + 1);
        temp_used[slot] = 1;
    }
    pthread_mutex_unlock(&temp_lock);
    return slot;
}

int mt_stop_temp_add(const char *path) { return add(path, "", ""); }

int mt_stop_temp_add_matching(const char *dir, const char *name, const char *part) {
    return name[0] ? add(dir, name, part) : -1;
}

void mt_stop_temp_forget(int handle) {
    if (handle < 0 || handle >= TEMPS) return;
    pthread_mutex_lock(&temp_lock);
    temp_used[handle] = 0;
    pthread_mutex_unlock(&temp_lock);
}
