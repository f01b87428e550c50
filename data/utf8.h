// data/utf8.h: strict UTF-8 validation (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
#pragma once
#include <stddef.h>
#include <stdint.h>

// Offset of the first byte of the first invalid sequence in s[0..n), or -1 if s is valid
// UTF-8. A sequence cut off by the end of s is invalid. Pure.
long long data_utf8_invalid_at(const uint8_t *s, size_t n);
