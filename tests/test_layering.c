/* The include rule of docs/architecture.md ("Layers of the code"): each directory of src/ includes
 * only itself and the directories below it in the list, so that no arrow points upward and no
 * two directories include each other. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>

/* Top to bottom, as docs/architecture.md lists them. */
static const char *const layers[] = {"cli", "train", "plan", "engine", "tokenizer", "io", "backend", "optim",
                                     "model", "util", NULL};

static int rank(const char *dir, size_t len) {
    for (int i = 0; layers[i]; i++)
        if (strlen(layers[i]) == len && !strncmp(layers[i], dir, len)) return i;
    return -1;
}

static int files, violations;

static int check_file(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    const char *dot = strrchr(path, '.');
    if (type != FTW_F || !dot || (strcmp(dot, ".c") && strcmp(dot, ".h") && strcmp(dot, ".cu") && strcmp(dot, ".cuh")))
        return 0;
    const char *dir = path + strlen("src/"), *slash = strchr(dir, '/');
    if (!slash) return 0;
    int own = rank(dir, (size_t)(slash - dir));
    cr_assert_geq(own, 0, "%s: src/%.*s is not in docs/architecture.md's list of layers", path, (int)(slash - dir),
                  dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *inc = strstr(line, "#include \"");
        if (!inc) continue;
        const char *target = inc + strlen("#include \""), *end = strchr(target, '/');
        if (!end || end > strchr(target, '"')) continue; /* a file of its own directory, or include/ */
        int other = rank(target, (size_t)(end - target));
        if (other != own && (other < 0 || other < own)) {
            cr_log_error("%s includes %.*s, which is not below %.*s", path, (int)(end - target), target,
                         (int)(slash - dir), dir);
            violations++;
        }
    }
    fclose(f);
    files++;
    return 0;
}

Test(layering, every_include_points_down_the_list_of_layers) {
    cr_assert_eq(nftw("src", check_file, 16, FTW_PHYS), 0, "cannot walk src/ (run from the repository root)");
    cr_assert_gt(files, 100, "only %d source files under src/", files);
    cr_assert_eq(violations, 0, "%d includes point upward or sideways (see the log)", violations);
}
