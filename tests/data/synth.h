// tests/data/synth.h: synthetic token datasets for the data tests (header only).
// Token i of the file is i itself (mod vocab), so every sample's content says exactly which
// file positions it came from.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "data/h5ds.h"

// Deterministic document length in [1, max_len] for document d.
static inline int synth_doc_len(uint64_t seed, int64_t d, int max_len) {
    uint64_t x = (seed + 0x9E3779B97F4A7C15ull * (uint64_t)(d + 1));
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return 1 + (int)(x % (uint64_t)max_len);
}

// Writes n_docs documents of synth_doc_len tokens, token at position i = i % vocab.
// Returns the number of tokens.
static inline int64_t synth_write(const char *path, int64_t n_docs, int max_len, int64_t vocab, uint64_t seed) {
    char err[512];
    H5dsWriter *w = h5ds_writer_create(path, vocab, vocab - 1, "byte", err, sizeof err);
    if (!w) {
        fprintf(stderr, "synth_write: %s\n", err);
        exit(1);
    }
    int64_t pos = 0;
    for (int64_t d = 0; d < n_docs; d++) {
        int len = synth_doc_len(seed, d, max_len);
        for (int i = 0; i < len; i++, pos++) {
            uint32_t id = (uint32_t)(pos % vocab);
            if (h5ds_writer_append(w, &id, 1, err, sizeof err)) {
                fprintf(stderr, "synth_write: %s\n", err);
                exit(1);
            }
        }
        h5ds_writer_end_doc(w);
    }
    if (h5ds_writer_close(w, err, sizeof err) != 0) {
        fprintf(stderr, "synth_write: %s\n", err);
        exit(1);
    }
    return pos;
}
