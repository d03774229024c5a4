/* Jinja's filters and tests, the Python methods of strings and dicts that templates call, and the
 * global functions, as transformers' environment has them: tojson is json.dumps(ensure_ascii=False)
 * (tokenizer/py_json.h), strftime_now formats the run's fixed date. Mutating methods (list.append,
 * dict.update) are refused, as the immutable sandbox refuses them. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/jinja_value.h"
#include "tokenizer/py_json.h"

static mt_status nomem(void) { return mt_fail(MT_ERR_NOMEM, "cannot hold a template value"); }

/* The argument at position `pos` or named `name`; NULL when not given. */
static json_t *arg(const j_args *a, size_t pos, const char *name) {
    size_t k = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (a->name && a->name[i]) {
            if (name && !strcmp(a->name[i], name)) return a->v[i];
        } else if (k++ == pos) {
            return a->v[i];
        }
    }
    return NULL;
}

static size_t positional(const j_args *a) {
    size_t k = 0;
    for (size_t i = 0; i < a->n; i++) k += !(a->name && a->name[i]);
    return k;
}

static mt_status need_string(j_ctx *c, size_t at, const char *what, const json_t *v) {
    return json_is_string(v) ? MT_OK : j_fail(c, at, "%s needs a string, not a %s", what, j_type(v));
}

static mt_status new_string(const char *s, size_t n, json_t **out) {
    return (*out = json_stringn_nocheck(s, n)) ? MT_OK : nomem();
}

static mt_status from_buf(mt_jinja_output *b, json_t **out) {
    mt_status st = new_string(b->text ? b->text : "", b->len, out);
    free(b->text);
    free(b->gen);
    return st;
}

/* ---- strings ---- */

/* s stripped of whitespace (chars NULL) or of the code points in chars, at either end. */
static mt_status strip(const json_t *v, const json_t *chars, int left, int right, json_t **out) {
    const char *s = json_string_value(v), *set = chars ? json_string_value(chars) : NULL;
    size_t n = json_string_length(v), setn = chars ? json_string_length(chars) : 0, a = 0, b = n, len;
    #define STRIPPED(cp, at, l) (set ? memmem(set, setn, s + (at), l) != NULL : j_py_space(cp))
    while (left && a < b) {
        unsigned cp = j_decode(s, n, a, &len);
        if (!STRIPPED(cp, a, len)) break;
        a += len;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        unsigned cp = j_decode(s, n, k, &len);
        if (!STRIPPED(cp, k, len)) break;
        b = k;
    }
    #undef STRIPPED
    return new_string(s + a, b - a, out);
}

static mt_status change_case(const json_t *v, int upper, int capitalize, int title, json_t **out) {
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (!s) return nomem();
    memcpy(s, json_string_value(v), n);
    int start = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        int up = capitalize ? i == 0 : title ? start : upper;
        s[i] = (char)(up ? toupper(ch) : ch < 0x80 ? tolower(ch) : ch);
        if (title) start = !isalnum(ch) && ch < 0x80;
    }
    mt_status st = new_string(s, n, out);
    free(s);
    return st;
}

static mt_status replace(const json_t *v, const json_t *old, const json_t *new, const json_t *count, json_t **out) {
    const char *s = json_string_value(v), *o = json_string_value(old), *r = json_string_value(new);
    size_t n = json_string_length(v), on = json_string_length(old), rn = json_string_length(new);
    long long left = json_is_integer(count) && json_integer_value(count) >= 0 ? json_integer_value(count) : -1;
    mt_jinja_output b = {0};
    mt_status st = j_put(&b, "", 0);
    size_t i = 0;
    if (on == 0) { /* Python puts the replacement between every code point */
        size_t len;
        for (; st == MT_OK && left != 0; left--) {
            st = j_put(&b, r, rn);
            if (i >= n) break;
            j_decode(s, n, i, &len);
            if (st == MT_OK) st = j_put(&b, s + i, len);
            i += len;
        }
    } else {
        while (st == MT_OK && left != 0 && i + on <= n) {
            const char *hit = memmem(s + i, n - i, o, on);
            if (!hit) break;
            st = j_put(&b, s + i, (size_t)(hit - s) - i);
            if (st == MT_OK) st = j_put(&b, r, rn);
            i = (size_t)(hit - s) + on;
            left--;
        }
    }
    if (st == MT_OK) st = j_put(&b, s + i, n - i);
    if (st != MT_OK) return free(b.text), st;
    return from_buf(&b, out);
}

