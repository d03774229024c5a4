/* The evaluator: renders a compiled template (tokenizer/jinja_ast.h) as Jinja does. Scopes as
 * Jinja's: each loop iteration and each macro call has its own variables (a {% set %} inside
 * does not outlive it: templates carry state out of a loop in a namespace()); names resolve
 * through the enclosing scopes, a macro's through the template's own. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_value.h"

/* MAX_NEST bounds the interpreter's recursion (and so its stack) whatever the template: a long
 * chain of operators parses as deep as it is long. */
enum { MAX_DEPTH = 100, MAX_STEPS = 5000000, MAX_NEST = 1000 };

static mt_status eval(j_ctx *c, const j_node *n, json_t **out);
static mt_status exec(j_ctx *c, const j_node *n);

/* ---- names ---- */

static json_t *lookup(const j_frame *f, const char *name) {
    for (; f; f = f->parent) {
        json_t *v = json_object_get(f->vars, name);
        if (v) return v;
    }
    return NULL;
}

static mt_status bind(j_frame *f, const char *name, json_t *v) {
    if (!v) return json_object_del(f->vars, name), MT_OK; /* undefined: the name stays unbound */
    return json_object_set(f->vars, name, v) ? mt_fail(MT_ERR_NOMEM, "cannot hold a template variable") : MT_OK;
}

/* A macro is a value: an object holding its node, which only a call uses. */
static const char MACRO_KEY[] = "\x01macro";

/* A global function named as a value: an object holding its name. */
static const char GLOBAL_KEY[] = "\x01global";

static const j_node *macro_of(const json_t *v) {
    const json_t *p = json_is_object(v) ? json_object_get(v, MACRO_KEY) : NULL;
    return p ? (const j_node *)(uintptr_t)json_integer_value(p) : NULL;
}

/* Runs `body` in a scope of its own, `vars`, under `parent`. */
static mt_status exec_in(j_ctx *c, const j_node *body, json_t *vars, j_frame *parent) {
    j_frame f = {vars, parent}, *saved = c->scope;
    c->scope = &f;
    mt_status st = exec(c, body);
    c->scope = saved;
    return st;
}

/* Renders `body` into a string of its own (a macro's output, a {% set %} block's, a filter block's). */
static mt_status capture(j_ctx *c, const j_node *body, json_t *vars, j_frame *parent, json_t **out) {
    mt_jinja_output *outer = c->out, text = {0};
    c->out = &text;
    mt_status st = vars ? exec_in(c, body, vars, parent) : exec(c, body);
    c->out = outer;
    free(text.gen);
    if (st == MT_OK && !(*out = json_stringn_nocheck(text.text ? text.text : "", text.len)))
        st = mt_fail(MT_ERR_NOMEM, "cannot hold a template's output");
    free(text.text);
    return st;
}

/* ---- expressions ---- */

static void args_free(j_args *a) {
    for (size_t i = 0; i < a->n; i++) json_decref(a->v[i]);
    free(a->v);
    *a = (j_args){0};
}

static mt_status eval_args(j_ctx *c, const j_node *n, j_args *a) {
    *a = (j_args){0};
    if (!n->n_kid) return MT_OK;
    a->v = calloc(n->n_kid, sizeof *a->v);
    if (!a->v) return mt_fail(MT_ERR_NOMEM, "cannot hold a call's arguments");
    a->name = n->names;
    for (; a->n < n->n_kid; a->n++) {
        mt_status st = eval(c, n->kid[a->n], &a->v[a->n]);
        if (st != MT_OK) return a->n++, args_free(a), st;
    }
    return MT_OK;
}

