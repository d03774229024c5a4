/* Chat and instruction data: one JSONL line is one example,
 *   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
 * (an assistant message may carry "reasoning_content", which Qwen3's template shows), or
 *   {"prompt": "...", "completion": "..."}
 * which is the conversation [user: prompt, assistant: completion]. Plain text JSONL ({"text": ...})
 * is the other kind of line a JSONL file may hold. */
#ifndef MT_TOKENIZER_CHAT_DATA_H
#define MT_TOKENIZER_CHAT_DATA_H

#include <jansson.h>

#include "tokenizer/chat_template.h"

typedef enum { MT_JSONL_OTHER, MT_JSONL_CHAT, MT_JSONL_INSTRUCTION } mt_jsonl_kind;

/* Which kind of example a parsed line is, from its fields: "messages" (chat), "prompt" and
 * "completion" (instruction), anything else (OTHER). */
mt_jsonl_kind mt_jsonl_kind_of(const json_t *line);

typedef struct {
    mt_chat_message *m;   /* point into `json`'s strings */
    size_t n;
    json_t *json;
} mt_chat_example;

/* Reads a chat or instruction example from `len` bytes of one JSONL line. A line that is not JSON,
 * is not an object, or lacks the fields (or has fields of the wrong type, an unknown role, an
 * empty messages list) fails naming `file`:`line` and the problem. */
mt_status mt_chat_example_parse(const char *text, size_t len, const char *file, size_t line, mt_chat_example *out);
void mt_chat_example_free(mt_chat_example *e);

#endif
