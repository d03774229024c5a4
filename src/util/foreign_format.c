#include "util/foreign_format.h"

#include <stdio.h>
#include <string.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The format's name, or NULL for one megatrain may read. Hugging Face datasets' .arrow files are
 * Arrow streams, which begin with a continuation marker (0xFFFFFFFF). */
static const char *foreign(const char *path) {
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    if ((n >= 4 && !memcmp(head, "PAR1", 4)) || ends_with(path, ".parquet")) return "a Parquet file";
    if ((n >= 6 && !memcmp(head, "ARROW1", 6)) || (n >= 4 && !memcmp(head, "\xff\xff\xff\xff", 4)) ||
        ends_with(path, ".arrow") || ends_with(path, ".feather"))
        return "an Arrow file";
    if (n >= 2 && !memcmp(head, "\x1f\x8b", 2)) return "gzip-compressed";
    if (n >= 4 && !memcmp(head, "\x28\xb5\x2f\xfd", 4)) return "zstd-compressed";
    return NULL;
}

mt_status mt_refuse_foreign_format(const char *path) {
    const char *what = foreign(path);
    if (!what) return MT_OK;
    return mt_fail(MT_ERR_INVALID, "%s is %s, which megatrain does not read: it reads " MT_READABLE_FORMATS
                   "; decompress or convert it (the datasets library writes JSONL: "
                   "load_dataset(...).to_json(\"data.jsonl\"))", path, what);
}