static mt_status call_macro(j_ctx *c, size_t at, const j_node *m, const j_args *a, json_t **out) {
    if (c->depth >= MAX_DEPTH) return j_fail(c, at, "macro calls nested more than %d deep", MAX_DEPTH);
    json_t *vars = json_object();
    if (!vars) return mt_fail(MT_ERR_NOMEM, "cannot hold a macro call");
    j_frame f = {vars, c->top};
    mt_status st = MT_OK;
    size_t positional = 0;
    for (size_t i = 0; i < a->n && st == MT_OK; i++) {
        if (a->name && a->name[i]) {
            size_t k = 0;
            while (k < m->n_names && strcmp(m->names[k], a->name[i])) k++;
            st = k < m->n_names ? bind(&f, a->name[i], a->v[i])
                                : j_fail(c, at, "macro `%s` has no parameter `%s`", m->str, a->name[i]);
        } else if (positional < m->n_names) {
            st = bind(&f, m->names[positional++], a->v[i]);
        } else {
            st = j_fail(c, at, "macro `%s` takes %zu arguments, given more", m->str, m->n_names);
        }
    }
    c->depth++;
    j_frame *saved = c->scope;
    c->scope = &f;
    for (size_t k = 0; k < m->n_names && st == MT_OK; k++) { /* defaults, in the macro's scope */
        if (json_object_get(vars, m->names[k]) || !m->kid[k]) continue;
        json_t *v = NULL;
        st = eval(c, m->kid[k], &v);
        if (st == MT_OK) st = bind(&f, m->names[k], v);
        json_decref(v);
    }
    c->scope = saved;
    if (st == MT_OK) st = capture(c, m->b, vars, c->top, out);
    c->depth--;
    c->flow = 0;
    json_decref(vars);
    return st;
}

static mt_status eval_call(j_ctx *c, const j_node *n, json_t **out) {
    j_args a;
    const j_node *callee = n->a;
    json_t *obj = NULL;
    if (callee->kind == J_ATTR) MT_TRY(eval(c, callee->a, &obj));
    mt_status st = eval_args(c, n, &a);
    if (st != MT_OK) return json_decref(obj), st;
    int found = 0;
    if (callee->kind == J_ATTR) {
        st = j_method(c, n->at, obj, callee->str, &a, &found, out);
        if (st == MT_OK && !found) {
            const j_node *m = macro_of(json_is_object(obj) ? json_object_get(obj, callee->str) : NULL);
            if (m) found = 1, st = call_macro(c, n->at, m, &a, out);
        }
        if (st == MT_OK && !found)
            st = j_fail(c, n->at, "%s has no method `%s`", j_type(obj), callee->str);
    } else if (callee->kind == J_NAME) {
        json_t *v = lookup(c->scope, callee->str);
        const j_node *m = macro_of(v);
        const char *global = json_is_object(v) ? json_string_value(json_object_get(v, GLOBAL_KEY)) : NULL;
        if (m) found = 1, st = call_macro(c, n->at, m, &a, out);
        else if (global) st = j_global(c, n->at, global, &a, &found, out);
        if (!found) st = j_global(c, n->at, callee->str, &a, &found, out);
        if (st == MT_OK && !found) st = j_fail(c, n->at, "`%s` is not a function", callee->str);
    } else {
        json_t *v = NULL;
        st = eval(c, callee, &v);
        const j_node *m = macro_of(v);
        const char *global = json_is_object(v) ? json_string_value(json_object_get(v, GLOBAL_KEY)) : NULL;
        if (st == MT_OK && m) st = call_macro(c, n->at, m, &a, out);
        else if (st == MT_OK && global) st = j_global(c, n->at, global, &a, &found, out);
        else if (st == MT_OK) st = j_fail(c, n->at, "calling a %s", j_type(v));
        json_decref(v);
    }
    json_decref(obj);
    args_free(&a);
    return st;
}

/* Python's index into a sequence of n: negative from the end; -1 when outside. */
static long index_of(long long i, size_t n) {
    if (i < 0) i += (long long)n;
    return i < 0 || (size_t)i >= n ? -1 : (long)i;
}

static mt_status item(j_ctx *c, size_t at, const json_t *v, const json_t *key, json_t **out) {
    *out = NULL;
    if (!v) return j_fail(c, at, "an undefined value has no items");
    if (json_is_object(v)) {
        if (json_is_string(key)) *out = json_incref(json_object_get(v, json_string_value(key)));
        return MT_OK;
    }
    if (!json_is_integer(key)) return MT_OK; /* an attribute a list or string does not have */
    if (json_is_array(v)) {
        long i = index_of(json_integer_value(key), json_array_size(v));
        if (i >= 0) *out = json_incref(json_array_get(v, (size_t)i));
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        long i = index_of(json_integer_value(key), j_ulen(s, n));
        if (i >= 0) {
            size_t b = j_uoffset(s, n, (size_t)i), len;
            j_decode(s, n, b, &len);
            if (!(*out = json_stringn_nocheck(s + b, len))) return mt_fail(MT_ERR_NOMEM, "cannot hold a string");
        }
    }
    return MT_OK;
}

