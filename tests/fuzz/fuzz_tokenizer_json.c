/* libFuzzer harness: tokenizer.json loading, then encoding and decoding with what loaded. The
 * input is tokenizer.json, optionally followed by a NUL and text to encode, optionally followed by
 * another NUL and a tokenizer_config.json. An accepted tokenizer must encode the text (and a few
 * fixed strings) into ids below its vocabulary size, or refuse it with a message, and decode any
 * ids it produced; encoded in parts cut at every candidate (mt_tokenizer_next_cut, a cut that does
 * not verify merged with the next), the text must give the same ids. */
#include <stdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tmp_file.h"
#include "tokenizer/tokenizer.h"

/* The text in parts at every candidate cut gives `whole`. */
static void check_parts(const mt_tokenizer *tok, const char *text, size_t len, int special, const mt_ids *whole) {
    mt_ids ids = {0};
    for (size_t start = 0; start < len;) {
        size_t end = mt_tokenizer_next_cut(tok, text, len, start + 1);
        for (;;) {
            size_t n0 = ids.n;
            int ok;
            if (mt_tokenizer_encode_part(tok, text, len, start, end, special, &ids, &ok) != MT_OK) abort();
            if (ok) break;
            if (end == len) abort(); /* the document's end always verifies */
            ids.n = n0;
            end = mt_tokenizer_next_cut(tok, text, len, end + 1);
        }
        start = end;
    }
    if (ids.n != whole->n || (ids.n && memcmp(ids.ids, whole->ids, ids.n * sizeof *ids.ids))) abort();
    mt_ids_free(&ids);
}

static void exercise(const mt_tokenizer *tok, const char *text, size_t len) {
    for (int special = 0; special < 2; special++) {
        mt_ids ids = {0};
        if (mt_tokenizer_encode(tok, text, len, special, &ids) == MT_OK) {
            check_parts(tok, text, len, special, &ids);
            for (size_t i = 0; i < ids.n; i++)
                if (ids.ids[i] < 0 || (uint32_t)ids.ids[i] >= mt_tokenizer_vocab_size(tok)) abort();
            char *back;
            size_t back_len;
            if (mt_tokenizer_decode(tok, ids.ids, ids.n, special, &back, &back_len) != MT_OK) abort();
            if (strlen(back) > back_len) abort();
            free(back);
        }
        mt_ids_free(&ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : NULL;
    size_t text_len = nul ? size - json_len - 1 : 0;
    const uint8_t *config = text ? memchr(text, 0, text_len) : NULL;
    if (config) {
        text_len = (size_t)(config - text);
        config++;
        mt_fuzz_write("tokenizer_config.json", config, size - (size_t)(config - data));
    } else {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer_config.json", mt_fuzz_dir());
        unlink(path);
    }
    const char *path = mt_fuzz_write("tokenizer.json", data, json_len);
    mt_tokenizer *tok;
    if (mt_tokenizer_load(path, &tok) != MT_OK) return 0;
    static const char *const samples[] = {"Hello, world! It's 2024.\n\n  indented\ttabs", "中文 テキスト 😀👨‍👩‍👧",
                                          "<s></s><unk><|endoftext|>", "", " ", "\xe2\x96\x81x"};
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) exercise(tok, samples[i], strlen(samples[i]));
    if (text) exercise(tok, (const char *)text, text_len);
    mt_tokenizer_eot(tok);
    mt_tokenizer_chat_template(tok);
    mt_tokenizer_free(tok);
    return 0;
}
