/* The host memory a run may use (util/host_memory.h): MemAvailable plus the VM's balloon, capped
 * by every memory cgroup of the process (v2 and v1, each level), and --host-mem in its place
 * (plan for another machine; train and bench refuse against it up front). The /proc and cgroup
 * readers run on fake files and trees. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "hf_test_files.h"
#include "run_fixture.h"
#include "util/host_memory.h"

#define GIB ((int64_t)1 << 30)

/* dir/rel/file holding `text`, making the directories. */
static void put(const char *dir, const char *rel, const char *file, const char *text) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; *p; p++)
        if (*p == '/') *p = '\0', mkdir(path, 0755), *p = '/';
    mkdir(path, 0755);
    char name[PATH_MAX + 64];
    snprintf(name, sizeof name, "%s/%s", path, file);
    hf_test_write_text(name, text);
}

Test(host_memory, reads_meminfo_and_vmstat_fields) {
    char dir[PATH_MAX], path[PATH_MAX];
    hf_test_mkdtemp(dir);
    hf_test_write_text(hf_test_path(path, dir, "meminfo"), "MemTotal:       32505856 kB\nMemAvailableX:  1 kB\n"
                                                         "MemAvailable:   30408704 kB\n");
    cr_assert_eq(mt_host_memory_proc_field(path, "MemAvailable"), 30408704);
    cr_assert_eq(mt_host_memory_proc_field(path, "MemTotal"), 32505856);
    cr_assert_eq(mt_host_memory_proc_field(path, "SwapTotal"), -1, "an absent field is unknown");
    hf_test_write_text(hf_test_path(path, dir, "vmstat"), "nr_free_pages 12\nnr_balloon_pages 126091264\n");
    cr_assert_eq(mt_host_memory_proc_field(path, "nr_balloon_pages"), 126091264);
    cr_assert_eq(mt_host_memory_proc_field(hf_test_path(path, dir, "absent"), "nr_balloon_pages"), -1);
    hf_test_rmtree(dir);
}

Test(host_memory, the_balloon_counts_and_the_cgroup_caps) {
    /* The 512 GiB VM at start: 30 GiB available, 481 GiB in the balloon, no cgroup limit. */
    cr_assert_eq(mt_host_memory_combine(30 * GIB, 481 * GIB, -1), 511 * GIB);
    cr_assert_eq(mt_host_memory_combine(30 * GIB, 481 * GIB, 100 * GIB), 100 * GIB, "the cgroup caps it");
    cr_assert_eq(mt_host_memory_combine(30 * GIB, 0, 100 * GIB), 30 * GIB, "and never raises it");
    cr_assert_eq(mt_host_memory_combine(-1, 0, 8 * GIB), 8 * GIB, "without meminfo the cgroup's room");
    cr_assert_eq(mt_host_memory_combine(-1, 0, -1), -1, "nothing known");
}

Test(host_memory, every_cgroup_level_of_both_versions_caps_it) {
    char dir[PATH_MAX], proc[PATH_MAX];
    hf_test_mkdtemp(dir);
    /* v2: /a/b under /a; b has no limit, a leaves 10 - 4 GiB. */
    put(dir, "root/a", "memory.max", "10737418240\n");
    put(dir, "root/a", "memory.current", "4294967296\n");
    put(dir, "root/a/b", "memory.max", "max\n");
    put(dir, "root/a/b", "memory.current", "4294967296\n");
    hf_test_write_text(hf_test_path(proc, dir, "cgroup"), "0::/a/b\n");
    char root[PATH_MAX];
    hf_test_path(root, dir, "root");
    cr_assert_eq(mt_host_memory_cgroup_room(proc, root), 6 * GIB);
    /* v1, as the lent VMs mount it: the group says "no limit", its parent 3 GiB with 1 used. */
    put(dir, "root/memory/api/x", "memory.limit_in_bytes", "9223372036854771712\n");
    put(dir, "root/memory/api/x", "memory.usage_in_bytes", "1073741824\n");
    put(dir, "root/memory/api", "memory.limit_in_bytes", "3221225472\n");
    put(dir, "root/memory/api", "memory.usage_in_bytes", "1073741824\n");
    hf_test_write_text(proc, "9:name=systemd:/\n4:memory:/api/x\n3:cpuset:/\n0::/\n");
    cr_assert_eq(mt_host_memory_cgroup_room(proc, root), 2 * GIB);
    hf_test_write_text(proc, "4:cpu,memory:/api/x\n0::/a/b\n");
    cr_assert_eq(mt_host_memory_cgroup_room(proc, root), 2 * GIB, "the least of both");
    hf_test_write_text(proc, "4:cpuset:/api/x\n0::/\n");
    cr_assert_eq(mt_host_memory_cgroup_room(proc, root), -1, "no memory controller, no limit");
    /* Usage past the limit leaves nothing. */
    put(dir, "root/memory/api", "memory.usage_in_bytes", "4294967296\n");
    hf_test_write_text(proc, "4:memory:/api/x\n");
    cr_assert_eq(mt_host_memory_cgroup_room(proc, root), 0);
    hf_test_rmtree(dir);
}

