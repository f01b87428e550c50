// data/utf8.c: strict UTF-8 validation (see utf8.h).
#include "utf8.h"

// Length of the valid sequence starting at s[0] (1..4), or 0 when it is invalid.
static int seq_len(const uint8_t *s, size_t left) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;        // overlong
        if (c == 0xED) hi = 0x9F;        // surrogates U+D800..U+DFFF
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;        // overlong
        if (c == 0xF4) hi = 0x8F;        // above U+10FFFF
    } else return 0;
    if ((size_t)len > left || s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

long long data_utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int len = seq_len(s + i, n - i);
        if (!len) return (long long)i;
        i += (size_t)len;
    }
    return -1;
}