/* str.split's pieces of s[n] appended to list: at sep (pn bytes, not empty), at most `left` splits
 * (-1: any); or, sep NULL, at runs of whitespace. */
static mt_status split_into(json_t *list, const char *s, size_t n, const char *sep, size_t pn, long long left) {
    size_t i = 0, len;
    if (sep)
        for (;;) {
            const char *hit = left != 0 ? memmem(s + i, n - i, sep, pn) : NULL;
            size_t end = hit ? (size_t)(hit - s) : n;
            if (json_array_append_new(list, json_stringn_nocheck(s + i, end - i))) return nomem();
            if (!hit) return MT_OK;
            i = end + pn;
            left--;
        }
    for (;;) {
        while (i < n && j_py_space(j_decode(s, n, i, &len))) i += len;
        if (i >= n) return MT_OK;
        size_t start = i;
        if (left == 0) {
            size_t end = n;
            while (end > start) { /* the rest, its trailing whitespace removed */
                size_t k = end - 1;
                while (k > start && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
                if (!j_py_space(j_decode(s, n, k, &len))) break;
                end = k;
            }
            return json_array_append_new(list, json_stringn_nocheck(s + start, end - start)) ? nomem() : MT_OK;
        }
        while (i < n && !j_py_space(j_decode(s, n, i, &len))) i += len;
        if (json_array_append_new(list, json_stringn_nocheck(s + start, i - start))) return nomem();
        left--;
    }
}

/* str.split(sep=None, maxsplit=-1). */
static mt_status split(j_ctx *c, size_t at, const json_t *v, const json_t *sep, const json_t *max, json_t **out) {
    int by_sep = sep && !json_is_null(sep);
    if (by_sep) MT_TRY(need_string(c, at, "split's separator", sep));
    if (by_sep && json_string_length(sep) == 0) return j_fail(c, at, "split with an empty separator");
    json_t *list = json_array();
    if (!list) return nomem();
    mt_status st = split_into(list, json_string_value(v), json_string_length(v), by_sep ? json_string_value(sep) : NULL,
                              by_sep ? json_string_length(sep) : 0, json_is_integer(max) ? json_integer_value(max) : -1);
    if (st != MT_OK) return json_decref(list), st;
    *out = list;
    return MT_OK;
}

static int starts_or_ends(const json_t *v, const json_t *fix, int end) {
    size_t n = json_string_length(v), k = json_string_length(fix);
    return k <= n && !memcmp(json_string_value(v) + (end ? n - k : 0), json_string_value(fix), k);
}

/* ---- methods ---- */

static mt_status string_method(j_ctx *c, size_t at, const json_t *s, const char *name, const j_args *a, int *found,
                               json_t **out) {
    json_t *a0 = arg(a, 0, NULL), *a1 = arg(a, 1, NULL);
    *found = 1;
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        int end = name[0] == 'e', yes = 0;
        if (json_is_array(a0)) { /* a tuple of prefixes */
            for (size_t i = 0; i < json_array_size(a0) && !yes; i++) {
                MT_TRY(need_string(c, at, name, json_array_get(a0, i)));
                yes = starts_or_ends(s, json_array_get(a0, i), end);
            }
        } else {
            MT_TRY(need_string(c, at, name, a0));
            yes = starts_or_ends(s, a0, end);
        }
        return (*out = json_boolean(yes)) ? MT_OK : nomem();
    }
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        if (a0 && !json_is_null(a0)) MT_TRY(need_string(c, at, name, a0));
        return strip(s, json_is_null(a0) ? NULL : a0, name[0] != 'r', name[0] != 'l', out);
    }
    if (!strcmp(name, "split")) return split(c, at, s, a0 ? a0 : arg(a, 9, "sep"), a1 ? a1 : arg(a, 9, "maxsplit"), out);
    if (!strcmp(name, "replace")) {
        MT_TRY(need_string(c, at, "replace", a0));
        MT_TRY(need_string(c, at, "replace", a1));
        return replace(s, a0, a1, arg(a, 2, NULL), out);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower")) return change_case(s, name[0] == 'u', 0, 0, out);
    if (!strcmp(name, "capitalize")) {
        json_t *low;
        MT_TRY(change_case(s, 0, 0, 0, &low));
        mt_status st = change_case(low, 0, 1, 0, out);
        json_decref(low);
        return st;
    }
    if (!strcmp(name, "title")) return change_case(s, 0, 0, 1, out);
    if (!strcmp(name, "find") || !strcmp(name, "count")) {
        MT_TRY(need_string(c, at, name, a0));
        const char *h = json_string_value(s), *p = json_string_value(a0);
        size_t n = json_string_length(s), k = json_string_length(a0);
        long long count = 0, first = -1;
        for (size_t i = 0; i + k <= n; i++)
            if (!memcmp(h + i, p, k)) {
                if (first < 0) first = (long long)j_ulen(h, i);
                count++;
                if (k) i += k - 1;
            }
        return (*out = json_integer(name[0] == 'f' ? first : count)) ? MT_OK : nomem();
    }
    *found = 0;
    return MT_OK;
}

