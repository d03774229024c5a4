#include "backend/alloc_fault.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static pthread_once_t parsed = PTHREAD_ONCE_INIT;
static int target_kind = -1; /* the kind the hook fails; -1 when the variable is unset */
static long target_index;    /* 1-based */
static atomic_long seen;     /* allocations of that kind so far */

static void parse(void) {
    const char *spec = getenv("MT_TEST_ALLOC_FAIL");
    if (!spec || !*spec) return;
    static const char *const names[2] = {[MT_ALLOC_PINNED] = "pinned:", [MT_ALLOC_DEVICE] = "device:"};
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(names[k]);
        if (strncmp(spec, names[k], len) != 0) continue;
        char *end;
        long n = strtol(spec + len, &end, 10);
        if (*end == '\0' && n >= 1) {
            target_kind = k;
            target_index = n;
            return;
        }
    }
    /* A misspelled hook would quietly fail nothing: say so. */
    mt_log_warn("MT_TEST_ALLOC_FAIL=%s ignored: expected pinned:N or device:N with N >= 1", spec);
}

int mt_alloc_fault_hit(mt_alloc_kind kind) {
    pthread_once(&parsed, parse);
    if ((int)kind != target_kind) return 0;
    return atomic_fetch_add(&seen, 1) + 1 == target_index;
}

const char *mt_alloc_fault_note(int hit) { return hit ? " (test hook MT_TEST_ALLOC_FAIL)" : ""; }
