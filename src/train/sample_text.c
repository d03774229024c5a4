#include "train/sample_text.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_encode.h"
#include "tokenizer/tokenize_chat.h"
#include "train/run_inputs.h"
#include "train/run_state.h"

mt_status mt_sample_text_open(const char *checkpoint, const mt_config *cfg, mt_sample_text *t) {
    *t = (mt_sample_text){.cfg = cfg};
    char path[4096];
    MT_TRY(mt_run_load_tokenizer(checkpoint, path, sizeof path));
    if (!path[0]) return MT_OK;
    int64_t step;
    json_t *settings;
    MT_TRY(mt_run_read_info(checkpoint, &step, &settings));
    mt_status same = mt_run_inputs_check_tokenizer(settings, path, checkpoint);
    json_decref(settings);
    MT_TRY(same);
    MT_TRY(mt_tokenizer_load(path, &t->tok));
    uint32_t vocab = mt_tokenizer_vocab_size(t->tok);
    if (vocab > (uint32_t)cfg->vocab_size) {
        mt_sample_text_close(t);
        return mt_fail(MT_ERR_INVALID, "%s: the run's tokenizer %s has %u tokens, more than the model's %d", checkpoint,
                       path, vocab, cfg->vocab_size);
    }
    return MT_OK;
}

static mt_status encode(const mt_sample_text *t, const char *prompt, mt_ids *ids) {
    int32_t bos = mt_tokenizer_bos(t->tok);
    if (bos >= 0 && (mt_tokenizer_adds_bos(t->tok) || !prompt[0])) MT_TRY(mt_ids_push(ids, bos));
    MT_TRY(mt_tokenizer_encode(t->tok, prompt, strlen(prompt), 1, ids));
    if (ids->n == 0) MT_TRY(mt_ids_push(ids, mt_tokenizer_eot(t->tok) >= 0 ? mt_tokenizer_eot(t->tok) : 0));
    return MT_OK;
}

mt_status mt_sample_text_prompt(const mt_sample_text *t, const char *prompt, int32_t **out, int *n) {
    mt_ids ids = {0};
    mt_status st = MT_OK;
    if (t->tok) {
        st = encode(t, prompt, &ids);
    } else if (prompt[0] && t->cfg->vocab_size < 256) {
        st = mt_fail(MT_ERR_INVALID, "a text prompt needs a byte vocabulary (256) or a run with a tokenizer; the model "
                     "has %d tokens", t->cfg->vocab_size);
    } else {
        for (const char *p = prompt; *p && st == MT_OK; p++) st = mt_ids_push(&ids, (unsigned char)*p);
        if (st == MT_OK && ids.n == 0) st = mt_ids_push(&ids, t->cfg->bos_token_id >= 0 ? t->cfg->bos_token_id : '\n');
    }
    if (st != MT_OK) {
        mt_ids_free(&ids);
        return st;
    }
    *out = ids.ids;
    *n = (int)ids.n;
    return MT_OK;
}

/* The run's template: its --chat-template file (unchanged since the run stored it), else the
 * tokenizer's own. */
static mt_status run_template(const mt_sample_text *t, const char *checkpoint, mt_chat_template *out) {
    int64_t step;
    json_t *settings;
    MT_TRY(mt_run_read_info(checkpoint, &step, &settings));
    const json_t *file = json_object_get(settings, "chat-template");
    mt_status st = json_is_string(file) ? mt_run_inputs_check_template(settings, json_string_value(file), checkpoint)
                                        : MT_OK;
    if (st == MT_OK) st = mt_tokenizer_chat(t->tok, json_is_string(file) ? json_string_value(file) : NULL, out);
    json_decref(settings);
    return st;
}

mt_status mt_sample_text_chat(const mt_sample_text *t, const char *checkpoint, const char *message, int32_t **out,
                              int *n) {
    if (!t->tok)
        return mt_fail(MT_ERR_INVALID, "%s: the run has no tokenizer, so no chat template: --chat needs a run trained "
                       "with --tokenizer (or --init-from a model directory with one)", checkpoint);
    mt_chat_template tpl;
    MT_TRY(run_template(t, checkpoint, &tpl));
    mt_chat_message user = {.role = MT_ROLE_USER, .content = message, .len = strlen(message)};
    mt_chat_rendered r;
    mt_ids ids = {0};
    mt_mask mask = {0};
    mt_status st = mt_chat_render_prompt(&tpl, &user, 1, &r);
    if (st == MT_OK) st = mt_chat_encode(t->tok, &r, &ids, &mask);
    mt_chat_rendered_free(&r);
    mt_mask_free(&mask);
    mt_chat_template_free(&tpl);
    if (st != MT_OK) {
        mt_ids_free(&ids);
        return st;
    }
    *out = ids.ids;
    *n = (int)ids.n;
    return MT_OK;
}

int mt_sample_text_emit(mt_sample_text *t, int32_t id, FILE *out) {
    if (!t->tok) {
        if (t->cfg->vocab_size == 256) fputc(id, out);
        else fprintf(out, "%d ", id);
        fflush(out);
        return 0;
    }
    /* eos, end of text, or another special token such as Llama 3's <|eot_id|>: the end of a turn. */
    if (id == mt_tokenizer_eos(t->tok) || id == mt_tokenizer_eot(t->tok) || mt_tokenizer_is_special(t->tok, id)) return 1;
    char *text = NULL;
    size_t len = 0;
    if (mt_ids_push(&t->generated, id) != MT_OK ||
        mt_tokenizer_decode(t->tok, t->generated.ids, t->generated.n, 0, &text, &len) != MT_OK)
        return fprintf(out, "[%d]", id), 0;
    /* A character whose bytes are not all there yet decodes as U+FFFD: wait for the rest. */
    size_t whole = len;
    if (whole >= 3 && !memcmp(text + whole - 3, "\xEF\xBF\xBD", 3)) whole -= 3;
    if (whole > t->printed) fwrite(text + t->printed, 1, whole - t->printed, out);
    if (whole > t->printed) t->printed = whole;
    fflush(out);
    free(text);
    return 0;
}

void mt_sample_text_close(mt_sample_text *t) {
    mt_tokenizer_free(t->tok);
    mt_ids_free(&t->generated);
    *t = (mt_sample_text){0};
}