static mt_status dict_items(const json_t *d, int which, json_t **out) {
    json_t *list = json_array();
    if (!list) return nomem();
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)d, key, value) {
        json_t *e = which == 0 ? json_pack("[sO]", key, value) : which == 1 ? json_string(key) : json_incref(value);
        if (json_array_append_new(list, e)) return json_decref(list), nomem();
    }
    *out = list;
    return MT_OK;
}

mt_status j_method(j_ctx *c, size_t at, const json_t *obj, const char *name, const j_args *a, int *found,
                   json_t **out) {
    *found = 0;
    if (json_is_string(obj)) return string_method(c, at, obj, name, a, found, out);
    if (!json_is_object(obj)) return MT_OK;
    *found = 1;
    if (!strcmp(name, "items")) return dict_items(obj, 0, out);
    if (!strcmp(name, "keys")) return dict_items(obj, 1, out);
    if (!strcmp(name, "values")) return dict_items(obj, 2, out);
    if (!strcmp(name, "get")) {
        json_t *key = arg(a, 0, NULL);
        json_t *v = json_is_string(key) ? json_object_get(obj, json_string_value(key)) : NULL;
        *out = json_incref(v ? v : arg(a, 1, NULL) ? arg(a, 1, NULL) : json_null());
        return MT_OK;
    }
    *found = 0;
    return MT_OK;
}

/* ---- filters ---- */

static const char *const FILTERS[] = {
    "abs", "capitalize", "count", "d", "default", "dictsort", "first", "float", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round",
    "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", NULL};

int mt_jinja_filter_known(const char *name) {
    for (const char *const *f = FILTERS; *f; f++)
        if (!strcmp(*f, name)) return 1;
    return 0;
}

/* An attribute path ("function.name") of v, as Jinja's attribute= and selectattr follow it. */
static json_t *attribute(const json_t *v, const char *path) {
    char part[256];
    while (v && *path) {
        size_t k = strcspn(path, ".");
        if (k >= sizeof part) return NULL;
        memcpy(part, path, k);
        part[k] = '\0';
        if (json_is_object(v)) {
            v = json_object_get(v, part);
        } else if (json_is_array(v) && isdigit((unsigned char)part[0])) {
            v = json_array_get(v, (size_t)atol(part));
        } else {
            return NULL;
        }
        path += k + (path[k] == '.');
    }
    return (json_t *)v;
}

/* A list made from v: a list's items, a dict's keys, a string's characters. */
static mt_status as_list(j_ctx *c, size_t at, const char *what, const json_t *v, json_t **out) {
    if (json_is_array(v)) return *out = json_incref((json_t *)v), MT_OK;
    json_t *list = json_array();
    if (!list) return nomem();
    *out = list;
    if (json_is_object(v)) {
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)v, key, value) if (json_array_append_new(list, json_string(key))) return nomem();
        return MT_OK;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v), len;
        for (size_t i = 0; i < n; i += len) {
            j_decode(s, n, i, &len);
            if (json_array_append_new(list, json_stringn_nocheck(s + i, len))) return nomem();
        }
        return MT_OK;
    }
    json_decref(list);
    *out = NULL;
    return j_fail(c, at, "%s needs a sequence, not a %s", what, j_type(v));
}

