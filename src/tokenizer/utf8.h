/* UTF-8 helpers shared by the tokenizer's stages. */
#ifndef MT_TOKENIZER_UTF8_H
#define MT_TOKENIZER_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length of the UTF-8 sequence that starts with byte `b` (1 for a stray continuation byte,
 * so that loops over already-validated text always advance). */
static inline size_t mt_utf8_len(unsigned char b) {
    return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
}

/* Decodes the code point at s (valid UTF-8, n bytes available) and stores its length. */
uint32_t mt_utf8_decode(const char *s, size_t n, size_t *cp_len);
/* Writes code point `cp` as UTF-8 into out (4 bytes room); returns its length. */
size_t mt_utf8_encode(uint32_t cp, char *out);

#endif
