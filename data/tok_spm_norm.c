// data/tok_spm_norm.c: SentencePiece's normalizer (and Hugging Face's Metaspace / Prepend +
// Replace, its tokenizer.json form), see tok_spm.h.
//
// SentencePiece: the text is read one rule at a time: a USER piece matches as it is; else
// the longest key of the precompiled_charsmap (a darts-clone double-array trie whose values
// are offsets of NUL-terminated replacement strings) is replaced; else one UTF-8 character is
// kept (an invalid byte becomes U+FFFD). remove_extra_whitespaces drops leading and trailing
// spaces and runs of spaces after the first; escape_whitespaces writes each space as "▁";
// add_dummy_prefix puts "▁" before a non-empty text.
#include "tok_spm.h"

#include <string.h>

#define WS "\xE2\x96\x81"  // U+2581, SentencePiece's whitespace
#define WS_LEN 3

// Length of the valid UTF-8 character at s (1..4; RFC 3629), or 0 when it is invalid.
static size_t utf8_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    uint8_t d = s[1];
    if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F))
        return 0;  // overlong, surrogate, above U+10FFFF
    return len;
}

// darts-clone's unit fields.
static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static int unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }

// The longest charsmap key at s[0..n): its length (0: none) and replacement in *rep, *rep_n.
// Bounds-checked against a corrupt trie (a bad offset ends the search).
static size_t charsmap_match(const TokSpm *sp, const uint8_t *s, size_t n, const char **rep, size_t *rep_n) {
    const uint32_t *u = sp->cm_units;
    size_t N = sp->n_units, pos = unit_offset(u[0]), best = 0, value = 0;
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= N || unit_label(u[pos]) != s[i]) break;
        uint32_t unit = u[pos];
        pos ^= unit_offset(unit);
        if (pos >= N) break;
        if (unit_has_leaf(unit)) best = i + 1, value = u[pos] & 0x7FFFFFFFu;
    }
    if (!best || value >= sp->n_norm) return 0;
    *rep = sp->cm_norm + value;
    *rep_n = strnlen(*rep, sp->n_norm - value);
    return best;
}

// The longest USER piece at s[0..n) (0: none), walking the piece trie.
size_t tok_spm_user_match(const TokSpm *sp, const uint8_t *s, size_t n) {
    int64_t node = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t *c = data_u64map_get(&sp->trie, (uint64_t)node << 8 | s[i]);
        if (!c) break;
        node = *c;
        int32_t id = sp->node_id[node];
        if (id >= 0 && sp->type[id] == SPM_USER) best = i + 1;
    }
    return best;
}

// One normalization step at s[0..n): the replacement in *rep, *rep_n; returns bytes consumed.
static size_t norm_prefix(const TokSpm *sp, const uint8_t *s, size_t n, const char **rep, size_t *rep_n) {
    size_t m = sp->has_user ? tok_spm_user_match(sp, s, n) : 0;
    if (!m && sp->cm_units) m = charsmap_match(sp, s, n, rep, rep_n);
    else if (m) *rep = (const char *)s, *rep_n = m;
    if (m) return m;
    m = utf8_len(s, n);
    if (!m) {
        *rep = "\xEF\xBF\xBD", *rep_n = 3;
        return 1;
    }
    *rep = (const char *)s, *rep_n = m;
    return m;
}

static void put(TokBytes *o, const char *s, size_t n) { tok_bytes_append(o, (const uint8_t *)s, n); }

static void put_byte(TokBytes *o, uint8_t c) {
    if (o->n < o->cap) o->v[o->n++] = c;
    else tok_bytes_append(o, &c, 1);
}

void tok_spm_norm_index(TokSpm *sp) {
    const uint32_t *u = sp->cm_units;
    size_t N = sp->n_units;
    memset(sp->pair, 0, sizeof sp->pair);
    for (size_t b = 0; b < 128; b++) {
        sp->plain[b] = 0;
        if (sp->has_user && sp->root[b] >= 0) continue;  // a USER piece may start with b
        size_t pos = u ? unit_offset(u[0]) ^ b : 0;
        if (!u || pos >= N || unit_label(u[pos]) != b) {  // no charsmap key starts with b
            sp->plain[b] = 1;
            continue;
        }
        if (unit_has_leaf(u[pos])) continue;  // b itself is a key
        size_t next = pos ^ unit_offset(u[pos]);
        for (size_t c = 0; c < 128; c++) {  // the keys' second bytes
            size_t p2 = next ^ c;
            if (next < N && p2 < N && unit_label(u[p2]) == c) sp->pair[b][c / 8] |= (uint8_t)(1u << (c % 8));
        }
        sp->plain[b] = 2;
    }
}

// Whether the normalizer keeps s[0] (ASCII) as it is: no rule matches more than that byte.
static int plain_at(const TokSpm *sp, const uint8_t *s, size_t n) {
    uint8_t b = s[0], k = b < 0x80 ? sp->plain[b] : 0;
    if (k != 2) return k;
    return n == 1 || (s[1] < 0x80 && !(sp->pair[b][s[1] / 8] & (1u << (s[1] % 8))));
}

// Hugging Face: ' ' -> "▁", "▁" put first as hf_prepend says.
static void hf_normalize(const TokSpm *sp, const uint8_t *s, size_t n, TokBytes *out) {
    int starts_ws = n && (s[0] == ' ' || (n >= WS_LEN && !memcmp(s, WS, WS_LEN)));
    if (n && (sp->hf_prepend == 2 || (sp->hf_prepend == 1 && !starts_ws))) put(out, WS, WS_LEN);
    size_t run = 0;  // bytes copied as they are
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ') continue;
        put(out, (const char *)s + run, i - run);
        put(out, WS, WS_LEN);
        run = i + 1;
    }
    put(out, (const char *)s + run, n - run);
}

void tok_spm_normalize(const TokSpm *sp, const uint8_t *s, size_t n, TokBytes *out) {
    if (sp->hf) {
        hf_normalize(sp, s, n, out);
        return;
    }
    const char *rep;
    size_t rn, m;
    if (sp->remove_extra_ws)  // leading spaces
        while (n && (m = norm_prefix(sp, s, n, &rep, &rn)) && rn == 1 && rep[0] == ' ') s += m, n -= m;
    if (!n) return;
    size_t start = out->n;
    const char *ws = sp->escape_ws ? WS : " ";
    size_t ws_n = sp->escape_ws ? WS_LEN : 1;
    if (sp->add_dummy_prefix) put(out, ws, ws_n);
    int prev_space = sp->remove_extra_ws;
    while (n) {
        if (plain_at(sp, s, n)) {  // kept as it is (the rules below, shortened)
            if (s[0] != ' ') put_byte(out, s[0]), prev_space = 0;
            else if (!prev_space) put(out, ws, ws_n), prev_space = 1;
            s++, n--;
            if (!sp->remove_extra_ws) prev_space = 0;
            continue;
        }
        m = norm_prefix(sp, s, n, &rep, &rn);
        while (prev_space && rn && rep[0] == ' ') rep++, rn--;  // spaces after a space
        if (rn) {
            for (size_t i = 0; i < rn; i++) {
                if (rep[i] == ' ') put(out, ws, ws_n);
                else put_byte(out, (uint8_t)rep[i]);
            }
            prev_space = rep[rn - 1] == ' ';
        }
        s += m, n -= m;
        if (!sp->remove_extra_ws) prev_space = 0;
    }
    if (sp->remove_extra_ws)  // trailing spaces
        while (out->n >= start + ws_n && !memcmp(out->v + out->n - ws_n, ws, ws_n)) out->n -= ws_n;
}