/* select/reject(test, args...) and selectattr/rejectattr(attr, test, args...). */
static mt_status select_items(j_ctx *c, size_t at, const char *name, json_t *v, const j_args *a, json_t **out) {
    int by_attr = strstr(name, "attr") != NULL, keep_if = name[0] == 's';
    json_t *attr = by_attr ? arg(a, 0, NULL) : NULL, *test = arg(a, by_attr, NULL), *items;
    if (by_attr) MT_TRY(need_string(c, at, name, attr));
    if (test) MT_TRY(need_string(c, at, name, test));
    if (test && !mt_jinja_test_known(json_string_value(test)))
        return j_fail(c, at, "no test named `%s`", json_string_value(test));
    MT_TRY(as_list(c, at, name, v, &items));
    size_t taken = (size_t)by_attr + (test != NULL); /* the test's own arguments follow these */
    j_args rest = {a->n > taken ? a->v + taken : NULL, NULL, a->n > taken ? a->n - taken : 0};
    json_t *list = json_array();
    mt_status st = list ? MT_OK : nomem();
    for (size_t i = 0; st == MT_OK && i < json_array_size(items); i++) {
        json_t *x = json_array_get(items, i), *subject = by_attr ? attribute(x, json_string_value(attr)) : x;
        int yes = 0;
        if (test) st = j_test(c, at, json_string_value(test), subject, &rest, &yes);
        else yes = j_truthy(subject);
        if (st == MT_OK && yes == keep_if && json_array_append(list, x)) st = nomem();
    }
    json_decref(items);
    if (st != MT_OK) return json_decref(list), st;
    *out = list;
    return MT_OK;
}

/* map(attribute="x", default=...) or map("filter", args...). */
static mt_status map(j_ctx *c, size_t at, json_t *v, const j_args *a, json_t **out) {
    json_t *attr = arg(a, 9, "attribute"), *dflt = arg(a, 9, "default"), *filter = arg(a, 0, NULL), *items;
    if (attr) MT_TRY(need_string(c, at, "map", attr));
    else MT_TRY(need_string(c, at, "map", filter));
    if (!attr && !mt_jinja_filter_known(json_string_value(filter)))
        return j_fail(c, at, "no filter named `%s`", json_string_value(filter));
    MT_TRY(as_list(c, at, "map", v, &items));
    j_args rest = {a->n ? a->v + 1 : NULL, a->name ? a->name + 1 : NULL, a->n ? a->n - 1 : 0};
    json_t *list = json_array();
    mt_status st = list ? MT_OK : nomem();
    for (size_t i = 0; st == MT_OK && i < json_array_size(items); i++) {
        json_t *x = json_array_get(items, i), *r = NULL;
        if (attr) {
            r = json_incref(attribute(x, json_string_value(attr)));
            if (!r && dflt) r = json_incref(dflt);
            if (!r) st = j_fail(c, at, "map: an item has no attribute `%s`", json_string_value(attr));
        } else {
            st = j_filter(c, at, json_string_value(filter), x, &rest, &r);
        }
        if (st == MT_OK && json_array_append_new(list, r)) st = nomem();
    }
    json_decref(items);
    if (st != MT_OK) return json_decref(list), st;
    *out = list;
    return MT_OK;
}

static mt_status join(j_ctx *c, size_t at, json_t *v, const j_args *a, json_t **out) {
    json_t *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute"), *items;
    if (sep) MT_TRY(need_string(c, at, "join", sep));
    if (attr) MT_TRY(need_string(c, at, "join", attr));
    MT_TRY(as_list(c, at, "join", v, &items));
    mt_jinja_output b = {0};
    mt_status st = j_put(&b, "", 0);
    for (size_t i = 0; st == MT_OK && i < json_array_size(items); i++) {
        if (i && sep) st = j_put(&b, json_string_value(sep), json_string_length(sep));
        json_t *x = json_array_get(items, i);
        if (st == MT_OK) st = j_str(&b, attr ? attribute(x, json_string_value(attr)) : x);
    }
    json_decref(items);
    if (st != MT_OK) return free(b.text), st;
    return from_buf(&b, out);
}

/* indent(width=4, first=False, blank=False): each line after the first (and the first with
 * first=True) indented, blank lines only with blank=True. */
static mt_status indent(j_ctx *c, size_t at, json_t *v, const j_args *a, json_t **out) {
    json_t *w = arg(a, 0, "width"), *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
    MT_TRY(need_string(c, at, "indent", v));
    mt_jinja_output pad = {0}, b = {0};
    mt_status st = j_put(&pad, "", 0);
    if (json_is_string(w)) st = j_put(&pad, json_string_value(w), json_string_length(w));
    else for (long long i = 0; st == MT_OK && i < (w ? json_integer_value(w) : 4) && i < 4096; i++) st = j_put(&pad, " ", 1);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v), i = 0;
    if (st == MT_OK) st = j_put(&b, "", 0);
    for (int line = 0; st == MT_OK && i <= n; line++) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - s) : n;
        if ((line > 0 || j_truthy(first)) && (end > i || j_truthy(blank))) st = j_put(&b, pad.text, pad.len);
        if (st == MT_OK) st = j_put(&b, s + i, end - i + (nl != NULL));
        if (!nl) break;
        i = end + 1;
    }
    free(pad.text);
    if (st != MT_OK) return free(b.text), st;
    return from_buf(&b, out);
}