/* Python's slice bounds: start, stop, step over n items (slice.indices). */
static mt_status slice_bounds(j_ctx *c, const j_node *n, size_t len, long *start, long *stop, long *step) {
    json_t *v[3] = {0};
    const j_node *part[3] = {n->b, n->c, n->d};
    mt_status st = MT_OK;
    for (int i = 0; i < 3 && st == MT_OK; i++) {
        if (part[i]) st = eval(c, part[i], &v[i]);
        if (st == MT_OK && v[i] && !json_is_null(v[i]) && !json_is_integer(v[i]))
            st = j_fail(c, n->at, "a slice index is a %s, not an int", j_type(v[i]));
    }
    long s[3];
    for (int i = 0; i < 3; i++) {
        int given = v[i] && json_is_integer(v[i]);
        s[i] = given ? (long)json_integer_value(v[i]) : i == 2 ? 1 : LONG_MIN;
        json_decref(v[i]);
    }
    MT_TRY(st);
    if (s[2] == 0) return j_fail(c, n->at, "a slice step of zero");
    long L = (long)len;
    *step = s[2];
    long lo = *step < 0 ? -1 : 0, hi = *step < 0 ? L - 1 : L;
    for (int i = 0; i < 2; i++) {
        if (s[i] == LONG_MIN) {
            s[i] = (i == 0) == (*step > 0) ? lo : hi;
            continue;
        }
        if (s[i] < 0) s[i] = s[i] + L < lo ? lo : s[i] + L;
        else if (s[i] > hi) s[i] = hi;
    }
    if (*step > 0 && s[0] == -1) s[0] = 0;
    *start = s[0], *stop = s[1];
    return MT_OK;
}

static mt_status eval_slice(j_ctx *c, const j_node *n, json_t **out) {
    json_t *v = NULL;
    MT_TRY(eval(c, n->a, &v));
    int is_str = json_is_string(v);
    if (!json_is_array(v) && !is_str) {
        mt_status st = j_fail(c, n->at, "slicing a %s", j_type(v));
        return json_decref(v), st;
    }
    const char *s = is_str ? json_string_value(v) : NULL;
    size_t slen = is_str ? json_string_length(v) : 0, len = is_str ? j_ulen(s, slen) : json_array_size(v);
    long start = 0, stop = 0, step = 1;
    mt_status st = slice_bounds(c, n, len, &start, &stop, &step);
    json_t *r = st == MT_OK ? json_array() : NULL;
    if (st == MT_OK && !r) st = mt_fail(MT_ERR_NOMEM, "cannot hold a slice");
    mt_jinja_output text = {0};
    for (long i = start; st == MT_OK && (step > 0 ? i < stop : i > stop); i += step) {
        if (is_str) {
            size_t b = j_uoffset(s, slen, (size_t)i), k;
            j_decode(s, slen, b, &k);
            st = j_put(&text, s + b, k);
        } else if (json_array_append(r, json_array_get(v, (size_t)i))) {
            st = mt_fail(MT_ERR_NOMEM, "cannot hold a slice");
        }
    }
    if (st == MT_OK && is_str) {
        json_decref(r);
        if (!(r = json_stringn_nocheck(text.text ? text.text : "", text.len)))
            st = mt_fail(MT_ERR_NOMEM, "cannot hold a slice");
    }
    free(text.text);
    json_decref(v);
    if (st != MT_OK) return json_decref(r), st;
    *out = r;
    return MT_OK;
}

static mt_status contains(j_ctx *c, size_t at, const json_t *needle, const json_t *hay, int *out) {
    *out = 0;
    if (json_is_string(hay)) {
        if (!json_is_string(needle))
            return j_fail(c, at, "`in <string>` needs a string on the left, not a %s", j_type(needle));
        size_t n = json_string_length(needle), m = json_string_length(hay);
        const char *h = json_string_value(hay), *s = json_string_value(needle);
        for (size_t i = 0; i + n <= m && !*out; i++) *out = !memcmp(h + i, s, n);
        return MT_OK;
    }
    if (json_is_array(hay)) {
        for (size_t i = 0; i < json_array_size(hay) && !*out; i++) *out = j_equal(json_array_get(hay, i), needle);
        return MT_OK;
    }
    if (json_is_object(hay)) {
        *out = json_is_string(needle) && json_object_get(hay, json_string_value(needle)) != NULL;
        return MT_OK;
    }
    return j_fail(c, at, "`in` a %s", j_type(hay));
}

