/* The host memory a run may use, and where that number came from.
 *
 * Not MemTotal: on the lent VMs memory starts small and grows as it is touched (the 512 GiB
 * machine read 31 GiB of MemTotal at start and 271 GiB once 192 GiB had been filled), the rest
 * held by the hypervisor's balloon. So what is available is
 *     MemAvailable + the balloon's pages (nr_balloon_pages in /proc/vmstat: given back as the
 *                                          guest touches memory)
 * capped by what the process's memory cgroups still allow (v2 memory.max - memory.current, v1
 * memory.limit_in_bytes - memory.usage_in_bytes, the least over the cgroup and its ancestors).
 * Where neither says what the machine will give (memory hot-plugged on demand), --host-mem says
 * it (mt_host_memory_give); MT_TEST_HOST_AVAILABLE (a size) stands in for the machine's report in
 * tests of the refusal. */
#ifndef MT_UTIL_HOST_MEMORY_H
#define MT_UTIL_HOST_MEMORY_H

#include <stdint.h>

typedef struct {
    int64_t bytes;    /* available to the run; -1: unknown */
    char source[192]; /* how: "--host-mem", "MemAvailable 30.1 GB + balloon 481.2 GB, ..." */
} mt_host_memory;

/* --host-mem: from now on what is available is `bytes` less what the process holds (its resident
 * set), in place of the machine's report (0: the machine's report again). */
void mt_host_memory_give(int64_t bytes);

/* What is available now, by the rule above. */
mt_host_memory mt_host_memory_available(void);

/* The most host memory this process has held resident (VmHWM), in bytes; -1 when unknown. */
int64_t mt_host_memory_peak(void);

/* The rule on its parts (each -1 when unknown): mem_available + balloon, capped by cgroup_room. */
int64_t mt_host_memory_combine(int64_t mem_available, int64_t balloon, int64_t cgroup_room);

/* The least room any memory cgroup of the process leaves (v2 and v1, each level up to the root),
 * read from `proc_cgroup` (/proc/self/cgroup) and the hierarchy mounted at `cgroup_root`
 * (/sys/fs/cgroup); -1 when no cgroup sets a limit. Parameters for tests. */
int64_t mt_host_memory_cgroup_room(const char *proc_cgroup, const char *cgroup_root);

/* A "Name: value" or "name value" field of a /proc file (meminfo in kB, vmstat in pages), as the
 * number written; -1 when absent. */
int64_t mt_host_memory_proc_field(const char *path, const char *name);

#endif
