#include "tmp_file.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[PATH_MAX];

/* The fuzzer exits from many places (time limit, crash); the directory goes with it. */
static void remove_dir(void) {
    char command[PATH_MAX + 16];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (system(command) != 0) fprintf(stderr, "fuzz: could not remove %s\n", dir);
}

const char *mt_fuzz_dir(void) {
    if (dir[0]) return dir;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/mt-fuzz-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_dir);
    return dir;
}

const char *mt_fuzz_write(const char *name, const uint8_t *data, size_t size) {
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", mt_fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}
