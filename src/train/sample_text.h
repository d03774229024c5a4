/* How `megatrain sample` turns text into tokens and back. With the run's tokenizer (the
 * checkpoint's settings.tokenizer) the prompt is encoded (special-token strings such as
 * <|im_start|> match; BOS first where the tokenizer adds one) and the continuation decoded as it
 * grows, until a special token (eos, end of text, <|eot_id|>, <|im_end|>, ...: a chat turn's end). Without one, text is bytes (the demo's
 * vocabulary of 256), and other vocabularies print token ids. */
#ifndef MT_TRAIN_SAMPLE_TEXT_H
#define MT_TRAIN_SAMPLE_TEXT_H

#include <stdint.h>
#include <stdio.h>

#include "model/config.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    mt_tokenizer *tok;      /* NULL: bytes or ids */
    const mt_config *cfg;
    mt_ids generated;       /* the continuation so far (tokenizer) */
    size_t printed;         /* bytes of its text already printed */
} mt_sample_text;

/* Opens the checkpoint's tokenizer, if its run has one; refuses one whose vocabulary the model's
 * does not hold. */
mt_status mt_sample_text_open(const char *checkpoint, const mt_config *cfg, mt_sample_text *t);
/* The prompt's ids (malloc'd) and their count; never empty (an empty prompt starts from BOS, or
 * a newline for bytes). */
mt_status mt_sample_text_prompt(const mt_sample_text *t, const char *prompt, int32_t **ids, int *n);
/* The ids of a conversation of one user message `message`, rendered with the run's chat template
 * (its --chat-template file, else the tokenizer's) and its generation prompt, as transformers'
 * apply_chat_template(add_generation_prompt=True, tokenize=True) gives them. Refused without a
 * tokenizer or a template megatrain renders. */
mt_status mt_sample_text_chat(const mt_sample_text *t, const char *checkpoint, const char *message, int32_t **ids,
                              int *n);
/* Prints the generated token's text as soon as it is whole; returns 1 when the token ends the
 * text (a special token), which is not printed. */
int mt_sample_text_emit(mt_sample_text *t, int32_t id, FILE *out);
void mt_sample_text_close(mt_sample_text *t);

#endif
