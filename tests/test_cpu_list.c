/* --opt-cores lists: ranges and commas in the order written; a core the machine lacks, a repeat
 * or bad syntax refused, naming the fault. */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "util/cpu_list.h"

Test(cpu_list, ranges_and_commas_in_order) {
    int *cores, count;
    cr_assert_eq(mt_cpu_list_parse("1,0", "--opt-cores", &cores, &count), MT_OK, "%s", mt_error());
    cr_assert_eq(count, 2);
    cr_assert(cores[0] == 1 && cores[1] == 0);
    free(cores);
    cr_assert_eq(mt_cpu_list_parse("0-1", "--opt-cores", &cores, &count), MT_OK, "%s", mt_error());
    cr_assert(count == 2 && cores[0] == 0 && cores[1] == 1);
    free(cores);
}

Test(cpu_list, bad_lists_refused_naming_the_fault) {
    int *cores, count;
    cr_assert_eq(mt_cpu_list_parse("0,100000", "--opt-cores", &cores, &count), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "core 100000 is past"), "%s", mt_error());
    cr_assert_eq(mt_cpu_list_parse("0,0", "--opt-cores", &cores, &count), MT_ERR_INVALID);
    cr_assert(strstr(mt_error(), "core 0 is listed twice"), "%s", mt_error());
    cr_assert_eq(mt_cpu_list_parse("0-x", "--opt-cores", &cores, &count), MT_ERR_INVALID);
    cr_assert_eq(mt_cpu_list_parse("", "--opt-cores", &cores, &count), MT_ERR_INVALID);
}

/* The default optimizer cores: every allowed core in order but the lowest, or none below three. */
Test(cpu_list, all_but_the_first_allowed_core) {
    cpu_set_t allowed;
    cr_assert_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int first = 0;
    while (!CPU_ISSET(first, &allowed)) first++;
    int *cores, count;
    cr_assert_eq(mt_cpu_list_all_but_first(&cores, &count), MT_OK, "%s", mt_error());
    int n = CPU_COUNT(&allowed);
    if (n < 3) {
        cr_expect(count == 0 && cores == NULL, "%d cores given out of %d allowed", count, n);
        return;
    }
    cr_assert_eq(count, n - 1);
    for (int i = 0; i < count; i++) {
        cr_expect(cores[i] != first && CPU_ISSET(cores[i], &allowed), "core %d", cores[i]);
        if (i) cr_expect_gt(cores[i], cores[i - 1]);
    }
    free(cores);
}

/* The same on sets this machine may not have: sixteen cores, a sparse set, and two. */
Test(cpu_list, all_but_the_first_of_a_set) {
    cpu_set_t set;
    int *cores, count;
    CPU_ZERO(&set);
    for (int c = 0; c < 16; c++) CPU_SET(c, &set);
    cr_assert_eq(mt_cpu_list_all_but_first_of(&set, &cores, &count), MT_OK, "%s", mt_error());
    cr_assert_eq(count, 15);
    for (int i = 0; i < 15; i++) cr_expect_eq(cores[i], i + 1);
    free(cores);

    CPU_ZERO(&set);
    int sparse[] = {3, 7, 8, 40};
    for (int i = 0; i < 4; i++) CPU_SET(sparse[i], &set);
    cr_assert_eq(mt_cpu_list_all_but_first_of(&set, &cores, &count), MT_OK, "%s", mt_error());
    cr_assert(count == 3 && cores[0] == 7 && cores[1] == 8 && cores[2] == 40, "%d cores", count);
    free(cores);

    CPU_ZERO(&set);
    CPU_SET(0, &set);
    CPU_SET(1, &set);
    cr_assert_eq(mt_cpu_list_all_but_first_of(&set, &cores, &count), MT_OK, "%s", mt_error());
    cr_expect(count == 0 && cores == NULL, "two cores: none pinned");
}
