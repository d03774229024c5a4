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

/* 3 when s (n bytes) starts with a UTF-8 byte-order mark, else 0. A JSONL file that starts with
 * one (as some editors write) has it skipped: JSON never starts with U+FEFF, and a parse error
 * "near" an invisible character would only puzzle. */
static inline size_t mt_utf8_bom(const char *s, size_t n) {
    return n >= 3 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF ? 3 : 0;
}

/* Decodes the code point at s (valid UTF-8, n bytes available) and stores its length. */
uint32_t mt_utf8_decode(const char *s, size_t n, size_t *cp_len);
/* Writes code point `cp` as UTF-8 into out (4 bytes room); returns its length. */
size_t mt_utf8_encode(uint32_t cp, char *out);

#endif
