/* The answers in a conversation that gpt-oss's chat template rendered: harmony, a text of messages
 *
 *   <|start|>AUTHOR[ to=RECIPIENT][<|channel|>CHANNEL[ CONTENT_TYPE]]<|message|>BODY END
 *
 * AUTHOR system, developer, user, assistant, or functions.NAME (a tool's result); END <|end|>,
 * <|call|> (a tool call) or <|return|> (the last answer). An answer is what the model writes after
 * the generation prompt <|start|>assistant: an assistant message from after its author through its
 * END, and, where another assistant message follows at once (the analysis, then the final answer or
 * the call), the <|start|>assistant that opens it. An answer in the analysis channel (the
 * reasoning: the template shows it for the last answer and for a tool call no later final answer
 * follows) is marked so, and so is the <|start|>assistant after it. */
#ifndef MT_TOKENIZER_CHAT_HARMONY_H
#define MT_TOKENIZER_CHAT_HARMONY_H

#include "tokenizer/chat_template.h"

/* A byte range of a rendered text that carries loss. */
typedef struct {
    size_t start, end;
    int analysis; /* harmony's analysis channel */
} mt_chat_answer;

/* The answers of `text`, the render of the n messages m, in order, into *answers (malloc'd;
 * *n_answers of them). Fails, naming `name` (the template), where the text is not a sequence of
 * harmony messages, or where its user, assistant and tool-result messages are not one for each
 * message of the conversation (a message's text holding harmony's markers, which make messages of
 * their own), and for what the template drops: a system or developer message after the first, an
 * answer's reasoning_content (it reads thinking). */
mt_status mt_harmony_answers(const char *name, const char *text, size_t len, const mt_chat_message *m, size_t n,
                             mt_chat_answer **answers, size_t *n_answers);

#endif
