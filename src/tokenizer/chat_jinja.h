/* Chat templates megatrain does not know by their text (tokenizer/chat_known.h), rendered by the
 * Jinja interpreter (tokenizer/jinja.h) with the variables transformers' apply_chat_template
 * passes: messages, tools (none where the example has none), bos_token, eos_token and
 * add_generation_prompt.
 *
 * Which text carries loss: the template's {% generation %} blocks where it has them; else, for
 * each assistant message, the text between the conversation before it rendered with the
 * generation prompt and the conversation through it (LLaMA-Factory's, axolotl's and TRL's way),
 * less the whitespace that ends it (the newline ChatML writes after <|im_end|>: the model stops at
 * the end-of-turn token and never generates it). Where the whole conversation shows a turn
 * otherwise (Qwen3 and Qwen3.5 drop the thinking of turns before the last question), the turn is
 * what the whole has and the conversation without that message has not, the answer what follows
 * the lines of the generation prompt it begins with. A template whose renders fit neither (whose
 * generation prompt is not how it opens an assistant turn, or that renders the other messages
 * otherwise without the answer) is refused for that conversation, naming the template and the
 * message: it needs {% generation %} tags. */
#ifndef MT_TOKENIZER_CHAT_JINJA_H
#define MT_TOKENIZER_CHAT_JINJA_H

#include "tokenizer/chat_template.h"

mt_status mt_chat_jinja_render(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools,
                               mt_chat_rendered *out);
mt_status mt_chat_jinja_render_prompt(const mt_chat_template *t, const mt_chat_message *m, size_t n,
                                      mt_chat_rendered *out);

#endif