/* tojson(indent=None, separators=None, sort_keys=False, ensure_ascii=False): transformers' filter. */
static mt_status tojson(j_ctx *c, size_t at, json_t *v, const j_args *a, json_t **out) {
    json_t *ind = arg(a, 1, "indent"), *sep = arg(a, 2, "separators");
    if (!v) return j_fail(c, at, "tojson of an undefined value");
    if (ind && !json_is_null(ind) && !json_is_integer(ind)) return j_fail(c, at, "tojson's indent is not an int");
    mt_py_json_options o = {.indent = ind && json_is_integer(ind) ? (int)json_integer_value(ind) : -1,
                            .sort_keys = j_truthy(arg(a, 3, "sort_keys")), .ensure_ascii = j_truthy(arg(a, 0, "ensure_ascii"))};
    if (sep && !json_is_null(sep)) {
        if (!json_is_array(sep) || json_array_size(sep) != 2 || !json_is_string(json_array_get(sep, 0)) ||
            !json_is_string(json_array_get(sep, 1)))
            return j_fail(c, at, "tojson's separators are not two strings");
        o.item_sep = json_string_value(json_array_get(sep, 0));
        o.key_sep = json_string_value(json_array_get(sep, 1));
    }
    char *text;
    size_t len;
    MT_TRY(mt_py_json_dumps_with(v, &o, &text, &len));
    mt_status st = new_string(text, len, out);
    free(text);
    return st;
}

/* int(v): a number truncated, a string read as one (default 0 when it is not). */
static json_t *to_int(const json_t *v, const json_t *dflt) {
    if (json_is_integer(v)) return json_incref((json_t *)v);
    if (j_is_number(v)) return json_integer((json_int_t)j_number(v));
    if (json_is_string(v)) {
        char *end;
        const char *s = json_string_value(v);
        long long x = strtoll(s, &end, 10);
        if (end != s && !*end) return json_integer(x);
        double d = strtod(s, &end);
        if (end != s && !*end) return json_integer((json_int_t)d);
    }
    return dflt ? json_incref((json_t *)dflt) : json_integer(0);
}

static mt_status string_filter(j_ctx *c, size_t at, const char *name, json_t *v, const j_args *a, json_t **out);

static int by_value(const void *x, const void *y) {
    int r = j_compare(*(json_t *const *)x, *(json_t *const *)y);
    return r == -2 ? 0 : r;
}

