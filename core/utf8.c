/* UTF-8 well-formedness (core.h): Unicode's table of well-formed byte sequences (Table 3-7),
 * so overlong forms, surrogates and code points past U+10FFFF are invalid. */
#include "core/core.h"

#include <stdint.h>
#include <string.h>

size_t tr_utf8_invalid_len(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    int need;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range, narrower after some leads */
    if (c < 0x80)
        return 0;
    if (c < 0xC2 || c > 0xF4)
        return 1;
    if (c < 0xE0)
        need = 1;
    else if (c < 0xF0) {
        need = 2;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else {
        need = 3;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    size_t i = 1;
    for (int k = 0; k < need; k++, i++) {
        if (i >= len || s[i] < lo || s[i] > hi)
            return i;
        lo = 0x80;
        hi = 0xBF;
    }
    return 0;
}

size_t tr_utf8_valid_prefix(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) { /* 8 ASCII bytes at once */
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (!(v & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (tr_utf8_invalid_len(s + i, len - i))
            return i;
        i += s[i] >= 0xF0 ? 4 : s[i] >= 0xE0 ? 3 : 2; /* a valid sequence: its lead's length */
    }
    return len;
}

size_t tr_utf8_lossy(const unsigned char *s, size_t len, int per_byte, char *out)
{
    size_t i = 0, o = 0;
    while (i < len) {
        size_t good = tr_utf8_valid_prefix(s + i, len - i);
        if (out)
            memcpy(out + o, s + i, good);
        o += good;
        i += good;
        if (i < len) {
            size_t bad = tr_utf8_invalid_len(s + i, len - i), n = per_byte ? bad : 1;
            for (size_t k = 0; out && k < n; k++)
                memcpy(out + o + 3 * k, "\xEF\xBF\xBD", 3);
            o += 3 * n;
            i += bad;
        }
    }
    return o;
}
