/* The parser: Jinja's grammar (jinja2/parser.py) for the statements and expressions chat templates
 * use, over the token stream of tokenizer/jinja_lex.h. Precedence, loosest first: inline if-else,
 * or, and, not, comparisons (== != < <= > >= in, not in), + -, ~, * / // %, **, unary - +, then
 * postfix .attr [item] [slice] (call), filters | and tests is. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_ast.h"

typedef struct {
    mt_jinja *t;
    size_t i;
    int depth; /* the parse's own recursion: expressions, unary operators and tags one inside another */
} parser;

/* The parser's recursion (and so its stack) is bounded whatever the template. */
enum { MAX_NEST = 500 };

static const mt_jinja_token *peek(const parser *p) { return p->i < p->t->tokens.n ? &p->t->tokens.t[p->i] : NULL; }

static size_t here(const parser *p) {
    const mt_jinja_token *k = peek(p);
    return k ? k->at : p->t->tokens.src_len;
}

static mt_status fail_at(const parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static mt_status fail_at(const parser *p, size_t at, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t line, col;
    mt_jinja_position(&p->t->tokens, at, &line, &col);
    return mt_fail(MT_ERR_INVALID, "%s: chat template line %zu, column %zu: %s", p->t->source, line, col, what);
}

static int is(const parser *p, mt_jinja_kind kind, const char *value) {
    const mt_jinja_token *k = peek(p);
    return k && k->kind == kind && (!value || !strcmp(k->value, value));
}

static int accept(parser *p, mt_jinja_kind kind, const char *value) {
    if (!is(p, kind, value)) return 0;
    p->i++;
    return 1;
}

static const char *shown(const parser *p) {
    const mt_jinja_token *k = peek(p);
    return !k ? "the end of the template" : k->kind == MT_JT_END ? "the end of the tag" : k->value;
}

static mt_status expect(parser *p, mt_jinja_kind kind, const char *value, const char *what) {
    if (accept(p, kind, value)) return MT_OK;
    return fail_at(p, here(p), "expected %s, found `%s`", what, shown(p));
}

/* A new node, kept in the template's list of nodes (which frees them all, so that a parse that
 * fails half-way leaves nothing behind). */
static j_node *node(parser *p, j_kind kind, size_t at) {
    mt_jinja *t = p->t;
    if (t->n_nodes == t->nodes_cap) {
        size_t cap = t->nodes_cap ? 2 * t->nodes_cap : 256;
        j_node **grown = realloc(t->nodes, cap * sizeof *grown);
        if (!grown) return NULL;
        t->nodes = grown;
        t->nodes_cap = cap;
    }
    j_node *n = calloc(1, sizeof *n);
    if (n) n->kind = kind, n->at = at, t->nodes[t->n_nodes++] = n;
    return n;
}

#define NEW(var, kind, at)                                                                   \
    j_node *var = node(p, kind, at);                                                         \
    if (!var) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template")

static mt_status set_str(j_node *n, const char *s, size_t len) {
    n->str = malloc(len + 1);
    if (!n->str) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    memcpy(n->str, s, len);
    n->str[len] = '\0';
    n->len = len;
    return MT_OK;
}

static mt_status add_kid(j_node *n, j_node *kid, const char *name) {
    j_node **grown = realloc(n->kid, (n->n_kid + 1) * sizeof *grown);
    if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    n->kid = grown;
    n->kid[n->n_kid++] = kid;
    if (name || n->names) {
        char **names = realloc(n->names, n->n_kid * sizeof *names);
        if (!names) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
        n->names = names;
        for (size_t i = n->n_names; i + 1 < n->n_kid; i++) names[i] = NULL;
        names[n->n_kid - 1] = name ? strdup(name) : NULL;
        n->n_names = n->n_kid;
    }
    return MT_OK;
}

static mt_status add_name(j_node *n, const char *name) {
    char **names = realloc(n->names, (n->n_names + 1) * sizeof *names);
    if (!names) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    n->names = names;
    return (names[n->n_names++] = strdup(name)) ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
}

/* One level deeper into the parse (undone by the caller once it returns), or a failure where the
 * template nests past MAX_NEST. */
static mt_status deeper(parser *p) {
    return ++p->depth > MAX_NEST ? fail_at(p, here(p), "expressions and tags nested more than %d deep", MAX_NEST)
                                 : MT_OK;
}

/* ---- expressions ---- */

static mt_status expression(parser *p, j_node **out);
static mt_status unary(parser *p, int with_filter, j_node **out);

/* Arguments of a call or filter, after its "(": positional, then name=value. */
static mt_status arguments(parser *p, j_node *n) {
    while (!accept(p, MT_JT_OP, ")")) {
        if (n->n_kid && !accept(p, MT_JT_OP, ",")) return fail_at(p, here(p), "expected `,` or `)`, found `%s`", shown(p));
        if (accept(p, MT_JT_OP, ")")) break;
        const char *name = NULL;
        if (is(p, MT_JT_NAME, NULL) && p->i + 1 < p->t->tokens.n && p->t->tokens.t[p->i + 1].kind == MT_JT_OP &&
            !strcmp(p->t->tokens.t[p->i + 1].value, "=")) {
            name = peek(p)->value;
            p->i += 2;
        }
        j_node *arg;
        MT_TRY(expression(p, &arg));
        MT_TRY(add_kid(n, arg, name));
    }
    return MT_OK;
}

static mt_status number(parser *p, const mt_jinja_token *k, j_node *n) {
    char *end;
    const char *s = k->value;
    if (!strpbrk(s, ".eE")) {
        long long v = strtoll(s, &end, 10);
        if (*end) return fail_at(p, k->at, "`%s` is not a number", s);
        n->lit = json_integer(v);
    } else {
        double v = strtod(s, &end);
        if (*end) return fail_at(p, k->at, "`%s` is not a number", s);
        n->lit = json_real(v);
    }
    return n->lit ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
}

/* A literal, a name, a parenthesised expression or tuple, a list or a dict. */
static mt_status primary(parser *p, j_node **out) {
    const mt_jinja_token *k = peek(p);
    size_t at = here(p);
    if (!k || k->kind == MT_JT_END) return fail_at(p, at, "expected an expression, found `%s`", shown(p));
    if (k->kind == MT_JT_NAME) {
        p->i++;
        NEW(n, J_LIT, at);
        *out = n;
        const char *v = k->value;
        if (!strcmp(v, "true") || !strcmp(v, "True")) n->lit = json_true();
        else if (!strcmp(v, "false") || !strcmp(v, "False")) n->lit = json_false();
        else if (!strcmp(v, "none") || !strcmp(v, "None")) n->lit = json_null();
        else return n->kind = J_NAME, set_str(n, v, k->len);
        return MT_OK;
    }
    if (k->kind == MT_JT_STRING) {
        NEW(n, J_LIT, at);
        *out = n;
        /* adjacent literals are one string, as in Python */
        size_t len = 0;
        for (size_t j = p->i; j < p->t->tokens.n && p->t->tokens.t[j].kind == MT_JT_STRING; j++)
            len += p->t->tokens.t[j].len;
        char *s = malloc(len + 1);
        if (!s) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
        len = 0;
        while (is(p, MT_JT_STRING, NULL)) {
            memcpy(s + len, peek(p)->value, peek(p)->len);
            len += peek(p)->len;
            p->i++;
        }
        n->lit = json_stringn_nocheck(s, len);
        free(s);
        return n->lit ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    }
    if (k->kind == MT_JT_NUMBER) {
        p->i++;
        NEW(n, J_LIT, at);
        *out = n;
        return number(p, k, n);
    }
    if (accept(p, MT_JT_OP, "(")) {
        if (accept(p, MT_JT_OP, ")")) {
            NEW(n, J_LIST, at);
            return *out = n, MT_OK;
        }
        MT_TRY(expression(p, out));
        if (is(p, MT_JT_OP, ",")) {
            NEW(n, J_LIST, at);
            MT_TRY(add_kid(n, *out, NULL));
            *out = n;
            while (accept(p, MT_JT_OP, ",") && !is(p, MT_JT_OP, ")")) {
                j_node *e;
                MT_TRY(expression(p, &e));
                MT_TRY(add_kid(n, e, NULL));
            }
        }
        return expect(p, MT_JT_OP, ")", "`)`");
    }
    if (accept(p, MT_JT_OP, "[")) {
        NEW(n, J_LIST, at);
        *out = n;
        while (!accept(p, MT_JT_OP, "]")) {
            if (n->n_kid) MT_TRY(expect(p, MT_JT_OP, ",", "`,` or `]`"));
            if (accept(p, MT_JT_OP, "]")) break;
            j_node *e;
            MT_TRY(expression(p, &e));
            MT_TRY(add_kid(n, e, NULL));
        }
        return MT_OK;
    }
    if (accept(p, MT_JT_OP, "{")) {
        NEW(n, J_DICT, at);
        *out = n;
        while (!accept(p, MT_JT_OP, "}")) {
            if (n->n_kid) MT_TRY(expect(p, MT_JT_OP, ",", "`,` or `}`"));
            if (accept(p, MT_JT_OP, "}")) break;
            j_node *key, *value;
            MT_TRY(expression(p, &key));
            MT_TRY(add_kid(n, key, NULL));
            MT_TRY(expect(p, MT_JT_OP, ":", "`:`"));
            MT_TRY(expression(p, &value));
            MT_TRY(add_kid(n, value, NULL));
        }
        return MT_OK;
    }
    return fail_at(p, at, "unexpected `%s`", shown(p));
}

/* [b], [b:c], [b:c:d] after `a[`. */
static mt_status subscript(parser *p, j_node *a, size_t at, j_node **out) {
    j_node *parts[3] = {0};
    int colons = 0;
    mt_status st = MT_OK;
    for (;;) {
        if (!is(p, MT_JT_OP, ":") && !is(p, MT_JT_OP, "]")) st = expression(p, &parts[colons]);
        if (st != MT_OK || colons == 2 || !accept(p, MT_JT_OP, ":")) break;
        colons++;
    }
    if (st == MT_OK) st = expect(p, MT_JT_OP, "]", "`]`");
    if (st == MT_OK && !colons && !parts[0]) st = fail_at(p, at, "an empty subscript");
    j_node *n = st == MT_OK ? node(p, colons ? J_SLICE : J_ITEM, at) : NULL;
    if (!n) return st != MT_OK ? st : mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    n->a = a, n->b = parts[0], n->c = parts[1], n->d = parts[2];
    *out = n;
    return MT_OK;
}

static mt_status postfix(parser *p, j_node **inout) {
    for (;;) {
        size_t at = here(p);
        if (accept(p, MT_JT_OP, ".")) {
            const mt_jinja_token *k = peek(p);
            if (!k || (k->kind != MT_JT_NAME && k->kind != MT_JT_NUMBER))
                return fail_at(p, at, "expected an attribute name after `.`, found `%s`", shown(p));
            p->i++;
            NEW(n, k->kind == MT_JT_NAME ? J_ATTR : J_ITEM, at);
            n->a = *inout;
            *inout = n;
            if (k->kind == MT_JT_NUMBER) {
                NEW(index, J_LIT, at);
                n->b = index;
                MT_TRY(number(p, k, index));
            } else {
                MT_TRY(set_str(n, k->value, k->len));
            }
        } else if (accept(p, MT_JT_OP, "[")) {
            MT_TRY(subscript(p, *inout, at, inout));
        } else if (accept(p, MT_JT_OP, "(")) {
            NEW(n, J_CALL, (*inout)->at); /* a call is where its callee is, for messages */
            n->a = *inout;
            *inout = n;
            MT_TRY(arguments(p, n));
        } else {
            return MT_OK;
        }
    }
}

/* Filters (| name(args)) and tests (is [not] name args) after an operand. */
static mt_status filters(parser *p, j_node **inout) {
    for (;;) {
        size_t at = here(p);
        if (accept(p, MT_JT_OP, "|")) {
            const mt_jinja_token *k = peek(p);
            if (!k || k->kind != MT_JT_NAME) return fail_at(p, here(p), "expected a filter name, found `%s`", shown(p));
            if (!mt_jinja_filter_known(k->value)) return fail_at(p, k->at, "no filter named `%s`", k->value);
            p->i++;
            NEW(n, J_FILTER, at);
            n->a = *inout;
            *inout = n;
            MT_TRY(set_str(n, k->value, k->len));
            if (accept(p, MT_JT_OP, "(")) MT_TRY(arguments(p, n));
        } else if (accept(p, MT_JT_NAME, "is")) {
            NEW(n, J_TEST, at);
            n->a = *inout;
            *inout = n;
            n->neg = accept(p, MT_JT_NAME, "not");
            const mt_jinja_token *k = peek(p);
            if (!k || k->kind != MT_JT_NAME) return fail_at(p, here(p), "expected a test name, found `%s`", shown(p));
            if (!mt_jinja_test_known(k->value)) return fail_at(p, k->at, "no test named `%s`", k->value);
            p->i++;
            MT_TRY(set_str(n, k->value, k->len));
            if (accept(p, MT_JT_OP, "(")) {
                MT_TRY(arguments(p, n));
            } else if ((is(p, MT_JT_NAME, NULL) || is(p, MT_JT_STRING, NULL) || is(p, MT_JT_NUMBER, NULL) ||
                        is(p, MT_JT_OP, "[") || is(p, MT_JT_OP, "{")) &&
                       !is(p, MT_JT_NAME, "else") && !is(p, MT_JT_NAME, "or") && !is(p, MT_JT_NAME, "and")) {
                /* one argument without parentheses: `is equalto 3`, `is sameas none` */
                j_node *arg;
                MT_TRY(primary(p, &arg));
                MT_TRY(add_kid(n, arg, NULL));
                MT_TRY(postfix(p, &n->kid[n->n_kid - 1]));
            }
        } else if (accept(p, MT_JT_OP, "(")) {
            NEW(n, J_CALL, at);
            n->a = *inout;
            *inout = n;
            MT_TRY(arguments(p, n));
        } else {
            return MT_OK;
        }
    }
}

static mt_status unary_at(parser *p, int with_filter, j_node **out) {
    size_t at = here(p);
    if (is(p, MT_JT_OP, "-") || is(p, MT_JT_OP, "+")) {
        NEW(n, J_UNARY, at);
        *out = n;
        MT_TRY(set_str(n, peek(p)->value, 1));
        p->i++;
        MT_TRY(unary(p, 0, &n->a));
    } else {
        MT_TRY(primary(p, out));
    }
    MT_TRY(postfix(p, out));
    return with_filter ? filters(p, out) : MT_OK;
}

static mt_status unary(parser *p, int with_filter, j_node **out) {
    MT_TRY(deeper(p));
    mt_status st = unary_at(p, with_filter, out);
    p->depth--;
    return st;
}

/* A left-associative level: operand (op operand)*. */
typedef mt_status (*level_fn)(parser *, j_node **);

static mt_status binary_level(parser *p, j_node **out, level_fn next, const char *const *ops, mt_jinja_kind kind) {
    MT_TRY(next(p, out));
    for (;;) {
        const char *const *op = ops;
        while (*op && !is(p, kind, *op)) op++;
        if (!*op) return MT_OK;
        size_t at = here(p);
        p->i++;
        NEW(n, J_BINARY, at);
        n->a = *out;
        *out = n;
        MT_TRY(set_str(n, *op, strlen(*op)));
        MT_TRY(next(p, &n->b));
    }
}

static mt_status pow_level(parser *p, j_node **out) {
    static const char *const ops[] = {"**", NULL};
    MT_TRY(unary(p, 1, out));
    while (is(p, MT_JT_OP, ops[0])) {
        size_t at = here(p);
        p->i++;
        NEW(n, J_BINARY, at);
        n->a = *out;
        *out = n;
        MT_TRY(set_str(n, "**", 2));
        MT_TRY(unary(p, 1, &n->b));
    }
    return MT_OK;
}

static mt_status math2(parser *p, j_node **out) {
    static const char *const ops[] = {"*", "/", "//", "%", NULL};
    return binary_level(p, out, pow_level, ops, MT_JT_OP);
}

static mt_status concat(parser *p, j_node **out) {
    static const char *const ops[] = {"~", NULL};
    return binary_level(p, out, math2, ops, MT_JT_OP);
}

static mt_status math1(parser *p, j_node **out) {
    static const char *const ops[] = {"+", "-", NULL};
    return binary_level(p, out, concat, ops, MT_JT_OP);
}

static mt_status compare(parser *p, j_node **out) {
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
    MT_TRY(math1(p, out));
    for (;;) {
        size_t at = here(p);
        const char *op = NULL;
        for (const char *const *o = ops; *o; o++)
            if (is(p, MT_JT_OP, *o)) op = *o;
        if (op) {
            p->i++;
        } else if (is(p, MT_JT_NAME, "in")) {
            op = "in", p->i++;
        } else if (is(p, MT_JT_NAME, "not") && p->i + 1 < p->t->tokens.n &&
                   p->t->tokens.t[p->i + 1].kind == MT_JT_NAME && !strcmp(p->t->tokens.t[p->i + 1].value, "in")) {
            op = "not in", p->i += 2;
        } else {
            return MT_OK;
        }
        NEW(n, J_BINARY, at);
        n->a = *out;
        *out = n;
        MT_TRY(set_str(n, op, strlen(op)));
        MT_TRY(math1(p, &n->b));
    }
}

static mt_status not_level(parser *p, j_node **out);

static mt_status not_level_at(parser *p, j_node **out) {
    size_t at = here(p);
    if (accept(p, MT_JT_NAME, "not")) {
        NEW(n, J_UNARY, at);
        *out = n;
        MT_TRY(set_str(n, "not", 3));
        return not_level(p, &n->a);
    }
    return compare(p, out);
}

static mt_status not_level(parser *p, j_node **out) {
    MT_TRY(deeper(p));
    mt_status st = not_level_at(p, out);
    p->depth--;
    return st;
}

static mt_status and_level(parser *p, j_node **out) {
    static const char *const ops[] = {"and", NULL};
    return binary_level(p, out, not_level, ops, MT_JT_NAME);
}

static mt_status or_level(parser *p, j_node **out) {
    static const char *const ops[] = {"or", NULL};
    return binary_level(p, out, and_level, ops, MT_JT_NAME);
}

static mt_status expression_at(parser *p, j_node **out) {
    MT_TRY(or_level(p, out));
    while (is(p, MT_JT_NAME, "if")) {
        size_t at = here(p);
        p->i++;
        NEW(n, J_COND, at);
        n->a = *out;
        *out = n;
        MT_TRY(or_level(p, &n->b));
        if (accept(p, MT_JT_NAME, "else")) MT_TRY(or_level(p, &n->c));
    }
    return MT_OK;
}

static mt_status expression(parser *p, j_node **out) {
    MT_TRY(deeper(p));
    mt_status st = expression_at(p, out);
    p->depth--;
    return st;
}

/* ---- statements ---- */

/* The statements up to a {% tag %} named in `ends` (NULL-terminated); *end gets its name and the
 * parser stands after it ({% else %} and the like keep their `%}` for the caller to expect). */
static mt_status body(parser *p, const char *const *ends, j_node **out, const char **end);

static mt_status end_tag(parser *p) { return expect(p, MT_JT_END, NULL, "`%}`"); }

static mt_status target_name(parser *p, const char **name) {
    static const char *const keywords[] = {"in", "if", "else", "not", "and", "or", "is", NULL};
    const mt_jinja_token *k = peek(p);
    int keyword = 0;
    for (const char *const *w = keywords; k && *w; w++) keyword |= !strcmp(k->value, *w);
    if (!k || k->kind != MT_JT_NAME || keyword) return fail_at(p, here(p), "expected a name, found `%s`", shown(p));
    *name = k->value;
    p->i++;
    return MT_OK;
}

static mt_status if_stmt(parser *p, size_t at, j_node **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    NEW(n, J_IF, at);
    *out = n;
    j_node *cond;
    MT_TRY(expression(p, &cond));
    MT_TRY(add_kid(n, cond, NULL));
    MT_TRY(end_tag(p));
    for (;;) {
        j_node *b;
        const char *end;
        MT_TRY(body(p, ends, &b, &end));
        MT_TRY(add_kid(n, b, NULL));
        if (!strcmp(end, "endif")) return end_tag(p);
        if (!strcmp(end, "else")) {
            MT_TRY(end_tag(p));
            MT_TRY(add_kid(n, NULL, NULL));
            static const char *const endif[] = {"endif", NULL};
            MT_TRY(body(p, endif, &b, &end));
            MT_TRY(add_kid(n, b, NULL));
            return end_tag(p);
        }
        MT_TRY(expression(p, &cond));
        MT_TRY(add_kid(n, cond, NULL));
        MT_TRY(end_tag(p));
    }
}

static mt_status for_stmt(parser *p, size_t at, j_node **out) {
    static const char *const ends[] = {"else", "endfor", NULL};
    NEW(n, J_FOR, at);
    *out = n;
    const char *name;
    do {
        MT_TRY(target_name(p, &name));
        MT_TRY(add_name(n, name));
    } while (accept(p, MT_JT_OP, ","));
    MT_TRY(expect(p, MT_JT_NAME, "in", "`in`"));
    MT_TRY(or_level(p, &n->a)); /* not an inline if: `for x in y if z` filters */
    if (accept(p, MT_JT_NAME, "if")) MT_TRY(expression(p, &n->d));
    if (accept(p, MT_JT_NAME, "recursive")) return fail_at(p, at, "recursive loops are not supported");
    MT_TRY(end_tag(p));
    const char *end;
    MT_TRY(body(p, ends, &n->b, &end));
    if (!strcmp(end, "else")) {
        static const char *const endfor[] = {"endfor", NULL};
        MT_TRY(end_tag(p));
        MT_TRY(body(p, endfor, &n->c, &end));
    }
    return end_tag(p);
}

static mt_status set_stmt(parser *p, size_t at, j_node **out) {
    NEW(n, J_SET, at);
    *out = n;
    const char *name;
    MT_TRY(target_name(p, &name));
    MT_TRY(add_name(n, name));
    if (accept(p, MT_JT_OP, ".")) {
        n->neg = 1; /* ns.attr */
        MT_TRY(target_name(p, &name));
        MT_TRY(add_name(n, name));
    } else {
        while (accept(p, MT_JT_OP, ",")) {
            MT_TRY(target_name(p, &name));
            MT_TRY(add_name(n, name));
        }
    }
    if (accept(p, MT_JT_OP, "=")) {
        MT_TRY(expression(p, &n->a));
        if (is(p, MT_JT_OP, ",")) { /* a tuple: set a, b = 1, 2 */
            NEW(list, J_LIST, n->a->at);
            MT_TRY(add_kid(list, n->a, NULL));
            n->a = list;
            while (accept(p, MT_JT_OP, ",")) {
                j_node *e;
                MT_TRY(expression(p, &e));
                MT_TRY(add_kid(list, e, NULL));
            }
        }
        return end_tag(p);
    }
    if (n->n_names != 1) return fail_at(p, here(p), "expected `=`, found `%s`", shown(p));
    static const char *const endset[] = {"endset", NULL};
    MT_TRY(end_tag(p));
    const char *end;
    MT_TRY(body(p, endset, &n->b, &end));
    return end_tag(p);
}

static mt_status macro_stmt(parser *p, size_t at, j_node **out) {
    NEW(n, J_MACRO, at);
    *out = n;
    const char *name;
    MT_TRY(target_name(p, &name));
    MT_TRY(set_str(n, name, strlen(name)));
    MT_TRY(expect(p, MT_JT_OP, "(", "`(`"));
    while (!accept(p, MT_JT_OP, ")")) {
        if (n->n_names) MT_TRY(expect(p, MT_JT_OP, ",", "`,` or `)`"));
        MT_TRY(target_name(p, &name));
        j_node *def = NULL;
        if (accept(p, MT_JT_OP, "=")) MT_TRY(expression(p, &def));
        MT_TRY(add_name(n, name));
        j_node **grown = realloc(n->kid, n->n_names * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
        n->kid = grown;
        n->kid[n->n_kid++] = def;
    }
    MT_TRY(end_tag(p));
    static const char *const ends[] = {"endmacro", NULL};
    const char *end;
    MT_TRY(body(p, ends, &n->b, &end));
    if (is(p, MT_JT_NAME, n->str)) p->i++;
    return end_tag(p);
}

static mt_status statement(parser *p, size_t at, j_node **out) {
    const mt_jinja_token *k = peek(p);
    if (!k || k->kind != MT_JT_NAME) return fail_at(p, here(p), "expected a tag name, found `%s`", shown(p));
    const char *tag = k->value;
    p->i++;
    if (!strcmp(tag, "if")) return if_stmt(p, at, out);
    if (!strcmp(tag, "for")) return for_stmt(p, at, out);
    if (!strcmp(tag, "set")) return set_stmt(p, at, out);
    if (!strcmp(tag, "macro")) return macro_stmt(p, at, out);
    if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        NEW(n, tag[0] == 'b' ? J_BREAK : J_CONTINUE, at);
        *out = n;
        return end_tag(p);
    }
    if (!strcmp(tag, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        NEW(n, J_GENERATION, at);
        *out = n;
        p->t->has_generation = 1;
        MT_TRY(end_tag(p));
        const char *end;
        MT_TRY(body(p, ends, &n->b, &end));
        return end_tag(p);
    }
    if (!strcmp(tag, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        NEW(n, J_FILTER_BLOCK, at);
        *out = n;
        const mt_jinja_token *f = peek(p);
        if (!f || f->kind != MT_JT_NAME) return fail_at(p, here(p), "expected a filter name, found `%s`", shown(p));
        if (!mt_jinja_filter_known(f->value)) return fail_at(p, f->at, "no filter named `%s`", f->value);
        p->i++;
        NEW(filter, J_FILTER, f->at);
        n->a = filter;
        MT_TRY(set_str(filter, f->value, f->len));
        if (accept(p, MT_JT_OP, "(")) MT_TRY(arguments(p, filter));
        MT_TRY(end_tag(p));
        const char *end;
        MT_TRY(body(p, ends, &n->b, &end));
        return end_tag(p);
    }
    return fail_at(p, k->at, "unknown tag `%s`", tag);
}

/* The tag that closes a block: the last of its `ends` (endif after elif and else). */
static const char *closing(const char *const *ends) {
    while (ends[1]) ends++;
    return *ends;
}

static mt_status body_at(parser *p, const char *const *ends, j_node **out, const char **end) {
    NEW(n, J_BODY, here(p));
    *out = n;
    for (;;) {
        const mt_jinja_token *k = peek(p);
        size_t at = here(p);
        if (!k) {
            if (!ends) return MT_OK;
            return fail_at(p, at, "the template ends where `{%% %s %%}` was expected", closing(ends));
        }
        j_node *s = NULL;
        if (k->kind == MT_JT_DATA) {
            p->i++;
            NEW(text, J_TEXT, at);
            s = text;
            MT_TRY(set_str(text, k->value, k->len));
        } else if (k->kind == MT_JT_VAR) {
            p->i++;
            NEW(o, J_OUT, at);
            s = o;
            MT_TRY(expression(p, &o->a));
            MT_TRY(expect(p, MT_JT_END, NULL, "`}}`"));
        } else if (k->kind == MT_JT_BLOCK) {
            p->i++;
            const mt_jinja_token *name = peek(p);
            for (const char *const *e = ends; e && *e && name && name->kind == MT_JT_NAME; e++)
                if (!strcmp(name->value, *e)) {
                    *end = *e;
                    p->i++;
                    return MT_OK;
                }
            if (name && name->kind == MT_JT_NAME &&
                (!strncmp(name->value, "end", 3) || !strcmp(name->value, "else") || !strcmp(name->value, "elif")))
                return fail_at(p, name->at, "`{%% %s %%}` where %s%s%s was expected", name->value,
                               ends ? "`{% " : "no such tag", ends ? closing(ends) : "", ends ? " %}`" : "");
            MT_TRY(statement(p, at, &s));
        } else {
            return fail_at(p, at, "unexpected `%s`", shown(p));
        }
        MT_TRY(add_kid(n, s, NULL));
    }
}

static mt_status body(parser *p, const char *const *ends, j_node **out, const char **end) {
    MT_TRY(deeper(p));
    mt_status st = body_at(p, ends, out, end);
    p->depth--;
    return st;
}

mt_status mt_jinja_parse(mt_jinja *t) {
    parser p = {t, 0, 0};
    const char *end = NULL;
    return body(&p, NULL, &t->root, &end);
}

void mt_jinja_node_free(j_node *n) {
    free(n->str);
    json_decref(n->lit);
    free(n->kid);
    for (size_t i = 0; i < n->n_names; i++) free(n->names[i]);
    free(n->names);
    free(n);
}

mt_status mt_jinja_compile(const char *text, const char *source, mt_jinja **out) {
    mt_jinja *t = calloc(1, sizeof *t);
    *out = NULL;
    if (!t || !(t->source = strdup(source))) return free(t), mt_fail(MT_ERR_NOMEM, "cannot hold a chat template");
    mt_status st = mt_jinja_lex(text, source, &t->tokens);
    if (st == MT_OK) st = mt_jinja_parse(t);
    if (st != MT_OK) return mt_jinja_free(t), st;
    *out = t;
    return MT_OK;
}

void mt_jinja_free(mt_jinja *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_nodes; i++) mt_jinja_node_free(t->nodes[i]);
    free(t->nodes);
    mt_jinja_tokens_free(&t->tokens);
    free(t->source);
    free(t);
}

int mt_jinja_has_generation(const mt_jinja *t) { return t->has_generation; }
