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
    mt_world w = {.rank = rank, .size = 2, .local_rank = rank, .port = port, .timeout_s = timeout_s};
    snprintf(w.addr, sizeof w.addr, "127.0.0.1");
    return w;
}

static mt_engine_options options(void) {
    mt_engine_options o = mt_engine_defaults();
    o.seq = SEQ;
    o.batch = BATCH;
    o.lm_chunk = 5;
    o.opt_threads = 1;
    o.max_grad_norm = 0.05f;
    return o;
}

/* One process's part: `steps` steps of both ranks' windows as a replica; writes its masters and
 * moments to `out` (NULL: none). Returns a status; the message is the thread's. */
static mt_status replica(const mt_world *w, int steps, const char *out) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options();
    mt_backend *be;
    MT_TRY(mt_backend_cpu_create(&be, 2));
    mt_layout lay = {0};
    mt_store store = {0};
    mt_engine *e = NULL;
    mt_status rc = be->ops->coll.comm_init_world(be, w);
    if (rc == MT_OK) rc = mt_layout_init(&lay, &cfg);
    if (rc == MT_OK) rc = mt_store_create(&store, &lay, be);
    if (rc == MT_OK) mt_store_init_random(&store, 7);
    if (rc == MT_OK) rc = mt_engine_create_replica(&e, be, &store, &o, 0, w->size);
    int all = w->size * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    for (int s = 1; rc == MT_OK && s <= steps; s++) {
        mt_tiny_windows(100 + s, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result r;
        rc = mt_replica_step(e, w->rank, w->size, inputs, targets, NULL, 3e-3f, &r);
    }
    if (rc == MT_OK) mt_engine_finish(e);
    if (rc == MT_OK && out) {
        FILE *f = fopen(out, "wb");
        size_t n = (size_t)lay.total_numel;
        if (!f || fwrite(mt_store_f32(&store), 4, n, f) != n || fwrite(store.moments.m, 4, n, f) != n ||
            fwrite(store.moments.v, 4, n, f) != n)
            rc = mt_fail(MT_ERR_IO, "%s: cannot write the state", out);
        if (f) fclose(f);
    }
    mt_engine_destroy(e);
    if (store.layout) mt_store_free(&store);
    if (lay.units) mt_layout_free(&lay);
    be->ops->coll.comm_free(be);
    mt_backend_destroy(be);
    return rc;
}

/* Rank 1 in a child process: exit status 0 when its part went well. */
static pid_t fork_rank1(int port, int steps) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        mt_world w = world(1, port, 30);
        mt_status rc = replica(&w, steps, NULL);
        if (rc != MT_OK) fprintf(stderr, "rank 1: %s\n", mt_error());
        _exit(rc == MT_OK ? 0 : 1);
    }
    return pid;
}

static mt_status open_cpu(void *ctx, int rank, mt_backend **out) { return mt_backend_cpu_create(out, 2); }

/* The same training as two ranks that are threads on one store (tests/test_ranks.c's): masters and
 * moments, 3 x *n floats. */
static float *threads_state(size_t *n) {
    mt_config cfg = mt_tiny_config_gqa();
    mt_engine_options o = options();
    mt_ranks *g;
    mt_layout lay;
    mt_store store;
    setenv("MT_TEST_RANKS_SUMMED", "1", 1); /* threads sum in rank order, as processes do */
    cr_assert_eq(mt_ranks_create(&g, 2, open_cpu, NULL), MT_OK, "%s", mt_error());
    unsetenv("MT_TEST_RANKS_SUMMED");
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    cr_assert_eq(mt_store_create(&store, &lay, mt_ranks_backend(g, 0)), MT_OK);
    mt_store_init_random(&store, 7);
    cr_assert_eq(mt_ranks_start(g, &store, &o, 0), MT_OK, "%s", mt_error());
    int all = 2 * BATCH;
    int32_t tokens[all * (SEQ + 1)], inputs[all * SEQ], targets[all * SEQ];
    for (int s = 1; s <= STEPS; s++) {
        mt_tiny_windows(100 + s, all, SEQ, cfg.vocab_size, tokens, inputs, targets);
        mt_step_result r;
        cr_assert_eq(mt_ranks_step(g, inputs, targets, NULL, 3e-3f, &r), MT_OK, "%s", mt_error());
    }
    mt_engine_finish(mt_ranks_leader(g));
    *n = (size_t)lay.total_numel;
    float *state = malloc(3 * *n * 4);
    memcpy(state, mt_store_f32(&store), *n * 4);
    memcpy(state + *n, store.moments.m, *n * 4);
    memcpy(state + 2 * *n, store.moments.v, *n * 4);
    mt_ranks_stop(g);
    mt_store_free(&store);
    mt_ranks_destroy(g);
    mt_layout_free(&lay);
    return state;
}

Test(world, two_processes_give_the_bits_of_two_threads) {
    char out[] = "/tmp/mt-world-XXXXXX";
    int fd = mkstemp(out);
    cr_assert(fd >= 0);
    close(fd);
    int port = free_port();
    pid_t child = fork_rank1(port, STEPS);
    mt_world w = world(0, port, 30);
    mt_status rc = replica(&w, STEPS, out);
    int status;
    waitpid(child, &status, 0);
    cr_assert_eq(rc, MT_OK, "rank 0: %s", mt_error());
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 failed");
    size_t n;
    float *want = threads_state(&n), *got = malloc(3 * n * 4);
    FILE *f = fopen(out, "rb");
    cr_assert(f && fread(got, 4, 3 * n, f) == 3 * n, "rank 0's state is not in %s", out);
    fclose(f);
    unlink(out);
    size_t first = 0;
    while (first < 3 * n && !memcmp(&got[first], &want[first], 4)) first++;
    cr_expect_eq(first, 3 * n, "two processes differ from two threads at %s[%zu]",
                 first < n ? "master" : first < 2 * n ? "m" : "v", first % n);
    free(want);
    free(got);
}

Test(world, a_rank_that_never_comes_or_dies_ends_the_wait_with_its_name) {
    mt_world w = world(0, free_port(), 1);
    double t0 = mt_now();
    cr_assert_neq(replica(&w, 1, NULL), MT_OK);
    cr_expect(strstr(mt_error(), "0 of the 1 other ranks came within 1 s"), "%s", mt_error());
    cr_expect_lt(mt_now() - t0, MT_TEST_LIMIT(10.0));

    /* Rank 1 takes one step of the two, then is gone. */
    int port = free_port();
    pid_t child = fork_rank1(port, 1);
    w = world(0, port, 30);
    t0 = mt_now();
    cr_assert_neq(replica(&w, 2, NULL), MT_OK, "rank 0 went on without rank 1");
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
    unsetenv("WORLD_SIZE"), unsetenv("RANK"), unsetenv("LOCAL_RANK"), unsetenv("MASTER_PORT");
}
