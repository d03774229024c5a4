/* Chat templates, rendered as transformers' apply_chat_template(messages, tools=tools) renders
 * them (add_generation_prompt false). Any template is rendered by megatrain's Jinja interpreter
 * (tokenizer/chat_jinja.h, tokenizer/jinja.h); the templates of the models megatrain trains,
 * recognised by their exact text (tokenizer/chat_known.h), are rendered in C to the same text,
 * with the answers marked by what each template does (the interpreter finds them from the
 * renders, which these templates do not always allow). strftime_now's date is fixed, 2024-07-26
 * (MT_CHAT_TEMPLATE_DATE), so that the same data always gives the same tokens. The C families:
 *
 *   Llama 3    <|start_header_id|>role<|end_header_id|>\n\n content|trim <|eot_id|>; with the
 *              Llama 3.1+ system header "Cutting Knowledge Date: ...\nToday Date: ...\n\n", whose
 *              date is the template's own fallback date_string (Llama 3.2's, as its strftime_now
 *              gives MT_CHAT_TEMPLATE_DATE), and its tool section
 *   ChatML     <|im_start|>role\n content <|im_end|>\n (Qwen2, Qwen2.5, Qwen3), with the template's
 *              default system prompt where it has one, Qwen3's <think> rules, Qwen2.5's and
 *              Qwen3's tool sections
 *   [INST]     Llama 2 chat (<<SYS>>), Mistral Instruct v0.1 (no system role), v0.2 (the system
 *              prompt before the first user message) and v0.3 (the system prompt only before a
 *              user message that ends the conversation)
 *
 * gpt-oss's template (the harmony format) is known too, but rendered by the interpreter: its answers
 * are found from the harmony messages of the text (tokenizer/chat_harmony.h).
 *
 * Rendering gives segments of text, each either context (no loss) or trainable: what the model
 * generates for an assistant turn after the template's generation prompt, through the turn's end
 * token (<|eot_id|>, <|im_end|>, eos; harmony's <|end|>, <|call|>, <|return|>), tool calls included
 * (for other templates, tokenizer/chat_jinja.h says how the answers are found). */
#ifndef MT_TOKENIZER_CHAT_TEMPLATE_H
#define MT_TOKENIZER_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "util/status.h"

typedef enum { MT_CHAT_LLAMA3, MT_CHAT_CHATML, MT_CHAT_INST, MT_CHAT_JINJA } mt_chat_family;

#define MT_CHAT_TEMPLATE_DATE "2024-07-26"

typedef struct mt_jinja mt_jinja;

/* The [INST] family's variants. */
typedef enum {
    MT_INST_LLAMA2,        /* bos + "[INST] " <<SYS>> ... " [/INST]", " answer " + eos */
    MT_INST_NO_SYSTEM,     /* Mistral v0.1/v0.2 as released: "[INST] q [/INST]" + "answer" + eos */
    MT_INST_SYSTEM_FIRST,  /* Mistral v0.2 (2024): " [INST] " sys "\n\n" q " [/INST]", " answer" + eos */
    MT_INST_SYSTEM_IF_LAST /* Mistral v0.3: "[INST] " q "[/INST]", " answer|trim" + eos; the system prompt
                            * only where the last message of the conversation is a user message */
} mt_inst_variant;

/* The template's tool section: how `tools`, assistant tool_calls and tool messages render. */
typedef enum {
    MT_TOOLS_NONE,    /* none we render: a conversation with tools is refused */
    MT_TOOLS_LLAMA31, /* tools in the first user message (tojson, indent 4), one call a turn as
                       * {"name": ..., "parameters": ...}, results under the ipython role */
    MT_TOOLS_QWEN25,  /* tools in the system message, calls in <tool_call> tags (arguments tojson),
                       * results in <tool_response> tags of a user turn */
    MT_TOOLS_QWEN3    /* Qwen2.5's, with a string's arguments written as they are */
} mt_chat_tools;

typedef struct {
    const char *name;                /* the known template's name ("Qwen2.5"), or the file of another */
    mt_chat_family family;
    mt_jinja *jinja;                 /* MT_CHAT_JINJA: the compiled template */
    int harmony;                     /* MT_CHAT_JINJA: gpt-oss's template; answers found from its harmony messages */
    char *source;                    /* MT_CHAT_JINJA: the file it came from, which name points to */
    char today[16];                  /* strftime_now's date: MT_CHAT_TEMPLATE_DATE */
    mt_chat_tools tools;
    char bos[64], eos[64];           /* tokenizer_config.json's bos_token and eos_token ("" if none) */
    /* Llama 3 */
    int date_header;                 /* the system header with the dates (Llama 3.1+) */
    char knowledge_date[64], today_date[64];
    int trailing_header;             /* Llama 3 as first released: the assistant header always ends the text */
    /* ChatML */
    char *default_system;            /* the system prompt used when the conversation has none, or NULL */
    int think;                       /* Qwen3's reasoning rules */
    int think_in_prompt;             /* the generation prompt ends with "<think>\n" (Qwen3 thinking-2507) */
    int null_content_raises;         /* an assistant content of null fails (Qwen3's first template) */
    /* [INST] */
    mt_inst_variant inst;
} mt_chat_template;

