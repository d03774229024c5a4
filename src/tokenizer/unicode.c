/* Character classes that tokenizers takes from Rust: char::is_whitespace and the regex crate's
 * \w, for added tokens' lstrip/rstrip and single_word. */
#include <utf8proc.h>

#include "tokenizer/internal.h"

int mt_unicode_is_space(uint32_t cp) {
    /* Unicode's White_Space property. */
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

int mt_unicode_is_word(uint32_t cp) {
    /* \w: Alphabetic, marks, decimal digits, connector punctuation, joiners. Alphabetic is taken as
     * the letters, letter numbers and the circled/squared Latin letters (Other_Alphabetic outside
     * the marks). */
    if (cp == 0x200C || cp == 0x200D) return 1;
    if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
        (cp >= 0x1F170 && cp <= 0x1F189))
        return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return 1;
    default: return 0;
    }
}
