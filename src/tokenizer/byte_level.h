/* GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable code point
 * (printable Latin-1 bytes for themselves, the others for U+0100 upward), so that any byte string
 * is a string of visible characters ("Ġ" is the space byte). */
#ifndef MT_TOKENIZER_BYTE_LEVEL_H
#define MT_TOKENIZER_BYTE_LEVEL_H

#include <stddef.h>
#include <stdint.h>

/* The code point that stands for byte b. */
uint32_t mt_byte_level_char(unsigned char b);
/* The byte that code point cp stands for, or -1 when cp is not in the alphabet. */
int mt_byte_level_byte(uint32_t cp);
/* Decodes a byte-level token string (UTF-8) into its bytes: out gets `len` bytes at most; returns
 * the count, or -1 when a character is not in the alphabet. */
long mt_byte_level_decode(const char *s, size_t len, unsigned char *out);

#endif