/* Reads `text` (a chat_template) into *t: a known template, or any other compiled by the Jinja
 * interpreter; `source` names the file for messages. bos and eos are the tokenizer's token strings
 * (NULL where it has none). Refuses a template that does not compile (a syntax error, an unknown
 * tag, filter or test), naming `source`, the line and the column. mt_chat_template_free releases it. */
mt_status mt_chat_template_parse(const char *text, const char *bos, const char *eos, const char *source,
                                 mt_chat_template *t);
void mt_chat_template_free(mt_chat_template *t);

/* The token string that ends an assistant turn: <|eot_id|>, <|im_end|>, or eos ("" when the
 * tokenizer has none; eos for a template megatrain does not know). */
const char *mt_chat_turn_end(const mt_chat_template *t);

/* developer: OpenAI's name for the instructions that gpt-oss's template puts in its developer
 * message (a system message goes there too); the templates rendered in C have no place for it. */
typedef enum { MT_ROLE_SYSTEM, MT_ROLE_USER, MT_ROLE_ASSISTANT, MT_ROLE_TOOL, MT_ROLE_DEVELOPER } mt_chat_role;

typedef struct {
    mt_chat_role role;
    const char *content;    /* NULL for a null content (an assistant message with tool calls) */
    size_t len;
    const char *reasoning;  /* an assistant message's reasoning_content, or NULL (Qwen3 templates use it) */
    size_t reasoning_len;
    const char *thinking;   /* an assistant message's thinking, or NULL (gpt-oss's template: the analysis channel) */
    size_t thinking_len;
    const json_t *tool_calls; /* an assistant message's "tool_calls" as given (a list of calls, each
                               * {"function": {"name", "arguments"}} or {"name", "arguments"}), or NULL */
} mt_chat_message;

/* A piece of the rendered text. `special` marks the template's own special-token strings (bos, eos,
 * <|im_start|>, ...), where the tokenizer's pieces start afresh; `analysis` an answer's text in
 * harmony's analysis channel (the reasoning), which the loss may leave out. */
typedef struct {
    const char *text;
    size_t len;
    unsigned char trainable, special, analysis;
} mt_chat_segment;

typedef struct {
    mt_chat_segment *seg;
    size_t n, cap;
    char **owned;           /* strings the segments point into that rendering made */
    size_t n_owned;
} mt_chat_rendered;

/* Renders `n` messages (n >= 1) with `tools` (a JSON list of tool definitions, or NULL for none, as
 * apply_chat_template's tools=). The segments point into the messages, the template and strings of
 * their own (freed by mt_chat_rendered_free), so the messages must outlive them. Fails where the
 * template itself raises (roles that do not alternate, a system message it has no place for, two
 * tool calls in one Llama 3.1 turn), and where the template has no place for tools or tool calls
 * (transformers would drop them), with the reason. */
mt_status mt_chat_render(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools,
                         mt_chat_rendered *out);
void mt_chat_rendered_free(mt_chat_rendered *r);

/* Renders what comes before the model's answer to `n` messages (the last a user's): the text of
 * transformers' apply_chat_template(messages, add_generation_prompt=True), the generation prompt
 * last, all of it context. Fails where mt_chat_render does. */
mt_status mt_chat_render_prompt(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *out);

/* Which tokens of a conversation carry loss: the answers (every assistant turn: the default), the
 * last assistant turn only (the earlier answers are context), or every token, the prompts and the
 * template's markup too (LLaMA-Factory's train_on_prompt). */
typedef enum { MT_LOSS_ASSISTANT, MT_LOSS_LAST_TURN, MT_LOSS_ALL } mt_chat_loss;

/* The names --loss-on takes, indexed by mt_chat_loss, NULL-terminated. */
extern const char *const mt_chat_loss_names[];

/* Sets the segments' trainable flags for `loss`: as rendered (assistant), only the last run of
 * trainable segments (last-turn: an assistant turn is one run, its markup before it context), or
 * every segment (all). With `analysis` 0, the answers' analysis-channel segments are context
 * (before last-turn picks its run; `all` keeps every token). */
void mt_chat_rendered_set_loss(mt_chat_rendered *r, mt_chat_loss loss, int analysis);

#endif
