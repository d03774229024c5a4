/* The parsers under fuzzing read files, so each input is written to a file first: one private
 * temporary directory per fuzzing process, made on first use, holding the current input. */
#ifndef MT_FUZZ_TMP_FILE_H
#define MT_FUZZ_TMP_FILE_H

#include <stddef.h>
#include <stdint.h>

/* The process's temporary directory (aborts when it cannot be made: the harness is broken). */
const char *mt_fuzz_dir(void);
/* Writes data to mt_fuzz_dir()/name, replacing it; returns the file's path (static storage). */
const char *mt_fuzz_write(const char *name, const uint8_t *data, size_t size);

#endif
