/* libFuzzer harness: chat data. The first input byte picks one of the real chat templates of
 * tests/data/chat (gpt-oss's harmony among them, its answers found from the rendered text, which
 * the line's texts are in), or, past them, has the rest of the input parsed as a chat_template; the rest
 * is a JSONL line, parsed as a chat example, rendered with the template and encoded with a small
 * byte-level tokenizer. Whatever is accepted must give segments inside the input or the template,
 * and ids and a mask of one length, each id below the vocabulary. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_data.h"
#include "tokenizer/chat_encode.h"

static const char *names[] = {"llama3",       "llama3.1",     "qwen2.5", "qwen3", "llama2",
                              "mistral-v0.2", "mistral-v0.3", "gpt-oss"};
enum { N = sizeof names / sizeof *names };
static mt_chat_template templates[N];
static mt_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 0; i < N; i++) {
        char path[256], jinja[256], *file = NULL;
        snprintf(path, sizeof path, "tests/data/chat/%s/tokenizer_config.json", names[i]);
        snprintf(jinja, sizeof jinja, "tests/data/chat/%s/chat_template.jinja", names[i]);
        json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
        FILE *f = fopen(jinja, "rb");
        if (f) fclose(f);
        if (!cfg || (f && mt_chat_template_read(jinja, &file) != MT_OK) ||
            mt_chat_template_parse(file ? file : json_string_value(json_object_get(cfg, "chat_template")),
                                   json_string_value(json_object_get(cfg, "bos_token")),
                                   json_string_value(json_object_get(cfg, "eos_token")), path, &templates[i]) != MT_OK) {
            fprintf(stderr, "fuzz_chat: cannot load %s (run from the repository root)\n", path);
            abort();
        }
        free(file);
        json_decref(cfg);
    }
    if (mt_tokenizer_load("tests/data/tokenizers/gpt2-bytelevel/tokenizer.json", &tok) != MT_OK) abort();
    return 0;
}

static void render_and_encode(const mt_chat_template *t, const char *line, size_t len) {
    mt_chat_example e;
    if (mt_chat_example_parse(line, len, "fuzz.jsonl", 1, &e) != MT_OK) return;
    mt_chat_rendered r;
    if (mt_chat_render(t, e.m, e.n, e.tools, &r) == MT_OK) {
        mt_ids ids = {0};
        mt_mask mask = {0};
        if (mt_chat_encode(tok, &r, &ids, &mask) == MT_OK) {
            if (ids.n != mask.n) abort();
            for (size_t i = 0; i < ids.n; i++)
                if (ids.ids[i] < 0 || (uint32_t)ids.ids[i] >= mt_tokenizer_vocab_size(tok) || mask.v[i] > 1) abort();
        }
        mt_ids_free(&ids);
        mt_mask_free(&mask);
        mt_chat_rendered_free(&r);
    }
    mt_chat_example_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *rest = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] % (N + 1) < N) {
        render_and_encode(&templates[data[0] % (N + 1)], rest, len);
        return 0;
    }
    /* A template of the fuzzer's own, then a fixed conversation rendered with it. */
    char *text = strndup(rest, len);
    mt_chat_template t;
    if (text && mt_chat_template_parse(text, "<s>", "</s>", "fuzz/tokenizer_config.json", &t) == MT_OK) {
        static const char line[] = "{\"messages\": [{\"role\": \"system\", \"content\": \" s \"}, {\"role\": \"user\", "
                                   "\"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"<think>r</think> a\"}]}";
        render_and_encode(&t, line, sizeof line - 1);
        mt_chat_template_free(&t);
    }
    free(text);
    return 0;
}