static json_t *number_result(int real, double x, long long i) { return real ? json_real(x) : json_integer(i); }

static long long floor_div(long long a, long long b) {
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static mt_status arithmetic(j_ctx *c, const j_node *n, const json_t *a, const json_t *b, json_t **out) {
    const char *op = n->str;
    if (!strcmp(op, "~")) {
        mt_jinja_output s = {0};
        mt_status st = j_str(&s, a);
        if (st == MT_OK) st = j_str(&s, b);
        if (st == MT_OK && !(*out = json_stringn_nocheck(s.text ? s.text : "", s.len)))
            st = mt_fail(MT_ERR_NOMEM, "cannot hold a string");
        free(s.text);
        return st;
    }
    if (!strcmp(op, "+") && json_is_string(a) && json_is_string(b)) {
        mt_jinja_output s = {0};
        mt_status st = j_str(&s, a);
        if (st == MT_OK) st = j_str(&s, b);
        if (st == MT_OK && !(*out = json_stringn_nocheck(s.text ? s.text : "", s.len)))
            st = mt_fail(MT_ERR_NOMEM, "cannot hold a string");
        free(s.text);
        return st;
    }
    if (!strcmp(op, "+") && json_is_array(a) && json_is_array(b)) {
        *out = json_copy((json_t *)a);
        if (!*out || json_array_extend(*out, (json_t *)b)) return mt_fail(MT_ERR_NOMEM, "cannot hold a list");
        return MT_OK;
    }
    if (!j_is_number(a) || !j_is_number(b))
        return j_fail(c, n->at, "unsupported operand types for %s: %s and %s", op, j_type(a), j_type(b));
    int real = json_is_real(a) || json_is_real(b);
    double x = j_number(a), y = j_number(b);
    long long i = 0, k = 0;
    if (!real) i = json_is_integer(a) ? json_integer_value(a) : json_is_true(a), k = json_is_integer(b) ? json_integer_value(b) : json_is_true(b);
    long long r = 0;
    int over = 0; /* Python's ints do not overflow; ours stop there */
    if (!strcmp(op, "+")) {
        over = !real && __builtin_add_overflow(i, k, &r);
        *out = number_result(real, x + y, r);
    } else if (!strcmp(op, "-")) {
        over = !real && __builtin_sub_overflow(i, k, &r);
        *out = number_result(real, x - y, r);
    } else if (!strcmp(op, "*")) {
        over = !real && __builtin_mul_overflow(i, k, &r);
        *out = number_result(real, x * y, r);
    } else if (!strcmp(op, "**")) {
        if (!real && k >= 0) {
            if (i == 0 || i == 1 || i == -1) r = k == 0 ? 1 : i == -1 && k % 2 == 0 ? 1 : i;
            else for (long long e = r = 1; e <= k && !over; e++) over = __builtin_mul_overflow(r, i, &r);
            *out = json_integer(r);
        } else {
            *out = json_real(pow(x, y));
        }
    } else {
        if (y == 0) return j_fail(c, n->at, "division by zero");
        if (!real && k == -1 && i == LLONG_MIN) over = 1;
        else if (!strcmp(op, "/")) *out = json_real(x / y);
        else if (!strcmp(op, "//")) *out = number_result(real, floor(x / y), real ? 0 : floor_div(i, k));
        else *out = number_result(real, x - y * floor(x / y), real ? 0 : i - k * floor_div(i, k));
    }
    if (over) return json_decref(*out), *out = NULL, j_fail(c, n->at, "an integer past 64 bits");
    return *out ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a number");
}

static mt_status eval_binary(j_ctx *c, const j_node *n, json_t **out) {
    const char *op = n->str;
    json_t *a = NULL, *b = NULL;
    MT_TRY(eval(c, n->a, &a));
    if (!strcmp(op, "and") || !strcmp(op, "or")) { /* the deciding operand is the value, as in Python */
        if (j_truthy(a) == (op[0] == 'o')) return *out = a, MT_OK;
        json_decref(a);
        return eval(c, n->b, out);
    }
    mt_status st = eval(c, n->b, &b);
    int r = 0;
    if (st != MT_OK) {
    } else if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        *out = json_boolean(j_equal(a, b) == (op[0] == '='));
    } else if (!strcmp(op, "in") || !strcmp(op, "not in")) {
        st = contains(c, n->at, a, b, &r);
        *out = json_boolean(r == (op[0] == 'i'));
    } else if (op[0] == '<' || op[0] == '>') {
        r = j_compare(a, b);
        if (r == -2) st = j_fail(c, n->at, "`%s` between %s and %s", op, j_type(a), j_type(b));
        else *out = json_boolean(!strcmp(op, "<") ? r < 0 : !strcmp(op, "<=") ? r <= 0 : !strcmp(op, ">") ? r > 0 : r >= 0);
    } else {
        st = arithmetic(c, n, a, b, out);
    }
    json_decref(a);
    json_decref(b);
    return st;
}

