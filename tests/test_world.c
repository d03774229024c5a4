/* Ranks that are processes (util/world.h, the cpu backend's collective over TCP, engine replicas):
 * two processes, each with its own store, train to the same bits as two ranks that are threads on
 * one store summing in rank order as processes do (MT_TEST_RANKS_SUMMED; threads otherwise take
 * turns); a rank that never comes, or dies, ends its peer's wait with an error naming it, in bounded
 * time; torchrun's variables are read and checked. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/ranks.h"
#include "train/memory_check.h"
#include "tiny_model.h"
#include "util/clock.h"
#include "util/world.h"
#include "test_limits.h"

enum { SEQ = 8, BATCH = 2, STEPS = 3 };

/* A port nobody listens on now. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

static mt_world world(int rank, int port, double timeout_s) {
    mt_world w = {.rank = rank, .size = 2, .local_rank = rank, .local_size = 2, .port = port, .timeout_s = timeout_s};
    snprintf(w.addr, sizeof w.addr, "127.0.0.1");
    return w;
}

/* What the two processes and the two threads train: the engine's modes that change what goes home
 * and who updates it. */
typedef struct {
    const char *name;
    int tied;             /* the tied config (with biases) */
    float clip;           /* 0: overlapped, the embedding in two parts */
    int head_vocab_chunk; /* the ends' gradients a vocabulary chunk at a time (0: whole) */
    mt_moments_format moments;
    int ends_on_device, device_blocks; /* units every rank updates whole on its device */
} variant;

static const variant CLIPPED = {"clipped", 0, 0.05f, 0, MT_MOMENTS_F32, 0, 0};
static const variant TIED_CHUNKED = {"overlapped, tied, ends in vocabulary chunks", 1, 0.0f, 16, MT_MOMENTS_F32, 0, 0};
static const variant CHUNKED_BF16 = {"clipped, untied ends in vocabulary chunks, bf16 moments", 0, 0.05f, 16,
                                     MT_MOMENTS_BF16, 0, 0};
static const variant ON_DEVICE = {"overlapped, the ends and a block on the device", 0, 0.0f, 0, MT_MOMENTS_F32, 1, 1};
/* each process's part of each chunk through its chunk buffers, its slice of the head's and the
 * embedding's rows updated from them */
static const variant UNTIED_CHUNKED = {"overlapped, untied ends in vocabulary chunks", 0, 0.0f, 16, MT_MOMENTS_F32, 0, 0};

static mt_config config_of(const variant *v) { return v->tied ? mt_tiny_config_tied_bias() : mt_tiny_config_gqa(); }

static mt_engine_options options(const variant *v) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = BATCH;
    o.lm_chunk = 5;
    o.opt_threads = 1;
    o.max_grad_norm = v->clip;
    o.head_vocab_chunk = v->head_vocab_chunk;
    o.ends_on_device = v->ends_on_device;
    o.device_blocks = v->device_blocks;
    return o;
}

/* The store's masters, then its moments m and v, as bytes: n * (4 + 2 * moment size). */
static size_t state_bytes(const mt_store *store) {
    return store->moments.n * (4 + 2 * mt_moments_value_size(store->moments.format));
}

static mt_status write_state(const mt_store *store, const char *out) {
    size_t n = store->moments.n, ms = mt_moments_value_size(store->moments.format);
    FILE *f = fopen(out, "wb");
    mt_status rc = MT_OK;
    if (!f || fwrite(mt_store_f32(store), 4, n, f) != n || fwrite(store->moments.m, ms, n, f) != n ||
        fwrite(store->moments.v, ms, n, f) != n)
        rc = mt_fail(MT_ERR_IO, "%s: cannot write the state", out);
    if (f) fclose(f);
    return rc;
}

static void copy_state(const mt_store *store, char *dst) {
    size_t n = store->moments.n, ms = mt_moments_value_size(store->moments.format);
    memcpy(dst, mt_store_f32(store), n * 4);
    memcpy(dst + n * 4, store->moments.m, n * ms);
    memcpy(dst + n * (4 + ms), store->moments.v, n * ms);
}

/* One process's part: `steps` steps of both ranks' windows as a replica, then (loss not NULL) an
 * evaluation, its loss to *loss, and the slices shared; writes its masters and moments (paths not
 * NULL) as its own store holds them after the steps (`own`) and once shared (`out`). Returns a
 * status; the message is the thread's. */
