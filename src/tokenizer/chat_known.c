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
TEMPLATE(mt_tpl_gpt_oss, "gpt-oss.jinja");

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
    /* Rendered by the interpreter; its answers found from its harmony messages. */
    {"gpt-oss", mt_tpl_gpt_oss, {.family = MT_CHAT_JINJA, .harmony = 1}},
};
enum { N_KNOWN = sizeof KNOWN / sizeof *KNOWN };

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

mt_status mt_chat_known_match(const char *text, const char *source, mt_chat_template *t, mt_chat_holes *holes,
                              int *found) {
    mt_jinja_tokens u;
    *found = 0;
    MT_TRY(mt_jinja_lex(text, source, &u));
    mt_status st = MT_OK;
    for (size_t i = 0; st == MT_OK && i < N_KNOWN && !*found; i++) {
        mt_jinja_tokens k;
        st = mt_jinja_lex(KNOWN[i].text, KNOWN[i].name, &k);
        if (st != MT_OK) break;
        *holes = (mt_chat_holes){0};
        if (common_prefix(&u, &k, holes) == u.n && u.n == k.n) {
            mt_chat_template known = KNOWN[i].settings;
            memcpy(known.bos, t->bos, sizeof known.bos);
            memcpy(known.eos, t->eos, sizeof known.eos);
            known.name = KNOWN[i].name;
            *t = known;
            *found = 1;
        }
        mt_jinja_tokens_free(&k);
    }
    mt_jinja_tokens_free(&u);
    return st;
}
