#include "io/file_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "util/fs.h"

/* Adds bytes [at, at + n) of the file to the hash. */
static mt_status hash_range(XXH3_state_t *h, int fd, const char *path, off_t at, size_t n, char *buf, size_t cap) {
    while (n > 0) {
        ssize_t got = pread(fd, buf, n < cap ? n : cap, at);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return mt_fail(MT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (got == 0) return mt_fail(MT_ERR_IO, "%s: ends early (it changed while it was read)", path);
        XXH3_64bits_update(h, buf, (size_t)got);
        at += got;
        n -= (size_t)got;
    }
    return MT_OK;
}

/* The whole file, or its ends and evenly spaced samples between them. */
static mt_status hash_file(int fd, const char *path, long long size, uint64_t *hash, int *whole) {
    enum { BUF = 1 << 16 };
    char *buf = malloc(BUF);
    XXH3_state_t *h = XXH3_createState();
    mt_status st = buf && h ? MT_OK : mt_fail(MT_ERR_NOMEM, "%s: cannot hash it", path);
    if (st == MT_OK) XXH3_64bits_reset(h);
    *whole = size <= MT_IDENTITY_WHOLE_BYTES;
    if (st == MT_OK && *whole) {
        st = hash_range(h, fd, path, 0, (size_t)size, buf, BUF);
    } else if (st == MT_OK) {
        long long end = MT_IDENTITY_END_BYTES, middle = size - 2 * end;
        st = hash_range(h, fd, path, 0, (size_t)end, buf, BUF);
        for (int i = 0; st == MT_OK && i < MT_IDENTITY_SAMPLES; i++) {
            long long at = end + (middle - MT_IDENTITY_SAMPLE_BYTES) / (MT_IDENTITY_SAMPLES - 1) * i;
            st = hash_range(h, fd, path, (off_t)at, MT_IDENTITY_SAMPLE_BYTES, buf, BUF);
        }
        if (st == MT_OK) st = hash_range(h, fd, path, (off_t)(size - end), (size_t)end, buf, BUF);
    }
    if (st == MT_OK) *hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    free(buf);
    return st;
}

mt_status mt_file_identity(const char *path, json_t **identity) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    mt_status rc = fstat(fd, &st) == 0 ? MT_OK : mt_fail(MT_ERR_IO, "%s: %s", path, strerror(errno));
    if (rc == MT_OK && !S_ISREG(st.st_mode))
        rc = mt_fail(MT_ERR_INVALID, "%s: is %s, not a regular file", path, mt_file_kind(st.st_mode));
    uint64_t hash = 0;
    int whole = 0;
    if (rc == MT_OK) rc = hash_file(fd, path, (long long)st.st_size, &hash, &whole);
    close(fd);
    MT_TRY(rc);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, hash);
    json_int_t mtime = (json_int_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    *identity = json_pack("{s:s, s:I, s:I, s:s, s:s}", "path", path, "bytes", (json_int_t)st.st_size, "mtime_ns",
                          mtime, "xxh3", hex, "hashed", whole ? "whole" : "sampled");
    return *identity ? MT_OK : mt_fail(MT_ERR_NOMEM, "%s: cannot build its identity", path);
}

/* "2026-11-24 10:00:01" (local time) of a time in nanoseconds. */
static const char *when(json_int_t ns, char *buf, size_t cap) {
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    if (!localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm)) snprintf(buf, cap, "?");
    return buf;
}

int mt_file_identity_differs(const json_t *stored, const json_t *now, char *why, size_t cap) {
    const json_t *sb = json_object_get(stored, "bytes"), *st = json_object_get(stored, "mtime_ns");
    const char *sh = json_string_value(json_object_get(stored, "xxh3"));
    const char *shashed = json_string_value(json_object_get(stored, "hashed"));
    if (!json_is_integer(sb) || !json_is_integer(st) || !sh || !shashed) {
        snprintf(why, cap, "its stored identity is not readable");
        return 1;
    }
    json_int_t bytes = json_integer_value(sb), now_bytes = json_integer_value(json_object_get(now, "bytes"));
    json_int_t time = json_integer_value(st), now_time = json_integer_value(json_object_get(now, "mtime_ns"));
    const char *hash = json_string_value(json_object_get(now, "xxh3"));
    if (bytes != now_bytes) {
        snprintf(why, cap, "its size was %lld bytes, now %lld", (long long)bytes, (long long)now_bytes);
        return 1;
    }
    if (!hash || strcmp(sh, hash)) {
        snprintf(why, cap, "its contents differ (the same size, %lld bytes; %s)", (long long)bytes,
                 strcmp(shashed, "whole") ? "its first and last MiB and samples between them hashed" : "hashed whole");
        return 1;
    }
    if (time != now_time && strcmp(shashed, "whole")) {
        char a[32], b[32];
        snprintf(why, cap, "it was modified (at %s; the run saw it as of %s), though its size and the bytes hashed "
                 "(its first and last MiB and samples between them) are the same", when(now_time, b, sizeof b),
                 when(time, a, sizeof a));
        return 1;
    }
    return 0;
}
