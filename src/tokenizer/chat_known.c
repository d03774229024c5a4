#include "tokenizer/chat_known.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_lex.h"

/* Each known template's text, built into the binary from src/tokenizer/templates/ (the Makefile
 * makes this file's objects depend on them). */
#define TEMPLATE(sym, file)                                                                               \
    extern const char sym[];                                                                              \
    __asm__(".pushsection .rodata\n" #sym ":\n.incbin \"src/tokenizer/templates/" file "\"\n.byte 0\n" \
            ".popsection\n")
TEMPLATE(mt_tpl_llama3, "llama3.jinja");
TEMPLATE(mt_tpl_llama3_gen, "llama3-gen.jinja");
TEMPLATE(mt_tpl_llama31, "llama3.1.jinja");
TEMPLATE(mt_tpl_llama32, "llama3.2.jinja");
TEMPLATE(mt_tpl_qwen2, "qwen2.jinja");
TEMPLATE(mt_tpl_qwen25, "qwen2.5.jinja");
TEMPLATE(mt_tpl_qwen3, "qwen3.jinja");
TEMPLATE(mt_tpl_qwen3_thinking, "qwen3-thinking-2507.jinja");
TEMPLATE(mt_tpl_llama2, "llama2.jinja");
TEMPLATE(mt_tpl_mistral01, "mistral-v0.1.jinja");
TEMPLATE(mt_tpl_mistral02, "mistral-v0.2.jinja");
TEMPLATE(mt_tpl_mistral03, "mistral-v0.3.jinja");

typedef struct {
    const char *name;
    const char *text;
    mt_chat_template settings; /* the family and variant the C renderer renders it as */
} known;

static const known KNOWN[] = {
    {"Llama 3 (first release)", mt_tpl_llama3, {.family = MT_CHAT_LLAMA3, .trailing_header = 1}},
    {"Llama 3", mt_tpl_llama3_gen, {.family = MT_CHAT_LLAMA3}},
    {"Llama 3.1", mt_tpl_llama31, {.family = MT_CHAT_LLAMA3, .date_header = 1, .tools = MT_TOOLS_LLAMA31}},
    {"Llama 3.2", mt_tpl_llama32, {.family = MT_CHAT_LLAMA3, .date_header = 1, .tools = MT_TOOLS_LLAMA31}},
    {"Qwen2", mt_tpl_qwen2, {.family = MT_CHAT_CHATML}},
    {"Qwen2.5", mt_tpl_qwen25, {.family = MT_CHAT_CHATML, .tools = MT_TOOLS_QWEN25}},
    {"Qwen3", mt_tpl_qwen3, {.family = MT_CHAT_CHATML, .think = 1, .tools = MT_TOOLS_QWEN3, .null_content_raises = 1}},
    {"Qwen3 thinking-2507", mt_tpl_qwen3_thinking,
     {.family = MT_CHAT_CHATML, .think = 1, .think_in_prompt = 1, .tools = MT_TOOLS_QWEN3}},
    {"Llama 2 chat", mt_tpl_llama2, {.family = MT_CHAT_INST, .inst = MT_INST_LLAMA2}},
    {"Mistral Instruct v0.1", mt_tpl_mistral01, {.family = MT_CHAT_INST, .inst = MT_INST_NO_SYSTEM}},
    {"Mistral Instruct v0.2", mt_tpl_mistral02, {.family = MT_CHAT_INST, .inst = MT_INST_SYSTEM_FIRST}},
    {"Mistral Instruct v0.3", mt_tpl_mistral03, {.family = MT_CHAT_INST, .inst = MT_INST_SYSTEM_IF_LAST}},
};
enum { N_KNOWN = sizeof KNOWN / sizeof *KNOWN };

size_t mt_chat_known_count(void) { return N_KNOWN; }
const char *mt_chat_known_name(size_t i) { return i < N_KNOWN ? KNOWN[i].name : NULL; }

/* ---- comparing token streams ---- */