mt_status j_filter(j_ctx *c, size_t at, const char *name, json_t *v, const j_args *a, json_t **out) {
    *out = NULL;
    if (!strcmp(name, "safe")) return *out = json_incref(v), MT_OK;
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        json_t *dflt = arg(a, 0, "default_value");
        int use = j_truthy(arg(a, 1, "boolean")) ? !j_truthy(v) : !v;
        *out = json_incref(use ? (dflt ? dflt : NULL) : v);
        if (use && !dflt) *out = json_string("");
        return MT_OK;
    }
    if (!strcmp(name, "string")) return (*out = j_to_string(v)) ? MT_OK : nomem();
    if (!strcmp(name, "tojson")) return tojson(c, at, v, a, out);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (json_is_string(v)) *out = json_integer((json_int_t)j_ulen(json_string_value(v), json_string_length(v)));
        else if (json_is_array(v)) *out = json_integer((json_int_t)json_array_size(v));
        else if (json_is_object(v)) *out = json_integer((json_int_t)json_object_size(v));
        else return j_fail(c, at, "%s of a %s", name, j_type(v));
        return *out ? MT_OK : nomem();
    }
    if (!strcmp(name, "int")) return (*out = to_int(v, arg(a, 0, "default"))) ? MT_OK : nomem();
    if (!strcmp(name, "float")) return (*out = json_real(j_is_number(v) ? j_number(v) : json_is_string(v) ? atof(json_string_value(v)) : 0)) ? MT_OK : nomem();
    if (!strcmp(name, "abs")) {
        if (!j_is_number(v)) return j_fail(c, at, "abs of a %s", j_type(v));
        *out = json_is_real(v) ? json_real(j_number(v) < 0 ? -j_number(v) : j_number(v))
                               : json_integer((json_int_t)(j_number(v) < 0 ? -j_number(v) : j_number(v)));
        return MT_OK;
    }
    if (!strcmp(name, "join")) return join(c, at, v, a, out);
    if (!strcmp(name, "map")) return map(c, at, v, a, out);
    if (strstr(name, "select") || strstr(name, "reject")) return select_items(c, at, name, v, a, out);
    if (!strcmp(name, "items")) {
        if (!v) return (*out = json_array()) ? MT_OK : nomem();
        if (!json_is_object(v)) return j_fail(c, at, "items of a %s", j_type(v));
        return dict_items(v, 0, out);
    }
    if (!strcmp(name, "dictsort")) {
        if (!json_is_object(v)) return j_fail(c, at, "dictsort of a %s", j_type(v));
        MT_TRY(dict_items(v, 0, out));
        size_t n = json_array_size(*out);
        json_t **e = malloc((n ? n : 1) * sizeof *e);
        if (!e) return nomem();
        for (size_t i = 0; i < n; i++) e[i] = json_array_get(*out, i);
        qsort(e, n, sizeof *e, by_value);
        json_t *sorted = json_array();
        for (size_t i = 0; sorted && i < n; i++) json_array_append(sorted, e[i]);
        free(e);
        json_decref(*out);
        return (*out = sorted) ? MT_OK : nomem();
    }
    if (!strcmp(name, "list") || !strcmp(name, "reverse") || !strcmp(name, "sort") || !strcmp(name, "unique") ||
        !strcmp(name, "first") || !strcmp(name, "last") || !strcmp(name, "max") || !strcmp(name, "min") ||
        !strcmp(name, "sum")) {
        json_t *items;
        if (!strcmp(name, "reverse") && json_is_string(v)) {
            MT_TRY(as_list(c, at, name, v, &items));
            json_t *rev = json_array();
            for (size_t i = json_array_size(items); rev && i-- > 0;) json_array_append(rev, json_array_get(items, i));
            json_decref(items);
            j_args none = {0};
            json_t *empty = json_string("");
            mt_status st = rev && empty ? join(c, at, rev, &none, out) : nomem();
            json_decref(rev);
            json_decref(empty);
            return st;
        }
        MT_TRY(as_list(c, at, name, v, &items));
        size_t n = json_array_size(items);
        if (!strcmp(name, "first") || !strcmp(name, "last")) {
            *out = n ? json_incref(json_array_get(items, name[0] == 'f' ? 0 : n - 1)) : NULL;
            return json_decref(items), MT_OK;
        }
        json_t **e = malloc((n ? n : 1) * sizeof *e);
        json_t *attr = arg(a, 9, "attribute");
        if (!e) return json_decref(items), nomem();
        if (attr && !json_is_string(attr)) return free(e), json_decref(items), need_string(c, at, name, attr);
        for (size_t i = 0; i < n; i++) e[i] = json_array_get(items, i);
        if (!strcmp(name, "sum")) {
            double sum = 0;
            int real = 0;
            for (size_t i = 0; i < n; i++) {
                json_t *x = attr ? attribute(e[i], json_string_value(attr)) : e[i];
                real |= json_is_real(x), sum += j_number(x);
            }
            free(e);
            json_decref(items);
            return (*out = real ? json_real(sum) : json_integer((json_int_t)sum)) ? MT_OK : nomem();
        }
        if (!strcmp(name, "sort") || !strcmp(name, "max") || !strcmp(name, "min")) {
            for (size_t i = 1; i < n; i++) /* insertion sort: stable, as Python's */
                for (size_t k = i; k > 0 && j_compare(e[k - 1], e[k]) == 1; k--) {
                    json_t *t = e[k];
                    e[k] = e[k - 1], e[k - 1] = t;
                }
        }
        json_t *r = json_array();
        int rev = !strcmp(name, "reverse") || j_truthy(arg(a, 0, "reverse"));
        for (size_t i = 0; r && i < n; i++) {
            json_t *x = e[rev ? n - 1 - i : i];
            int dup = 0;
            for (size_t k = 0; !strcmp(name, "unique") && k < json_array_size(r) && !dup; k++) dup = j_equal(json_array_get(r, k), x);
            if (!dup) json_array_append(r, x);
        }
        free(e);
        json_decref(items);
        if (r && (!strcmp(name, "max") || !strcmp(name, "min"))) {
            json_t *pick = json_array_size(r) ? json_incref(json_array_get(r, name[1] == 'a' ? json_array_size(r) - 1 : 0)) : NULL;
            json_decref(r);
            return *out = pick, MT_OK;
        }
        return (*out = r) ? MT_OK : nomem();
    }
    if (!strcmp(name, "round")) {
        if (!j_is_number(v)) return j_fail(c, at, "round of a %s", j_type(v));
        json_t *p = arg(a, 0, "precision");
        double scale = 1, x = j_number(v);
        for (long long i = 0; i < (json_is_integer(p) ? json_integer_value(p) : 0) && i < 20; i++) scale *= 10;
        double r = x * scale;
        double f = (double)(long long)r, frac = r - f;
        if (frac >= 0.5) f += 1;
        else if (frac <= -0.5) f -= 1;
        return (*out = json_real(f / scale)) ? MT_OK : nomem();
    }
    /* the string filters, on str(v) as Jinja's (undefined: "") */
    json_t *text = j_to_string(v);
    if (!text) return nomem();
    mt_status st = string_filter(c, at, name, text, a, out);
    json_decref(text);
    return st;
}

