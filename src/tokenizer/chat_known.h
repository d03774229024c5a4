/* The chat templates of the models megatrain trains, known by their exact text (the files of
 * src/tokenizer/templates, built into the binary), and the comparison that recognises one: a
 * model's chat_template is one of them when its Jinja token stream (tokenizer/jinja_lex.h) equals
 * the known template's, so that it renders the same text for every conversation. A known
 * template's string literal may hold one hole, ⟪name⟫, that matches any text there: the settings
 * a model's copy of a template may change (a default system prompt, the dates of Llama 3.1's
 * system header), which the C renderer takes from the model's template. A known template is
 * rendered in C (tokenizer/chat_template.h) because its answers are marked there even where its
 * renders are not prefixes of one another (Qwen3's reasoning, Mistral v0.3's system prompt); any
 * other template is rendered by the Jinja interpreter (tokenizer/chat_jinja.h), gpt-oss's too,
 * whose answers are found from the harmony messages it writes (tokenizer/chat_harmony.h). */
#ifndef MT_TOKENIZER_CHAT_KNOWN_H
#define MT_TOKENIZER_CHAT_KNOWN_H

#include "tokenizer/chat_template.h"

/* The hole captures of a match. */
typedef struct {
    char default_system[4096];
    int has_default_system;
    char knowledge_date[64], today_date[64];
} mt_chat_holes;

/* Finds the known template `text` is, filling t->family and its variant settings and *holes
 * (*found 1), or sets *found 0. Fails only where `text` does not lex (naming `source`). */
mt_status mt_chat_known_match(const char *text, const char *source, mt_chat_template *t, mt_chat_holes *holes,
                              int *found);

#endif
