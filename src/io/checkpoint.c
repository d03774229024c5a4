#include "io/checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "util/log.h"

#define CKPT_FORMAT "megatrain-checkpoint"
#define CKPT_VERSION 2
#define MANIFEST "manifest.json"
#define BLOB_VERSION 1
/* The manifest's last member, its own checksum: XXH64 of every byte of the file before it. */
#define SEAL_HEAD ",\n \"manifest_xxh64\": \""
#define SEAL_TAIL "\"\n}\n"
#define SEAL_BYTES (sizeof SEAL_HEAD - 1 + 16 + sizeof SEAL_TAIL - 1)
#define MANIFEST_MAX_BYTES (64 << 20)
/* A directory on its way out: renamed to "<name>.deleting-XXXXXX" before its files go. */
#define DELETING ".deleting-"
typedef struct {
    char magic[8];          /* "MTCKBLOB" */
    uint32_t version;
    uint32_t header_bytes;  /* sizeof(blob_header): the payload starts here */
    uint64_t payload_bytes;
} blob_header;
_Static_assert(sizeof(blob_header) == 24, "blob header has no padding");

static const char blob_magic[8] = {'M', 'T', 'C', 'K', 'B', 'L', 'O', 'B'};

/* path = a + "/" + b, failing when it does not fit. */
static mt_status join(char *path, const char *a, const char *b) {
    if (snprintf(path, PATH_MAX, "%s/%s", a, b) >= PATH_MAX)
        return mt_fail(MT_ERR_INVALID, "%s/%s: path too long", a, b);
    return MT_OK;
}

static bool valid_blob_name(const char *name) {
    if (!name[0] || name[0] == '.' || strlen(name) > 200) return false;
    for (const char *c = name; *c; c++)
        if (!(isalnum((unsigned char)*c) || *c == '_' || *c == '-' || *c == '.')) return false;
    return true;
}

static mt_status blob_path(char *path, const char *dir, const char *name) {
    char file[256];
    snprintf(file, sizeof file, "%s.bin", name);
    return join(path, dir, file);
}

/* ---- writing ---- */

