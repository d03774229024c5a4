#include "tokenizer/chat_jinja.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_harmony.h"
#include "tokenizer/jinja.h"

static const char *const ROLE_NAMES[] = {"system", "user", "assistant", "tool", "developer"};

/* The messages as the template sees them: role, content (null where it is), and an assistant's
 * tool_calls, reasoning_content and thinking where it has them. */
static mt_status messages_json(const mt_chat_message *m, size_t n, json_t **out) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++) {
        json_t *msg = json_pack("{s:s,s:o}", "role", ROLE_NAMES[m[i].role], "content",
                                m[i].content ? json_stringn_nocheck(m[i].content, m[i].len) : json_null());
        if (msg && m[i].reasoning)
            json_object_set_new(msg, "reasoning_content", json_stringn_nocheck(m[i].reasoning, m[i].reasoning_len));
        if (msg && m[i].thinking)
            json_object_set_new(msg, "thinking", json_stringn_nocheck(m[i].thinking, m[i].thinking_len));
        if (msg && m[i].tool_calls) json_object_set(msg, "tool_calls", (json_t *)m[i].tool_calls);
        if (!msg || json_array_append_new(list, msg)) {
            json_decref(list);
            list = NULL;
        }
    }
    *out = list;
    return list ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a conversation");
}

#define NO_SKIP ((size_t)-1)

/* Renders the first n messages of `all` but message `skip`. */
static mt_status render(const mt_chat_template *t, const json_t *all, size_t n, size_t skip, const json_t *tools,
                        int prompt, mt_jinja_output *out) {
    json_t *msgs = json_array();
    for (size_t i = 0; msgs && i < n; i++)
        if (i != skip) json_array_append(msgs, json_array_get(all, i));
    json_t *vars = msgs ? json_pack("{s:o,s:O,s:s,s:s,s:b}", "messages", msgs, "tools", tools ? tools : json_null(),
                                    "bos_token", t->bos, "eos_token", t->eos, "add_generation_prompt", prompt)
                        : NULL;
    mt_status st = vars ? mt_jinja_render(t->jinja, vars, t->today, out) : mt_fail(MT_ERR_NOMEM, "cannot hold a conversation");
    json_decref(vars);
    return st;
}

static int is_prefix(const mt_jinja_output *a, const mt_jinja_output *b) {
    return a->len == 0 || (a->len <= b->len && !memcmp(a->text, b->text, a->len));
}

