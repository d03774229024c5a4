/* The world of processes and its star of TCP connections (world.h). Rank 0 keeps one socket per
 * peer, indexed by the peer's rank (each peer sends its rank first); a peer keeps one to rank 0.
 * Every socket has send and receive timeouts of the world's timeout, so no wait is unbounded. */
#include "util/world.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"

struct mt_star {
    mt_world w;
    int *fd;      /* rank 0: [size], fd[r] the socket of peer r; others: fd[0], the socket to rank 0 */
    float *sum;   /* rank 0: a peer's buffer as it arrives */
    size_t sum_count;
};

static mt_status env_int(const char *name, int required, int fallback, int lo, int hi, int *out) {
    const char *v = getenv(name);
    if (!v || !*v) {
        if (required) return mt_fail(MT_ERR_INVALID, "%s is not set (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, "
                                     "MASTER_ADDR and MASTER_PORT)", name);
        *out = fallback;
        return MT_OK;
    }
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi)
        return mt_fail(MT_ERR_INVALID, "%s='%s': must be an integer from %d to %d", name, v, lo, hi);
    *out = (int)x;
    return MT_OK;
}

mt_status mt_world_from_env(mt_world *w, int *present) {
    memset(w, 0, sizeof *w);
    w->size = w->local_size = 1;
    const char *t = getenv("MT_WORLD_TIMEOUT_S");
    w->timeout_s = t && atof(t) > 0 ? atof(t) : 300;
    *present = getenv("WORLD_SIZE") != NULL;
    if (!*present) return MT_OK;
    MT_TRY(env_int("WORLD_SIZE", 1, 1, 1, 1 << 16, &w->size));
    MT_TRY(env_int("RANK", 1, 0, 0, w->size - 1, &w->rank));
    MT_TRY(env_int("LOCAL_RANK", 0, w->rank, 0, w->size - 1, &w->local_rank));
    MT_TRY(env_int("LOCAL_WORLD_SIZE", 0, 1, 1, w->size, &w->local_size));
    if (w->local_rank >= w->local_size && getenv("LOCAL_WORLD_SIZE"))
        return mt_fail(MT_ERR_INVALID, "LOCAL_RANK=%d is not below LOCAL_WORLD_SIZE=%d", w->local_rank, w->local_size);
    MT_TRY(env_int("MASTER_PORT", w->size > 1, 29500, 1, 65535, &w->port));
    const char *addr = getenv("MASTER_ADDR");
    if (w->size > 1 && (!addr || !*addr))
        return mt_fail(MT_ERR_INVALID, "MASTER_ADDR is not set: rank 0's host, where the ranks meet (torchrun sets "
                       "it)");
    snprintf(w->addr, sizeof w->addr, "%s", addr ? addr : "127.0.0.1");
    return MT_OK;
}

/* ---- sockets ---- */

static mt_status fail_at(const mt_world *w, const char *what) {
    return mt_fail(MT_ERR_IO, "rank %d of %d, rendezvous at %s:%d: %s: %s", w->rank, w->size, w->addr, w->port, what,
                   strerror(errno));
}

static void set_timeouts(int fd, double seconds) {
    struct timeval tv = {.tv_sec = (time_t)seconds, .tv_usec = (suseconds_t)((seconds - (time_t)seconds) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Sends or receives all of buf; a timeout or a peer gone is an error naming the peer. */
static mt_status io_all(const mt_star *s, int fd, void *buf, size_t bytes, int sending, int peer) {
    char *p = buf;
    while (bytes > 0) {
        ssize_t n = sending ? send(fd, p, bytes, MSG_NOSIGNAL) : recv(fd, p, bytes, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = ECONNRESET;
            int timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
            return mt_fail(MT_ERR_IO, "rank %d of %d: %s rank %d: %s", s->w.rank, s->w.size,
                           sending ? "sending to" : "receiving from", peer,
                           timed_out ? "no answer within MT_WORLD_TIMEOUT_S (it hung or died)"
                                     : n == 0 ? "it closed the connection (it died or failed)" : strerror(errno));
        }
        p += n;
        bytes -= (size_t)n;
    }
    return MT_OK;
}

static mt_status resolve(const mt_world *w, struct sockaddr_in *sa) {
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)w->port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(w->addr, NULL, &hints, &res);
    if (rc != 0)
        return mt_fail(MT_ERR_INVALID, "MASTER_ADDR '%s': cannot resolve it: %s", w->addr, gai_strerror(rc));
    sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return MT_OK;
}

/* Rank 0: listens and takes every peer, each saying its rank first, before the deadline. */
static mt_status accept_peers(mt_star *s, const struct sockaddr_in *sa) {
    const mt_world *w = &s->w;
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (lfd < 0) return fail_at(w, "socket");
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in any = *sa;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(lfd, (struct sockaddr *)&any, sizeof any) != 0 || listen(lfd, w->size) != 0) {
        mt_status rc = fail_at(w, "rank 0 cannot listen on MASTER_PORT");
        close(lfd);
        return rc;
    }
    double deadline = mt_now() + w->timeout_s;
    mt_status rc = MT_OK;
    for (int joined = 1; rc == MT_OK && joined < w->size;) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        int left_ms = (int)((deadline - mt_now()) * 1e3);
        if (left_ms <= 0 || poll(&p, 1, left_ms) == 0) {
            rc = mt_fail(MT_ERR_IO, "rank 0 of %d at %s:%d: %d of the %d other ranks came within %.0f s "
                         "(MT_WORLD_TIMEOUT_S)", w->size, w->addr, w->port, joined - 1, w->size - 1, w->timeout_s);
            break;
        }
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno != EINTR) rc = fail_at(w, "accept");
            continue;
        }
        set_timeouts(fd, w->timeout_s);
        int32_t rank = -1;
        s->fd[0] = fd; /* io_all's error names it */
        rc = io_all(s, fd, &rank, sizeof rank, 0, -1);
        if (rc == MT_OK && (rank < 1 || rank >= w->size || s->fd[rank] >= 0))
            rc = mt_fail(MT_ERR_INVALID, "rank 0 of %d: a peer said it is rank %d, which is out of range or taken "
                         "(two processes with the same RANK?)", w->size, (int)rank);
        if (rc == MT_OK) s->fd[rank] = fd, joined++;
        else close(fd);
    }
    s->fd[0] = -1;
    close(lfd);
    return rc;
}