static mt_status write_all(int fd, const void *data, size_t bytes, const char *path) {
    const char *p = data;
    while (bytes > 0) {
        /* Linux moves at most ~2 GiB per write call. */
        ssize_t n = write(fd, p, bytes < (1u << 30) ? bytes : (1u << 30));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return mt_fail(MT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        p += n;
        bytes -= (size_t)n;
    }
    return MT_OK;
}

static mt_status read_all(int fd, void *dst, size_t bytes, const char *path) {
    char *p = dst;
    while (bytes > 0) {
        ssize_t n = read(fd, p, bytes < (1u << 30) ? bytes : (1u << 30));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return mt_fail(MT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (n == 0) return mt_fail(MT_ERR_INVALID, "%s: ends early", path);
        p += n;
        bytes -= (size_t)n;
    }
    return MT_OK;
}

static mt_status fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return mt_fail(MT_ERR_IO, "%s: fsync of directory failed: %s", path, strerror(err));
    return MT_OK;
}

/* Deletes a flat directory's files (a checkpoint has no subdirectories), then the directory. */
static mt_status remove_files_and_dir(const char *dir) {
    char path[PATH_MAX];
    DIR *d = opendir(dir);
    if (!d) return mt_fail(MT_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    mt_status st = MT_OK;
    for (struct dirent *e; st == MT_OK && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        st = join(path, dir, e->d_name);
        if (st == MT_OK && unlink(path) != 0)
            st = mt_fail(MT_ERR_IO, "%s: cannot delete: %s", path, strerror(errno));
    }
    closedir(d);
    if (st == MT_OK && rmdir(dir) != 0)
        st = mt_fail(MT_ERR_IO, "%s: cannot delete directory: %s", dir, strerror(errno));
    return st;
}

static void parent_of(char *parent, const char *path);

/* Deletes a checkpoint directory. It is first renamed (durably) to "<dir>.deleting-XXXXXX": the
 * name is the proof that a deletion cut short by a crash leaves, and the only thing that lets
 * tidying remove a checkpoint directory that is not a temporary one of ours. */
static mt_status remove_checkpoint_dir(const char *dir) {
    char doomed[PATH_MAX], parent[PATH_MAX];
    if (snprintf(doomed, sizeof doomed, "%s%sXXXXXX", dir, DELETING) >= (int)sizeof doomed)
        return mt_fail(MT_ERR_INVALID, "%s: path too long", dir);
    /* rename(2) replaces an empty directory: mkdtemp reserves the unique name. */
    if (!mkdtemp(doomed)) return mt_fail(MT_ERR_IO, "%s: cannot name it for deletion: %s", dir, strerror(errno));
    if (rename(dir, doomed) != 0) {
        int err = errno;
        rmdir(doomed);
        return mt_fail(MT_ERR_IO, "%s: cannot move it aside for deletion: %s", dir, strerror(err));
    }
    parent_of(parent, dir);
    MT_TRY(fsync_dir(parent));
    return remove_files_and_dir(doomed);
}

/* Makes `fd` durable and closes it (closed either way). */
static mt_status sync_close(int fd, const char *path) {
    mt_status st = MT_OK;
    if (fsync(fd) != 0) st = mt_fail(MT_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == MT_OK) st = mt_fail(MT_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    return st;
}

/* The manifest's text, sealed: the object as jansson writes it (sorted, indented), with the
 * checksum of the text before it added as its last member. */
static char *sealed_manifest(json_t *manifest) {
    char *text = json_dumps(manifest, JSON_INDENT(1) | JSON_SORT_KEYS);
    size_t n = text ? strlen(text) : 0;
    if (n < 2 || strcmp(text + n - 2, "\n}")) { /* an object of members, written on lines */
        free(text);
        return NULL;
    }
    n -= 2;
    char *sealed = malloc(n + SEAL_BYTES + 1);
    if (sealed) {
        memcpy(sealed, text, n);
        snprintf(sealed + n, SEAL_BYTES + 1, SEAL_HEAD "%016llx" SEAL_TAIL, (unsigned long long)XXH64(text, n, 0));
    }
    free(text);
    return sealed;
}

/* Writes `manifest` sealed as `path` (which must not exist), durably. */
static mt_status write_manifest_file(const char *path, json_t *manifest) {
    char *text = sealed_manifest(manifest);
    if (!text) return mt_fail(MT_ERR_NOMEM, "%s: cannot serialize the manifest", path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    mt_status st = fd < 0 ? mt_fail(MT_ERR_IO, "%s: cannot create: %s", path, strerror(errno)) : MT_OK;
    if (st == MT_OK) st = write_all(fd, text, strlen(text), path);
    if (fd >= 0) {
        mt_status closed = sync_close(fd, path);
        if (st == MT_OK) st = closed;
    }
    free(text);
    return st;
}

static mt_status write_manifest(const char *tmp, json_t *manifest) {
    char path[PATH_MAX];
    MT_TRY(join(path, tmp, MANIFEST));
    return write_manifest_file(path, manifest);
}

static mt_status check_names(const char *dir, const mt_ckpt_blob_size *blobs, int count) {
    for (int i = 0; i < count; i++) {
        if (!blobs[i].name || !valid_blob_name(blobs[i].name))
            return mt_fail(MT_ERR_INVALID, "%s: bad blob name '%s' (use letters, digits, _ - .)",
                           dir, blobs[i].name ? blobs[i].name : "(null)");
        for (int j = 0; j < i; j++)
            if (!strcmp(blobs[i].name, blobs[j].name))
                return mt_fail(MT_ERR_INVALID, "%s: blob name '%s' given twice", dir, blobs[i].name);
    }
    return MT_OK;
}

static void parent_of(char *parent, const char *path) {
    snprintf(parent, PATH_MAX, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, PATH_MAX, ".");
    else if (slash == parent) slash[1] = '\0';
    else *slash = '\0';
}

/* Moves the finished temp dir to `dir`. An existing `dir` goes aside first (rename onto an empty
 * directory made by mkdtemp) and is deleted once the new one is in place. */
static mt_status install(const char *tmp, const char *dir) {
    char aside[PATH_MAX] = "", manifest[PATH_MAX];
    struct stat st;
    MT_TRY(join(manifest, dir, MANIFEST));
    if (lstat(dir, &st) == 0 && (!S_ISDIR(st.st_mode) || access(manifest, F_OK) != 0))
        return mt_fail(MT_ERR_IO, "%s exists and is not a complete checkpoint (no manifest): it is left alone; "
                       "move it away to save this step", dir);
    if (lstat(dir, &st) == 0) {
        if (snprintf(aside, sizeof aside, "%s.old-XXXXXX", dir) >= (int)sizeof aside || !mkdtemp(aside))
            return mt_fail(MT_ERR_IO, "%s: cannot make a directory to move the old checkpoint "
                           "aside: %s", dir, strerror(errno));
        if (rename(dir, aside) != 0) {
            int err = errno;
            rmdir(aside);
            return mt_fail(MT_ERR_IO, "%s: cannot move the old checkpoint aside: %s", dir,
                           strerror(err));
        }
    }
    if (rename(tmp, dir) != 0) {
        int err = errno;
        if (aside[0]) rename(aside, dir);  /* put the old one back */
        return mt_fail(MT_ERR_IO, "%s: cannot rename %s into place: %s", dir, tmp, strerror(err));
    }
    char parent[PATH_MAX];
    parent_of(parent, dir);
    MT_TRY(fsync_dir(parent));
    /* The new checkpoint is in place: a leftover old one is untidy, not a failed write. */
    if (aside[0] && remove_files_and_dir(aside) != MT_OK) mt_log_warn("%s", mt_error());
    return MT_OK;
}

/* ---- the streaming writer ---- */

typedef struct {
    char name[256], path[PATH_MAX];
    int fd;                /* -1 once closed */
    size_t bytes, written;
    XXH64_state_t *hash;
} blob_file;

struct mt_ckpt_writer {
    char dir[PATH_MAX], tmp[PATH_MAX];
    int count;
    blob_file *blobs;      /* [count] */
};

/* Closes what is open, deletes the temp dir (gone already once installed), frees w. */
static void discard(mt_ckpt_writer *w) {
    for (int i = 0; i < w->count; i++) {
        if (w->blobs[i].fd >= 0) close(w->blobs[i].fd);
        XXH64_freeState(w->blobs[i].hash);
    }
    if (w->tmp[0] && access(w->tmp, F_OK) == 0) remove_files_and_dir(w->tmp);
    free(w->blobs);
    free(w);
}

/* Every failure of the writer: the message names the checkpoint, and the writer is gone. */
static mt_status fail_writer(mt_ckpt_writer *w, mt_status st) {
    char why[1024], dir[PATH_MAX];
    snprintf(why, sizeof why, "%s", mt_error());
    snprintf(dir, sizeof dir, "%s", w->dir);
    discard(w);
    return mt_fail(st, "writing checkpoint %s: %s", dir, why);
}

/* Creates blob file b with its header; its payload follows by appends. */
static mt_status open_blob(mt_ckpt_writer *w, blob_file *b) {
    char file[256 + 8];
    snprintf(file, sizeof file, "%s.bin", b->name);
    MT_TRY(join(b->path, w->tmp, file));
    b->hash = XXH64_createState();
    if (!b->hash) return mt_fail(MT_ERR_NOMEM, "%s: cannot allocate a checksum state", b->path);
    XXH64_reset(b->hash, 0);
    b->fd = open(b->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (b->fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot create: %s", b->path, strerror(errno));
    blob_header h = {.version = BLOB_VERSION, .header_bytes = sizeof h, .payload_bytes = b->bytes};
    memcpy(h.magic, blob_magic, sizeof h.magic);
    return write_all(b->fd, &h, sizeof h, b->path);
}

mt_status mt_checkpoint_begin(mt_ckpt_writer **out, const char *dir, const mt_ckpt_blob_size *blobs,
                              int count) {
    *out = NULL;
    MT_TRY(check_names(dir, blobs, count));
    mt_ckpt_writer *w = calloc(1, sizeof *w);
    blob_file *files = calloc((size_t)count + 1, sizeof *files);
    if (!w || !files) {
        free(w);
        free(files);
        return mt_fail(MT_ERR_NOMEM, "%s: cannot start a checkpoint write", dir);
    }
    w->blobs = files;
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    for (int i = 0; i < count; i++) {
        snprintf(files[i].name, sizeof files[i].name, "%s", blobs[i].name);
        files[i].bytes = blobs[i].bytes;
        files[i].fd = -1;
    }
    if (snprintf(w->tmp, sizeof w->tmp, "%s.tmp-XXXXXX", dir) >= (int)sizeof w->tmp) {
        w->tmp[0] = '\0';
        return fail_writer(w, mt_fail(MT_ERR_INVALID, "checkpoint path too long"));
    }
    if (!mkdtemp(w->tmp)) {
        w->tmp[0] = '\0';
        return fail_writer(w, mt_fail(MT_ERR_IO, "cannot create the temporary checkpoint directory: %s",
                                      strerror(errno)));
    }
    for (; w->count < count; w->count++) {
        mt_status st = open_blob(w, &files[w->count]);
        if (st != MT_OK) {
            w->count++; /* discard closes this one too */
            return fail_writer(w, st);
        }
    }
    *out = w;
    return MT_OK;
}

mt_status mt_checkpoint_append(mt_ckpt_writer *w, int blob, const void *data, size_t bytes) {
    blob_file *b = &w->blobs[blob];
    if (bytes > b->bytes - b->written)
        return fail_writer(w, mt_fail(MT_ERR_INVALID, "%s: %zu more bytes than the %zu declared", b->path,
                                      b->written + bytes - b->bytes, b->bytes));
    mt_status st = write_all(b->fd, data, bytes, b->path);
    if (st != MT_OK) return fail_writer(w, st);
    XXH64_update(b->hash, data, bytes);
    b->written += bytes;
    return MT_OK;
}

/* Each blob complete and durable, listed with its checksum. */
static mt_status close_blobs(mt_ckpt_writer *w, json_t *list) {
    for (int i = 0; i < w->count; i++) {
        blob_file *b = &w->blobs[i];
        if (b->written != b->bytes)
            return mt_fail(MT_ERR_INVALID, "%s: %zu bytes written of the %zu declared", b->path, b->written,
                           b->bytes);
        int fd = b->fd;
        b->fd = -1;
        MT_TRY(sync_close(fd, b->path));
        char hash[17], file[256 + 8];
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)XXH64_digest(b->hash));
        snprintf(file, sizeof file, "%s.bin", b->name);
        json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:s}", "name", b->name, "file", file, "bytes",
                                              (json_int_t)b->bytes, "xxh64", hash));
    }
    return MT_OK;
}

mt_status mt_checkpoint_finish(mt_ckpt_writer *w, const json_t *meta) {
    json_t *list = json_array();
    json_t *meta_ref = meta ? json_incref((json_t *)meta) : json_object();
    json_t *manifest = json_pack("{s:s, s:i, s:o, s:o}", "format", CKPT_FORMAT, "version", CKPT_VERSION,
                                 "meta", meta_ref, "blobs", list);
    mt_status st = manifest ? MT_OK : mt_fail(MT_ERR_NOMEM, "%s: cannot build the manifest", w->tmp);
    if (st == MT_OK) st = close_blobs(w, list);
    if (st == MT_OK) st = write_manifest(w->tmp, manifest);
    if (st == MT_OK) st = fsync_dir(w->tmp);
    if (st == MT_OK) st = install(w->tmp, w->dir);
    json_decref(manifest);
    if (st != MT_OK) return fail_writer(w, st);
    discard(w);
    return MT_OK;
}

void mt_checkpoint_abandon(mt_ckpt_writer *w) { discard(w); }

mt_status mt_checkpoint_write(const char *dir, const mt_ckpt_blob *blobs, int count,
                              const json_t *meta) {
    mt_ckpt_blob_size sizes[count > 0 ? count : 1];
    memset(sizes, 0, sizeof sizes);
    for (int i = 0; i < count; i++) sizes[i] = (mt_ckpt_blob_size){blobs[i].name, blobs[i].bytes};
    mt_ckpt_writer *w;
    MT_TRY(mt_checkpoint_begin(&w, dir, sizes, count));
    for (int i = 0; i < count; i++) MT_TRY(mt_checkpoint_append(w, i, blobs[i].data, blobs[i].bytes));
    return mt_checkpoint_finish(w, meta);
}

/* ---- reading ---- */

/* Reads a whole manifest file (at most MANIFEST_MAX_BYTES) into a NUL-terminated buffer. */
static mt_status read_manifest_text(const char *path, char **text, size_t *bytes) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return mt_fail(MT_ERR_INVALID, "%s: missing (the checkpoint is incomplete or not a checkpoint)", path);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    mt_status rc = fstat(fd, &st) == 0 ? MT_OK : mt_fail(MT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (rc == MT_OK && (!S_ISREG(st.st_mode) || st.st_size > MANIFEST_MAX_BYTES))
        rc = mt_fail(MT_ERR_INVALID, "%s: not a manifest (not a regular file of at most %d bytes)", path,
                     MANIFEST_MAX_BYTES);
    char *buf = rc == MT_OK ? malloc((size_t)st.st_size + 1) : NULL;
    if (rc == MT_OK && !buf) rc = mt_fail(MT_ERR_NOMEM, "%s: cannot allocate %lld bytes", path, (long long)st.st_size);
    if (rc == MT_OK) rc = read_all(fd, buf, (size_t)st.st_size, path);
    close(fd);
    if (rc != MT_OK) {
        free(buf);
        return rc;
    }
    buf[st.st_size] = '\0';
    *text = buf;
    *bytes = (size_t)st.st_size;
    return MT_OK;
}

/* 1 when the text ends with a seal whose checksum is that of the text before it. */
static int seal_holds(const char *text, size_t n, int *sealed) {
    *sealed = 0;
    if (n < SEAL_BYTES) return 0;
    const char *seal = text + n - SEAL_BYTES, *hex = seal + sizeof SEAL_HEAD - 1;
    if (memcmp(seal, SEAL_HEAD, sizeof SEAL_HEAD - 1) || strcmp(hex + 16, SEAL_TAIL)) return 0;
    char digits[17];
    memcpy(digits, hex, 16);
    digits[16] = '\0';
    char *end;
    unsigned long long listed = strtoull(digits, &end, 16);
    if (*end || !isxdigit((unsigned char)digits[0])) return 0;
    *sealed = 1;
    return listed == XXH64(text, n - SEAL_BYTES, 0);
}

static mt_status load_manifest(const char *dir, json_t **manifest) {
    char path[PATH_MAX], *text = NULL;
    size_t n = 0;
    MT_TRY(join(path, dir, MANIFEST));
    MT_TRY(read_manifest_text(path, &text, &n));
    int sealed;
    int holds = seal_holds(text, n, &sealed);
    json_error_t err;
    json_t *m = json_loadb(text, n, 0, &err);
    free(text);
    json_int_t version = m ? json_integer_value(json_object_get(m, "version")) : 0;
    const char *format = m ? json_string_value(json_object_get(m, "format")) : NULL;
    mt_status st = MT_OK;
    if (holds && !m)
        st = mt_fail(MT_ERR_INVALID, "%s: line %d: %s", path, err.line, err.text);
    else if (!holds && format && !strcmp(format, CKPT_FORMAT) && version == 1)
        st = mt_fail(MT_ERR_INVALID, "%s: written by an earlier megatrain (manifest version 1, whose own fields "
                     "carry no checksum): not trusted; use that version with it, or start a new run", path);
    else if (!holds)
        st = mt_fail(MT_ERR_INVALID, "%s: %s: the manifest is corrupt or cut short", path,
                     sealed ? "its checksum does not match its contents" : "it does not end with its own checksum");
    else if (!format || strcmp(format, CKPT_FORMAT) || version != CKPT_VERSION)
        st = mt_fail(MT_ERR_INVALID, "%s: not a %s version %d manifest", path, CKPT_FORMAT, CKPT_VERSION);
    if (st != MT_OK) {
        json_decref(m);
        return st;
    }
    *manifest = m;
    return MT_OK;
}

/* The manifest's record of blob `name`: its size and checksum. */
static mt_status find_blob(const char *dir, const char *name, uint64_t *bytes, uint64_t *hash) {
    json_t *manifest;
    MT_TRY(load_manifest(dir, &manifest));
    json_t *entry;
    size_t i;
    mt_status st = mt_fail(MT_ERR_INVALID, "%s/%s: no blob named '%s'", dir, MANIFEST, name);
    json_array_foreach(json_object_get(manifest, "blobs"), i, entry) {
        const char *entry_name = "", *hex = "";
        json_int_t size = -1;
        json_unpack(entry, "{s?s, s?I, s?s}", "name", &entry_name, "bytes", &size, "xxh64", &hex);
        if (strcmp(entry_name, name)) continue;
        char *end;
        *hash = strtoull(hex, &end, 16);
        *bytes = (uint64_t)size;
        st = size < 0 || *end || !hex[0]
                 ? mt_fail(MT_ERR_INVALID, "%s/%s: malformed entry for blob '%s'", dir, MANIFEST, name)
                 : MT_OK;
        break;
    }
    json_decref(manifest);
    return st;
}

/* Header and file size checks; leaves fd at the payload. */
static mt_status check_blob_file(int fd, const char *path, size_t bytes) {
    struct stat st;
    MT_CHECK_IO(fstat(fd, &st), path);
    blob_header h;
    if ((size_t)st.st_size < sizeof h)
        return mt_fail(MT_ERR_INVALID, "%s: truncated: %lld bytes, shorter than its header", path,
                       (long long)st.st_size);
    MT_TRY(read_all(fd, &h, sizeof h, path));
    if (memcmp(h.magic, blob_magic, sizeof h.magic) || h.version != BLOB_VERSION ||
        h.header_bytes != sizeof h)
        return mt_fail(MT_ERR_INVALID, "%s: not a version %d checkpoint blob (bad header)", path,
                       BLOB_VERSION);
    if (h.payload_bytes != bytes)
        return mt_fail(MT_ERR_INVALID, "%s: holds %" PRIu64 " bytes, expected %zu", path,
                       h.payload_bytes, bytes);
    if ((uint64_t)st.st_size != sizeof h + h.payload_bytes)
        return mt_fail(MT_ERR_INVALID, "%s: truncated or padded: file is %lld bytes, its header "
                       "promises %" PRIu64, path, (long long)st.st_size, sizeof h + h.payload_bytes);
    return MT_OK;
}

static mt_status read_blob_file(int fd, const char *path, void *dst, size_t bytes) {
    MT_TRY(check_blob_file(fd, path, bytes));
    return read_all(fd, dst, bytes, path);
}

/* The checksum of the payload that follows fd's position, read in pieces. */
static mt_status hash_payload(int fd, const char *path, size_t bytes, uint64_t *hash) {
    enum { PIECE = 1 << 22 };
    XXH64_state_t *state = XXH64_createState();
    char *piece = malloc(PIECE);
    mt_status st = state && piece ? MT_OK : mt_fail(MT_ERR_NOMEM, "%s: cannot allocate a read buffer", path);
    if (st == MT_OK) XXH64_reset(state, 0);
    while (st == MT_OK && bytes > 0) {
        size_t n = bytes < PIECE ? bytes : PIECE;
        st = read_all(fd, piece, n, path);
        if (st == MT_OK) XXH64_update(state, piece, n);
        bytes -= n;
    }
    if (st == MT_OK) *hash = XXH64_digest(state);
    XXH64_freeState(state);
    free(piece);
    return st;
}

/* Blob `name` of checkpoint dir opened for reading (*fd), once the manifest lists it at `bytes`
 * bytes; its path into path[PATH_MAX] and its listed hash into *hash. */
static mt_status open_listed(const char *dir, const char *name, size_t bytes, char *path, int *fd, uint64_t *hash) {
    if (!valid_blob_name(name)) return mt_fail(MT_ERR_INVALID, "%s: bad blob name '%s'", dir, name);
    MT_TRY(blob_path(path, dir, name));
    uint64_t listed_bytes = 0;
    MT_TRY(find_blob(dir, name, &listed_bytes, hash));
    if (listed_bytes != bytes)
        return mt_fail(MT_ERR_INVALID, "%s: the manifest lists %" PRIu64 " bytes, expected %zu", path, listed_bytes, bytes);
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return MT_OK;
}

mt_status mt_checkpoint_read(const char *dir, const char *name, void *dst, size_t bytes) {
    char path[PATH_MAX];
    int fd;
    uint64_t listed_hash = 0;
    MT_TRY(open_listed(dir, name, bytes, path, &fd, &listed_hash));
    mt_status st = read_blob_file(fd, path, dst, bytes);
    close(fd);
    MT_TRY(st);
    if (XXH64(dst, bytes, 0) != listed_hash)
        return mt_fail(MT_ERR_INVALID, "%s: checksum mismatch: the file is corrupt", path);
    return MT_OK;
}

mt_status mt_checkpoint_read_pieces(const char *dir, const char *name, size_t bytes, void *buf, size_t piece,
                                    mt_ckpt_sink sink, void *user) {
    char path[PATH_MAX];
    int fd;
    uint64_t listed_hash = 0;
    MT_TRY(open_listed(dir, name, bytes, path, &fd, &listed_hash));
    XXH64_state_t *state = XXH64_createState();
    mt_status st = state ? check_blob_file(fd, path, bytes) : mt_fail(MT_ERR_NOMEM, "%s: cannot hash", path);
    if (st == MT_OK) XXH64_reset(state, 0);
    for (size_t at = 0; st == MT_OK && at < bytes;) {
        size_t n = bytes - at < piece ? bytes - at : piece;
        st = read_all(fd, buf, n, path);
        if (st == MT_OK) XXH64_update(state, buf, n);
        if (st == MT_OK) st = sink(user, at, buf, n);
        at += n;
    }
    if (st == MT_OK && XXH64_digest(state) != listed_hash)
        st = mt_fail(MT_ERR_INVALID, "%s: checksum mismatch: the file is corrupt", path);
    XXH64_freeState(state);
    close(fd);
    return st;
}

static mt_status verify_blob(const char *dir, const char *name) {
    char path[PATH_MAX];
    if (!valid_blob_name(name)) return mt_fail(MT_ERR_INVALID, "%s/%s: bad blob name '%s'", dir, MANIFEST, name);
    MT_TRY(blob_path(path, dir, name));
    uint64_t listed_bytes = 0, listed_hash = 0, hash = 0;
    MT_TRY(find_blob(dir, name, &listed_bytes, &listed_hash));
    if (listed_bytes > SIZE_MAX) return mt_fail(MT_ERR_INVALID, "%s: the manifest lists too many bytes", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mt_fail(MT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    mt_status st = check_blob_file(fd, path, (size_t)listed_bytes);
    if (st == MT_OK) st = hash_payload(fd, path, (size_t)listed_bytes, &hash);
    close(fd);
    MT_TRY(st);
    if (hash != listed_hash) return mt_fail(MT_ERR_INVALID, "%s: checksum mismatch: the file is corrupt", path);
    return MT_OK;
}

mt_status mt_checkpoint_verify(const char *dir) {
    json_t *manifest, *entry;
    MT_TRY(load_manifest(dir, &manifest));
    json_t *blobs = json_object_get(manifest, "blobs");
    mt_status st = json_is_array(blobs) ? MT_OK
                                        : mt_fail(MT_ERR_INVALID, "%s/%s: no \"blobs\" list", dir, MANIFEST);
    size_t i;
    json_array_foreach(blobs, i, entry) {
        const char *name = json_string_value(json_object_get(entry, "name"));
        if (st == MT_OK) st = name ? verify_blob(dir, name)
                                   : mt_fail(MT_ERR_INVALID, "%s/%s: blob %zu has no name", dir, MANIFEST, i);
    }
    json_decref(manifest);
    return st;
}

mt_status mt_checkpoint_read_meta(const char *dir, json_t **meta) {
    json_t *manifest;
    MT_TRY(load_manifest(dir, &manifest));
    json_t *m = json_object_get(manifest, "meta");
    mt_status st = json_is_object(m) ? MT_OK
                                     : mt_fail(MT_ERR_INVALID, "%s/%s: no \"meta\" object", dir, MANIFEST);
    if (st == MT_OK) *meta = json_incref(m);
    json_decref(manifest);
    return st;
}

/* ---- a run's checkpoints ---- */

mt_status mt_checkpoint_path(char *path, size_t cap, const char *run_dir, int64_t step) {
    if (snprintf(path, cap, "%s/ckpt-%06" PRId64, run_dir, step) >= (int)cap)
        return mt_fail(MT_ERR_INVALID, "%s: checkpoint path too long", run_dir);
    return MT_OK;
}

/* The step of a name "ckpt-<digits>", or -1 (temp and aside dirs have suffixes). */
static int64_t checkpoint_step(const char *name) {
    if (strncmp(name, "ckpt-", 5) || !name[5]) return -1;
    int64_t step = 0;
    for (const char *c = name + 5; *c; c++) {
        if (!isdigit((unsigned char)*c) || step > INT64_MAX / 10 - 1) return -1;
        step = step * 10 + (*c - '0');
    }
    return step;
}

static int newest_first(const void *a, const void *b) {
    int64_t sa = ((const mt_ckpt_entry *)a)->step, sb = ((const mt_ckpt_entry *)b)->step;
    return (sa < sb) - (sa > sb);
}

void mt_checkpoint_list_free(mt_ckpt_entry *entries, int count) {
    for (int i = 0; i < count; i++) free(entries[i].path);
    free(entries);
}

static mt_status add_entry(mt_ckpt_entry **entries, int *count, int *cap, int64_t step,
                           const char *path) {
    if (*count == *cap) {
        int grown = *cap ? 2 * *cap : 16;
        mt_ckpt_entry *e = realloc(*entries, (size_t)grown * sizeof *e);
        if (!e) return mt_fail(MT_ERR_NOMEM, "%s: cannot list checkpoints", path);
        *entries = e;
        *cap = grown;
    }
    char *copy = strdup(path);
    if (!copy) return mt_fail(MT_ERR_NOMEM, "%s: cannot list checkpoints", path);
    (*entries)[(*count)++] = (mt_ckpt_entry){.step = step, .path = copy};
    return MT_OK;
}

mt_status mt_checkpoint_list(const char *run_dir, mt_ckpt_entry **entries, int *count) {
    *entries = NULL;
    *count = 0;
    DIR *d = opendir(run_dir);
    if (!d && errno == ENOENT) return MT_OK;
    if (!d) return mt_fail(MT_ERR_IO, "%s: cannot open run directory: %s", run_dir, strerror(errno));
    mt_status st = MT_OK;
    int cap = 0;
    char path[PATH_MAX], manifest[PATH_MAX];
    for (struct dirent *e; st == MT_OK && (e = readdir(d));) {
        int64_t step = checkpoint_step(e->d_name);
        if (step < 0) continue;
        st = join(path, run_dir, e->d_name);
        if (st == MT_OK) st = join(manifest, path, MANIFEST);
        if (st == MT_OK && access(manifest, F_OK) == 0)
            st = add_entry(entries, count, &cap, step, path);
    }
    closedir(d);
    if (st != MT_OK) {
        mt_checkpoint_list_free(*entries, *count);
        *entries = NULL;
        *count = 0;
        return st;
    }
    if (*count) qsort(*entries, (size_t)*count, sizeof **entries, newest_first);
    return MT_OK;
}

mt_status mt_checkpoint_keep(const char *run_dir, int keep, int64_t spare_step, int64_t upto_step) {
    if (keep < 1) return mt_fail(MT_ERR_INVALID, "%s: must keep at least one checkpoint, not %d",
                                 run_dir, keep);
    mt_ckpt_entry *entries;
    int count;
    MT_TRY(mt_checkpoint_list(run_dir, &entries, &count));
    mt_status st = MT_OK;
    int kept = 0;
    for (int i = 0; st == MT_OK && i < count; i++) {
        if (entries[i].step > upto_step || entries[i].step == spare_step || kept++ < keep) continue;
        st = remove_checkpoint_dir(entries[i].path);
    }
    mt_checkpoint_list_free(entries, count);
    return st;
}

mt_status mt_checkpoint_update_meta(const char *dir, const json_t *meta) {
    json_t *manifest;
    MT_TRY(load_manifest(dir, &manifest));
    char path[PATH_MAX], tmp[PATH_MAX];
    mt_status st = join(path, dir, MANIFEST);
    if (st == MT_OK) st = join(tmp, dir, MANIFEST ".tmp");
    if (st == MT_OK && json_object_set_new(manifest, "meta", json_deep_copy(meta)) != 0)
        st = mt_fail(MT_ERR_NOMEM, "%s: cannot build the manifest", path);
    if (st == MT_OK && unlink(tmp) != 0 && errno != ENOENT)
        st = mt_fail(MT_ERR_IO, "%s: cannot delete: %s", tmp, strerror(errno));
    if (st == MT_OK) st = write_manifest_file(tmp, manifest);
    if (st == MT_OK && rename(tmp, path) != 0)
        st = mt_fail(MT_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
    if (st == MT_OK) st = fsync_dir(dir);
    if (st != MT_OK) unlink(tmp);
    json_decref(manifest);
    return st;
}

/* The step of a leftover "ckpt-<digits><suffix>*" (suffix ".tmp-", ".old-" or ".deleting-"), or -1. */
static int64_t leftover_step(const char *name, const char *suffix) {
    const char *at = strstr(name, suffix);
    if (!at || (size_t)(at - name) >= 64) return -1;
    char base[64];
    memcpy(base, name, (size_t)(at - name));
    base[at - name] = '\0';
    return checkpoint_step(base);
}

/* A checkpoint directory without its manifest is not ours to delete: no write or deletion of
 * this protocol leaves one (a deletion renames first). It is reported and left alone. */
static mt_status report_incomplete(const char *run_dir, const char *name) {
    char path[PATH_MAX], manifest[PATH_MAX];
    struct stat st;
    if (checkpoint_step(name) < 0) return MT_OK;
    MT_TRY(join(path, run_dir, name));
    MT_TRY(join(manifest, path, MANIFEST));
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || access(manifest, F_OK) == 0) return MT_OK;
    mt_log_warn("%s: a checkpoint directory without a manifest (incomplete, or not megatrain's): left alone", path);
    return MT_OK;
}

/* An unfinished write's temporary directory, a deletion cut short, or an old checkpoint moved
 * aside for a replacement. */
static mt_status tidy_leftover(const char *run_dir, const char *name) {
    int64_t tmp = leftover_step(name, ".tmp-"), old = leftover_step(name, ".old-");
    int64_t doomed = leftover_step(name, DELETING);
    if (tmp < 0 && old < 0 && doomed < 0) return MT_OK;
    char path[PATH_MAX], target[PATH_MAX], manifest[PATH_MAX];
    MT_TRY(join(path, run_dir, name));
    if (tmp >= 0 || doomed >= 0) {
        mt_log_info("%s: removing %s", path, tmp >= 0 ? "an unfinished checkpoint write" : "a checkpoint whose deletion was cut short");
        return remove_files_and_dir(path);
    }
    MT_TRY(mt_checkpoint_path(target, sizeof target, run_dir, old));
    MT_TRY(join(manifest, target, MANIFEST));
    if (access(manifest, F_OK) == 0) {
        mt_log_info("%s: removing a replaced checkpoint", path);
        return remove_files_and_dir(path);
    }
    struct stat st;
    if (lstat(target, &st) == 0) {
        mt_log_warn("%s: a checkpoint moved aside, but %s holds something else: both left alone", path, target);
        return MT_OK;
    }
    if (rename(path, target) != 0)
        return mt_fail(MT_ERR_IO, "%s: cannot restore it as %s: %s", path, target, strerror(errno));
    mt_log_info("%s: restored as %s (its replacement never landed)", path, target);
    return MT_OK;
}

mt_status mt_checkpoint_tidy(const char *run_dir) {
    DIR *d = opendir(run_dir);
    if (!d && errno == ENOENT) return MT_OK;
    if (!d) return mt_fail(MT_ERR_IO, "%s: cannot open run directory: %s", run_dir, strerror(errno));
    mt_status st = MT_OK;
    for (struct dirent *e; st == MT_OK && (e = readdir(d));) {
        st = tidy_leftover(run_dir, e->d_name);
        if (st == MT_OK) st = report_incomplete(run_dir, e->d_name);
    }
    closedir(d);
    return st;
}
