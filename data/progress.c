// data/progress.c: the progress line (see progress.h).
#include "progress.h"
#include "core/timer.h"  // defines: core_now

#include <stdio.h>

void data_progress_init(DataProgress *p, const char *what, uint64_t total_bytes, int on) {
    p->on = on;
    p->what = what;
    p->total_bytes = total_bytes;
    p->t0 = p->last = core_now();
}

void data_progress_update(DataProgress *p, uint64_t bytes, int64_t docs, int64_t tokens) {
    if (!p->on) return;
    double now = core_now(), dt = now - p->t0;
    if (now - p->last < 0.25) return;
    p->last = now;
    char eta[32] = "";
    if (p->total_bytes && bytes > 0 && bytes <= p->total_bytes) {
        double left = dt * (double)(p->total_bytes - bytes) / (double)bytes;
        snprintf(eta, sizeof eta, "  ETA %d:%02d", (int)left / 60, (int)left % 60);
    }
    char tok[64] = "";
    if (tokens >= 0)
        snprintf(tok, sizeof tok, "  %.2fM tokens  %.2fM tok/s", tokens / 1e6, dt > 0 ? tokens / dt / 1e6 : 0.0);
    fprintf(stderr, "\rmegac %s: %.1f / %.1f MB  %lld docs%s%s   ", p->what, bytes / 1e6,
            p->total_bytes / 1e6, (long long)docs, tok, eta);
    fflush(stderr);
}

void data_progress_done(DataProgress *p) {
    if (p->on) fprintf(stderr, "\r%100s\r", "");
}