static mt_status replica(const variant *v, const mt_world *w, int steps, const char *own, const char *out,
                         double *loss) {
    mt_config cfg = config_of(v);
    mt_engine_options o = options(v);
    mt_backend *be;
    MT_TRY(mt_backend_cpu_create(&be, 2));
    mt_layout lay = {0};
    mt_store store = {0};
    mt_engine *e = NULL;
    mt_status rc = be->ops->coll.comm_init_world(be, w);
    if (rc == MT_OK) rc = mt_layout_init(&lay, &cfg);
    if (rc == MT_OK) rc = mt_store_create_with_moments(&store, &lay, be, v->moments);
    if (rc == MT_OK) mt_store_init_random(&store, 7);
    if (rc == MT_OK) rc = mt_engine_create_replica(&e, be, &store, &o, 0, w->size);
    int all = w->size * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    for (int s = 1; rc == MT_OK && s <= steps; s++) {
        mt_tiny_windows(100 + s, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result r;
        rc = mt_replica_step(e, w->rank, w->size, inputs, targets, NULL, 3e-3f, &r);
    }
    if (rc == MT_OK && loss) {
        mt_tiny_windows(99, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
        rc = mt_replica_eval(e, w->rank, w->size, inputs, targets, NULL, loss);
    }
    if (rc == MT_OK) mt_engine_finish(e);
    if (rc == MT_OK && own) rc = write_state(&store, own);
    if (rc == MT_OK && loss) rc = mt_engine_share_state(e);
    if (rc == MT_OK && out) rc = write_state(&store, out);
    mt_engine_destroy(e);
    if (store.layout) mt_store_free(&store);
    if (lay.units) mt_layout_free(&lay);
    be->ops->coll.comm_free(be);
    mt_backend_destroy(be);
    return rc;
}

/* Rank 1 in a child process: exit status 0 when its part went well; `whole`: the evaluation and
 * the sharing too, else the steps alone. */
static pid_t fork_rank1(const variant *v, int port, int steps, int whole) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        mt_world w = world(1, port, 30);
        double loss;
        mt_status rc = replica(v, &w, steps, NULL, NULL, whole ? &loss : NULL);
        if (rc != MT_OK) fprintf(stderr, "rank 1: %s\n", mt_error());
        _exit(rc == MT_OK ? 0 : 1);
    }
    return pid;
}

static mt_status open_cpu(void *ctx, int rank, mt_backend **out) { return mt_backend_cpu_create(out, 2); }

/* The same training as two ranks that are threads on one store (tests/test_ranks.c's): the state
 * (state_bytes), and the same evaluation's loss. */
