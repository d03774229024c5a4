/* A tiny mixture of experts of each family through the megatrain command: it trains from its
 * config.json, logs the load-balancing loss and the experts' load apart from the cross-entropy, and
 * 6 steps resumed from the step-3 checkpoint end with the bits of 6 straight steps (the router's
 * statistics and the aux loss carry nothing across steps that a checkpoint would have to hold). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "io/hf_config.h"
#include "run_fixture.h"
#include "tiny_model.h"

#define TIMEOUT_S 60.0
#define STEP_ARGS "--seq", "16", "--batch", "2", "--micro-batches", "2", "--backend", "cpu", "--eval-every", "0"

static char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];

static void make_fixtures(void) { mt_test_make_run_dirs(dir, corpus, run); }
static void remove_fixtures(void) { hf_test_rmtree(dir); }

TestSuite(moe_cli, .init = make_fixtures, .fini = remove_fixtures);

static const char *in_dir(const char *name) {
    static char paths[4][PATH_MAX + 64];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

/* The family's tiny model over bytes (the corpus's tokens), its config.json in dir/<name>/. */
static const char *write_config(mt_arch arch, int aux, const char *name) {
    mt_config c = mt_tiny_config_moe(arch, aux);
    c.vocab_size = 256;
    const char *where = in_dir(name);
    cr_assert_eq(mkdir(where, 0755), 0, "cannot create %s", where);
    cr_assert_eq(mt_hf_config_write(&c, "float32", where), MT_OK, "%s", mt_error());
    static char config[4][PATH_MAX + 96];
    static int next;
    char *p = config[next++ % 4];
    snprintf(p, sizeof config[0], "%s/config.json", where);
    return p;
}

static void train(const char *config, const char *out, int resume) {
    mt_cli_result r;
    if (resume)
        mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, STEP_ARGS, "--steps", "6",
                   "--ckpt-every", "3", "--out", out, "--resume", NULL);
    else
        mt_cli_run(&r, TIMEOUT_S, "train", "--config", config, "--data", corpus, STEP_ARGS, "--steps", "6",
                   "--ckpt-every", "3", "--out", out, NULL);
    cr_assert_eq(r.exit_code, 0, "train failed:\n%s", r.err);
    if (resume) cr_assert(strstr(r.err, "ckpt-000003"), "did not resume from step 3:\n%s", r.err);
    mt_cli_result_free(&r);
}

/* Every step's line holds the cross-entropy, the aux loss and the load, each a number in range. */
static void expect_metrics(const char *out, int experts) {
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    FILE *f = fopen(path, "r");
    cr_assert(f, "no %s", path);
    char line[4096];
    int steps = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *ev = json_loads(line, 0, NULL);
        cr_assert(ev, "%s: not JSON: %s", path, line);
        if (json_object_get(ev, "loss")) {
            double aux = json_number_value(json_object_get(ev, "aux_loss"));
            double most = json_number_value(json_object_get(ev, "expert_load_max"));
            double least = json_number_value(json_object_get(ev, "expert_load_min"));
            cr_expect(aux > 0 && most >= 1.0 / experts && least <= 1.0 / experts && least >= 0 && most <= 1,
                      "%s: aux %g, load %g..%g", path, aux, least, most);
            steps++;
        }
        json_decref(ev);
    }
    fclose(f);
    cr_expect_eq(steps, 6, "%s: %d steps logged", path, steps);
}

static void resumes_bitwise(mt_arch arch, int aux, const char *name) {
    const char *config = write_config(arch, aux, name);
    char straight[PATH_MAX + 64], resumed[PATH_MAX + 64], cut[PATH_MAX + 96];
    snprintf(straight, sizeof straight, "%s/%s-straight", dir, name);
    snprintf(resumed, sizeof resumed, "%s/%s-resumed", dir, name);
    train(config, straight, 0);
    train(config, resumed, 0);
    snprintf(cut, sizeof cut, "%s/ckpt-000006", resumed);
    hf_test_rmtree(cut);
    train(config, resumed, 1);
    cr_expect_null(mt_test_state_differs(straight, resumed, 6), "%s: the resumed run's state differs", name);
    cr_expect(!mt_test_files_equal(mt_test_blob(straight, 3, "master"), mt_test_blob(straight, 6, "master")),
              "%s: nothing changed from step 3 to 6: the comparison proves nothing", name);
    mt_config c = mt_tiny_config_moe(arch, aux);
    expect_metrics(straight, c.num_experts);
}

Test(moe_cli, qwen3_moe_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_QWEN3_MOE, 1, "qwen3moe"); }
Test(moe_cli, qwen2_moe_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_QWEN2_MOE, 0, "qwen2moe"); }
Test(moe_cli, mixtral_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_MIXTRAL, 1, "mixtral"); }
Test(moe_cli, olmoe_trains_and_resumes_bitwise) { resumes_bitwise(MT_ARCH_OLMOE, 0, "olmoe"); }
