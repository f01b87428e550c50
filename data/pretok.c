// data/pretok.c: PCRE2-driven pre-tokenisation (see pretok.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretok.h"
#include "core/check.h"  // defines: core_calloc, core_fatal

#include <pcre2.h>  // defines: pcre2_compile, pcre2_match, PCRE2_MATCH_INVALID_UTF
#include <stdio.h>
#include <stdlib.h>

struct TokPretok {
    pcre2_code *re;
    pcre2_match_data *md;
    int max_piece;
};

TokPretok *tok_pretok_new(const char *pattern, int max_piece, char *err, size_t errlen) {
    if (max_piece < 1) {
        snprintf(err, errlen, "max_piece must be >= 1, got %d", max_piece);
        return NULL;
    }
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    if (!re) {
        char msg[256];
        pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof msg);
        snprintf(err, errlen, "bad pre-tokenisation pattern at offset %zu: %s", (size_t)at, msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // optional: pcre2_match falls back to the interpreter
    TokPretok *p = core_calloc(1, sizeof *p);
    p->re = re;
    p->md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!p->md) core_fatal("out of memory creating PCRE2 match data");
    p->max_piece = max_piece;
    return p;
}

void tok_pretok_free(TokPretok *p) {
    if (!p) return;
    pcre2_match_data_free(p->md);
    pcre2_code_free(p->re);
    free(p);
}

// Emits s[0..n) as pieces of at most max_piece bytes.
static void emit(const TokPretok *p, const uint8_t *s, size_t n, TokPieceFn fn, void *ctx) {
    size_t m = (size_t)p->max_piece;
    for (size_t i = 0; i < n; i += m) fn(ctx, s + i, n - i < m ? n - i : m);
}

void tok_pretok_split(TokPretok *p, const uint8_t *text, size_t n, TokPieceFn fn, void *ctx) {
    size_t pos = 0;
    while (pos < n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)text, n, pos, 0, p->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            char msg[256];
            pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
            core_fatal("PCRE2 match failed at byte %zu: %s", pos, msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
        if (ov[0] > pos) emit(p, text + pos, ov[0] - pos, fn, ctx);  // unmatched (invalid UTF-8)
        if (ov[0] >= n) { pos = n; break; }
        size_t end = ov[1] > ov[0] ? ov[1] : ov[0] + 1;  // a custom pattern may match ""
        emit(p, text + ov[0], end - ov[0], fn, ctx);
        pos = end;
    }
    if (pos < n) emit(p, text + pos, n - pos, fn, ctx);
}
