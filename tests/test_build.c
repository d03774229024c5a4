/* The build itself: a plain `make` (no goal) builds the megatrain command, not whatever rule comes
 * first in the Makefile. Checked as a dry run (`make -n`) into a scratch build directory, from the
 * repository root the tests run in. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(build);

Test(build, plain_make_builds_the_command) {
    char scratch[] = "/tmp/mt_build_XXXXXX", command[PATH_MAX + 200];
    cr_assert_not_null(mkdtemp(scratch));
    /* An outer make's jobserver and flags are not this make's. */
    snprintf(command, sizeof command, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n BUILD=%s CUDA=0 2>&1", scratch);
    FILE *p = popen(command, "r");
    cr_assert_not_null(p);
    char line[1 << 14], linked[PATH_MAX + 32];
    snprintf(linked, sizeof linked, "-o %s/megatrain ", scratch);
    int links = 0;
    while (fgets(line, sizeof line, p)) links |= strstr(line, linked) != NULL;
    int status = pclose(p);
    rmdir(scratch);
    cr_expect_eq(status, 0, "%s failed", command);
    cr_expect(links, "a plain make does not link %s/megatrain", scratch);
}
