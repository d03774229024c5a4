#include "io/hub_form.h"

#include "io/mxfp4.h"

/* The held row of an expert's layout row r, and back: interleaved, row r of the first half is held
 * at 2r and row r of the second at 2(r - half) + 1. */
static int64_t held_row(mt_hub_form f, int64_t rows, int64_t r) {
    if (!f.interleaved) return r;
    return r < rows / 2 ? 2 * r : 2 * (r - rows / 2) + 1;
}

static int64_t layout_row(mt_hub_form f, int64_t rows, int64_t held) {
    return f.interleaved ? held % 2 * (rows / 2) + held / 2 : held;
}

static mt_status read_row(const mt_held_tensor *h, int64_t r, float *out) {
    int64_t e = r / h->rows, held = held_row(h->form, h->rows, r % h->rows);
    if (h->scales) return mt_mxfp4_decode_rows(h->src, h->scales, e * h->rows + held, 1, out);
    if (!h->form.transposed) return mt_st_tensor_gather_f32(h->src, (e * h->rows + held) * h->cols, h->cols, 1, out);
    /* expert e's [cols, rows]: the layout's row is its column `held` */
    return mt_st_tensor_gather_f32(h->src, e * h->cols * h->rows + held, h->cols, h->rows, out);
}

mt_status mt_held_read_rows(const mt_held_tensor *h, int64_t r0, int64_t n, float *dst) {
    int64_t bad = -1;
#pragma omp parallel for schedule(static) if (n * h->cols >= (1 << 20))
    for (int64_t k = 0; k < n; k++) {
        if (read_row(h, r0 + k, dst + k * h->cols) == MT_OK) continue;
#pragma omp critical(mt_held_bad_row)
        if (bad < 0 || r0 + k < bad) bad = r0 + k;
    }
    /* the first row that failed again, on this thread, for its message */
    return bad < 0 ? MT_OK : read_row(h, bad, dst);
}

static void release_experts(const mt_st_tensor *t, int64_t experts, int64_t e0, int64_t e1) {
    size_t per = t->nbytes / (size_t)experts;
    mt_st_tensor_release(t, (size_t)e0 * per, (size_t)e1 * per);
}

void mt_held_release(const mt_held_tensor *h, int64_t e0, int64_t e1) {
    release_experts(h->src, h->experts, e0, e1);
    if (h->scales) release_experts(h->scales, h->experts, e0, e1);
}

/* Counters stepped element by element, not divided out for each: an export of gpt-oss-120b gathers
 * 115 billion of them. */
void mt_held_gather(const void *held_masters, int64_t first, int64_t n, float *dst) {
    const mt_held_masters *m = held_masters;
    int64_t rows = m->rows, cols = m->cols, per = rows * cols;
    /* the file's order: expert e, then (held row, column) or, transposed, (column, held row) */
    int64_t inner = m->form.transposed ? rows : cols, outer = m->form.transposed ? cols : rows;
    int64_t e = first / per, o = first % per / inner, i = first % inner;
    for (int64_t k = 0; k < n; k++) {
        int64_t held = m->form.transposed ? i : o, c = m->form.transposed ? o : i;
        dst[k] = m->masters[e * per + layout_row(m->form, rows, held) * cols + c];
        if (++i < inner) continue;
        i = 0;
        if (++o < outer) continue;
        o = 0;
        e++;
    }
}
