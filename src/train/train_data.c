#include "train/train_data.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/masked_tokens.h"
#include "tokenizer/chat_file.h"
#include "tokenizer/shard_writer.h"
#include "tokenizer/tokenize_chat.h"
#include "tokenizer/tokenize_files.h"
#include "tokenizer/utf8.h"
#include "train/data_mix.h"
#include "train/run_state.h"
#include "util/foreign_format.h"
#include "util/fs.h"
#include "util/log.h"

/* Bump when the tokenized form of the same input changes. Left at 1 when masked shards began to
 * record example starts: a run resumed on its older cache keeps its windows (no packing). */
#define CACHE_VERSION 1

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

mt_status mt_train_tokenizer_resolve(const mt_train_options *o, char *out, size_t cap) {
    char probe[PATH_MAX + 32], resolved[PATH_MAX];
    const char *path = NULL;
    if (o->tokenizer) {
        path = o->tokenizer;
    } else if (o->init_from) {
        snprintf(probe, sizeof probe, "%s/tokenizer.json", o->init_from);
        if (exists(probe)) path = o->init_from;
    }
    if (!path) {
        snprintf(out, cap, "%s", "");
        return MT_OK;
    }
    if (!realpath(path, resolved)) return mt_fail(MT_ERR_IO, "--tokenizer %s: %s", path, strerror(errno));
    snprintf(out, cap, "%s", resolved);
    return MT_OK;
}

/* llm.c and masked shards and .npy arrays, by name or by their first bytes. */
static int is_token_file(const char *path) {
    if (has_suffix(path, ".bin") || has_suffix(path, ".npy")) return 1;
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    int32_t magic;
    memcpy(&magic, head, sizeof magic);
    return (n >= 4 && (magic == 20240520 || mt_masked_shard_magic(head, n))) || (n >= 6 && !memcmp(head, "\x93NUMPY", 6));
}

/* Adds a file's bytes to the hash; a missing optional file adds nothing. */
static mt_status hash_file(XXH3_state_t *h, const char *path, int optional) {
    FILE *f = fopen(path, "rb");
    if (!f) return optional && errno == ENOENT ? MT_OK : mt_fail(MT_ERR_IO, "%s: %s", path, strerror(errno));
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) XXH3_64bits_update(h, buf, n);
    int bad = ferror(f);
    fclose(f);
    return bad ? mt_fail(MT_ERR_IO, "%s: read failed", path) : MT_OK;
}

/* How chat data is rendered: --chat-template's file (NULL: the tokenizer's), --loss-on and
 * --analysis-loss. */
typedef struct {
    const char *file;
    mt_chat_loss loss;
    int analysis;
} chat_render;

static chat_render chat_render_of(const mt_train_options *o) {
    chat_render c = {o->chat_template, MT_LOSS_ASSISTANT, !(o->analysis_loss && !strcmp(o->analysis_loss, "off"))};
    for (int i = 0; o->loss_on && mt_chat_loss_names[i]; i++)
        if (!strcmp(o->loss_on, mt_chat_loss_names[i])) c.loss = (mt_chat_loss)i;
    return c;
}

/* The cache key: the input's size and modification time, the tokenizer's files and, where they
 * are not the defaults, the chat template file, the loss and the analysis channel's (keys of
 * earlier caches hold). */
