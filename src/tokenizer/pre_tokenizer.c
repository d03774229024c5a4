/* Pre-tokenizers: Split (a regex or string, with tokenizers' five delimiter behaviours), Metaspace,
 * ByteLevel, and Sequences of them. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/pre_tokenizer.h"

/* tokenizers' ByteLevel pattern (GPT-2's), used when use_regex is true. */
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char supported[] = "Split, Metaspace, ByteLevel, Sequence";

static mt_status parse_behavior(const json_t *spec, const char *what, mt_split_behavior *out) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    const char *b;
    MT_TRY(mt_json_string(spec, "behavior", 1, what, &b));
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(b, names[i])) {
            *out = (mt_split_behavior)i;
            return MT_OK;
        }
    return mt_fail(MT_ERR_INVALID, "%s: Split behavior '%s' is not one of tokenizers' five", what, b);
}

mt_status mt_prepend_parse(const json_t *spec, const char *what, mt_prepend_scheme *out) {
    const char *scheme;
    int add_prefix_space;
    MT_TRY(mt_json_string(spec, "prepend_scheme", 0, what, &scheme));
    MT_TRY(mt_json_bool(spec, "add_prefix_space", 1, what, &add_prefix_space));
    if (!scheme || !strcmp(scheme, "always")) *out = PREPEND_ALWAYS;
    else if (!strcmp(scheme, "first")) *out = PREPEND_FIRST;
    else if (!strcmp(scheme, "never")) *out = PREPEND_NEVER;
    else return mt_fail(MT_ERR_INVALID, "%s: prepend_scheme '%s' is not always, first or never", what, scheme);
    /* The older add_prefix_space: false means never, and contradicts any other scheme. */
    if (!add_prefix_space && scheme && *out != PREPEND_NEVER)
        return mt_fail(MT_ERR_INVALID, "%s: add_prefix_space false contradicts prepend_scheme '%s'", what, scheme);
    if (!add_prefix_space) *out = PREPEND_NEVER;
    return MT_OK;
}

static mt_status parse_step(const json_t *spec, const char *type, const char *what, mt_pre_step *step) {
    if (!strcmp(type, "Split")) {
        step->kind = PRE_SPLIT;
        MT_TRY(parse_behavior(spec, what, &step->behavior));
        MT_TRY(mt_json_bool(spec, "invert", 0, what, &step->invert));
        MT_TRY(mt_json_pattern(spec, "pattern", what, &step->pattern, &step->empty_pattern));
        step->has_pattern = !step->empty_pattern;
        return MT_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        step->kind = PRE_METASPACE;
        MT_TRY(mt_json_char(spec, "replacement", NULL, what, step->replacement, &step->replacement_len));
        MT_TRY(mt_prepend_parse(spec, what, &step->prepend));
        return mt_json_bool(spec, "split", 1, what, &step->split);
    }
    if (!strcmp(type, "ByteLevel")) {
        int use_regex;
        step->kind = PRE_BYTE_LEVEL;
        MT_TRY(mt_json_bool(spec, "add_prefix_space", 1, what, &step->add_prefix_space));
        MT_TRY(mt_json_bool(spec, "use_regex", 1, what, &use_regex));
        if (use_regex) MT_TRY(mt_regex_compile(&step->pattern, gpt2_pattern, strlen(gpt2_pattern), 0, what));
        step->has_pattern = use_regex;
        return MT_OK;
    }
    return mt_fail(MT_ERR_INVALID, "%s: pre-tokenizer '%s' is not supported (supported: %s)", what, type, supported);
}

static mt_status add_step(mt_tokenizer *tok, const json_t *spec, const char *type, const char *what) {
    mt_pre_step step = {0};
    mt_status st = parse_step(spec, type, what, &step);
    if (!st) st = mt_array_append(&tok->pre, &tok->n_pre, sizeof step, &step, what);
    if (st) mt_regex_free(&step.pattern);
    return st;
}

mt_status mt_pre_parse(mt_tokenizer *tok, const json_t *spec) {
    if (!spec || json_is_null(spec)) return MT_OK;
    char what[600];
    snprintf(what, sizeof what, "%s: pre_tokenizer", tok->path);
    MT_TRY(mt_json_steps(tok, spec, "pre-tokenizer", "pretokenizers", what, add_step));
    /* ByteLevel maps the text to its byte alphabet; the model does that here (its vocabulary is
     * looked up by raw bytes), which holds only when nothing comes after it. */
    for (size_t i = 0; i < tok->n_pre; i++) {
        if (tok->pre[i].kind != PRE_BYTE_LEVEL) continue;
        if (i + 1 != tok->n_pre)
            return mt_fail(MT_ERR_INVALID,
                           "%s: a ByteLevel pre-tokenizer followed by other pre-tokenizers is not supported", what);
        tok->bpe.byte_level = 1;
    }
    return MT_OK;
}

