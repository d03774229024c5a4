/* The tokenizer's concurrency under ThreadSanitizer, as a plain program (Criterion cannot run
 * under TSan): four threads encode with one tokenizer at once (its word cache is shared), each
 * must get the ids one thread alone gets; then mt_tokenize_files with 3 workers over many small
 * JSONL documents, and over one plain-text document cut into parts of 40 bytes, must write the
 * same shards as with 1 (the text whole). TSan (halt_on_error=1) ends it non-zero
 * on any race. Run from the repository root (it reads tests/data/tokenizers/gpt2-bytelevel). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/tokenize_files.h"
#include "tokenizer/tokenizer.h"

#define TOKENIZER "tests/data/tokenizers/gpt2-bytelevel"

static const char text[] = "The cache is shared: the the the cat sat on the mat, it's 2024. 中文 😀 and again";
static mt_tokenizer *tok;
static mt_ids alone;

static void *encode_thread(void *arg) {
    int *ok = arg;
    for (int i = 0; i < 100 && *ok; i++) {
        mt_ids ids = {0};
        *ok = mt_tokenizer_encode(tok, text, strlen(text), 1, &ids) == MT_OK && ids.n == alone.n &&
              !memcmp(ids.ids, alone.ids, ids.n * sizeof *ids.ids);
        mt_ids_free(&ids);
    }
    return NULL;
}

/* The bytes of shards PREFIX_000000.bin, ... concatenated (malloc'd), their total in *len. */
static char *slurp_shards(const char *prefix, size_t *len) {
    char *all = NULL;
    *len = 0;
    for (int i = 0;; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s_%06d.bin", prefix, i);
        FILE *f = fopen(path, "rb");
        if (!f) break;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        all = realloc(all, *len + (size_t)n);
        if (fread(all + *len, 1, (size_t)n, f) != (size_t)n) abort();
        *len += (size_t)n;
        fclose(f);
    }
    return all;
}

static int tokenize(const char *input, const char *prefix, int threads, size_t part) {
    const char *inputs[] = {input};
    mt_tokenize_options o = {.tokenizer = TOKENIZER, .inputs = inputs, .n_inputs = 1, .out_prefix = prefix,
                             .threads = threads, .bos = -1, .shard_tokens = 777, .part_bytes = part};
    mt_tokenize_summary s;
    if (mt_tokenize_files(&o, &s) != MT_OK) {
        fprintf(stderr, "FAIL: tokenize with %d threads: %s\n", threads, mt_error());
        return 0;
    }
    return 1;
}

int main(void) {
    if (mt_tokenizer_load(TOKENIZER, &tok) != MT_OK ||
        mt_tokenizer_encode(tok, text, strlen(text), 1, &alone) != MT_OK) {
        fprintf(stderr, "FAIL: %s\n", mt_error());
        return 1;
    }
    mt_tokenizer_free(tok);
    mt_tokenizer_load(TOKENIZER, &tok); /* a cold cache, filled by the threads together */
    pthread_t th[4];
    int ok[4] = {1, 1, 1, 1}, failures = 0;
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, encode_thread, &ok[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (!ok[i]) failures++, fprintf(stderr, "FAIL: thread %d got other ids\n", i);
    }
    mt_tokenizer_free(tok);
    mt_ids_free(&alone);

    char dir[] = "/tmp/mt-tokenize-tsan-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    for (int text_file = 0; text_file < 2; text_file++) {
        char input[600], one[600], three[600];
        snprintf(input, sizeof input, "%s/docs%d.%s", dir, text_file, text_file ? "txt" : "jsonl");
        snprintf(one, sizeof one, "%s/one%d", dir, text_file);
        snprintf(three, sizeof three, "%s/three%d", dir, text_file);
        FILE *f = fopen(input, "w");
        for (int i = 0; i < 3000; i++)
            fprintf(f, text_file ? "document %d:\nthe cat %d sat on mat %d\n" : "{\"text\": \"document %d: the cat %d sat on mat %d\"}\n",
                    i, i * 7, i % 13);
        fclose(f);
        size_t len1 = 0, len3 = 0;
        char *a = NULL, *b = NULL;
        if (tokenize(input, one, 1, SIZE_MAX) && tokenize(input, three, 3, 40)) {
            a = slurp_shards(one, &len1);
            b = slurp_shards(three, &len3);
            if (!len1 || len1 != len3 || memcmp(a, b, len1))
                failures++, fprintf(stderr, "FAIL: %s: 1 and 3 threads differ\n", input);
        } else {
            failures++;
        }
        free(a);
        free(b);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    printf("tokenize-tsan: %s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}
