#include "train/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "util/fs.h"
#include "util/log.h"

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

mt_status mt_run_dir_take(mt_run_dir *d, const char *path, int writes) {
    *d = (mt_run_dir){.lock = {.fd = -1}};
    if (snprintf(d->path, sizeof d->path, "%s", path) >= (int)sizeof d->path)
        return mt_fail(MT_ERR_INVALID, "--out %.64s...: path too long", path);
    if (mt_mkdir_p_noting(path, d->created_from, sizeof d->created_from) != MT_OK)
        return mt_fail_context(MT_ERR_IO, "%s: cannot create the run directory", path);
    if (access(path, W_OK) != 0)
        return mt_fail(MT_ERR_IO, "%s: the run directory is not writable: %s", path, strerror(errno));
    if (!writes) return MT_OK;
    char lock[PATH_MAX + 8], data[PATH_MAX + 8];
    snprintf(lock, sizeof lock, "%s/.lock", path);
    snprintf(data, sizeof data, "%s/data", path);
    d->made_lock = !exists(lock);
    d->had_data = exists(data);
    MT_TRY(mt_run_lock_acquire(path, &d->lock));
    return mt_checkpoint_tidy(path);
}

/* What megatrain writes into a run directory (the lock, metrics.jsonl and its TensorBoard events,
 * loss.svg, run.yaml, the token cache, the checkpoints), and a shell's log of the run. */
static int ours(const char *name) {
    static const char *const names[] = {".", "..", ".lock", "metrics.jsonl", "loss.svg", "run.yaml", "run.yaml.tmp",
                                        "data", NULL};
    for (const char *const *n = names; *n; n++)
        if (!strcmp(name, *n)) return 1;
    size_t n = strlen(name);
    return !strncmp(name, "ckpt-", 5) || !strncmp(name, "events.out.tfevents.", 20) ||
           (n > 4 && !strcmp(name + n - 4, ".log"));
}

mt_status mt_run_dir_check_fresh(const mt_run_dir *d) {
    DIR *dir = opendir(d->path);
    if (!dir) return mt_fail(MT_ERR_IO, "%s: cannot read the run directory: %s", d->path, strerror(errno));
    char others[512] = "";
    size_t at = 0;
    int count = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (ours(e->d_name)) continue;
        if (count++ < 3 && at < sizeof others)
            at += (size_t)snprintf(others + at, sizeof others - at, "%s%s", count > 1 ? ", " : "", e->d_name);
    }
    closedir(dir);
    if (!count) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "--out %s is not empty and not a megatrain run directory (it holds %s%s): a run "
                   "writes its checkpoints, metrics.jsonl and loss.svg there, so give a new or empty directory",
                   d->path, others, count > 3 ? ", ..." : "");
}

int mt_run_dir_is_empty(const mt_run_dir *d) {
    DIR *dir = opendir(d->path);
    int empty = dir != NULL;
    for (struct dirent *e; empty && (e = readdir(dir));)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, ".lock");
    if (dir) closedir(dir);
    return empty;
}

/* Removes a directory tree of regular files and directories (the token cache), not following
 * links. */
static void remove_tree(const char *path) {
    DIR *dir = opendir(path);
    if (dir) {
        char child[PATH_MAX];
        for (struct dirent *e; (e = readdir(dir));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(child);
            else unlink(child);
        }
        closedir(dir);
    }
    rmdir(path);
}

void mt_run_dir_undo(mt_run_dir *d) {
    char path[PATH_MAX + 8];
    if (d->lock.fd >= 0 && !d->had_data) {
        snprintf(path, sizeof path, "%s/data", d->path);
        if (exists(path)) remove_tree(path);
    }
    if (d->lock.fd >= 0 && d->made_lock) {
        snprintf(path, sizeof path, "%s/.lock", d->path);
        unlink(path); /* still held: no other run can have taken it */
    }
    if (!d->created_from[0]) return;
    mt_rmdir_made(d->path, d->created_from);
    if (!exists(d->created_from))
        mt_log_info("%s: removed (the run was refused before it wrote anything)", d->created_from);
}

void mt_run_dir_release(mt_run_dir *d) { mt_run_lock_release(&d->lock); }
