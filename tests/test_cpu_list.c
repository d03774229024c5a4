/* --opt-cores lists: ranges and commas in the order written; a core the machine lacks, a repeat
 * or bad syntax refused, naming the fault. */
#include <criterion/criterion.h>
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
