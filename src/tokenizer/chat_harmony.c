#include "tokenizer/chat_harmony.h"

#include <stdlib.h>
#include <string.h>

#define START "<|start|>"
#define MESSAGE "<|message|>"
#define CHANNEL "<|channel|>"
#define ASSISTANT "assistant"

static const char *const ENDS[] = {"<|end|>", "<|call|>", "<|return|>"};

static const char *find(const char *s, size_t n, const char *needle) {
    return memmem(s, n, needle, strlen(needle));
}

/* The first END in s[0, n): its position, its length in *end_len; NULL if none. */
static const char *find_end(const char *s, size_t n, size_t *end_len) {
    const char *first = NULL;
    for (size_t k = 0; k < sizeof ENDS / sizeof *ENDS; k++) {
        const char *e = find(s, first ? (size_t)(first - s) : n, ENDS[k]);
        if (e) first = e, *end_len = strlen(ENDS[k]);
    }
    return first;
}

/* One harmony message: its author's kind and whether it is in the analysis channel. */
typedef enum { AUTHOR_OTHER, AUTHOR_USER, AUTHOR_ASSISTANT, AUTHOR_TOOL } author;

typedef struct {
    author who;
    int analysis;
    size_t body_start; /* after the author */
    size_t end;        /* after END */
} message;

static int starts(const char *s, size_t n, const char *word) {
    size_t k = strlen(word);
    return n >= k && !memcmp(s, word, k);
}

/* The length of s[0, n) up to its first space or '<' (a header's words end so). */
static size_t word_len(const char *s, size_t n) {
    size_t k = 0;
    while (k < n && s[k] != ' ' && s[k] != '<') k++;
    return k;
}

/* The message that starts at text[at]; 0 when the text there is not one. */
static int read_message(const char *text, size_t len, size_t at, message *out) {
    if (!starts(text + at, len - at, START)) return 0;
    const char *header = text + at + strlen(START);
    const char *msg = find(header, (size_t)(text + len - header), MESSAGE);
    if (!msg || find(header, (size_t)(msg - header), START)) return 0;
    size_t header_len = (size_t)(msg - header), author_len = word_len(header, header_len);
    const char *body = msg + strlen(MESSAGE);
    size_t end_len = 0;
    const char *end = find_end(body, (size_t)(text + len - body), &end_len);
    if (!end || find(body, (size_t)(end - body), START)) return 0;
    const char *channel = find(header, header_len, CHANNEL);
    size_t channel_at = channel ? (size_t)(channel - header) + strlen(CHANNEL) : header_len;
    out->analysis = channel && word_len(header + channel_at, header_len - channel_at) == strlen("analysis") &&
                    starts(header + channel_at, header_len - channel_at, "analysis");
    out->who = author_len == strlen(ASSISTANT) && starts(header, header_len, ASSISTANT) ? AUTHOR_ASSISTANT
               : author_len == 4 && starts(header, header_len, "user")                  ? AUTHOR_USER
               : starts(header, author_len, "functions.")                               ? AUTHOR_TOOL
                                                                                        : AUTHOR_OTHER;
    out->body_start = (size_t)(header - text) + author_len;
    out->end = (size_t)(end - text) + end_len;
    return 1;
}

/* Refuses what the template drops: a system or developer message after the first, an answer's
 * reasoning_content (it reads thinking). */
static mt_status check_dropped(const char *name, const mt_chat_message *m, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (m[i].reasoning)
            return mt_fail(MT_ERR_INVALID, "message %zu: reasoning_content, which the %s template does not read: give "
                           "the reasoning as thinking (the analysis channel)", i + 1, name);
    for (size_t i = 1; i < n; i++)
        if (m[i].role == MT_ROLE_SYSTEM || m[i].role == MT_ROLE_DEVELOPER)
            return mt_fail(MT_ERR_INVALID, "message %zu: a %s message after the first message, which the %s template "
                           "drops (only the first message may be a system or developer message)", i + 1,
                           m[i].role == MT_ROLE_SYSTEM ? "system" : "developer", name);
    return MT_OK;
}

mt_status mt_harmony_answers(const char *name, const char *text, size_t len, const mt_chat_message *m, size_t n,
                             mt_chat_answer **answers, size_t *n_answers) {
    *answers = NULL;
    *n_answers = 0;
    MT_TRY(check_dropped(name, m, n));
    size_t want[4] = {0}, got[4] = {0};
    for (size_t i = 0; i < n; i++)
        want[m[i].role == MT_ROLE_USER ? AUTHOR_USER : m[i].role == MT_ROLE_ASSISTANT ? AUTHOR_ASSISTANT
             : m[i].role == MT_ROLE_TOOL ? AUTHOR_TOOL : AUTHOR_OTHER]++;
    mt_chat_answer *a = malloc((len / strlen(START) + 1) * sizeof *a);
    if (!a) return mt_fail(MT_ERR_NOMEM, "cannot hold a conversation's answers");
    size_t k = 0;
    for (size_t at = 0; at < len;) {
        message msg;
        if (!read_message(text, len, at, &msg)) {
            free(a);
            return mt_fail(MT_ERR_INVALID, "%s: the rendered conversation is not a sequence of harmony messages at byte "
                           "%zu (<|start|>author<|message|>text<|end|>): a message's text holds one of harmony's "
                           "markers (<|start|>, <|message|>, <|end|>, <|call|>, <|return|>)", name, at);
        }
        got[msg.who] += msg.who != AUTHOR_ASSISTANT || !msg.analysis;
        if (msg.who == AUTHOR_ASSISTANT) {
            /* The model writes the <|start|>assistant of a message that follows its own at once. */
            if (k > 0 && a[k - 1].end == at) a[k - 1].end = msg.body_start;
            a[k++] = (mt_chat_answer){msg.body_start, msg.end, msg.analysis};
        }
        at = msg.end;
    }
    if (got[AUTHOR_USER] != want[AUTHOR_USER] || got[AUTHOR_ASSISTANT] != want[AUTHOR_ASSISTANT] ||
        got[AUTHOR_TOOL] != want[AUTHOR_TOOL]) {
        free(a);
        return mt_fail(MT_ERR_INVALID, "%s: the rendered conversation has %zu user, %zu assistant and %zu tool-result "
                       "messages for the conversation's %zu, %zu and %zu: a message's text holds harmony's markers "
                       "(<|start|>, <|message|>, <|end|>, ...), which make messages of their own", name,
                       got[AUTHOR_USER], got[AUTHOR_ASSISTANT], got[AUTHOR_TOOL], want[AUTHOR_USER],
                       want[AUTHOR_ASSISTANT], want[AUTHOR_TOOL]);
    }
    *answers = a;
    *n_answers = k;
    return MT_OK;
}