static mt_status eval_unary(j_ctx *c, const j_node *n, json_t **out) {
    json_t *v = NULL;
    MT_TRY(eval(c, n->a, &v));
    mt_status st = MT_OK;
    if (n->str[0] == 'n') *out = json_boolean(!j_truthy(v));
    else if (!j_is_number(v)) st = j_fail(c, n->at, "unary %s on a %s", n->str, j_type(v));
    else if (n->str[0] == '+') *out = json_is_real(v) ? json_real(json_real_value(v)) : json_integer(json_is_integer(v) ? json_integer_value(v) : (json_int_t)j_number(v));
    else if (json_is_integer(v) && json_integer_value(v) == LLONG_MIN) st = j_fail(c, n->at, "an integer past 64 bits");
    else *out = json_is_real(v) ? json_real(-json_real_value(v)) : json_integer(json_is_integer(v) ? -json_integer_value(v) : -(json_int_t)j_number(v));
    json_decref(v);
    return st;
}

static mt_status eval_filter(j_ctx *c, const j_node *n, json_t *v, json_t **out) {
    j_args a;
    MT_TRY(eval_args(c, n, &a));
    mt_status st = j_filter(c, n->at, n->str, v, &a, out);
    args_free(&a);
    return st;
}

static mt_status eval_node(j_ctx *c, const j_node *n, json_t **out) {
    switch (n->kind) {
    case J_LIT: *out = json_incref(n->lit); return MT_OK;
    case J_NAME:
        *out = json_incref(lookup(c->scope, n->str));
        /* a global function, unbound, is defined (`strftime_now is defined`) */
        if (!*out && mt_jinja_global_known(n->str) && !(*out = json_pack("{ss}", GLOBAL_KEY, n->str)))
            return mt_fail(MT_ERR_NOMEM, "cannot hold a template value");
        return MT_OK;
    case J_ATTR: {
        json_t *v = NULL;
        MT_TRY(eval(c, n->a, &v));
        mt_status st = MT_OK;
        if (!v) st = j_fail(c, n->at, "an undefined value has no attribute `%s`", n->str);
        else if (json_is_object(v)) *out = json_incref(json_object_get(v, n->str));
        json_decref(v);
        return st;
    }
    case J_ITEM: {
        json_t *v = NULL, *key = NULL;
        MT_TRY(eval(c, n->a, &v));
        mt_status st = eval(c, n->b, &key);
        if (st == MT_OK) st = item(c, n->at, v, key, out);
        json_decref(v);
        json_decref(key);
        return st;
    }
    case J_SLICE: return eval_slice(c, n, out);
    case J_CALL: return eval_call(c, n, out);
    case J_FILTER: {
        json_t *v = NULL;
        MT_TRY(eval(c, n->a, &v));
        mt_status st = eval_filter(c, n, v, out);
        json_decref(v);
        return st;
    }
    case J_TEST: {
        json_t *v = NULL;
        j_args a;
        MT_TRY(eval(c, n->a, &v));
        mt_status st = eval_args(c, n, &a);
        int r = 0;
        if (st == MT_OK) st = j_test(c, n->at, n->str, v, &a, &r);
        if (st == MT_OK) *out = json_boolean(r != n->neg);
        args_free(&a);
        json_decref(v);
        return st;
    }
    case J_UNARY: return eval_unary(c, n, out);
    case J_BINARY: return eval_binary(c, n, out);
    case J_COND: {
        json_t *cond = NULL;
        MT_TRY(eval(c, n->b, &cond));
        int yes = j_truthy(cond);
        json_decref(cond);
        return yes ? eval(c, n->a, out) : n->c ? eval(c, n->c, out) : MT_OK;
    }
    case J_LIST: {
        json_t *list = json_array();
        if (!list) return mt_fail(MT_ERR_NOMEM, "cannot hold a list");
        for (size_t i = 0; i < n->n_kid; i++) {
            json_t *v = NULL;
            mt_status st = eval(c, n->kid[i], &v);
            if (st == MT_OK && !v) st = j_fail(c, n->kid[i]->at, "an undefined value in a list");
            if (st == MT_OK && json_array_append_new(list, v)) st = mt_fail(MT_ERR_NOMEM, "cannot hold a list");
            if (st != MT_OK) return json_decref(list), st;
        }
        return *out = list, MT_OK;
    }
    case J_DICT: {
        json_t *dict = json_object();
        if (!dict) return mt_fail(MT_ERR_NOMEM, "cannot hold a dict");
        for (size_t i = 0; i + 1 < n->n_kid; i += 2) {
            json_t *k = NULL, *v = NULL;
            mt_status st = eval(c, n->kid[i], &k);
            if (st == MT_OK) st = eval(c, n->kid[i + 1], &v);
            if (st == MT_OK && !json_is_string(k)) st = j_fail(c, n->kid[i]->at, "a dict key is a %s, not a string", j_type(k));
            if (st == MT_OK && !v) st = j_fail(c, n->kid[i + 1]->at, "an undefined value in a dict");
            if (st == MT_OK && json_object_setn(dict, json_string_value(k), json_string_length(k), v))
                st = mt_fail(MT_ERR_NOMEM, "cannot hold a dict");
            json_decref(k);
            json_decref(v);
            if (st != MT_OK) return json_decref(dict), st;
        }
        return *out = dict, MT_OK;
    }
    default: return j_fail(c, n->at, "a statement where an expression was expected");
    }
}

