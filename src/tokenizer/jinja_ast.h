/* The compiled form of a Jinja template (tokenizer/jinja.h): a tree of nodes, statements and
 * expressions alike, each with the byte of the source it came from, for messages. */
#ifndef MT_TOKENIZER_JINJA_AST_H
#define MT_TOKENIZER_JINJA_AST_H

#include <jansson.h>
#include <stddef.h>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_lex.h"

typedef enum {
    /* statements */
    J_BODY,       /* kid[]: statements in order */
    J_TEXT,       /* str: text output as it stands */
    J_OUT,        /* a: an expression output ({{ a }}) */
    J_IF,         /* kid[2i], kid[2i+1]: condition and body of each branch; a NULL condition: else */
    J_FOR,        /* names[]: the targets; a: iterable; b: body; c: else body or NULL; d: filter or NULL */
    J_SET,        /* names[]: the targets, or (neg) names[0].names[1]; a: value, or b: a block's body */
    J_MACRO,      /* str: name; names[]: parameters; kid[]: their defaults (NULL: none); b: body */
    J_GENERATION, /* b: body */
    J_FILTER_BLOCK, /* a: the filter (J_FILTER whose operand a is NULL); b: body */
    J_BREAK,
    J_CONTINUE,
    /* expressions */
    J_LIT,        /* lit */
    J_NAME,       /* str */
    J_ATTR,       /* a.str */
    J_ITEM,       /* a[b] */
    J_SLICE,      /* a[b:c:d], each of b, c, d may be NULL */
    J_CALL,       /* a(kid...), names[i] the keyword of kid[i] (NULL: positional) */
    J_FILTER,     /* a | str(kid...), names as J_CALL */
    J_TEST,       /* a is [not] str(kid...); neg */
    J_UNARY,      /* op a: "not", "-", "+" */
    J_BINARY,     /* a op b */
    J_COND,       /* a if b else c (c may be NULL) */
    J_LIST,       /* [kid...] or a tuple */
    J_DICT        /* {kid[0]: kid[1], ...} */
} j_kind;

typedef struct j_node {
    j_kind kind;
    size_t at;                 /* the byte of the (normalised) source it starts at */
    char *str;                 /* a name, operator or text (NUL-terminated; len its length) */
    size_t len;
    json_t *lit;
    struct j_node *a, *b, *c, *d;
    struct j_node **kid;
    size_t n_kid;
    char **names;              /* targets, parameters, keywords (entries may be NULL) */
    size_t n_names;
    int neg;
} j_node;

struct mt_jinja {
    j_node *root;
    j_node **nodes;            /* every node, for freeing */
    size_t n_nodes, nodes_cap;
    mt_jinja_tokens tokens;    /* kept for the source text that positions point into */
    char *source;
    int has_generation;
};

/* Parses the tokens into t->root; fails naming the source, line and column. */
mt_status mt_jinja_parse(mt_jinja *t);
/* Frees one node's own parts (not the nodes it points to: mt_jinja_free frees every node). */
void mt_jinja_node_free(j_node *n);

/* Whether a filter, test or global function of this name exists (jinja_filters.c): the parser
 * refuses unknown ones at compile time, as Jinja does. */
int mt_jinja_filter_known(const char *name);
int mt_jinja_test_known(const char *name);
int mt_jinja_global_known(const char *name);

#endif