static int space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* How many bytes a and b agree on from their starts. */
static size_t agree(const char *a, size_t na, const char *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* A turn's answer where the whole text shows the turn otherwise than the renders up to it do (Qwen3
 * and Qwen3.5 drop the thinking of turns before the last user message, so a turn shows it until a
 * later question follows): the turn is the text the whole has and the conversation without the
 * message (`without`) has not; where that could lie at several places (its ends like its
 * neighbours'), at the one whose text begins most like the generation prompt (`open`). The answer
 * is the turn after as much of the prompt as it shows, backed up to the start of the line it leaves
 * the prompt in (Qwen3.5's prompt ends "<think>\n", an answer may begin "<tool_call>"), less its
 * closing whitespace. 0 where the two renders are not the turn and the rest, or where the turn does
 * not begin with a whole line of the prompt (or all of it). */
static int removed_turn(const mt_jinja_output *whole, const mt_jinja_output *without, const char *open, size_t open_len,
                        mt_chat_answer *span) {
    if (whole->len <= without->len) return 0;
    size_t turn = whole->len - without->len, shared_end = 0;
    size_t shared_start = agree(whole->text, whole->len, without->text, without->len);
    const char *w_end = whole->text + whole->len - 1, *o_end = without->text + without->len - 1;
    while (shared_end < without->len && w_end[-(ptrdiff_t)shared_end] == o_end[-(ptrdiff_t)shared_end]) shared_end++;
    size_t lo = without->len - shared_end, hi = shared_start < without->len ? shared_start : without->len;
    if (lo > hi) return 0;
    size_t at = lo, shown = 0;
    for (size_t q = lo; q <= hi; q++) {
        size_t k = agree(whole->text + q, turn, open, open_len);
        if (k > shown) at = q, shown = k;
    }
    const char *text = whole->text + at;
    while (shown > 0 && shown < open_len && text[shown - 1] != '\n') shown--;
    if (shown == 0) return 0; /* no place begins with a line of the prompt: which is the turn cannot be told */
    size_t end = turn;
    while (end > shown && space(text[end - 1])) end--;
    if (end == shown) return 0;
    *span = (mt_chat_answer){at + shown, at + end, 0};
    return 1;
}

/* The answer of assistant message i (of n) as a byte range of the whole text: after the
 * conversation before it with the generation prompt, through it less its closing whitespace; where
 * the whole text shows the turn otherwise, removed_turn's. */
static mt_status answer_span(const mt_chat_template *t, const json_t *msgs, size_t n, size_t i, const json_t *tools,
                             const mt_jinja_output *whole, mt_chat_answer *span) {
    mt_jinja_output before = {0}, through = {0}, plain = {0}, without = {0};
    mt_status st = i > 0 ? render(t, msgs, i, NO_SKIP, tools, 1, &before) : MT_OK;
    if (st == MT_OK) st = render(t, msgs, i + 1, NO_SKIP, tools, 0, &through);
    int found = st == MT_OK && is_prefix(&before, &through) && is_prefix(&through, whole);
    if (found) {
        size_t end = through.len;
        while (end > before.len && space(through.text[end - 1])) end--;
        *span = (mt_chat_answer){before.len, end, 0};
    } else if (st == MT_OK) {
        /* a template that raises without the message leaves the answer unfound, reported below */
        if ((i == 0 || render(t, msgs, i, NO_SKIP, tools, 0, &plain) == MT_OK) && is_prefix(&plain, &before) &&
            render(t, msgs, n, i, tools, 0, &without) == MT_OK)
            found = removed_turn(whole, &without, before.text + plain.len, before.len - plain.len, span);
        if (!found)
            st = mt_fail(MT_ERR_INVALID, "%s: the chat template's renders are not prefixes of one another at "
                         "message %zu (an assistant's): the conversation before it with the generation prompt, then "
                         "through it, then whole, must each begin with the one before (or the whole be the "
                         "conversation without it and its turn) for megatrain to tell which text is the answer; mark "
                         "the answer with {%% generation %%} ... {%% endgeneration %%} in the template", t->name,
                         i + 1);
    }
    mt_jinja_output_free(&before);
    mt_jinja_output_free(&through);
    mt_jinja_output_free(&plain);
    mt_jinja_output_free(&without);
    return st;
}

static mt_status push(mt_chat_rendered *r, const char *text, size_t len, int trainable, int analysis) {
    if (len == 0) return MT_OK;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        mt_chat_segment *grown = realloc(r->seg, cap * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered conversation");
        r->seg = grown;
        r->cap = cap;
    }
    r->seg[r->n++] = (mt_chat_segment){text, len, (unsigned char)trainable, 0, (unsigned char)analysis};
    return MT_OK;
}

/* The length of a special-token-like marker at s (<|im_end|>, </s>, <start_of_turn>: `<`, then up
 * to 62 bytes without `<`, `>` or whitespace, then `>`), or 0. */
static size_t marker(const char *s, size_t n) {
    if (n < 3 || s[0] != '<') return 0;
    for (size_t k = 1; k < n && k < 64; k++) {
        if (s[k] == '>') return k > 1 ? k + 1 : 0;
        if (s[k] == '<' || space(s[k])) return 0;
    }
    return 0;
}

/* Pushes text, its markers as segments of their own marked special: mt_chat_encode splits the
 * text at those that are the tokenizer's special tokens, so that it encodes pieces, not the whole. */
static mt_status push_text(mt_chat_rendered *r, const char *text, size_t len, int trainable, int analysis) {
    size_t from = 0;
    for (size_t i = 0; i < len; i++) {
        size_t k = marker(text + i, len - i);
        if (!k) continue;
        MT_TRY(push(r, text + from, i - from, trainable, analysis));
        MT_TRY(push(r, text + i, k, trainable, analysis));
        r->seg[r->n - 1].special = 1;
        from = i + k;
        i += k - 1;
    }
    return push(r, text + from, len - from, trainable, analysis);
}

/* Keeps the rendered text, which the segments point into, in out->owned. */
static mt_status own(mt_chat_rendered *out, mt_jinja_output *text) {
    out->owned = malloc(sizeof *out->owned);
    if (!out->owned) return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered conversation");
    out->owned[0] = text->text;
    out->n_owned = 1;
    text->text = NULL;
    return MT_OK;
}

/* Segments of the whole text from sorted, non-overlapping trainable ranges. */
static mt_status segments(mt_chat_rendered *out, const char *text, size_t len, const mt_chat_answer *spans, size_t n) {
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        if (spans[k].start < at) continue; /* nested or repeated: already covered */
        MT_TRY(push_text(out, text + at, spans[k].start - at, 0, 0));
        MT_TRY(push_text(out, text + spans[k].start, spans[k].end - spans[k].start, 1, spans[k].analysis));
        at = spans[k].end;
    }
    return push_text(out, text + at, len - at, 0, 0);
}

/* The answers by the template's {% generation %} blocks, else by the renders of each assistant
 * message (harmony's by its messages). */
static mt_status answers(const mt_chat_template *t, const json_t *msgs, const mt_chat_message *m, size_t n,
                         const json_t *tools, const mt_jinja_output *whole, mt_chat_answer **spans, size_t *n_spans) {
    if (t->harmony) return mt_harmony_answers(t->name, whole->text, whole->len, m, n, spans, n_spans);
    int tagged = mt_jinja_has_generation(t->jinja);
    *n_spans = 0;
    *spans = calloc((tagged ? whole->n_gen : n) + 1, sizeof **spans);
    if (!*spans) return mt_fail(MT_ERR_NOMEM, "cannot hold a conversation");
    for (size_t k = 0; tagged && k < whole->n_gen; k++)
        (*spans)[(*n_spans)++] = (mt_chat_answer){whole->gen[k][0], whole->gen[k][1], 0};
    for (size_t i = 0; !tagged && i < n; i++)
        if (m[i].role == MT_ROLE_ASSISTANT) MT_TRY(answer_span(t, msgs, n, i, tools, whole, &(*spans)[(*n_spans)++]));
    return MT_OK;
}

static mt_status render_conversation(const mt_chat_template *t, const json_t *msgs, const mt_chat_message *m, size_t n,
                                     const json_t *tools, mt_chat_rendered *out) {
    mt_jinja_output whole = {0};
    MT_TRY(render(t, msgs, n, NO_SKIP, tools, 0, &whole));
    mt_chat_answer *spans = NULL;
    size_t n_spans = 0;
    mt_status st = answers(t, msgs, m, n, tools, &whole, &spans, &n_spans);
    if (st == MT_OK) st = own(out, &whole);
    if (st == MT_OK) st = segments(out, out->owned[0], whole.len, spans, n_spans);
    free(spans);
    mt_jinja_output_free(&whole);
    return st;
}

mt_status mt_chat_jinja_render(const mt_chat_template *t, const mt_chat_message *m, size_t n, const json_t *tools,
                               mt_chat_rendered *out) {
    *out = (mt_chat_rendered){0};
    json_t *msgs;
    MT_TRY(messages_json(m, n, &msgs));
    mt_status st = render_conversation(t, msgs, m, n, tools, out);
    json_decref(msgs);
    if (st != MT_OK) mt_chat_rendered_free(out);
    return st;
}

mt_status mt_chat_jinja_render_prompt(const mt_chat_template *t, const mt_chat_message *m, size_t n,
                                      mt_chat_rendered *out) {
    *out = (mt_chat_rendered){0};
    json_t *msgs;
    MT_TRY(messages_json(m, n, &msgs));
    mt_jinja_output text = {0};
    mt_status st = render(t, msgs, n, NO_SKIP, NULL, 1, &text);
    json_decref(msgs);
    if (st == MT_OK) st = own(out, &text);
    if (st == MT_OK) st = push_text(out, out->owned[0], text.len, 0, 0);
    mt_jinja_output_free(&text);
    if (st != MT_OK) mt_chat_rendered_free(out);
    return st;
}