void mt_pre_free(mt_tokenizer *tok) {
    for (size_t i = 0; i < tok->n_pre; i++) mt_regex_free(&tok->pre[i].pattern);
    free(tok->pre);
    tok->pre = NULL;
    tok->n_pre = 0;
}

/* ---- applying one step ---- */

static mt_status push(mt_spans *sp, size_t start, size_t end, int is_match) {
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 64;
        mt_span *v = realloc(sp->v, cap * sizeof *v);
        if (!v) return mt_fail(MT_ERR_NOMEM, "pre-tokenizer: cannot grow a split list to %zu", cap);
        sp->v = v;
        sp->cap = cap;
    }
    sp->v[sp->n++] = (mt_span){start, end, is_match};
    return MT_OK;
}

void mt_spans_free(mt_spans *sp) {
    free(sp->v);
    *sp = (mt_spans){0};
}

/* Matches and the gaps between them, covering s, up to the first that ends past `stop` (len: all).
 * A NULL pattern matches `delim` (a literal character) at each occurrence. `open`: the text goes on
 * past len, and *more is set when a match there could change the answer. */
static mt_status find_matches(const mt_regex *re, int empty, const char *delim, size_t delim_len,
                              mt_regex_scratch *rx, const char *s, size_t len, size_t stop, int open, int *more,
                              mt_spans *out) {
    size_t pos = 0;
    *more = 0;
    while (!empty && pos <= stop) {
        int found;
        size_t ms, me;
        if (re && open) {
            MT_TRY(mt_regex_next_open(re, rx, s, len, pos, &found, &ms, &me, more));
            if (*more) return MT_OK;
        } else if (re) {
            MT_TRY(mt_regex_next(re, rx, s, len, pos, &found, &ms, &me));
        } else {
            const char *at = pos < len ? memmem(s + pos, len - pos, delim, delim_len) : NULL;
            found = at != NULL;
            ms = found ? (size_t)(at - s) : 0;
            me = ms + delim_len;
        }
        if (!found) break;
        if (pos < ms) MT_TRY(push(out, pos, ms, 0));
        MT_TRY(push(out, ms, me, 1));
        pos = me;
    }
    if (pos < len && pos <= stop) MT_TRY(push(out, pos, len, 0));
    return MT_OK;
}

/* Whether the pieces `behavior` makes of `m` (matches and gaps, is_match already inverted where
 * asked) have a boundary at `cut`, which is inside the text; then drops the spans after it. */
static int cut_spans(mt_spans *m, size_t cut, mt_split_behavior behavior) {
    size_t n = 0;
    while (n < m->n && m->v[n].end <= cut) n++;
    if (n == 0 || n == m->n || m->v[n - 1].end != cut) return 0;
    int left = m->v[n - 1].is_match, right = m->v[n].is_match;
    m->n = n;
    switch (behavior) {
    case SPLIT_ISOLATED:
    case SPLIT_REMOVED: return 1;
    case SPLIT_CONTIGUOUS: return left != right;
    case SPLIT_MERGED_WITH_PREVIOUS: return !(right && !left);
    case SPLIT_MERGED_WITH_NEXT: return !(left && !right);
    }
    return 0;
}

/* Regroups `m` (matches and gaps in order) as tokenizers' NormalizedString::split does for
 * `behavior`, in place; empty and removed pieces are dropped. */
static void regroup(mt_spans *m, mt_split_behavior behavior) {
    size_t n = 0;
    int prev = 0;
    switch (behavior) {
    case SPLIT_ISOLATED: return;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < m->n; i++)
            if (!m->v[i].is_match) m->v[n++] = m->v[i];
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < m->n; i++) {
            int is_match = m->v[i].is_match;
            if (n && is_match == prev) m->v[n - 1].end = m->v[i].end;
            else m->v[n++] = m->v[i];
            prev = is_match;
        }
        break;
    case SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < m->n; i++) {
            int is_match = m->v[i].is_match;
            if (n && is_match && !prev) m->v[n - 1].end = m->v[i].end;
            else m->v[n++] = m->v[i];
            prev = is_match;
        }
        break;
    case SPLIT_MERGED_WITH_NEXT: {
        /* From the end: a match joins the piece after it. The kept pieces fill the array from its
         * end, then move to the front. */
        size_t w = m->n;
        for (size_t i = m->n; i-- > 0;) {
            int is_match = m->v[i].is_match;
            if (w < m->n && is_match && !prev) m->v[w].start = m->v[i].start;
            else m->v[--w] = m->v[i];
            prev = is_match;
        }
        n = m->n - w;
        memmove(m->v, m->v + w, n * sizeof *m->v);
        break;
    }
    }
    m->n = n;
}