static mt_status string_filter(j_ctx *c, size_t at, const char *name, json_t *v, const j_args *a, json_t **out) {
    if (!strcmp(name, "trim")) {
        json_t *chars = arg(a, 0, "chars");
        if (chars && !json_is_null(chars)) MT_TRY(need_string(c, at, "trim", chars));
        return strip(v, json_is_null(chars) ? NULL : chars, 1, 1, out);
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) return change_case(v, name[0] == 'u', 0, 0, out);
    if (!strcmp(name, "title")) return change_case(v, 0, 0, 1, out);
    if (!strcmp(name, "capitalize")) {
        int found;
        j_args none = {0};
        return string_method(c, at, v, "capitalize", &none, &found, out);
    }
    if (!strcmp(name, "replace")) {
        json_t *old = arg(a, 0, "old"), *new = arg(a, 1, "new");
        MT_TRY(need_string(c, at, "replace", old));
        MT_TRY(need_string(c, at, "replace", new));
        return replace(v, old, new, arg(a, 2, "count"), out);
    }
    if (!strcmp(name, "indent")) return indent(c, at, v, a, out);
    return j_fail(c, at, "no filter named `%s`", name);
}

/* ---- tests ---- */

static const char *const TESTS[] = {"boolean", "defined", "divisibleby", "eq", "equalto", "even", "false", "float",
                                    "ge", "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne",
                                    "none", "number", "odd", "sameas", "sequence", "string", "true", "undefined",
                                    "upper", "==", "!=", NULL};

int mt_jinja_test_known(const char *name) {
    for (const char *const *t = TESTS; *t; t++)
        if (!strcmp(*t, name)) return 1;
    return 0;
}

mt_status j_test(j_ctx *c, size_t at, const char *name, const json_t *v, const j_args *a, int *out) {
    json_t *x = arg(a, 0, NULL);
    if (!strcmp(name, "defined")) *out = v != NULL;
    else if (!strcmp(name, "undefined")) *out = v == NULL;
    else if (!strcmp(name, "none")) *out = json_is_null(v);
    else if (!strcmp(name, "string")) *out = json_is_string(v);
    else if (!strcmp(name, "mapping")) *out = json_is_object(v);
    else if (!strcmp(name, "iterable")) *out = json_is_object(v) || json_is_array(v) || json_is_string(v);
    else if (!strcmp(name, "sequence")) *out = json_is_object(v) || json_is_array(v) || json_is_string(v);
    else if (!strcmp(name, "number")) *out = j_is_number(v);
    else if (!strcmp(name, "integer")) *out = json_is_integer(v);
    else if (!strcmp(name, "float")) *out = json_is_real(v);
    else if (!strcmp(name, "boolean")) *out = json_is_boolean(v);
    else if (!strcmp(name, "true")) *out = json_is_true(v);
    else if (!strcmp(name, "false")) *out = json_is_false(v);
    else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) *out = j_equal(v, x);
    else if (!strcmp(name, "ne") || !strcmp(name, "!=")) *out = !j_equal(v, x);
    else if (!strcmp(name, "sameas")) *out = (json_is_null(v) && json_is_null(x)) || (json_is_boolean(v) && json_equal((json_t *)v, x)) || (v && v == x);
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        *out = json_is_string(v);
        for (const char *s = *out ? json_string_value(v) : ""; *s; s++)
            if (name[0] == 'l' ? isupper((unsigned char)*s) : islower((unsigned char)*s)) *out = 0;
    } else if (!strcmp(name, "in")) {
        if (json_is_string(x)) *out = json_is_string(v) && memmem(json_string_value(x), json_string_length(x), json_string_value(v), json_string_length(v));
        else if (json_is_object(x)) *out = json_is_string(v) && json_object_get(x, json_string_value(v));
        else if (json_is_array(x)) {
            *out = 0;
            for (size_t i = 0; i < json_array_size(x) && !*out; i++) *out = j_equal(json_array_get(x, i), v);
        } else return j_fail(c, at, "`in` a %s", j_type(x));
    } else {
        int numeric = !strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby");
        if (numeric && !json_is_integer(v)) return j_fail(c, at, "test `%s` of a %s", name, j_type(v));
        if (!strcmp(name, "odd") || !strcmp(name, "even")) *out = (json_integer_value(v) % 2 != 0) == (name[0] == 'o');
        else if (!strcmp(name, "divisibleby")) {
            if (!json_is_integer(x) || json_integer_value(x) == 0) return j_fail(c, at, "divisibleby needs a nonzero int");
            *out = json_integer_value(v) % json_integer_value(x) == 0;
        } else {
            int r = j_compare(v, x);
            if (r == -2) return j_fail(c, at, "test `%s` between %s and %s", name, j_type(v), j_type(x));
            *out = !strcmp(name, "lt") ? r < 0 : !strcmp(name, "le") ? r <= 0 : !strcmp(name, "gt") ? r > 0 : r >= 0;
        }
    }
    return MT_OK;
}

