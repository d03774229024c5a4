/* Chat and instruction data: one JSONL line (or one record of a JSON array) is one example, in
 * one of the layouts people have (the layout is read from each record's fields):
 *   OpenAI messages  {"messages": [{"role": "system"|"developer"|"user"|"assistant"|"tool", "content":
 *                     "..."}, ...], "tools": [...]}: an assistant message may carry "tool_calls" (a
 *                     list of {"function": {"name", "arguments"}}; its content may then be null),
 *                     "reasoning_content" (Qwen3's templates show it) and "thinking" (gpt-oss's
 *                     template shows it in the analysis channel)
 *   prompt/completion {"prompt": "...", "completion": "..."}: [user: prompt, assistant: completion]
 *   alpaca           {"instruction", "input" (optional), "output", "system" (optional), "history"
 *                     (optional)}: the user message is the instruction, and the input after a
 *                     newline where there is one; history's [instruction, answer] pairs are the
 *                     turns before it, after the system message (LLaMA-Factory's reading)
 *   ShareGPT         {"conversations": [{"from": "human"|"gpt"|"system"|"function_call"|"observation",
 *                     "value": "..."}, ...], "system": "..." (optional), "tools": "[...]" (optional,
 *                     a list or its JSON text)}: function_call's value is the JSON text of a call
 *                     {"name", "arguments"} (or a list of them), observation a tool result
 * Plain text JSONL ({"text": ...}) is the other kind of line a JSONL file may hold. */
#ifndef MT_TOKENIZER_CHAT_DATA_H
#define MT_TOKENIZER_CHAT_DATA_H

#include <jansson.h>

#include "tokenizer/chat_template.h"

typedef enum {
    MT_JSONL_OTHER,
    MT_JSONL_CHAT,        /* "messages" */
    MT_JSONL_INSTRUCTION, /* "prompt" and "completion" */
    MT_JSONL_ALPACA,      /* "instruction" and "output" */
    MT_JSONL_SHAREGPT     /* "conversations" */
} mt_jsonl_kind;

/* Which layout a parsed line is in, from its fields (OTHER: none of them). */
mt_jsonl_kind mt_jsonl_kind_of(const json_t *line);

/* What is wrong with a line's layout, written into buf[cap] and returned: the fields of two layouts
 * ("messages" and "conversations"), or half of one ("prompt" without "completion"); NULL when it
 * is in one layout, or has none of their fields. */
const char *mt_jsonl_layout_problem(const json_t *line, char *buf, size_t cap);

typedef struct {
    mt_chat_message *m;   /* point into `json`'s strings and `owned`'s */
    size_t n;
    const json_t *tools;  /* the tool definitions (a list), or NULL */
    json_t *json;
    json_t *owned;        /* values made while reading (ShareGPT's calls and tools, alpaca's user message) */
} mt_chat_example;

/* Reads an example from `len` bytes of one JSONL line. A line that is not JSON, is not an object,
 * is in none of the layouts, or has fields of the wrong type, an unknown role, an empty
 * conversation or a malformed tool call, fails naming `file`:`line` and the problem. */
mt_status mt_chat_example_parse(const char *text, size_t len, const char *file, size_t line, mt_chat_example *out);
/* The same from a record already read (one element of a JSON array of records), which the example
 * takes over (its reference is the example's, freed with it); `where` names it in errors. */
mt_status mt_chat_example_read(json_t *record, const char *where, mt_chat_example *out);
void mt_chat_example_free(mt_chat_example *e);

#endif