/* The plan's "fit  host ..." line, which must say `verdict` against --host-mem. */
static void expect_fit(const char *out, const char *verdict) {
    const char *line = strstr(out, "fit       host needs");
    cr_assert_not_null(line, "no fit line:\n%s", out);
    char text[512];
    snprintf(text, sizeof text, "%.*s", (int)strcspn(line, "\n"), line);
    cr_assert(strstr(text, "available (--host-mem, less ") && strstr(text, " GB this process holds)"),
              "not against --host-mem: %s", text);
    size_t len = strlen(text), want = strlen(verdict);
    cr_assert(len > want && !strcmp(text + len - want, verdict) && text[len - want - 1] == ' ', "%s", text);
}

Test(host_memory, plan_takes_host_mem_in_place_of_the_machine) {
    mt_cli_result r;
    setenv("MT_TEST_HOST_AVAILABLE", "64KiB", 1);
    mt_cli_run(&r, 60.0, "plan", "--preset", "tiny", "--backend", "cpu", "--host-mem", "1TiB", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    expect_fit(r.out, "fits");
    cr_assert_not_null(strstr(r.out, " 1099."), "1 TiB less a plan's few megabytes:\n%s", r.out);
    mt_cli_result_free(&r);
    unsetenv("MT_TEST_HOST_AVAILABLE");
    mt_cli_run(&r, 60.0, "plan", "--preset", "tiny", "--backend", "cpu", "--host-mem", "1KiB", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    expect_fit(r.out, "does NOT fit");
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60.0, "plan", "--preset", "tiny", "--backend", "cpu", "--host-mem", "0", NULL);
    cr_assert_eq(r.exit_code, 2, "--host-mem 0 must be refused as an option:\n%s", r.err);
    cr_assert_not_null(strstr(r.err, "--host-mem"), "%s", r.err);
    mt_cli_result_free(&r);
}

/* A 14B model on a 512 GiB host with the H200's 139 GiB: plan says it fits, for another machine. */
Test(host_memory, plan_sizes_14b_for_a_512_gib_host) {
    mt_cli_result r;
    mt_cli_run(&r, 120.0, "plan", "--preset", "qwen2.5-14b", "--backend", "cuda", "--gpu-mem", "139GiB", "--host-mem",
               "512GiB", "--seq", "4096", "--batch", "4", "--rate-adamw", "3.7", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    expect_fit(r.out, "fits");
    /* The 14B's masters are 4 bytes a parameter: its bf16 high halves (what streams) and low halves. */
    cr_assert_not_null(strstr(r.out, "fp32 master: high halves (the bf16 weights) 29.54 GB + fp32 master: low halves 29.54 GB"),
                       "%s", r.out);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 120.0, "plan", "--preset", "qwen2.5-14b", "--backend", "cuda", "--gpu-mem", "139GiB", "--host-mem",
               "128GiB", "--seq", "4096", "--batch", "4", "--rate-adamw", "3.7", NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    expect_fit(r.out, "does NOT fit");
    mt_cli_result_free(&r);
}

/* train and bench refuse against --host-mem before allocating, naming the classes. */
Test(host_memory, train_and_bench_refuse_against_host_mem) {
    char dir[PATH_MAX], corpus[PATH_MAX], run[PATH_MAX];
    mt_test_make_run_dirs(dir, corpus, run);
    mt_cli_result r;
    mt_cli_run(&r, 60.0, "bench", "--preset", "tiny", "--backend", "cpu", "--steps", "1", "--host-mem", "64KiB", NULL);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert(strstr(r.err, "fp32 master") && strstr(r.err, "available (--host-mem, less "), "%s", r.err);
    mt_cli_result_free(&r);
    mt_cli_run(&r, 60.0, "train", MT_TINY_STEP, "--steps", "1", "--data", corpus, "--out", run, "--host-mem", "64KiB",
               NULL);
    cr_assert_eq(r.exit_code, 1, "%s", r.err);
    cr_assert(strstr(r.err, "Adam moments") && strstr(r.err, "available (--host-mem, less "), "%s", r.err);
    mt_cli_result_free(&r);
    hf_test_rmtree(dir);
}

/* --host-mem is the process's total: what it holds already counts against it, so that a save's
 * staging, asked for late in a run, gets what is left, not the whole figure again. */
Test(host_memory, host_mem_is_less_what_the_process_holds) {
    mt_host_memory_give(GIB * 1024);
    mt_host_memory before = mt_host_memory_available();
    cr_assert(before.bytes < GIB * 1024 && before.bytes > GIB * 1023, "%lld", (long long)before.bytes);
    cr_assert_not_null(strstr(before.source, "--host-mem"), "%s", before.source);
    size_t held = (size_t)256 << 20;
    char *p = malloc(held);
    cr_assert_not_null(p);
    memset(p, 1, held);
    mt_host_memory after = mt_host_memory_available();
    cr_assert_geq(before.bytes - after.bytes, (int64_t)held * 3 / 4, "holding 256 MiB more left %lld of %lld bytes",
                  (long long)after.bytes, (long long)before.bytes);
    free(p);
    mt_host_memory_give(0);
    cr_assert_null(strstr(mt_host_memory_available().source, "--host-mem"), "0 gives the machine's report back");
}
