// data/map.h: two small open-addressing hash maps for the tokenizer.
//
//   DataU64Map: uint64 key -> int64 value (a BPE pair (a << 32 | b) -> merge id or pair slot).
//   DataStrMap: byte string -> dense id 0, 1, 2, ... (unique pre-tokenised words, encode cache);
//               the keys are copied into one arena, callers keep per-id data in their own arrays.
// Both grow by doubling at 50% load; neither removes single keys (clear() empties the whole map).
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *keys;  // (cap)
    int64_t *vals;   // (cap)
    uint8_t *used;   // (cap) 1 where a slot holds a key
    size_t cap, n;   // cap is a power of two
} DataU64Map;

// Empty map with room for about cap_hint keys. Never fails (aborts on out of memory).
void data_u64map_init(DataU64Map *m, size_t cap_hint);
// Frees the tables (m itself is the caller's).
void data_u64map_free(DataU64Map *m);
// Pointer to the value of key, or NULL when absent. Pure.
int64_t *data_u64map_get(const DataU64Map *m, uint64_t key);
// Pointer to the value of key, inserting it with value init when absent (*inserted = 1 then).
// The pointer is valid until the next insertion.
int64_t *data_u64map_put(DataU64Map *m, uint64_t key, int64_t init, int *inserted);

typedef struct {
    uint8_t *bytes;        // (bytes_cap) keys, back to back
    size_t n_bytes, bytes_cap;
    uint64_t *key_off;     // (cap_ids) where key i starts in bytes
    uint32_t *key_len;     // (cap_ids)
    uint64_t *key_hash;    // (cap_ids)
    int64_t n, cap_ids;    // number of keys
    int64_t *slots;        // (n_slots) key id or -1
    size_t n_slots;        // a power of two
} DataStrMap;

// Empty map. Never fails.
void data_strmap_init(DataStrMap *m);
// Frees the tables and keys (m itself is the caller's).
void data_strmap_free(DataStrMap *m);
// Forgets every key (keeps the memory). Never fails.
void data_strmap_clear(DataStrMap *m);
// Id of key s[0..n), or -1 when absent. Pure.
int64_t data_strmap_find(const DataStrMap *m, const uint8_t *s, size_t n);
// Id of key s[0..n), adding it (id = previous count) when absent (*inserted = 1 then).
int64_t data_strmap_intern(DataStrMap *m, const uint8_t *s, size_t n, int *inserted);
// Bytes of key id (valid until the next insertion); *len gets its length. Pure.
const uint8_t *data_strmap_key(const DataStrMap *m, int64_t id, size_t *len);
// 64-bit hash of a byte string (FNV-1a with a final mix). Pure.
uint64_t data_hash_bytes(const uint8_t *s, size_t n);
