#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

/* Bytes that stand for themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. The other 68, in byte order
 * (0x00..0x20, 0x7F..0xA0, 0xAD), take U+0100..U+0143. */
static int printable(unsigned b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t mt_byte_level_char(unsigned char b) {
    if (printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 67; /* 0xAD */
}

int mt_byte_level_byte(uint32_t cp) {
    if (cp < 0x100) return printable(cp) ? (int)cp : -1;
    uint32_t n = cp - 0x100;
    if (n <= 32) return (int)n;
    if (n <= 66) return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

long mt_byte_level_decode(const char *s, size_t len, unsigned char *out) {
    long n = 0;
    for (size_t i = 0; i < len;) {
        size_t l;
        int b = mt_byte_level_byte(mt_utf8_decode(s + i, len - i, &l));
        if (b < 0) return -1;
        out[n++] = (unsigned char)b;
        i += l;
    }
    return n;
}