static mt_status cache_key(const char *data, const char *tokenizer, const chat_render *chat, uint64_t *key) {
    struct stat st;
    if (stat(data, &st) != 0) return mt_fail(MT_ERR_IO, "--data %s: %s", data, strerror(errno));
    char json[PATH_MAX + 32], config[PATH_MAX + 32];
    struct stat ts;
    int dir = stat(tokenizer, &ts) == 0 && S_ISDIR(ts.st_mode);
    snprintf(json, sizeof json, dir ? "%s/tokenizer.json" : "%s", tokenizer);
    const char *slash = strrchr(json, '/');
    snprintf(config, sizeof config, "%.*stokenizer_config.json", slash ? (int)(slash - json + 1) : 0, json);
    int64_t fields[4] = {CACHE_VERSION, (int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
    XXH3_state_t *h = XXH3_createState();
    if (!h) return mt_fail(MT_ERR_NOMEM, "cannot hash the tokenizer");
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, fields, sizeof fields);
    char jinja[PATH_MAX + 32];
    snprintf(jinja, sizeof jinja, "%.*schat_template.jinja", slash ? (int)(slash - json + 1) : 0, json);
    mt_status rc = hash_file(h, json, 0);
    if (rc == MT_OK) rc = hash_file(h, config, 1);
    if (rc == MT_OK) rc = hash_file(h, jinja, 1);
    if (rc == MT_OK && chat->file) rc = hash_file(h, chat->file, 0);
    if (chat->loss != MT_LOSS_ASSISTANT) XXH3_64bits_update(h, &chat->loss, sizeof chat->loss);
    if (!chat->analysis) XXH3_64bits_update(h, "analysis-loss off", 17);
    *key = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return rc;
}

void mt_train_cache_remove_stale(const char *cache_dir, const char *name) {
    char pattern[PATH_MAX * 2];
    snprintf(pattern, sizeof pattern, "%s/%s-????????????????_[0-9]*.bin", cache_dir, name);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        mt_log_info("removing the stale token cache %s", g.gl_pathv[i]);
        unlink(g.gl_pathv[i]);
    }
    globfree(&g);
}

static mt_status check_vocab(const char *tokenizer, uint32_t vocab) {
    mt_tokenizer *tok;
    MT_TRY(mt_tokenizer_load(tokenizer, &tok));
    uint32_t n = mt_tokenizer_vocab_size(tok);
    mt_tokenizer_free(tok);
    if (n > vocab)
        return mt_fail(MT_ERR_INVALID, "the tokenizer %s has %u tokens but the model's vocab_size is %u", tokenizer, n,
                       vocab);
    return MT_OK;
}

/* --chat-template, --loss-on and --analysis-loss other than the default, for data that is not chat
 * data: refused. */
static mt_status not_chat(const char *data, const chat_render *chat, const char *why) {
    if (chat->file) return mt_fail(MT_ERR_INVALID, "--chat-template %s: --data %s %s", chat->file, data, why);
    if (chat->loss != MT_LOSS_ASSISTANT)
        return mt_fail(MT_ERR_INVALID, "--loss-on %s: --data %s %s", mt_chat_loss_names[chat->loss], data, why);
    if (!chat->analysis) return mt_fail(MT_ERR_INVALID, "--analysis-loss off: --data %s %s", data, why);
    return MT_OK;
}

static mt_status tokenize(const char *data, const char *tokenizer, const chat_render *render, uint32_t vocab,
                          const char *prefix) {
    static const char *const loss_said[] = {"on the answers only", "on the last answer of each conversation",
                                            "on every token"};
    int chat = 0;
    MT_TRY(check_vocab(tokenizer, vocab));
    if (has_suffix(data, ".jsonl") || has_suffix(data, ".json")) MT_TRY(mt_jsonl_is_chat(data, &chat));
    if (!chat) MT_TRY(not_chat(data, render, "is text, not chat data (JSONL or a .json array of conversations)"));
    const char *inputs[1] = {data};
    mt_tokenize_options o = {.tokenizer = tokenizer, .inputs = inputs, .n_inputs = 1, .out_prefix = prefix,
                             .shard_tokens = chat ? INT64_MAX : INT32_MAX, .bos = -1,
                             .chat_template = render->file, .loss = (int)render->loss,
                             .no_analysis_loss = !render->analysis};
    mt_tokenize_summary s;
    uint64_t trained = 0;
    if (chat)
        mt_log_info("tokenizing %s with %s (chat data: the template of %s, loss %s%s)", data, tokenizer,
                    render->file ? render->file : "the tokenizer", loss_said[render->loss],
                    render->analysis ? "" : ", not on the analysis channel");
    else
        mt_log_info("tokenizing %s with %s", data, tokenizer);
    MT_TRY(chat ? mt_tokenize_chat_files(&o, &s, &trained) : mt_tokenize_files(&o, &s));
    if (s.shards > 1) {
        for (size_t i = 0; i < s.shards; i++) {
            char *name = mt_shard_name(prefix, i, 0);
            if (name) unlink(name);
            free(name);
        }
        return mt_fail(MT_ERR_INVALID, "%s: %llu tokens are more than one shard holds: tokenize it with 'megatrain "
                       "tokenize' and train on the shards", data, (unsigned long long)s.tokens);
    }
    mt_log_info("%s: %llu tokens in %.1f s", data, (unsigned long long)s.tokens, s.seconds);
    if (chat)
        mt_log_info("%s: %zu conversations, %llu tokens carry loss", data, s.documents, (unsigned long long)trained);
    return MT_OK;
}

