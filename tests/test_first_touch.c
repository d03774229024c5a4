/* The host state's first touch and the optimizer's threads on a large host: the store's fp32
 * masters and moments are faulted in at creation by the optimizer's team in the optimizer's own
 * split (so that on several NUMA nodes each thread's share lies on its node), the team comes from
 * the process's CPU set with no cap, and the NUMA node count is read from sysfs. This machine has
 * one node: where the pages land is the kernel's; what is checked is who touches what. */
#include <criterion/criterion.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/engine.h"
#include "hf_test_files.h"
#include "tiny_model.h"

Test(first_touch, the_adamw_split_covers_each_tensor_once) {
    size_t sizes[] = {1, 63, 64, 65, 1000, 123457, (size_t)1 << 20, 70778880 /* a 14B MLP matrix */};
    int teams[] = {1, 2, 3, 7, 63, 127};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t j = 0; j < sizeof teams / sizeof teams[0]; j++) {
            size_t n = sizes[i], next = 0;
            int nt = mt_adamw_threads(n, teams[j]);
            cr_assert(nt >= 1 && nt <= teams[j], "%d threads for %zu elements of a team of %d", nt, n, teams[j]);
            for (int t = 0; t < nt; t++) {
                size_t begin, count;
                mt_adamw_share(n, t, nt, &begin, &count);
                if (!count) continue;
                cr_assert_eq(begin, next, "n %zu, thread %d of %d: a gap or an overlap", n, t, nt);
                cr_assert_eq(begin % 64, 0, "shares start on 64-element chunks (no shared cache line)");
                next = begin + count;
            }
            cr_assert_eq(next, n, "n %zu over %d threads: %zu covered", n, nt, next);
        }
    /* A 14B MLP matrix keeps the whole 63-thread team, in shares of megabytes. */
    cr_assert_eq(mt_adamw_threads(70778880, 63), 63);
    size_t begin, count;
    mt_adamw_share(70778880, 0, 63, &begin, &count);
    cr_assert_gt(count * 4, (size_t)2 << 20, "a share of %zu bytes is smaller than a huge page", count * 4);
}

/* Every page of [p, p + bytes) is resident. */
static size_t pages_missing(const void *p, size_t bytes) {
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = (bytes + (size_t)page - 1) / (size_t)page, missing = 0;
    unsigned char *vec = malloc(pages);
    cr_assert_eq(mincore((void *)p, bytes, vec), 0);
    for (size_t i = 0; i < pages; i++) missing += !(vec[i] & 1);
    free(vec);
    return missing;
}

static void check_touched(const mt_cpu_team *team) {
    mt_backend *be;
    cr_assert_eq(mt_backend_cpu_create(&be, 1), MT_OK, "%s", mt_error());
    mt_config cfg = mt_tiny_wider(mt_tiny_config_gqa());
    mt_layout lay;
    cr_assert_eq(mt_layout_init(&lay, &cfg), MT_OK);
    cpu_set_t before, after;
    sched_getaffinity(0, sizeof before, &before);
    mt_store s;
    cr_assert_eq(mt_store_create_touched(&s, &lay, be, MT_MOMENTS_F32, team), MT_OK, "%s", mt_error());
    size_t n = (size_t)lay.total_numel;
    cr_assert_eq(pages_missing(mt_store_f32(&s), n * 4), 0, "fp32 masters not faulted in");
    cr_assert_eq(pages_missing(s.moments.m, n * 4), 0, "first moments not faulted in");
    cr_assert_eq(pages_missing(s.moments.v, n * 4), 0, "second moments not faulted in");
    for (size_t i = 0; i < n; i++)
        cr_assert(mt_store_f32(&s)[i] == 0 && ((float *)s.moments.m)[i] == 0 && ((float *)s.moments.v)[i] == 0, "element %zu", i);
    sched_getaffinity(0, sizeof after, &after);
    cr_assert(CPU_EQUAL(&before, &after), "the creating thread was left pinned");
    mt_store_free(&s);
    mt_layout_free(&lay);
    mt_backend_destroy(be);
}

Test(first_touch, the_store_is_faulted_in_by_a_pinned_team_that_leaves_the_caller_alone) {
    cpu_set_t allowed;
    sched_getaffinity(0, sizeof allowed, &allowed);
    int cores[2], count = 0;
    for (int c = 0; c < CPU_SETSIZE && count < 2; c++)
        if (CPU_ISSET(c, &allowed)) cores[count++] = c;
    mt_cpu_team team = {.threads = count, .cores = cores, .count = count};
    check_touched(&team);
    check_touched(NULL);
}

Test(first_touch, the_optimizer_team_follows_the_cpu_set) {
    cpu_set_t allowed;
    sched_getaffinity(0, sizeof allowed, &allowed);
    int cpus = CPU_COUNT(&allowed);
    mt_engine_options o = mt_engine_defaults();
    mt_cpu_team team;
    o.opt_cores = MT_OPT_CORES_AUTO;
    cr_assert_eq(mt_engine_optimizer_team(&o, &team), MT_OK, "%s", mt_error());
    if (cpus >= 3) cr_assert(team.count == cpus - 1 && team.threads == cpus - 1, "%d CPUs: %d", cpus, team.count);
    else cr_assert(team.count == 0 && team.cores == NULL, "below three CPUs nothing is pinned");
    free(team.cores);
    o.opt_cores = NULL;
    cr_assert_eq(mt_engine_optimizer_team(&o, &team), MT_OK, "%s", mt_error());
#ifdef _OPENMP
    if (!getenv("OMP_NUM_THREADS"))
        cr_assert_eq(team.threads, cpus > 1 ? cpus - 1 : 1, "every CPU of the set but one, no cap: %d of %d",
                     team.threads, cpus);
#endif
    cr_assert_null(team.cores);
    o.opt_cores = "0";
    o.opt_threads = 3;
    cr_assert_eq(mt_engine_optimizer_team(&o, &team), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "--opt-threads 3") && strstr(mt_error(), "--opt-cores '0'"), "%s", mt_error());
    o.opt_threads = 0;
    if (CPU_ISSET(0, &allowed)) {
        cr_assert_eq(mt_engine_optimizer_team(&o, &team), MT_OK, "%s", mt_error());
        cr_assert(team.threads == 1 && team.count == 1 && team.cores[0] == 0);
        free(team.cores);
    }
}

Test(first_touch, numa_nodes_from_sysfs) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    hf_test_path(path, dir, "online");
    const char *lists[] = {"0\n", "0-1\n", "0,2-3\n", "0-7\n", "garbage\n", ""};
    int nodes[] = {1, 2, 3, 8, 1, 1};
    for (int i = 0; i < 6; i++) {
        hf_test_write_text(path, lists[i]);
        cr_assert_eq(mt_numa_node_count(path), nodes[i], "'%s'", lists[i]);
    }
    cr_assert_eq(mt_numa_node_count(hf_test_path(path, dir, "absent")), 1, "no sysfs: one node");
    hf_test_rmtree(dir);
    cr_assert_geq(mt_numa_node_count("/sys/devices/system/node/online"), 1);
}
