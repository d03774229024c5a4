#include "tokenizer/shard_prefix.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"
#include "util/stop_signal.h"

/* The digits of a name "<base>_<digits>.bin<rest>" after `base`: 1 and *rest set when it is one. */
static int shard_name(const char *name, const char *base, const char **rest) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) || name[n] != '_' || !isdigit((unsigned char)name[n + 1])) return 0;
    const char *at = name + n + 1;
    while (isdigit((unsigned char)*at)) at++;
    if (strncmp(at, ".bin", 4)) return 0;
    *rest = at + 4;
    return 1;
}

/* The directories claim made, from the outermost (p->made) to p->dir, each registered before the one
 * inside it: the stop handler removes the newest first, so each goes once what is in it has. */
static void register_made(mt_shard_prefix *p) {
    size_t at = strlen(p->made);
    if (!at) return;
    while (p->n_dir_temps < MT_SHARD_DIR_TEMPS) {
        char level[PATH_MAX];
        snprintf(level, sizeof level, "%.*s", (int)at, p->dir);
        p->dir_temps[p->n_dir_temps++] = mt_stop_temp_add(level);
        if (!p->dir[at]) break;
        const char *next = strchr(p->dir + at + 1, '/');
        at = next ? (size_t)(next - p->dir) : strlen(p->dir);
    }
}

mt_status mt_shard_prefix_claim(const char *prefix, mt_shard_prefix *p) {
    *p = (mt_shard_prefix){.temps = -1};
    const char *slash = strrchr(prefix, '/'), *base = slash ? slash + 1 : prefix;
    if (!base[0]) return mt_fail(MT_ERR_INVALID, "--out %s: the prefix names a directory, not shards in it", prefix);
    if (slash == prefix) snprintf(p->dir, sizeof p->dir, "/");
    else if (slash) snprintf(p->dir, sizeof p->dir, "%.*s", (int)(slash - prefix), prefix);
    else snprintf(p->dir, sizeof p->dir, ".");
    if (slash && slash != prefix) MT_TRY(mt_mkdir_p_noting(p->dir, p->made, sizeof p->made));
    DIR *d = opendir(p->dir);
    if (!d) return mt_fail(MT_ERR_IO, "%s: cannot read the directory: %s", p->dir, strerror(errno));
    char found[NAME_MAX + 1] = "", path[PATH_MAX + NAME_MAX + 2];
    for (struct dirent *e; (e = readdir(d));) {
        const char *rest;
        if (!shard_name(e->d_name, base, &rest)) continue;
        if (!rest[0] && !found[0]) snprintf(found, sizeof found, "%s", e->d_name);
        if (!strncmp(rest, ".tmp", 4)) {
            snprintf(path, sizeof path, "%s/%s", p->dir, e->d_name);
            if (unlink(path) == 0) mt_log_info("%s: removed, a temporary shard an interrupted tokenize left", path);
        }
    }
    closedir(d);
    if (found[0]) {
        mt_shard_prefix_release(p, 1);
        return mt_fail(MT_ERR_INVALID, "%s/%s already exists: an earlier tokenize's shards would mix with these; "
                       "remove all of %s_*.bin or choose another output prefix", p->dir, found, prefix);
    }
    register_made(p);
    char name[NAME_MAX + 2];
    snprintf(name, sizeof name, "%s_", base);
    p->temps = mt_stop_temp_add_matching(p->dir, name, ".bin.tmp");
    return MT_OK;
}

void mt_shard_prefix_release(mt_shard_prefix *p, int failed) {
    mt_stop_temp_forget(p->temps);
    p->temps = -1;
    for (int i = p->n_dir_temps - 1; i >= 0; i--) mt_stop_temp_forget(p->dir_temps[i]);
    p->n_dir_temps = 0;
    if (failed) mt_rmdir_made(p->dir, p->made);
}
