/* The files `megatrain tokenize` reads: the inputs as given, directories expanded. */
#ifndef MT_TOKENIZER_INPUT_FILES_H
#define MT_TOKENIZER_INPUT_FILES_H

#include <stddef.h>

#include "util/status.h"

typedef struct {
    char *path;
    int records; /* JSON records: JSONL (one a line) or, chat data, a JSON array of them; else plain
                  * text, the whole file one document */
} mt_input_file;

typedef struct {
    mt_input_file *v;
    size_t n, cap;
} mt_input_list;

/* Each path in turn: a regular file is taken whatever its name (records when it ends in .jsonl or .json); a
 * directory gives, recursively and sorted by path, its .txt, .text, .md and .jsonl files; what it
 * passes over (hidden entries, links to directories, other names) is counted in a log line. Fails
 * naming a path that does not exist, an input that is not a regular file or a directory (a FIFO
 * is refused without being opened, which would wait for a writer), a link to nothing in a
 * directory (a file the user meant to give), and when nothing is found. */
mt_status mt_input_files_collect(const char *const *paths, size_t n, mt_input_list *out);
void mt_input_files_free(mt_input_list *l);

#endif
