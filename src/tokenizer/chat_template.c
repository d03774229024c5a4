#include "tokenizer/chat_template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading the template's text ---- */

static int has(const char *text, const char *s) { return strstr(text, s) != NULL; }

/* A newline inside a Jinja string literal: written "\n" (two characters), or a real newline when
 * the JSON string held "\n". Returns the characters it takes at p, 0 when p is not one. */
static size_t newline_at(const char *p) {
    if (p[0] == '\\' && p[1] == 'n') return 2;
    return p[0] == '\n';
}

/* Where `before` + a literal newline + `after` occurs in text, or NULL. */
static const char *find_with_newline(const char *text, const char *before, const char *after) {
    for (const char *p = strstr(text, before); p; p = strstr(p + 1, before)) {
        size_t nl = newline_at(p + strlen(before));
        if (nl && !strncmp(p + strlen(before) + nl, after, strlen(after))) return p;
    }
    return NULL;
}

/* The value of a Jinja string literal's characters from p up to (not including) `end`: the
 * escapes \n \t \r \\ \' \" are decoded, any other backslash is kept. Returns NULL when out of
 * memory. */
static char *unescape(const char *p, const char *end) {
    char *out = malloc((size_t)(end - p) + 1), *o = out;
    if (!out) return NULL;
    while (p < end) {
        if (*p == '\\' && p + 1 < end && strchr("nrt\\'\"", p[1])) {
            *o++ = p[1] == 'n' ? '\n' : p[1] == 'r' ? '\r' : p[1] == 't' ? '\t' : p[1];
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

/* Copies the literal text that follows `marker` in the template up to a newline (either form) or
 * a closing quote into out[cap]; fails when there is none or it does not fit. */
static int text_after(const char *text, const char *marker, char *out, size_t cap) {
    const char *p = strstr(text, marker);
    if (!p) return -1;
    p += strlen(marker);
    size_t n = 0;
    while (p[n] && !newline_at(p + n) && p[n] != '"' && p[n] != '\'') n++;
    if (n == 0 || n >= cap) return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

/* ---- recognising a template ---- */

static mt_status refuse(const char *source, const char *family, const char *what) {
    return mt_fail(MT_ERR_INVALID,
                   "%s: chat_template is a %s template, but %s; megatrain renders the templates of Llama 3, "
                   "Qwen2/Qwen2.5/Qwen3 (ChatML), Llama 2 and Mistral Instruct (docs/data-formats.md), without Jinja",
                   source, family, what);
}

static mt_status parse_llama3(const char *text, const char *source, mt_chat_template *t) {
    if (!has(text, "| trim") && !has(text, "|trim"))
        return refuse(source, "Llama 3", "it does not trim message contents as Meta's templates do");
    t->trailing_header = !has(text, "add_generation_prompt");
    t->date_header = has(text, "Cutting Knowledge Date: ");
    if (!t->date_header) return MT_OK;
    if (text_after(text, "Cutting Knowledge Date: ", t->knowledge_date, sizeof t->knowledge_date) ||
        !has(text, "Today Date: "))
        return refuse(source, "Llama 3.1+", "its \"Cutting Knowledge Date\" header is not the one we know");
    /* The fallback date (Llama 3.2 uses it where strftime_now is not defined). */
    const char *set = NULL;
    for (const char *p = strstr(text, "set date_string = "); p; p = strstr(p + 1, "set date_string = ")) set = p;
    if (!set) return refuse(source, "Llama 3.1+", "it sets no fixed date_string");
    set += strlen("set date_string = ");
    if (*set != '"' && *set != '\'') return refuse(source, "Llama 3.1+", "its date_string is not a string literal");
    const char *end = strchr(set + 1, *set);
    if (!end || end - set - 1 <= 0 || (size_t)(end - set - 1) >= sizeof t->today_date)
        return refuse(source, "Llama 3.1+", "its date_string literal is unreadable");
    memcpy(t->today_date, set + 1, (size_t)(end - set - 1));
    t->today_date[end - set - 1] = '\0';
    return MT_OK;
}

/* ChatML's default system prompt: a literal '<|im_start|>system\n<text><|im_end|>...' whose text is
 * not empty (the literal that opens a given system message ends right after "system\n"). */
static mt_status default_system_prompt(const char *text, mt_chat_template *t) {
    static const char marker[] = "<|im_start|>system";
    for (const char *p = strstr(text, marker); p; p = strstr(p + 1, marker)) {
        const char *q = p + sizeof marker - 1;
        size_t nl = newline_at(q);
        if (!nl || q[nl] == '\'' || q[nl] == '"') continue;
        const char *start = q + nl, *end = strstr(start, "<|im_end|>");
        const char *quote = strpbrk(start, "'\"");
        if (!end || (quote && quote < end)) continue; /* the text leaves the literal: not a default */
        t->default_system = unescape(start, end);
        return t->default_system ? MT_OK : mt_fail(MT_ERR_NOMEM, "cannot hold a default system prompt");
    }
    return MT_OK;
}

static mt_status parse_chatml(const char *text, const char *source, mt_chat_template *t) {
    if (has(text, "| trim") || has(text, "|trim") || has(text, ".strip()"))
        return refuse(source, "ChatML", "it trims message contents, which Qwen's templates do not");
    t->think = has(text, "</think>") && has(text, "reasoning_content");
    t->think_in_prompt = t->think && find_with_newline(text, "<|im_start|>assistant", "<think>") != NULL;
    return default_system_prompt(text, t);
}

static mt_status parse_inst(const char *text, const char *source, mt_chat_template *t) {
    if (has(text, "<<SYS>>")) {
        if (!has(text, "bos_token + '[INST] '") || !has(text, "content.strip()"))
            return refuse(source, "Llama 2", "its [INST] and <<SYS>> markup is not Llama 2 chat's");
        t->inst = MT_INST_LLAMA2;
    } else if (has(text, "' [INST] ' + system_message")) {
        t->inst = MT_INST_SYSTEM_FIRST;
    } else if (has(text, "\"[INST] \" + system_message")) {
        if (has(text, "user_messages[-1]") && !has(text, "loop.last and system_message"))
            t->inst = MT_INST_SYSTEM_LAST;
        else if (has(text, "loop.last and system_message"))
            t->inst = MT_INST_SYSTEM_IF_LAST;
        else
            return refuse(source, "Mistral [INST]", "it places the system message where we do not know");
        if (!has(text, "message[\"content\"]|trim + eos_token"))
            return refuse(source, "Mistral v0.3", "its assistant turn is not \" \" + content|trim + eos");
    } else if (!has(text, "system_message") && has(text, "'[INST] ' + message['content'] + ' [/INST]'")) {
        t->inst = MT_INST_NO_SYSTEM;
        t->eos_space = has(text, "message['content'] + eos_token + ' '");
        if (!t->eos_space && !has(text, "message['content'] + eos_token"))
            return refuse(source, "Mistral [INST]", "its assistant turn is not content + eos");
    } else {
        return refuse(source, "[INST]", "its variant is not one of Llama 2 chat or Mistral Instruct v0.1-v0.3");
    }
    return MT_OK;
}

mt_status mt_chat_template_parse(const char *text, const char *bos, const char *eos, const char *source,
                                 mt_chat_template *t) {
    *t = (mt_chat_template){0};
    if (!text) return mt_fail(MT_ERR_INVALID, "%s: no chat_template: chat data needs the model's chat template", source);
    if ((bos && strlen(bos) >= sizeof t->bos) || (eos && strlen(eos) >= sizeof t->eos))
        return mt_fail(MT_ERR_INVALID, "%s: bos_token or eos_token is longer than %zu bytes", source, sizeof t->bos - 1);
    snprintf(t->bos, sizeof t->bos, "%s", bos ? bos : "");
    snprintf(t->eos, sizeof t->eos, "%s", eos ? eos : "");
    mt_status st;
    if (has(text, "<|start_header_id|>") && has(text, "<|end_header_id|>") && has(text, "<|eot_id|>")) {
        t->family = MT_CHAT_LLAMA3;
        st = parse_llama3(text, source, t);
    } else if (has(text, "<|im_start|>") && has(text, "<|im_end|>")) {
        t->family = MT_CHAT_CHATML;
        st = parse_chatml(text, source, t);
    } else if (has(text, "[INST]") && has(text, "[/INST]")) {
        t->family = MT_CHAT_INST;
        st = parse_inst(text, source, t);
        if (st == MT_OK && !eos) st = refuse(source, "[INST]", "the tokenizer has no eos_token to end answers with");
    } else {
        return mt_fail(MT_ERR_INVALID,
                       "%s: chat_template is not one megatrain renders: it has none of the markers of the Llama 3 "
                       "(<|start_header_id|>, <|eot_id|>), ChatML (<|im_start|>, <|im_end|>) or [INST] families "
                       "(docs/data-formats.md)",
                       source);
    }
    if (st != MT_OK) mt_chat_template_free(t);
    return st;
}

void mt_chat_template_free(mt_chat_template *t) {
    free(t->default_system);
    t->default_system = NULL;
}

const char *mt_chat_family_name(const mt_chat_template *t) {
    return t->family == MT_CHAT_LLAMA3 ? "Llama 3" : t->family == MT_CHAT_CHATML ? "ChatML" : "[INST]";
}

/* ---- text helpers with Python's semantics ---- */

typedef struct {
    const char *p;
    size_t n;
} span;

static span whole(const mt_chat_message *m) { return (span){m->content, m->len}; }

/* The code point that starts at s[i] (s is valid UTF-8) and its length in bytes. */
static uint32_t decode(const char *s, size_t i, size_t *len) {
    const unsigned char *u = (const unsigned char *)s + i;
    if (u[0] < 0x80) return *len = 1, u[0];
    if (u[0] < 0xE0) return *len = 2, (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    if (u[0] < 0xF0) return *len = 3, (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    return *len = 4, (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 |
                     (u[3] & 0x3F);
}

/* Python's str.isspace(), which str.strip() and Jinja's trim remove. */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* str.strip() (all Unicode whitespace) or, with `newlines_only`, str.strip('\n'); left and right
 * choose the ends. */
static span strip(span s, int left, int right, int newlines_only) {
    size_t len;
    while (left && s.n) {
        uint32_t c = decode(s.p, 0, &len);
        if (newlines_only ? c != '\n' : !py_space(c)) break;
        s.p += len;
        s.n -= len;
    }
    while (right && s.n) {
        size_t start = s.n - 1;
        while (start > 0 && ((unsigned char)s.p[start] & 0xC0) == 0x80) start--;
        uint32_t c = decode(s.p, start, &len);
        if (newlines_only ? c != '\n' : !py_space(c)) break;
        s.n = start;
    }
    return s;
}

static span trim(span s) { return strip(s, 1, 1, 0); }

/* memmem for spans: the first (or, with `last`, the final) occurrence of needle, or NULL. */
static const char *find(span s, const char *needle, int last) {
    size_t k = strlen(needle);
    const char *found = NULL;
    for (const char *p = s.p; p + k <= s.p + s.n; p++)
        if (!memcmp(p, needle, k)) {
            found = p;
            if (!last) break;
        }
    return found;
}

/* ---- rendering ---- */

static mt_status emit(mt_chat_rendered *r, const char *text, size_t len, int trainable, int special) {
    if (len == 0) return MT_OK;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 32;
        mt_chat_segment *grown = realloc(r->seg, cap * sizeof *grown);
        if (!grown) return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered conversation");
        r->seg = grown;
        r->cap = cap;
    }
    r->seg[r->n++] = (mt_chat_segment){text, len, (unsigned char)trainable, (unsigned char)special};
    return MT_OK;
}

#define TEXT(r, s, trainable) emit(r, s, strlen(s), trainable, 0)
#define SPECIAL(r, s, trainable) emit(r, s, strlen(s), trainable, 1)
#define SPAN(r, s, trainable) emit(r, (s).p, (s).n, trainable, 0)

static const char *role_name(mt_chat_role role) {
    return role == MT_ROLE_SYSTEM ? "system" : role == MT_ROLE_USER ? "user" : "assistant";
}

/* Keeps a string the segments point into until mt_chat_rendered_free. */
static mt_status own(mt_chat_rendered *r, char *s) {
    char **grown = s ? realloc(r->owned, (r->n_owned + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(s);
        return mt_fail(MT_ERR_NOMEM, "cannot hold a rendered conversation");
    }
    r->owned = grown;
    r->owned[r->n_owned++] = s;
    return MT_OK;
}

/* Llama 3: <|start_header_id|>role<|end_header_id|>\n\n content|trim <|eot_id|>. */
static mt_status header(mt_chat_rendered *r, const char *role) {
    MT_TRY(SPECIAL(r, "<|start_header_id|>", 0));
    MT_TRY(TEXT(r, role, 0));
    MT_TRY(SPECIAL(r, "<|end_header_id|>", 0));
    return TEXT(r, "\n\n", 0);
}

static mt_status render_llama3(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r) {
    MT_TRY(SPECIAL(r, t->bos, 0));
    size_t first = 0;
    if (t->date_header) {
        /* Llama 3.1+: the system header always comes first, with the conversation's system
         * message (trimmed) after the dates. */
        MT_TRY(header(r, "system"));
        MT_TRY(TEXT(r, "Cutting Knowledge Date: ", 0));
        MT_TRY(TEXT(r, t->knowledge_date, 0));
        MT_TRY(TEXT(r, "\nToday Date: ", 0));
        MT_TRY(TEXT(r, t->today_date, 0));
        MT_TRY(TEXT(r, "\n\n", 0));
        if (m[0].role == MT_ROLE_SYSTEM) {
            MT_TRY(SPAN(r, trim(whole(&m[0])), 0));
            first = 1;
        }
        MT_TRY(SPECIAL(r, "<|eot_id|>", 0));
    }
    for (size_t i = first; i < n; i++) {
        int answer = m[i].role == MT_ROLE_ASSISTANT;
        MT_TRY(header(r, role_name(m[i].role)));
        MT_TRY(SPAN(r, trim(whole(&m[i])), answer));
        MT_TRY(SPECIAL(r, "<|eot_id|>", answer));
    }
    return t->trailing_header ? header(r, "assistant") : MT_OK;
}

/* ChatML: <|im_start|>role\n content <|im_end|>\n. */
static mt_status chatml_turn(mt_chat_rendered *r, const char *role, span content) {
    MT_TRY(SPECIAL(r, "<|im_start|>", 0));
    MT_TRY(TEXT(r, role, 0));
    MT_TRY(TEXT(r, "\n", 0));
    MT_TRY(SPAN(r, content, 0));
    MT_TRY(SPECIAL(r, "<|im_end|>", 0));
    return TEXT(r, "\n", 0);
}

/* Qwen3: the index of the last user message (the last message when there is none). */
static size_t last_query(const mt_chat_message *m, size_t n) {
    for (size_t i = n; i-- > 0;) {
        span c = whole(&m[i]);
        int tool_response = c.n >= 31 && !memcmp(c.p, "<tool_response>", 15) &&
                            !memcmp(c.p + c.n - 16, "</tool_response>", 16);
        if (m[i].role == MT_ROLE_USER && !tool_response) return i;
    }
    return n - 1;
}

/* An assistant turn under Qwen3's rules: the reasoning comes from reasoning_content or from a
 * <think>...</think> block in the content; turns after the last user message show it in a <think>
 * block (the last turn always, with an empty one where there is none), earlier turns drop it. */
static mt_status qwen3_answer(const mt_chat_template *t, const mt_chat_message *m, size_t i, size_t n, size_t query,
                              mt_chat_rendered *r) {
    span content = whole(&m[i]), reasoning = {"", 0};
    if (m[i].reasoning) {
        reasoning = (span){m[i].reasoning, m[i].reasoning_len};
    } else {
        const char *close = find(content, "</think>", 0);
        if (close) {
            span before = {content.p, (size_t)(close - content.p)};
            before = strip(before, 0, 1, 1);
            const char *open = find(before, "<think>", 1);
            if (open) before = (span){open + 7, (size_t)(before.p + before.n - open - 7)};
            reasoning = strip(before, 1, 0, 1);
            const char *last = find(content, "</think>", 1) + 8;
            content = strip((span){last, (size_t)(content.p + content.n - last)}, 1, 0, 1);
        }
    }
    if (i > query && (i == n - 1 || reasoning.n)) {
        MT_TRY(TEXT(r, "<think>\n", !t->think_in_prompt));
        MT_TRY(SPAN(r, strip(reasoning, 1, 1, 1), 1));
        MT_TRY(TEXT(r, "\n</think>\n\n", 1));
        content = strip(content, 1, 0, 1);
    }
    return SPAN(r, content, 1);
}

static mt_status render_chatml(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r) {
    size_t first = 0;
    if (m[0].role == MT_ROLE_SYSTEM) {
        MT_TRY(chatml_turn(r, "system", whole(&m[0])));
        first = 1;
    } else if (t->default_system) {
        MT_TRY(chatml_turn(r, "system", (span){t->default_system, strlen(t->default_system)}));
    }
    size_t query = last_query(m, n);
    for (size_t i = first; i < n; i++) {
        if (m[i].role != MT_ROLE_ASSISTANT) {
            MT_TRY(chatml_turn(r, role_name(m[i].role), whole(&m[i])));
            continue;
        }
        MT_TRY(SPECIAL(r, "<|im_start|>", 0));
        MT_TRY(TEXT(r, "assistant\n", 0));
        if (t->think) MT_TRY(qwen3_answer(t, m, i, n, query, r));
        else MT_TRY(SPAN(r, whole(&m[i]), 1));
        MT_TRY(SPECIAL(r, "<|im_end|>", 1));
        MT_TRY(TEXT(r, "\n", 0));
    }
    return MT_OK;
}

/* The [INST] templates raise on roles that do not alternate user, assistant, user, ... */
static mt_status check_alternation(const mt_chat_message *m, size_t n, int after_system) {
    for (size_t k = 0; k < n; k++) {
        if ((m[k].role == MT_ROLE_USER) != (k % 2 == 0))
            return mt_fail(MT_ERR_INVALID, "the chat template needs %sroles that alternate user, assistant, user, ... "
                           "(message %zu is %s)", after_system ? "a system message first at most, then " : "",
                           k + 1 + (size_t)after_system, role_name(m[k].role));
    }
    return MT_OK;
}

static mt_status no_place_for_system(void) {
    return mt_fail(MT_ERR_INVALID, "the chat template takes a system message only as the first message");
}

/* Llama 2 chat: bos "[INST] " (<<SYS>>\n system \n<</SYS>>\n\n) user|strip " [/INST]", then
 * " " answer|strip " " eos. */
static mt_status render_llama2(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r,
                               const mt_chat_message *system) {
    for (size_t k = 0; k < n; k++) {
        /* The template checks alternation as it goes and renders nothing for another role. */
        if ((m[k].role == MT_ROLE_USER) != (k % 2 == 0))
            return check_alternation(m, k + 1, system != NULL);
        span content = whole(&m[k]);
        if (k == 0 && system) {
            size_t len = 8 + system->len + 11 + m[k].len;
            char *joined = malloc(len + 1);
            if (joined) snprintf(joined, len + 1, "<<SYS>>\n%.*s\n<</SYS>>\n\n%.*s", (int)system->len,
                                 system->content, (int)m[k].len, m[k].content);
            MT_TRY(own(r, joined));
            content = (span){joined, len};
        }
        if (m[k].role == MT_ROLE_USER) {
            MT_TRY(SPECIAL(r, t->bos, 0));
            MT_TRY(SPECIAL(r, "[INST]", 0));
            MT_TRY(TEXT(r, " ", 0));
            MT_TRY(SPAN(r, trim(content), 0));
            MT_TRY(TEXT(r, " ", 0));
            MT_TRY(SPECIAL(r, "[/INST]", 0));
        } else if (m[k].role == MT_ROLE_ASSISTANT) {
            MT_TRY(TEXT(r, " ", 1));
            MT_TRY(SPAN(r, trim(content), 1));
            MT_TRY(TEXT(r, " ", 1));
            MT_TRY(SPECIAL(r, t->eos, 1));
        }
    }
    return MT_OK;
}

/* Mistral Instruct: bos, then per turn [INST] user [/INST] and answer eos; the variants differ in
 * spaces, trimming and where a system message goes. */
static mt_status render_mistral(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r,
                                const mt_chat_message *system) {
    if (system && t->inst == MT_INST_NO_SYSTEM)
        return mt_fail(MT_ERR_INVALID, "the chat template has no system role (only user and assistant)");
    MT_TRY(check_alternation(m, n, system != NULL));
    int v03 = t->inst == MT_INST_SYSTEM_LAST || t->inst == MT_INST_SYSTEM_IF_LAST;
    const mt_chat_message *last_user = NULL;
    for (size_t k = 0; k < n; k++)
        if (m[k].role == MT_ROLE_USER) last_user = &m[k];
    MT_TRY(SPECIAL(r, t->bos, 0));
    for (size_t k = 0; k < n; k++) {
        if (m[k].role == MT_ROLE_ASSISTANT) {
            if (t->inst != MT_INST_NO_SYSTEM) MT_TRY(TEXT(r, " ", 1));
            MT_TRY(SPAN(r, v03 ? trim(whole(&m[k])) : whole(&m[k]), 1));
            MT_TRY(SPECIAL(r, t->eos, 1));
            if (t->eos_space) MT_TRY(TEXT(r, " ", 0));
            continue;
        }
        /* Where the system message goes: before the first user message (v0.2), before the last
         * one (v0.3: a user message equal to the last, as the template compares them), or before
         * a user message that ends the conversation (v0.3 as first released). */
        int with_system = system && (t->inst == MT_INST_SYSTEM_FIRST ? k == 0
                                     : t->inst == MT_INST_SYSTEM_LAST
                                         ? m[k].len == last_user->len && !memcmp(m[k].content, last_user->content, m[k].len)
                                         : k == n - 1);
        if (t->inst == MT_INST_SYSTEM_FIRST) MT_TRY(TEXT(r, " ", 0));
        MT_TRY(SPECIAL(r, "[INST]", 0));
        MT_TRY(TEXT(r, " ", 0));
        if (with_system) {
            MT_TRY(SPAN(r, whole(system), 0));
            MT_TRY(TEXT(r, "\n\n", 0));
        }
        MT_TRY(SPAN(r, whole(&m[k]), 0));
        if (!v03) MT_TRY(TEXT(r, " ", 0));
        MT_TRY(SPECIAL(r, "[/INST]", 0));
    }
    return MT_OK;
}

static mt_status render_inst(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *r) {
    const mt_chat_message *system = NULL;
    if (m[0].role == MT_ROLE_SYSTEM) {
        system = &m[0];
        m++;
        n--;
    }
    for (size_t k = 0; k < n; k++)
        if (m[k].role == MT_ROLE_SYSTEM && t->inst != MT_INST_LLAMA2) return no_place_for_system();
    return t->inst == MT_INST_LLAMA2 ? render_llama2(t, m, n, r, system) : render_mistral(t, m, n, r, system);
}

mt_status mt_chat_render(const mt_chat_template *t, const mt_chat_message *m, size_t n, mt_chat_rendered *out) {
    *out = (mt_chat_rendered){0};
    if (n == 0) return mt_fail(MT_ERR_INVALID, "a conversation with no message");
    mt_status st = t->family == MT_CHAT_LLAMA3   ? render_llama3(t, m, n, out)
                   : t->family == MT_CHAT_CHATML ? render_chatml(t, m, n, out)
                                                 : render_inst(t, m, n, out);
    if (st != MT_OK) mt_chat_rendered_free(out);
    return st;
}

void mt_chat_rendered_free(mt_chat_rendered *r) {
    for (size_t i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    free(r->seg);
    *r = (mt_chat_rendered){0};
}
