// data/map.c: open-addressing hash maps with linear probing (see map.h).
#include "map.h"
#include "core/check.h"  // defines: core_calloc, core_fatal

#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

uint64_t data_hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return mix64(h ^ n);
}

static void *grow(void *p, size_t n, size_t size) {
    void *q = realloc(p, (n ? n : 1) * size);
    if (!q) core_fatal("out of memory growing a table to %zu x %zu bytes", n, size);
    return q;
}

// ---- DataU64Map ----------------------------------------------------------------------------

void data_u64map_init(DataU64Map *m, size_t cap_hint) {
    size_t cap = 16;
    while (cap < 2 * cap_hint) cap *= 2;
    m->keys = core_calloc(cap, sizeof(uint64_t));
    m->vals = core_calloc(cap, sizeof(int64_t));
    m->used = core_calloc(cap, 1);
    m->cap = cap;
    m->n = 0;
}

void data_u64map_free(DataU64Map *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static size_t u64_slot(const DataU64Map *m, uint64_t key) {
    size_t mask = m->cap - 1, i = (size_t)mix64(key) & mask;
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

int64_t *data_u64map_get(const DataU64Map *m, uint64_t key) {
    size_t i = u64_slot(m, key);
    return m->used[i] ? &m->vals[i] : NULL;
}

static void u64_rehash(DataU64Map *m) {
    DataU64Map big;
    data_u64map_init(&big, m->cap);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        size_t j = u64_slot(&big, m->keys[i]);
        big.used[j] = 1;
        big.keys[j] = m->keys[i];
        big.vals[j] = m->vals[i];
    }
    big.n = m->n;
    data_u64map_free(m);
    *m = big;
}

int64_t *data_u64map_put(DataU64Map *m, uint64_t key, int64_t init, int *inserted) {
    size_t i = u64_slot(m, key);
    if (inserted) *inserted = !m->used[i];
    if (m->used[i]) return &m->vals[i];
    if (2 * (m->n + 1) > m->cap) {
        u64_rehash(m);
        i = u64_slot(m, key);
    }
    m->used[i] = 1;
    m->keys[i] = key;
    m->vals[i] = init;
    m->n++;
    return &m->vals[i];
}

// ---- DataStrMap ----------------------------------------------------------------------------

void data_strmap_init(DataStrMap *m) {
    memset(m, 0, sizeof *m);
    m->n_slots = 64;
    m->slots = core_calloc(m->n_slots, sizeof(int64_t));
    memset(m->slots, 0xff, m->n_slots * sizeof(int64_t));
}

void data_strmap_free(DataStrMap *m) {
    free(m->bytes);
    free(m->key_off);
    free(m->key_len);
    free(m->key_hash);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

void data_strmap_clear(DataStrMap *m) {
    m->n = 0;
    m->n_bytes = 0;
    memset(m->slots, 0xff, m->n_slots * sizeof(int64_t));
}

static size_t str_slot(const DataStrMap *m, const uint8_t *s, size_t n, uint64_t h) {
    size_t mask = m->n_slots - 1, i = (size_t)h & mask;
    for (;; i = (i + 1) & mask) {
        int64_t id = m->slots[i];
        if (id < 0) return i;
        if (m->key_hash[id] == h && m->key_len[id] == n &&
            memcmp(m->bytes + m->key_off[id], s, n) == 0)
            return i;
    }
}

int64_t data_strmap_find(const DataStrMap *m, const uint8_t *s, size_t n) {
    return m->slots[str_slot(m, s, n, data_hash_bytes(s, n))];
}

static void str_rehash(DataStrMap *m) {
    free(m->slots);
    m->n_slots *= 2;
    m->slots = core_calloc(m->n_slots, sizeof(int64_t));
    memset(m->slots, 0xff, m->n_slots * sizeof(int64_t));
    size_t mask = m->n_slots - 1;
    for (int64_t id = 0; id < m->n; id++) {
        size_t i = (size_t)m->key_hash[id] & mask;
        while (m->slots[i] >= 0) i = (i + 1) & mask;
        m->slots[i] = id;
    }
}

int64_t data_strmap_intern(DataStrMap *m, const uint8_t *s, size_t n, int *inserted) {
    uint64_t h = data_hash_bytes(s, n);
    size_t i = str_slot(m, s, n, h);
    if (inserted) *inserted = m->slots[i] < 0;
    if (m->slots[i] >= 0) return m->slots[i];
    if (m->n == m->cap_ids) {
        m->cap_ids = m->cap_ids ? 2 * m->cap_ids : 1024;
        m->key_off = grow(m->key_off, (size_t)m->cap_ids, sizeof(uint64_t));
        m->key_len = grow(m->key_len, (size_t)m->cap_ids, sizeof(uint32_t));
        m->key_hash = grow(m->key_hash, (size_t)m->cap_ids, sizeof(uint64_t));
    }
    if (m->n_bytes + n > m->bytes_cap) {
        while (m->n_bytes + n > m->bytes_cap) m->bytes_cap = m->bytes_cap ? 2 * m->bytes_cap : 65536;
        m->bytes = grow(m->bytes, m->bytes_cap, 1);
    }
    int64_t id = m->n++;
    if (n) memcpy(m->bytes + m->n_bytes, s, n);
    m->key_off[id] = m->n_bytes;
    m->key_len[id] = (uint32_t)n;
    m->key_hash[id] = h;
    m->n_bytes += n;
    m->slots[i] = id;
    if (2 * (size_t)m->n > m->n_slots) str_rehash(m);
    return id;
}

const uint8_t *data_strmap_key(const DataStrMap *m, int64_t id, size_t *len) {
    *len = m->key_len[id];
    return m->bytes + m->key_off[id];
}