static mt_status too_deep(j_ctx *c, const j_node *n) {
    return j_fail(c, n->at, "the template nests more than %d expressions and statements deep", MAX_NEST);
}

static mt_status eval(j_ctx *c, const j_node *n, json_t **out) {
    *out = NULL;
    if (++c->steps > MAX_STEPS) return j_fail(c, n->at, "the template runs too long (over %d steps)", MAX_STEPS);
    if (c->nest >= MAX_NEST) return too_deep(c, n);
    c->nest++;
    mt_status st = eval_node(c, n, out);
    c->nest--;
    return st;
}

/* ---- statements ---- */

/* The items a loop goes over: a list's items, a dict's keys, a string's characters. */
static mt_status iterable(j_ctx *c, size_t at, json_t *v, json_t **items) {
    if (json_is_array(v)) return *items = json_incref(v), MT_OK;
    json_t *list = json_array();
    if (!list) return mt_fail(MT_ERR_NOMEM, "cannot hold a list");
    *items = list;
    if (json_is_object(v)) {
        const char *key;
        json_t *value;
        json_object_foreach(v, key, value) if (strcmp(key, MACRO_KEY) && json_array_append_new(list, json_string(key)))
            return mt_fail(MT_ERR_NOMEM, "cannot hold a list");
        return MT_OK;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v), len;
        for (size_t i = 0; i < n; i += len) {
            j_decode(s, n, i, &len);
            if (json_array_append_new(list, json_stringn_nocheck(s + i, len))) return mt_fail(MT_ERR_NOMEM, "cannot hold a list");
        }
        return MT_OK;
    }
    return j_fail(c, at, "a loop over a %s", j_type(v));
}

/* Binds a loop's targets to an item: one name, or several unpacked from a list. */
static mt_status bind_targets(j_ctx *c, const j_node *n, j_frame *f, json_t *item) {
    if (n->n_names == 1) return bind(f, n->names[0], item);
    if (!json_is_array(item) || json_array_size(item) != n->n_names)
        return j_fail(c, n->at, "cannot unpack a %s into %zu names", j_type(item), n->n_names);
    for (size_t i = 0; i < n->n_names; i++) MT_TRY(bind(f, n->names[i], json_array_get(item, i)));
    return MT_OK;
}