static char *threads_state(const variant *v, size_t *bytes, double *loss) {
    mt_config cfg = config_of(v);
    mt_engine_options o = options(v);
    mt_ranks *g;
    mt_layout lay;
    mt_store store;
    setenv("MT_TEST_RANKS_SUMMED", "1", 1); /* threads sum in rank order, as processes do */
    cr_assert_eq(mt_ranks_create(&g, 2, open_cpu, NULL), MT_OK, "%s", mt_error());
    unsetenv("MT_TEST_RANKS_SUMMED");
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    cr_assert_eq(mt_store_create_with_moments(&store, &lay, mt_ranks_backend(g, 0), v->moments), MT_OK);
    mt_store_init_random(&store, 7);
    cr_assert_eq(mt_ranks_start(g, &store, &o, 0), MT_OK, "%s", mt_error());
    int all = 2 * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    for (int s = 1; s <= STEPS; s++) {
        mt_tiny_windows(100 + s, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_ranks_step(g, inputs, targets, NULL, 3e-3f, &r), MT_OK, "%s", mt_error());
    }
    mt_tiny_windows(99, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
    cr_assert_eq(mt_ranks_eval(g, inputs, targets, NULL, loss), MT_OK, "%s", mt_error());
    mt_engine_finish(mt_ranks_leader(g));
    *bytes = state_bytes(&store);
    char *state = malloc(*bytes);
    copy_state(&store, state);
    mt_ranks_stop(g);
    mt_store_free(&store);
    mt_ranks_destroy(g);
    mt_layout_free(&lay);
    return state;
}

static char *read_state(const char *path, size_t bytes) {
    char *x = malloc(bytes);
    FILE *f = fopen(path, "rb");
    cr_assert(x && f && fread(x, 1, bytes, f) == bytes, "rank 0's state is not in %s", path);
    fclose(f);
    unlink(path);
    return x;
}

static const char *class_names[3] = {"master", "m", "v"};

/* Element i of class c (masters, m, v) of a state, and its size. */
static const char *element(const char *state, size_t n, size_t ms, int c, size_t i) {
    return c == 0 ? state + i * 4 : state + n * 4 + (size_t)(c - 1) * n * ms + i * ms;
}

/* Two processes train as two threads summing in rank order. Rank 0 updates its slice of each
 * host-updated unit alone: before the slices are shared, its store matches the threads' in its
 * slices (and in the units its device updates whole) and still holds the initial state (moments
 * zero) in rank 1's; after, the threads' everywhere, bit for bit; an evaluation between, whose
 * weights come from both, gives the threads' loss. */
static void expect_threads_bits(const variant *v) {
    char own[] = "/tmp/mt-world-own-XXXXXX", out[] = "/tmp/mt-world-XXXXXX";
    int fd1 = mkstemp(own), fd2 = mkstemp(out);
    cr_assert(fd1 >= 0 && fd2 >= 0);
    close(fd1), close(fd2);
    int port = free_port();
    pid_t child = fork_rank1(v, port, STEPS, 1);
    mt_world w = world(0, port, 30);
    double loss;
    mt_status rc = replica(v, &w, STEPS, own, out, &loss);
    int status;
    waitpid(child, &status, 0);
    cr_assert_eq(rc, MT_OK, "%s: rank 0: %s", v->name, mt_error());
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: rank 1 failed", v->name);
    size_t bytes;
    double want_loss;
    char *want = threads_state(v, &bytes, &want_loss), *got = read_state(out, bytes), *before = read_state(own, bytes);
    cr_expect_eq(memcmp(got, want, bytes), 0, "%s: two processes differ from two threads", v->name);
    cr_expect_eq(memcmp(&loss, &want_loss, sizeof loss), 0, "%s: the evaluation's loss: %.9g, two threads %.9g",
                 v->name, loss, want_loss);

    mt_config cfg = config_of(v);
    mt_backend *be;
    mt_layout lay;
    mt_store init;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    cr_assert_eq(mt_store_create_with_moments(&init, &lay, be, v->moments), MT_OK);
    mt_store_init_random(&init, 7);
    char *initial = malloc(bytes);
    copy_state(&init, initial);
    size_t n = init.moments.n, ms = mt_moments_value_size(v->moments);
    for (int u = 0; u < lay.num_units; u++) {
        int whole = u == 0 || u == lay.num_units - 1 ? v->ends_on_device : u - 1 < v->device_blocks;
        size_t at = (size_t)lay.units[u].offset, numel = (size_t)lay.units[u].numel, lo, hi;
        mt_coll_slice(numel, 0, 2, &lo, &hi);
        for (int c = 0; c < 3; c++)
            for (size_t i = 0; i < numel; i++) {
                int mine = whole || (i >= lo && i < hi);
                size_t size = c ? ms : 4;
                const char *expect = element(mine ? want : initial, n, ms, c, at + i);
                cr_assert(!memcmp(element(before, n, ms, c, at + i), expect, size), "%s: before sharing, rank 0's "
                          "%s[%zu] (unit %d, %s) is not %s", v->name, class_names[c], at + i, u,
                          whole ? "updated whole on the device" : mine ? "its own slice" : "rank 1's slice",
                          mine ? "the threads'" : "the initial one");
            }
    }
    mt_store_free(&init);
    mt_layout_free(&lay);
    mt_backend_destroy(be);
    free(initial);
    free(want);
    free(got);
    free(before);
}

/* One mode a test: each forks its rank 1 before it has threads (a child of a process with threads
 * holds only the forking one, and OpenMP's pool would hang in it). */
Test(world, two_processes_give_the_bits_of_two_threads) { expect_threads_bits(&CLIPPED); }
Test(world, two_processes_give_the_bits_of_two_threads_tied_in_vocabulary_chunks) { expect_threads_bits(&TIED_CHUNKED); }
Test(world, two_processes_give_the_bits_of_two_threads_chunked_with_bf16_moments) { expect_threads_bits(&CHUNKED_BF16); }
Test(world, two_processes_give_the_bits_of_two_threads_with_units_on_the_device) { expect_threads_bits(&ON_DEVICE); }
Test(world, two_processes_give_the_bits_of_two_threads_untied_in_vocabulary_chunks) {
    expect_threads_bits(&UNTIED_CHUNKED);
}

Test(world, a_rank_that_never_comes_or_dies_ends_the_wait_with_its_name) {
    mt_world w = world(0, free_port(), 1);
    double t0 = mt_now();
    double loss;
    cr_assert_neq(replica(&CLIPPED, &w, 1, NULL, NULL, &loss), MT_OK);
    cr_expect(strstr(mt_error(), "0 of the 1 other ranks came within 1 s"), "%s", mt_error());
    cr_expect_lt(mt_now() - t0, MT_TEST_LIMIT(10.0));

    /* Rank 1 takes one step of the two, then is gone. */
    int port = free_port();
    pid_t child = fork_rank1(&CLIPPED, port, 1, 0);
    w = world(0, port, 30);
    t0 = mt_now();
    cr_assert_neq(replica(&CLIPPED, &w, 2, NULL, NULL, &loss), MT_OK, "rank 0 went on without rank 1");
    cr_expect(strstr(mt_error(), "rank 1"), "the error does not name the rank: %s", mt_error());
    cr_expect_lt(mt_now() - t0, MT_TEST_LIMIT(20.0), "rank 0 was not told at once");
    waitpid(child, NULL, 0);
}

Test(world, reads_and_checks_torchruns_variables) {
    mt_world w;
    int present;
    unsetenv("WORLD_SIZE");
    cr_assert_eq(mt_world_from_env(&w, &present), MT_OK);
    cr_expect_eq(present, 0);
    cr_expect_eq(w.size, 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("RANK", "2", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29511", 1);
    cr_assert_eq(mt_world_from_env(&w, &present), MT_OK, "%s", mt_error());
    cr_expect(present && w.size == 4 && w.rank == 2 && w.local_rank == 0 && w.port == 29511);
    cr_expect_str_eq(w.addr, "10.0.0.1");
    setenv("RANK", "4", 1);
    cr_expect_neq(mt_world_from_env(&w, &present), MT_OK);
    cr_expect(strstr(mt_error(), "RANK='4'"), "%s", mt_error());
    setenv("RANK", "1", 1);
    unsetenv("MASTER_ADDR");
    cr_expect_neq(mt_world_from_env(&w, &present), MT_OK);
    cr_expect(strstr(mt_error(), "MASTER_ADDR"), "%s", mt_error());
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    cr_expect_eq(w.local_size, 1, "LOCAL_WORLD_SIZE unset: one process on this host");
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    cr_assert_eq(mt_world_from_env(&w, &present), MT_OK, "%s", mt_error());
    cr_expect_eq(w.local_size, 2);
    setenv("LOCAL_WORLD_SIZE", "5", 1);
    cr_expect_neq(mt_world_from_env(&w, &present), MT_OK, "more processes on a host than in the world");
    cr_expect(strstr(mt_error(), "LOCAL_WORLD_SIZE='5'"), "%s", mt_error());
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "1", 1);
    cr_expect_neq(mt_world_from_env(&w, &present), MT_OK);
    cr_expect(strstr(mt_error(), "LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1"), "%s", mt_error());
    unsetenv("WORLD_SIZE"), unsetenv("RANK"), unsetenv("LOCAL_RANK"), unsetenv("MASTER_PORT");
    unsetenv("LOCAL_WORLD_SIZE"), unsetenv("MASTER_ADDR");
}

/* Each process of a host keeps a store of its own: the memory check counts the host's others. */
Test(world, the_memory_check_counts_the_hosts_other_processes) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options(&CLIPPED);
    mt_backend *be;
    mt_layout lay;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK);
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    mt_memory_fit one = mt_memory_fit_of(&lay, be, &o, MT_MOMENTS_F32), three = one;
    mt_memory_fit_processes(&three, 3);
    cr_expect_eq(three.host_needed, 3 * one.host_needed);
    cr_expect_eq(three.host_classes, one.host_classes + 1);
    cr_expect_str_eq(three.host[three.host_classes - 1].name, "this host's 2 other processes");
    mt_layout_free(&lay);
    mt_backend_destroy(be);
}
