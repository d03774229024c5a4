/* The chat templates megatrain renders, known by their exact text (the files of src/tokenizer/templates,
 * built into the binary), and the comparison that recognises one: a model's chat_template is
 * rendered only when its Jinja token stream (tokenizer/jinja_lex.h) equals a known template's,
 * so that it renders the same text for every conversation. A known template's string literal may
 * hold one hole, ⟪name⟫, that matches any text there: the settings a model's copy of a template
 * may change (a default system prompt, the dates of Llama 3.1's system header), which the C
 * renderer takes from the model's template. Anything else is refused, naming the known template
 * it comes closest to and the first place where it differs. */
#ifndef MT_TOKENIZER_CHAT_KNOWN_H
#define MT_TOKENIZER_CHAT_KNOWN_H

#include "tokenizer/chat_template.h"

/* The hole captures of a match. */
typedef struct {
    char default_system[4096];
    int has_default_system;
    char knowledge_date[64], today_date[64];
} mt_chat_holes;

/* Finds the known template `text` is, filling t->family and its variant settings and *holes; or
 * fails naming `source`, the closest known template, and the line, column and text of the first
 * difference. */
mt_status mt_chat_known_match(const char *text, const char *source, mt_chat_template *t, mt_chat_holes *holes);

/* The known templates' names, for docs and messages: names[i] for i < count. */
size_t mt_chat_known_count(void);
const char *mt_chat_known_name(size_t i);

#endif
