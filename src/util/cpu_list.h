/* A list of CPU cores as a user writes it ("2-15", "4,5,6", "0,2-3"), checked against the
 * cores this machine has and this process may run on. */
#ifndef MT_UTIL_CPU_LIST_H
#define MT_UTIL_CPU_LIST_H

#include <sched.h>

#include "util/status.h"

/* Parses `text` into a malloc'd array of core ids in the order written (free it); `what` names
 * the list in messages (e.g. "--opt-cores"). Refuses syntax errors, repeated cores, and cores
 * the machine lacks or the process may not use, naming the bad core. */
mt_status mt_cpu_list_parse(const char *text, const char *what, int **cores, int *count);

/* The cores of `allowed` but the lowest (left to the threads that issue work), in order,
 * malloc'd; none (count 0, *cores NULL) when it holds fewer than three. */
mt_status mt_cpu_list_all_but_first_of(const cpu_set_t *allowed, int **cores, int *count);
/* The same of the cores this process may run on. */
mt_status mt_cpu_list_all_but_first(int **cores, int *count);

/* A team of threads, pinned one to a core in order when `cores` is set (count of them = threads);
 * unpinned otherwise (cores NULL, count 0). */
typedef struct {
    int threads;
    int *cores; /* malloc'd */
    int count;
} mt_cpu_team;

/* The NUMA nodes of the list file at `path` (/sys/devices/system/node/online: "0", "0-1",
 * "0,2-3"); 1 when it is absent or unreadable (a machine without NUMA). */
int mt_numa_node_count(const char *path);
/* The entries of a list file of that form (a CPU cache's shared_cpu_list, the online CPUs); 0 when
 * it is absent or unreadable. */
int mt_list_file_count(const char *path);

/* Pins the calling thread to one core. */
mt_status mt_cpu_pin_self(int core);

#endif