static mt_status loop_object(json_t *items, size_t i, json_t **out) {
    size_t len = json_array_size(items);
    *out = json_pack("{s:I,s:I,s:I,s:I,s:b,s:b,s:I}", "index", (json_int_t)i + 1, "index0", (json_int_t)i, "revindex",
                     (json_int_t)(len - i), "revindex0", (json_int_t)(len - i - 1), "first", i == 0, "last", i + 1 == len,
                     "length", (json_int_t)len);
    if (*out && i > 0) json_object_set(*out, "previtem", json_array_get(items, i - 1));
    if (*out && i + 1 < len) json_object_set(*out, "nextitem", json_array_get(items, i + 1));
    return *out ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a loop");
}

/* The loop's items, kept by its `if` filter (evaluated with the targets bound). */
static mt_status filtered(j_ctx *c, const j_node *n, json_t *all, json_t **kept) {
    if (!n->d) return *kept = json_incref(all), MT_OK;
    json_t *list = json_array();
    if (!list) return mt_fail(MT_ERR_NOMEM, "cannot hold a list");
    mt_status st = MT_OK;
    for (size_t i = 0; i < json_array_size(all) && st == MT_OK; i++) {
        json_t *vars = json_object(), *yes = NULL;
        j_frame f = {vars, c->scope}, *saved = c->scope;
        st = vars ? bind_targets(c, n, &f, json_array_get(all, i)) : mt_fail(MT_ERR_NOMEM, "cannot hold a loop");
        c->scope = &f;
        if (st == MT_OK) st = eval(c, n->d, &yes);
        c->scope = saved;
        if (st == MT_OK && j_truthy(yes) && json_array_append(list, json_array_get(all, i)))
            st = mt_fail(MT_ERR_NOMEM, "cannot hold a list");
        json_decref(yes);
        json_decref(vars);
    }
    if (st != MT_OK) return json_decref(list), st;
    return *kept = list, MT_OK;
}

static mt_status exec_for(j_ctx *c, const j_node *n) {
    json_t *v = NULL, *all = NULL, *items = NULL;
    MT_TRY(eval(c, n->a, &v));
    mt_status st = iterable(c, n->a->at, v, &all);
    json_decref(v);
    if (st == MT_OK) st = filtered(c, n, all, &items);
    json_decref(all);
    size_t len = json_array_size(items);
    for (size_t i = 0; i < len && st == MT_OK; i++) {
        json_t *vars = json_object(), *loop = NULL;
        j_frame f = {vars, c->scope};
        st = vars ? loop_object(items, i, &loop) : mt_fail(MT_ERR_NOMEM, "cannot hold a loop");
        if (st == MT_OK) st = bind(&f, "loop", loop);
        if (st == MT_OK) st = bind_targets(c, n, &f, json_array_get(items, i));
        if (st == MT_OK) st = exec_in(c, n->b, vars, c->scope);
        json_decref(loop);
        json_decref(vars);
        int stop = c->flow == J_BREAK;
        c->flow = 0;
        if (stop) break;
    }
    if (st == MT_OK && len == 0 && n->c) st = exec(c, n->c);
    json_decref(items);
    return st;
}

/* Whether `v` holds `obj` anywhere (a namespace set into itself would make a cycle). */
static int holds(const json_t *v, const json_t *obj) {
    if (v == obj) return 1;
    if (json_is_array(v))
        for (size_t i = 0; i < json_array_size(v); i++)
            if (holds(json_array_get(v, i), obj)) return 1;
    if (json_is_object(v)) {
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)v, key, item) if (holds(item, obj)) return 1;
    }
    return 0;
}

/* {% set x = v %}, {% set a, b = v %}, {% set ns.attr = v %} (n->neg marks the attribute) or a
 * {% set x %}...{% endset %} block. */
static mt_status exec_set(j_ctx *c, const j_node *n) {
    json_t *v = NULL;
    MT_TRY(n->a ? eval(c, n->a, &v) : capture(c, n->b, NULL, NULL, &v));
    mt_status st = MT_OK;
    if (n->neg) {
        json_t *ns = lookup(c->scope, n->names[0]);
        int is_namespace = 0;
        for (size_t k = 0; k < json_array_size(c->namespaces) && !is_namespace; k++)
            is_namespace = json_array_get(c->namespaces, k) == ns;
        if (!is_namespace)
            st = j_fail(c, n->at, "`%s.%s = ...` on a %s, not a namespace()", n->names[0], n->names[1], j_type(ns));
        else if (v && holds(v, ns))
            st = j_fail(c, n->at, "a namespace set into itself");
        else if (!v)
            json_object_del(ns, n->names[1]);
        else if (json_object_set(ns, n->names[1], v))
            st = mt_fail(MT_ERR_NOMEM, "cannot hold a template variable");
    } else {
        st = bind_targets(c, n, c->scope, v);
    }
    json_decref(v);
    return st;
}