static const char HOLE_OPEN[] = "⟪", HOLE_CLOSE[] = "⟫";

/* A known string literal's hole: the text before and after it and its name; 0 when it has none. */
typedef struct {
    const char *before, *name, *after;
    size_t before_len, name_len, after_len;
} hole;

static int find_hole(const mt_jinja_token *k, hole *h) {
    if (k->kind != MT_JT_STRING) return 0;
    const char *open = strstr(k->value, HOLE_OPEN), *close = open ? strstr(open, HOLE_CLOSE) : NULL;
    if (!close) return 0;
    h->before = k->value;
    h->before_len = (size_t)(open - k->value);
    h->name = open + strlen(HOLE_OPEN);
    h->name_len = (size_t)(close - h->name);
    h->after = close + strlen(HOLE_CLOSE);
    h->after_len = k->len - (size_t)(h->after - k->value);
    return 1;
}

/* Whether user token u can stand where known token k is; a hole's text goes to *fill. */
static int same(const mt_jinja_token *u, const mt_jinja_token *k, const char **fill, size_t *fill_len, hole *h) {
    if (u->kind != k->kind) return 0;
    if (find_hole(k, h)) {
        if (u->len < h->before_len + h->after_len || memcmp(u->value, h->before, h->before_len) ||
            memcmp(u->value + u->len - h->after_len, h->after, h->after_len))
            return 0;
        *fill = u->value + h->before_len;
        *fill_len = u->len - h->before_len - h->after_len;
        return 1;
    }
    *fill = NULL;
    return u->len == k->len && !memcmp(u->value, k->value, u->len);
}

/* Stores a hole's text; the same hole seen twice must hold the same text. Returns 0 when it does
 * not (or does not fit). */
static int fill_hole(const hole *h, const char *text, size_t len, mt_chat_holes *out) {
    char *slot;
    size_t cap;
    int *seen = NULL, dummy = 0;
    if (h->name_len == 14 && !memcmp(h->name, "default_system", 14)) {
        slot = out->default_system, cap = sizeof out->default_system, seen = &out->has_default_system;
    } else if (h->name_len == 14 && !memcmp(h->name, "knowledge_date", 14)) {
        slot = out->knowledge_date, cap = sizeof out->knowledge_date;
    } else if (h->name_len == 10 && !memcmp(h->name, "today_date", 10)) {
        slot = out->today_date, cap = sizeof out->today_date;
    } else {
        return 0;
    }
    if (!seen) seen = &dummy, dummy = slot[0] != '\0';
    if (len >= cap || memchr(text, '\0', len)) return 0;
    if (*seen) return strlen(slot) == len && !memcmp(slot, text, len);
    memcpy(slot, text, len);
    slot[len] = '\0';
    *seen = 1;
    return 1;
}

/* How many leading tokens of u match k (holes filled into *holes). */
static size_t common_prefix(const mt_jinja_tokens *u, const mt_jinja_tokens *k, mt_chat_holes *holes) {
    size_t i = 0;
    for (; i < u->n && i < k->n; i++) {
        const char *fill;
        size_t fill_len;
        hole h;
        if (!same(&u->t[i], &k->t[i], &fill, &fill_len, &h)) break;
        if (fill && !fill_hole(&h, fill, fill_len, holes)) break;
    }
    return i;
}

/* The length of the longest common subsequence of the two streams: how alike they are overall,
 * to name the known template a refused one comes closest to. */
static size_t alike(const mt_jinja_tokens *u, const mt_jinja_tokens *k) {
    size_t *row = calloc(k->n + 1, sizeof *row), best = 0;
    if (!row) return 0;
    for (size_t i = 0; i < u->n; i++) {
        size_t diag = 0;
        for (size_t j = 0; j < k->n; j++) {
            const char *fill;
            size_t fill_len, up = row[j + 1];
            hole h;
            row[j + 1] = same(&u->t[i], &k->t[j], &fill, &fill_len, &h) ? diag + 1 : up > row[j] ? up : row[j];
            diag = up;
        }
    }
    best = row[k->n];
    free(row);
    return best;
}