/* A peer: connects to rank 0 (retrying while it is not listening yet) and says its rank. */
static mt_status connect_root(mt_star *s, const struct sockaddr_in *sa) {
    const mt_world *w = &s->w;
    double deadline = mt_now() + w->timeout_s;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return fail_at(w, "socket");
        if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0) {
            set_timeouts(fd, w->timeout_s);
            s->fd[0] = fd;
            int32_t rank = w->rank;
            return io_all(s, fd, &rank, sizeof rank, 1, 0);
        }
        close(fd);
        if (mt_now() > deadline)
            return fail_at(w, "rank 0 did not answer within MT_WORLD_TIMEOUT_S");
        usleep(50 * 1000);
    }
}

mt_status mt_star_open(mt_star **out, const mt_world *w) {
    mt_star *s = calloc(1, sizeof *s);
    if (s) s->fd = malloc((size_t)w->size * sizeof *s->fd);
    if (!s || !s->fd) {
        if (s) free(s->fd);
        free(s);
        return mt_fail(MT_ERR_NOMEM, "cannot allocate a star of %d ranks", w->size);
    }
    s->w = *w;
    for (int r = 0; r < w->size; r++) s->fd[r] = -1;
    struct sockaddr_in sa;
    mt_status rc = resolve(w, &sa);
    if (rc == MT_OK && w->size > 1) rc = w->rank == 0 ? accept_peers(s, &sa) : connect_root(s, &sa);
    if (rc != MT_OK) {
        mt_star_close(s);
        return rc;
    }
    *out = s;
    return MT_OK;
}

void mt_star_close(mt_star *s) {
    if (!s) return;
    for (int r = 0; r < s->w.size; r++)
        if (s->fd[r] >= 0) close(s->fd[r]);
    free(s->fd);
    free(s->sum);
    free(s);
}

void mt_star_abort(mt_star *s) {
    for (int r = 0; r < s->w.size; r++)
        if (s->fd[r] >= 0) shutdown(s->fd[r], SHUT_RDWR);
}

mt_status mt_star_broadcast(mt_star *s, void *buf, size_t bytes) { return mt_star_broadcast_from(s, buf, bytes, 0); }

/* Through rank 0: the root sends it there, rank 0 to every other peer. */
mt_status mt_star_broadcast_from(mt_star *s, void *buf, size_t bytes, int root) {
    int rank = s->w.rank;
    if (root < 0 || root >= s->w.size)
        return mt_fail(MT_ERR_INVALID, "a broadcast from rank %d in a world of %d", root, s->w.size);
    if (rank != 0) return io_all(s, s->fd[0], buf, bytes, rank == root, 0);
    if (root != 0) MT_TRY(io_all(s, s->fd[root], buf, bytes, 0, root));
    for (int r = 1; r < s->w.size; r++)
        if (r != root) MT_TRY(io_all(s, s->fd[r], buf, bytes, 1, r));
    return MT_OK;
}

mt_status mt_star_all_reduce(mt_star *s, float *buf, size_t count) {
    if (s->w.rank != 0) {
        MT_TRY(io_all(s, s->fd[0], buf, count * sizeof *buf, 1, 0));
        return io_all(s, s->fd[0], buf, count * sizeof *buf, 0, 0);
    }
    if (s->sum_count < count) {
        free(s->sum);
        s->sum = malloc(count * sizeof *s->sum);
        s->sum_count = s->sum ? count : 0;
        if (!s->sum) return mt_fail(MT_ERR_NOMEM, "cannot allocate the all-reduce's buffer of %zu floats", count);
    }
    for (int r = 1; r < s->w.size; r++) {
        MT_TRY(io_all(s, s->fd[r], s->sum, count * sizeof *buf, 0, r));
        for (size_t i = 0; i < count; i++) buf[i] += s->sum[i];
    }
    return mt_star_broadcast(s, buf, count * sizeof *buf);
}
