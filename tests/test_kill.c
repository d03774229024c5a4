/* Crash safety under SIGKILL: a tiny run killed at many random moments (checkpoints every two
 * steps, so that many kills land inside a checkpoint write), each time restarted with the same
 * command line (--resume), must end with final master weights and Adam moments byte for byte
 * those of the same run left alone. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"
#include "util/clock.h"
#include "test_limits.h"

#define STEPS 40
#define CKPT_EVERY 2
#define STR(x) #x
#define ARG(x) STR(x)
/* The issue asks for 50 kill moments; the whole test takes about 2 s on 2 cores. */
#define KILLS 50
#define KILL_SEED 20240520u
/* A run takes about a second; the bound is for slow, shared CI machines. */
#define TIMEOUT_S 120.0

static char dir[PATH_MAX], corpus[PATH_MAX];

static void make_fixtures(void) {
    hf_test_mkdtemp(dir);
    mt_test_write_corpus(hf_test_path(corpus, dir, "corpus.txt"));
}

static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(slow, .init = make_fixtures, .fini = remove_fixtures);

/* xorshift32: the kill moments depend on the seed alone, not on the C library. */
static double uniform(uint32_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return (double)*state / 4294967296.0;
}

/* One command line for every start: --resume begins afresh in an empty run directory. */
static void start(mt_cli_process *p, const char *run) {
    mt_cli_start(p, "train", MT_TINY_STEP, "--steps", ARG(STEPS), "--ckpt-every", ARG(CKPT_EVERY), "--keep", "2",
                 "--data", corpus, "--out", run, "--resume", NULL);
}

/* The newest step with a complete checkpoint (a manifest), 0 when none. */
static int newest_checkpoint(const char *run) {
    char manifest[PATH_MAX];
    for (int step = STEPS; step > 0; step -= CKPT_EVERY) {
        int n = snprintf(manifest, sizeof manifest, "%s/ckpt-%06d/manifest.json", run, step);
        cr_assert(n > 0 && n < PATH_MAX, "path too long under %s", run);
        if (mt_test_exists(manifest)) return step;
    }
    return 0;
}

/* Temporary checkpoint directories left behind: each is a kill inside a checkpoint write. */
static int torn_writes(const char *run) {
    DIR *d = opendir(run);
    cr_assert_not_null(d, "cannot list %s", run);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

Test(slow, sigkill_at_random_moments_then_resume_matches_an_uninterrupted_run, .timeout = MT_TEST_LIMIT(300)) {
    char reference[PATH_MAX], killed[PATH_MAX];
    hf_test_path(reference, dir, "reference");
    hf_test_path(killed, dir, "killed");
    mt_cli_process p;
    mt_cli_result r;

    double t0 = mt_now();
    start(&p, reference);
    mt_cli_wait(&p, TIMEOUT_S, &r);
    double duration = mt_now() - t0;
    cr_assert_eq(r.exit_code, 0, "the uninterrupted run failed:\n%s", r.err);
    mt_cli_result_free(&r);

    uint32_t state = KILL_SEED;
    int hits = 0;
    fprintf(stderr, "kill test: seed %u, %d kills, uninterrupted run %.2f s\n", KILL_SEED, KILLS, duration);
    for (int k = 0; k < KILLS; k++) {
        /* Uniform over the expected time of what is left of the run (and one checkpoint period
         * more, so that the final save is a target too). */
        int left = STEPS - newest_checkpoint(killed) + CKPT_EVERY;
        double delay = uniform(&state) * duration * left / STEPS;
        start(&p, killed);
        nanosleep(&(struct timespec){.tv_sec = (time_t)delay,
                                     .tv_nsec = (long)((delay - (double)(time_t)delay) * 1e9)}, NULL);
        kill(p.pid, SIGKILL);
        mt_cli_wait(&p, TIMEOUT_S, &r);
        cr_assert(r.signal == SIGKILL || r.exit_code == 0, "start %d failed by itself:\n%s", k + 1, r.err);
        hits += r.signal == SIGKILL;
        mt_cli_result_free(&r);
    }
    start(&p, killed);
    mt_cli_wait(&p, TIMEOUT_S, &r);
    cr_assert_eq(r.exit_code, 0, "the last resume failed:\n%s", r.err);
    mt_cli_result_free(&r);
    fprintf(stderr, "kill test: %d of %d kills landed before the run ended, %d inside a checkpoint write\n",
            hits, KILLS, torn_writes(killed));

    const char *differs = mt_test_state_differs(reference, killed, STEPS);
    cr_assert_null(differs, "%s after %d kills differs from the uninterrupted run's", differs, hits);
}
