#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static mt_status reserve(mt_ids *a, size_t extra) {
    if (a->n + extra <= a->cap) return MT_OK;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < a->n + extra) cap *= 2;
    int32_t *ids = realloc(a->ids, cap * sizeof *ids);
    if (!ids) return mt_fail(MT_ERR_NOMEM, "token ids: cannot grow to %zu ids", cap);
    a->ids = ids;
    a->cap = cap;
    return MT_OK;
}

mt_status mt_ids_push(mt_ids *a, int32_t id) {
    MT_TRY(reserve(a, 1));
    a->ids[a->n++] = id;
    return MT_OK;
}

mt_status mt_ids_append(mt_ids *a, const int32_t *ids, size_t n) {
    if (!n) return MT_OK;
    MT_TRY(reserve(a, n));
    memcpy(a->ids + a->n, ids, n * sizeof *ids);
    a->n += n;
    return MT_OK;
}

void mt_ids_free(mt_ids *a) {
    free(a->ids);
    *a = (mt_ids){0};
}