/* ---- global functions ---- */

static mt_status range(j_ctx *c, size_t at, const j_args *a, json_t **out) {
    long long p[3] = {0, 0, 1};
    size_t n = positional(a);
    if (n < 1 || n > 3) return j_fail(c, at, "range takes 1 to 3 arguments");
    for (size_t i = 0; i < n; i++) {
        json_t *x = arg(a, i, NULL);
        if (!json_is_integer(x)) return j_fail(c, at, "range of a %s", j_type(x));
        p[n == 1 ? 1 : i] = json_integer_value(x);
    }
    if (p[2] == 0) return j_fail(c, at, "range with a step of zero");
    json_t *list = json_array();
    if (!list) return nomem();
    for (long long i = p[0]; p[2] > 0 ? i < p[1] : i > p[1];) {
        if (json_array_size(list) >= 100000) return json_decref(list), j_fail(c, at, "range of over 100000 numbers");
        if (json_array_append_new(list, json_integer(i))) return json_decref(list), nomem();
        if (__builtin_add_overflow(i, p[2], &i)) break;
    }
    *out = list;
    return MT_OK;
}

/* strftime_now(format): the run's date (not the clock's), at midnight. */
static mt_status strftime_now(j_ctx *c, size_t at, const j_args *a, json_t **out) {
    json_t *fmt = arg(a, 0, NULL);
    MT_TRY(need_string(c, at, "strftime_now", fmt));
    struct tm tm = {0};
    if (sscanf(c->today, "%d-%d-%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday) != 3)
        return j_fail(c, at, "strftime_now: the date `%s` is not YYYY-MM-DD", c->today);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    time_t t = timegm(&tm);
    gmtime_r(&t, &tm); /* fills the weekday and day of the year */
    char text[512];
    size_t len = strftime(text, sizeof text, json_string_value(fmt), &tm);
    return new_string(text, len, out);
}

int mt_jinja_global_known(const char *name) {
    static const char *const GLOBALS[] = {"dict", "namespace", "raise_exception", "range", "strftime_now", NULL};
    for (const char *const *g = GLOBALS; *g; g++)
        if (!strcmp(*g, name)) return 1;
    return 0;
}

mt_status j_global(j_ctx *c, size_t at, const char *name, const j_args *a, int *found, json_t **out) {
    *found = 1;
    if (!strcmp(name, "raise_exception")) {
        json_t *msg = arg(a, 0, NULL);
        mt_jinja_output b = {0};
        mt_status st = j_str(&b, msg);
        if (st == MT_OK) st = j_fail(c, at, "the template refuses the conversation: %s", b.text ? b.text : "");
        free(b.text);
        return st;
    }
    if (!strcmp(name, "range")) return range(c, at, a, out);
    if (!strcmp(name, "strftime_now")) return strftime_now(c, at, a, out);
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        json_t *d = json_object();
        if (!d) return nomem();
        json_t *init = arg(a, 0, NULL);
        if (json_is_object(init) && json_object_update(d, init)) return json_decref(d), nomem();
        for (size_t i = 0; i < a->n; i++)
            if (a->name && a->name[i] && a->v[i] && json_object_set(d, a->name[i], a->v[i])) return json_decref(d), nomem();
        if (name[0] == 'n' && json_array_append(c->namespaces, d)) return json_decref(d), nomem();
        *out = d;
        return MT_OK;
    }
    *found = 0;
    return MT_OK;
}