/* JSON records (JSONL, or a .json array) by name, or by a first non-blank byte that opens a JSON
 * object. */
static int looks_like_jsonl(const char *path) {
    if (has_suffix(path, ".jsonl") || has_suffix(path, ".json")) return 1;
    FILE *f = fopen(path, "rb");
    int c = EOF;
    if (f) {
        unsigned char bom[3];
        if (fread(bom, 1, 3, f) != 3 || mt_utf8_bom((const char *)bom, 3) == 0) rewind(f);
        for (int n = 0; n < 4096 && (c = fgetc(f)) != EOF && c && strchr(" \t\r\n", c); n++) continue;
        fclose(f);
    }
    return c == '{';
}

/* Text without a tokenizer is read as bytes: token ids 0 to 255, which only a model of a 256-token
 * vocabulary (the demo's) reads as its own. Another model would train on ids that mean nothing
 * to it, and JSONL would be trained as its JSON syntax: both are refused. */
static mt_status check_bytes(const char *data, uint32_t vocab) {
    if (looks_like_jsonl(data))
        return mt_fail(MT_ERR_INVALID, "--data %s is JSON, and the run has no tokenizer: its bytes, JSON syntax and "
                       "all, would be the tokens; give --tokenizer (or --init-from a model directory with a "
                       "tokenizer.json) to tokenize its documents or conversations", data);
    if (vocab > 256)
        return mt_fail(MT_ERR_INVALID, "--data %s is text, and the run has no tokenizer: read as bytes, its tokens "
                       "would be ids 0 to 255, which only a model of a 256-token vocabulary reads (this one has %u); "
                       "give --tokenizer (or --init-from a model directory with a tokenizer.json), or tokenize it "
                       "with 'megatrain tokenize'", data, vocab);
    return MT_OK;
}