/* A regex step (Split, ByteLevel's) on s followed by more->s: the spans up to the cut at `cut`. */
static mt_status split_cut(const mt_pre_step *step, mt_regex_scratch *rx, mt_str *buf, size_t cut,
                           mt_pre_more *more, mt_spans *spans) {
    MT_TRY(mt_str_put(buf, more->s, more->len));
    int need_more;
    MT_TRY(find_matches(&step->pattern, step->empty_pattern, NULL, 0, rx, buf->s, buf->len, cut, more->open,
                        &need_more, spans));
    more->need_more = need_more;
    if (step->kind == PRE_SPLIT && step->invert)
        for (size_t i = 0; i < spans->n; i++) spans->v[i].is_match = !spans->v[i].is_match;
    more->boundary = !need_more && cut_spans(spans, cut, step->kind == PRE_SPLIT ? step->behavior : SPLIT_ISOLATED);
    if (!more->boundary) { /* the spans clipped at the cut: the caller drops what they give */
        size_t n = 0;
        for (; n < spans->n && spans->v[n].start < cut; n++)
            if (spans->v[n].end > cut) spans->v[n].end = cut;
        spans->n = n;
    }
    if (step->kind == PRE_SPLIT) regroup(spans, step->behavior);
    return MT_OK;
}

/* Metaspace's text: s with each space as the replacement, after the replacement when `prepend`. */
static mt_status meta_rewrite(const mt_pre_step *step, const char *s, size_t len, int prepend, mt_str *buf) {
    if (prepend) MT_TRY(mt_str_put(buf, step->replacement, step->replacement_len));
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && s[j] != ' ') j++;
        MT_TRY(mt_str_put(buf, s + i, j - i));
        if (j < len) MT_TRY(mt_str_put(buf, step->replacement, step->replacement_len));
        i = j + 1;
    }
    return MT_OK;
}

mt_status mt_pre_apply(const mt_pre_step *step, mt_regex_scratch *rx, const char *s, size_t len, int at_start,
                       int cont, mt_pre_more *more, mt_str *buf, const char **text, size_t *text_len,
                       mt_spans *spans) {
    spans->n = 0;
    *text = s;
    *text_len = len;
    /* Nothing after the cut: the piece ends there. */
    int ends = more && more->len == 0 && !more->open;
    if (more) *more = (mt_pre_more){.s = more->s, .len = more->len, .open = more->open, .boundary = ends,
                                    .need_more = more->len == 0 && more->open};
    if (ends || (more && more->need_more)) more = NULL;
    int need_more;
    switch (step->kind) {
    case PRE_SPLIT:
        if (more) {
            buf->len = 0;
            MT_TRY(mt_str_put(buf, s, len));
            MT_TRY(split_cut(step, rx, buf, len, more, spans));
            *text = buf->s; /* after split_cut grew it */
            return MT_OK;
        }
        MT_TRY(find_matches(&step->pattern, step->empty_pattern, NULL, 0, rx, s, len, len, 0, &need_more, spans));
        if (step->invert)
            for (size_t i = 0; i < spans->n; i++) spans->v[i].is_match = !spans->v[i].is_match;
        regroup(spans, step->behavior);
        return MT_OK;
    case PRE_METASPACE: {
        const char *r = step->replacement;
        size_t rl = step->replacement_len;
        buf->len = 0;
        int starts = len >= rl && !memcmp(s, r, rl);
        MT_TRY(meta_rewrite(step, s, len,
                            !cont && !starts && (step->prepend == PREPEND_ALWAYS || (step->prepend == PREPEND_FIRST && at_start)),
                            buf));
        *text_len = buf->len;
        if (more) {
            MT_TRY(meta_rewrite(step, more->s, more->len, 0, buf));
            more->next_len = buf->len - *text_len;
            more->boundary = step->split && more->next_len >= rl && !memcmp(buf->s + *text_len, r, rl);
        }
        *text = buf->s;
        if (more) more->next = buf->s + *text_len;
        if (!step->split) return push(spans, 0, *text_len, 0);
        MT_TRY(find_matches(NULL, 0, r, rl, rx, buf->s, *text_len, *text_len, 0, &need_more, spans));
        regroup(spans, SPLIT_MERGED_WITH_NEXT);
        return MT_OK;
    }
    case PRE_BYTE_LEVEL:
        if ((step->add_prefix_space && !cont && !(len && s[0] == ' ')) || more) {
            buf->len = 0;
            if (step->add_prefix_space && !cont && !(len && s[0] == ' ')) MT_TRY(mt_str_put(buf, " ", 1));
            MT_TRY(mt_str_put(buf, s, len));
            *text = buf->s;
            *text_len = buf->len;
        }
        if (!step->has_pattern) {
            if (more) more->boundary = 0;
            return push(spans, 0, *text_len, 0);
        }
        if (more) {
            MT_TRY(split_cut(step, rx, buf, *text_len, more, spans));
            *text = buf->s; /* after split_cut grew it */
            return MT_OK;
        }
        return find_matches(&step->pattern, 0, NULL, 0, rx, *text, *text_len, *text_len, 0, &need_more, spans);
    }
    return MT_OK;
}