static mt_status exec_generation(j_ctx *c, const j_node *n) {
    mt_jinja_output *o = c->out;
    size_t start = o->len;
    MT_TRY(exec(c, n->b));
    if (o->n_gen == o->gen_cap) {
        size_t cap = o->gen_cap ? 2 * o->gen_cap : 16;
        size_t(*grown)[2] = realloc(o->gen, cap * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered chat template");
        o->gen = grown;
        o->gen_cap = cap;
    }
    o->gen[o->n_gen][0] = start;
    o->gen[o->n_gen++][1] = o->len;
    return MT_OK;
}

static mt_status exec_one(j_ctx *c, const j_node *n) {
    switch (n->kind) {
    case J_BODY:
        for (size_t i = 0; i < n->n_kid && !c->flow; i++) MT_TRY(exec_one(c, n->kid[i]));
        return MT_OK;
    case J_TEXT: return j_put(c->out, n->str, n->len);
    case J_OUT: {
        json_t *v = NULL;
        MT_TRY(eval(c, n->a, &v));
        if (macro_of(v) || (json_is_object(v) && json_object_get(v, GLOBAL_KEY)))
            return json_decref(v), j_fail(c, n->at, "a function written out without calling it");
        mt_status st = j_str(c->out, v);
        json_decref(v);
        return st;
    }
    case J_IF:
        for (size_t i = 0; i + 1 < n->n_kid; i += 2) {
            int yes = 1;
            if (n->kid[i]) {
                json_t *cond = NULL;
                MT_TRY(eval(c, n->kid[i], &cond));
                yes = j_truthy(cond);
                json_decref(cond);
            }
            if (yes) return exec_one(c, n->kid[i + 1]);
        }
        return MT_OK;
    case J_FOR: return exec_for(c, n);
    case J_SET: return exec_set(c, n);
    case J_MACRO: {
        json_t *m = json_pack("{s:I}", MACRO_KEY, (json_int_t)(uintptr_t)n);
        if (!m) return mt_fail(MT_ERR_NOMEM, "cannot hold a macro");
        mt_status st = bind(c->scope, n->str, m);
        json_decref(m);
        return st;
    }
    case J_GENERATION: return exec_generation(c, n);
    case J_FILTER_BLOCK: {
        json_t *text = NULL, *v = NULL;
        MT_TRY(capture(c, n->b, NULL, NULL, &text));
        mt_status st = eval_filter(c, n->a, text, &v);
        if (st == MT_OK) st = j_str(c->out, v);
        json_decref(text);
        json_decref(v);
        return st;
    }
    case J_BREAK:
    case J_CONTINUE: c->flow = (int)n->kind; return MT_OK;
    default: return j_fail(c, n->at, "an expression where a statement was expected");
    }
}

static mt_status exec(j_ctx *c, const j_node *n) {
    if (++c->steps > MAX_STEPS) return j_fail(c, n->at, "the template runs too long (over %d steps)", MAX_STEPS);
    if (c->nest >= MAX_NEST) return too_deep(c, n);
    c->nest++;
    mt_status st = exec_one(c, n);
    c->nest--;
    return st;
}

mt_status mt_jinja_render(const mt_jinja *t, const json_t *vars, const char *today, mt_jinja_output *out) {
    *out = (mt_jinja_output){0};
    json_t *globals = json_copy((json_t *)vars), *own = json_object(), *namespaces = json_array();
    j_frame g = {globals, NULL}, top = {own, &g};
    j_ctx c = {.t = t, .out = out, .today = today, .top = &top, .scope = &top, .namespaces = namespaces};
    mt_status st = globals && own && namespaces ? exec(&c, t->root) : mt_fail(MT_ERR_NOMEM, "cannot render a chat template");
    if (st == MT_OK) st = j_put(out, "", 0); /* a text even when empty */
    json_decref(namespaces);
    json_decref(own);
    json_decref(globals);
    if (st != MT_OK) mt_jinja_output_free(out);
    return st;
}

void mt_jinja_output_free(mt_jinja_output *o) {
    free(o->text);
    free(o->gen);
    *o = (mt_jinja_output){0};
}