static mt_status data_tokens(const char *data, const char *tokenizer, const chat_render *chat, uint32_t vocab,
                             const char *out_dir, char *tokens, size_t cap) {
    struct stat st;
    if (stat(data, &st) == 0 && S_ISDIR(st.st_mode))
        return mt_fail(MT_ERR_INVALID, "--data %s is a directory: tokenize it with 'megatrain tokenize' and train on "
                       "the shards", data);
    if (stat(data, &st) != 0) return mt_fail(MT_ERR_INVALID, "--data %s: %s", data, strerror(errno));
    if (!S_ISREG(st.st_mode)) { /* the reader refuses it, naming what it is */
        snprintf(tokens, cap, "%s", data);
        return MT_OK;
    }
    if (!is_token_file(data)) MT_TRY(mt_refuse_foreign_format(data));
    if (!tokenizer[0] && !is_token_file(data)) MT_TRY(check_bytes(data, vocab));
    if (!tokenizer[0] || is_token_file(data)) {
        MT_TRY(not_chat(data, chat, tokenizer[0] ? "is tokenized already: its template and loss were chosen when it "
                        "was tokenized" : "is not tokenized, and the run has no tokenizer"));
        snprintf(tokens, cap, "%s", data);
        return MT_OK;
    }
    uint64_t key = 0;
    MT_TRY(cache_key(data, tokenizer, chat, &key));
    char cache_dir[PATH_MAX], name[NAME_MAX + 1], prefix[PATH_MAX * 2];
    const char *base = strrchr(data, '/') ? strrchr(data, '/') + 1 : data;
    snprintf(cache_dir, sizeof cache_dir, "%s/data", out_dir);
    snprintf(name, sizeof name, "%.200s", base);
    snprintf(prefix, sizeof prefix, "%s/%s-%016llx", cache_dir, name, (unsigned long long)key);
    char *first = mt_shard_name(prefix, 0, 0);
    if (!first) return mt_fail(MT_ERR_NOMEM, "cannot copy a path");
    snprintf(tokens, cap, "%s", first);
    free(first);
    if (exists(tokens)) {
        mt_log_info("%s: the tokens cached in %s", data, tokens);
        return MT_OK;
    }
    MT_TRY(mt_mkdir_p(cache_dir));
    mt_train_cache_remove_stale(cache_dir, name);
    return tokenize(data, tokenizer, chat, vocab, prefix);
}

mt_status mt_train_data_resolve(const mt_train_options *o, uint32_t vocab, char *tokens, size_t cap) {
    if (strchr(o->data_path, ',')) return mt_data_mix_resolve(o, vocab, tokens, cap);
    chat_render chat = chat_render_of(o);
    return data_tokens(o->data_path, o->tokenizer ? o->tokenizer : "", &chat, vocab, o->out_dir, tokens, cap);
}

/* The tokenizer's end-of-text token, which its documents end with under --doc-mask. */
static mt_status doc_end(const mt_train_options *o, const mt_tokens *tokens, const char *name, int32_t *eot) {
    if (tokens->format == MT_TOKENS_MASKED)
        return mt_fail(MT_ERR_INVALID, "--doc-mask: %s is chat data (a masked shard): its examples are packed whole "
                       "with attention masked between them (--packing); --doc-mask is for text", name);
    if (!o->tokenizer)
        return mt_fail(MT_ERR_INVALID, "--doc-mask: %s: %s", name, tokens->format == MT_TOKENS_TEXT ?
                       "raw bytes (no tokenizer) have no end-of-text token to tell where documents end; give "
                       "--tokenizer" : "documents end at the tokenizer's end-of-text token: give the --tokenizer "
                       "that wrote these tokens");
    mt_tokenizer *tok;
    MT_TRY(mt_tokenizer_load(o->tokenizer, &tok));
    *eot = mt_tokenizer_eot(tok);
    mt_tokenizer_free(tok);
    if (*eot < 0)
        return mt_fail(MT_ERR_INVALID, "--doc-mask: the tokenizer %s has no end-of-text token to end documents at",
                       o->tokenizer);
    return MT_OK;
}

mt_status mt_train_data_layout(mt_train_options *o, const mt_tokens *tokens, const char *name, int32_t *eot) {
    const uint64_t *starts;
    int masked = tokens->format == MT_TOKENS_MASKED, examples = mt_tokens_examples(tokens, &starts) > 0;
    *eot = -1;
    if (o->packing && !strcmp(o->packing, "on") && !masked)
        return mt_fail(MT_ERR_INVALID, "--packing on: %s is not chat data (a masked shard); for text, --doc-mask masks "
                       "attention between documents", name);
    if (o->doc_mask) MT_TRY(doc_end(o, tokens, name, eot));
    if (o->packing) return MT_OK;
    o->packing = masked && examples ? "on" : "off";
    if (masked && !examples)
        mt_log_warn("%s does not record where its examples start (a masked shard tokenized by an earlier megatrain): "
                    "its windows run across examples; tokenize it again to pack whole examples", name);
    return MT_OK;
}
