/* libFuzzer harness: the Jinja interpreter (tokenizer/jinja.h). The input is a chat template:
 * compiled, and where it compiles, rendered with a conversation that has a system prompt, tools,
 * a tool call and unicode. Whatever it does must end (the interpreter bounds its steps, macro
 * depth and ranges) with a text or an error, and generation ranges inside the text. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja.h"

static json_t *vars;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    vars = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
                      "\"q \\u00e9\\u65e5 \"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": "
                      "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [1, null]}}}]}, "
                      "{\"role\": \"tool\", \"content\": \"r\"}, {\"role\": \"assistant\", \"content\": \"a\"}], "
                      "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}], "
                      "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true}",
                      0, NULL);
    if (!vars) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    mt_jinja *t;
    if (mt_jinja_compile(text, "fuzz.jinja", &t) == MT_OK) {
        mt_jinja_output out;
        if (mt_jinja_render(t, vars, "2024-07-26", &out) == MT_OK) {
            if (!out.text || strlen(out.text) > out.len) abort();
            for (size_t i = 0; i < out.n_gen; i++)
                if (out.gen[i][0] > out.gen[i][1] || out.gen[i][1] > out.len) abort();
            mt_jinja_output_free(&out);
        }
        mt_jinja_free(t);
    }
    free(text);
    return 0;
}
