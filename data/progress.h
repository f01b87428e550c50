// data/progress.h: one self-overwriting progress line on stderr for long data jobs
// (bytes, documents, tokens/s, ETA). Silent unless enabled (callers pass isatty(stderr)).
#pragma once
#include <stdint.h>

typedef struct {
    int on;
    const char *what;       // "preprocess", "tokenizer"
    uint64_t total_bytes;   // 0: unknown (no ETA)
    double t0, last;        // start, last print (core_now seconds)
} DataProgress;

// Starts the clock. on = 0 makes every call a no-op. Never fails.
void data_progress_init(DataProgress *p, const char *what, uint64_t total_bytes, int on);
// Prints the line if at least 0.25 s passed since the last one. tokens < 0: not shown.
void data_progress_update(DataProgress *p, uint64_t bytes, int64_t docs, int64_t tokens);
// Erases the line. Never fails.
void data_progress_done(DataProgress *p);
