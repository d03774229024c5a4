#include "tokenizer/utf8.h"

#include "tokenizer/internal.h"

int mt_utf8_check(const char *text, size_t len, size_t *bad_offset) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t min, cp;
        if (b >= 0xC2 && b <= 0xDF) need = 1, min = 0x80, cp = b & 0x1F;
        else if (b >= 0xE0 && b <= 0xEF) need = 2, min = 0x800, cp = b & 0x0F;
        else if (b >= 0xF0 && b <= 0xF4) need = 3, min = 0x10000, cp = b & 0x07;
        else goto bad;
        if (len - i <= need) goto bad;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) goto bad;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto bad;
        i += need + 1;
    }
    return 0;
bad:
    if (bad_offset) *bad_offset = i;
    return -1;
}

uint32_t mt_utf8_decode(const char *text, size_t n, size_t *cp_len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t len = mt_utf8_len(s[0]);
    if (len > n) len = 1;
    *cp_len = len;
    switch (len) {
    case 1: return s[0];
    case 2: return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3: return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 |
               (s[3] & 0x3F);
    }
}

size_t mt_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The bytes a valid sequence may continue with after lead byte b (Unicode's table 3-7). */
static void second_byte_range(unsigned char b, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b == 0xE0) *lo = 0xA0;
    else if (b == 0xED) *hi = 0x9F;
    else if (b == 0xF0) *lo = 0x90;
    else if (b == 0xF4) *hi = 0x8F;
}

mt_status mt_utf8_lossy(const unsigned char *b, size_t n, mt_str *out) {
    MT_TRY(mt_str_reserve(out, n));
    size_t i = 0;
    while (i < n) {
        unsigned char c = b[i];
        size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        if (c < 0x80) {
            MT_TRY(mt_str_put(out, (const char *)b + i, 1));
            i++;
            continue;
        }
        /* How much of a sequence is there: the maximal valid prefix is replaced by one U+FFFD. */
        size_t k = 1;
        if (need > 1) {
            unsigned char lo, hi;
            second_byte_range(c, &lo, &hi);
            if (i + 1 < n && b[i + 1] >= lo && b[i + 1] <= hi) {
                k = 2;
                while (k < need && i + k < n && (b[i + k] & 0xC0) == 0x80) k++;
            }
        }
        if (need > 1 && k == need) MT_TRY(mt_str_put(out, (const char *)b + i, k));
        else MT_TRY(mt_str_put(out, "\xef\xbf\xbd", 3));
        i += k;
    }
    return MT_OK;
}
