/* Chat templates without Jinja: the template families of the models megatrain trains, recognised
 * from tokenizer_config.json's chat_template text by their markers and rendered in C, exactly as
 * transformers' apply_chat_template renders them (add_generation_prompt false, no tools).
 *
 *   Llama 3    <|start_header_id|>role<|end_header_id|>\n\n content|trim <|eot_id|>; with the
 *              Llama 3.1+ system header "Cutting Knowledge Date: ...\nToday Date: ...\n\n", whose
 *              date is the template's own fallback date_string (Llama 3.2's strftime_now date
 *              would make the data depend on the day it was tokenized)
 *   ChatML     <|im_start|>role\n content <|im_end|>\n (Qwen2, Qwen2.5, Qwen3, ...), with the
 *              template's default system prompt where it has one, and Qwen3's <think> rules
 *   [INST]     Llama 2 chat (<<SYS>>), Mistral Instruct v0.1/v0.2 (no system role, or the system
 *              prompt before the first user message) and v0.3 ("[INST] "... "[/INST]", the system
 *              prompt before the last user message)
 * A template that is none of these, or a variant whose markers we do not know, is refused.
 *
 * Rendering gives segments of text, each either context (no loss) or trainable: what the model
 * generates for an assistant turn after the template's generation prompt, through the turn's end
 * token (<|eot_id|>, <|im_end|>, eos). */
#ifndef MT_TOKENIZER_CHAT_TEMPLATE_H
#define MT_TOKENIZER_CHAT_TEMPLATE_H

#include <stddef.h>

#include "util/status.h"

typedef enum { MT_CHAT_LLAMA3, MT_CHAT_CHATML, MT_CHAT_INST } mt_chat_family;

/* The [INST] family's variants. */
typedef enum {
    MT_INST_LLAMA2,        /* bos + "[INST] " <<SYS>> ... " [/INST]", " answer " + eos */
    MT_INST_NO_SYSTEM,     /* Mistral v0.1/v0.2 as released: "[INST] q [/INST]" + "answer" + eos */
    MT_INST_SYSTEM_FIRST,  /* Mistral v0.2 (2024): " [INST] " sys "\n\n" q " [/INST]", " answer" + eos */
    MT_INST_SYSTEM_LAST,   /* Mistral v0.3: "[INST] " q "[/INST]", " answer|trim" + eos; system before the
                            * last user message */
    MT_INST_SYSTEM_IF_LAST /* Mistral v0.3 as first released: the system prompt only where the last message
                            * of the conversation is a user message (never in training data) */
} mt_inst_variant;

typedef struct {
    mt_chat_family family;
    char bos[64], eos[64];           /* tokenizer_config.json's bos_token and eos_token ("" if none) */
    /* Llama 3 */
    int date_header;                 /* the system header with the dates (Llama 3.1+) */
    char knowledge_date[64], today_date[64];
    int trailing_header;             /* Llama 3 as first released: the assistant header always ends the text */
    /* ChatML */
    char *default_system;            /* the system prompt used when the conversation has none, or NULL */
    int think;                       /* Qwen3's reasoning rules */
    int think_in_prompt;             /* the generation prompt ends with "<think>\n" (Qwen3 thinking-2507) */
    /* [INST] */
    mt_inst_variant inst;
    int eos_space;                   /* a space follows each answer's eos (Mistral v0.1) */
} mt_chat_template;

/* Recognises `text` (a chat_template) and fills *t; `source` names the file for messages. bos and eos
 * are the tokenizer's token strings (NULL where it has none). Refuses a template it does not render,
 * naming `source` and what it looked for. mt_chat_template_free releases it. */
mt_status mt_chat_template_parse(const char *text, const char *bos, const char *eos, const char *source,
                                 mt_chat_template *t);
void mt_chat_template_free(mt_chat_template *t);
/* The family's name, for messages: "Llama 3", "ChatML", "[INST]". */
const char *mt_chat_family_name(const mt_chat_template *t);

typedef enum { MT_ROLE_SYSTEM, MT_ROLE_USER, MT_ROLE_ASSISTANT } mt_chat_role;

typedef struct {
    mt_chat_role role;
    const char *content;
    size_t len;
    const char *reasoning;  /* an assistant message's reasoning_content, or NULL (Qwen3 templates use it) */
    size_t reasoning_len;
} mt_chat_message;

/* A piece of the rendered text. `special` marks the template's own special-token strings (bos, eos,
 * <|im_start|>, ...), where the tokenizer's pieces start afresh. */
typedef struct {
    const char *text;
    size_t len;
    unsigned char trainable, special;
} mt_chat_segment;

typedef struct {
    mt_chat_segment *seg;
    size_t n, cap;
    char **owned;           /* strings the segments point into that rendering made */
    size_t n_owned;
} mt_chat_rendered;

/* Renders `n` messages (n >= 1). The segments point into the messages, the template and strings of
 * their own (freed by mt_chat_rendered_free), so the messages must outlive them. Fails where the
 * template itself raises (roles that do not alternate, a system message it has no place for), with
 * the reason. */
mt_status mt_chat_render(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *out);
void mt_chat_rendered_free(mt_chat_rendered *r);

#endif