/* A token's source text for a message: newlines written \n, cut to 48 bytes (at a character). */
static void shown(const mt_jinja_tokens *s, const mt_jinja_token *t, char *out, size_t cap) {
    const char *p = t->kind == MT_JT_DATA ? t->value : s->src + t->at;
    size_t n = t->kind == MT_JT_DATA ? t->len : t->src_len, k = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        if (i >= 48 && ((unsigned char)p[i] & 0xC0) != 0x80) {
            memcpy(out + k, "...", 3), k += 3;
            break;
        }
        if (p[i] == '\n') out[k++] = '\\', out[k++] = 'n';
        else out[k++] = p[i];
    }
    out[k] = '\0';
}

static mt_status refuse(const char *source, const mt_jinja_tokens *u, const mt_jinja_tokens *k, const known *near,
                        size_t at) {
    char has[160], wants[160];
    size_t line, col;
    const char *tail = "; megatrain renders only the templates it knows exactly, as transformers does "
                       "(docs/data-formats.md lists them)";
    if (at < u->n) {
        shown(u, &u->t[at], has, sizeof has);
        mt_jinja_position(u, u->t[at].at, &line, &col);
    } else {
        mt_jinja_position(u, u->src_len, &line, &col);
    }
    if (at < k->n) shown(k, &k->t[at], wants, sizeof wants);
    if (at >= u->n)
        return mt_fail(MT_ERR_INVALID, "%s: chat_template is not one megatrain renders: it ends at line %zu, column %zu "
                       "where the %s template goes on with `%s`%s", source, line, col, near->name, wants, tail);
    if (at >= k->n)
        return mt_fail(MT_ERR_INVALID, "%s: chat_template is not one megatrain renders: it goes on at line %zu, column "
                       "%zu with `%s` after the end of the %s template%s", source, line, col, has, near->name, tail);
    return mt_fail(MT_ERR_INVALID, "%s: chat_template is not one megatrain renders: it differs from the %s template at "
                   "line %zu, column %zu, where it has `%s` and %s has `%s`%s",
                   source, near->name, line, col, has, near->name, wants, tail);
}

mt_status mt_chat_known_match(const char *text, const char *source, mt_chat_template *t, mt_chat_holes *holes) {
    mt_jinja_tokens u, k[N_KNOWN];
    MT_TRY(mt_jinja_lex(text, source, &u));
    size_t lexed = 0, matched = N_KNOWN;
    mt_status st = MT_OK;
    for (; st == MT_OK && lexed < N_KNOWN && matched == N_KNOWN; lexed++) {
        st = mt_jinja_lex(KNOWN[lexed].text, KNOWN[lexed].name, &k[lexed]);
        if (st != MT_OK) break;
        *holes = (mt_chat_holes){0};
        if (common_prefix(&u, &k[lexed], holes) == u.n && u.n == k[lexed].n) matched = lexed;
    }
    if (st == MT_OK && matched < N_KNOWN) {
        mt_chat_template found = KNOWN[matched].settings;
        memcpy(found.bos, t->bos, sizeof found.bos);
        memcpy(found.eos, t->eos, sizeof found.eos);
        found.name = KNOWN[matched].name;
        *t = found;
    } else if (st == MT_OK) {
        /* the most alike: the largest share of both streams in common */
        size_t best = 0;
        double best_alike = -1;
        for (size_t i = 0; i < N_KNOWN; i++) {
            double a = 2.0 * (double)alike(&u, &k[i]) / (double)(u.n + k[i].n + 1);
            if (a > best_alike) best = i, best_alike = a;
        }
        mt_chat_holes scratch = {0};
        st = refuse(source, &u, &k[best], &KNOWN[best], common_prefix(&u, &k[best], &scratch));
    }
    for (size_t i = 0; i < lexed; i++) mt_jinja_tokens_free(&k[i]);
    mt_jinja_tokens_free(&u);
    return st;
}
