// tests/data/test_fuzz.c: damaged HDF5 datasets and JSON Lines files (bit flips, overwritten
// spans, truncation, inserted bytes; deterministic seeds) must end with exit code 0 or 2,
// never a signal or a hang, within 1 GiB of address space. Each case runs in a forked child that does what megac does with
// such a file: open + validate + read every sample (HDF5), or preprocess (JSON Lines).
// A failing case is kept as /tmp/megac-fuzz-fail-<case>.<ext> to reproduce it.
// MEGAC_FUZZ_SCALE=k runs k times as many cases (for long runs by hand).
#include "core/check.h"  // defines: core_usage_error
#include "data/preprocess.h"
#include "data/sampler.h"
#include "tests/data/synth.h"
#include "tests/testing.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>  // defines: setrlimit
#include <sys/wait.h>
#include <unistd.h>

#define N_HDF5 250
#define N_JSONL 150

static uint64_t rng_next(uint64_t *s) {  // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static TokBytes slurp(const char *path) {
    TokBytes b = {0};
    FILE *f = fopen(path, "rb");
    uint8_t buf[65536];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) tok_bytes_append(&b, buf, n);
    if (f) fclose(f);
    return b;
}

// One damaged copy of src, chosen by case number c; `head` bounds the metadata-heavy prefix.
static void mutate(const TokBytes *src, uint64_t c, size_t head, TokBytes *out) {
    uint64_t r = 0x5eed0000 + c;
    out->n = 0;
    tok_bytes_append(out, src->v, src->n);
    size_t n = out->n, span = (c % 5 == 4 && head < n) ? head : n;
    switch (c % 5) {
    case 0:  // flip a few bits anywhere
    case 4:  // ... or in the first `head` bytes (HDF5: superblock and object headers)
        for (int k = 1 + (int)(rng_next(&r) % 4); k > 0; k--) out->v[rng_next(&r) % span] ^= (uint8_t)(1u << (rng_next(&r) % 8));
        break;
    case 1: {  // overwrite a span with random bytes
        size_t at = rng_next(&r) % n, len = 1 + rng_next(&r) % 32;
        for (size_t i = at; i < at + len && i < n; i++) out->v[i] = (uint8_t)rng_next(&r);
        break;
    }
    case 2:  // truncate
        out->n = rng_next(&r) % n;
        break;
    case 3: {  // insert random bytes (shifts everything after)
        size_t at = rng_next(&r) % n, len = 1 + rng_next(&r) % 8;
        TokBytes t = {0};
        tok_bytes_append(&t, out->v, at);
        for (size_t i = 0; i < len; i++) {
            uint8_t b = (uint8_t)rng_next(&r);
            tok_bytes_append(&t, &b, 1);
        }
        tok_bytes_append(&t, out->v + at, n - at);
        free(out->v);
        *out = t;
        break;
    }
    }
}

// What megac does with a dataset: open, validate, read every sample of one epoch.
static void child_hdf5(const char *path) {
    H5Dataset *ds = h5ds_open(path, NULL, MPI_COMM_NULL);
    DataSplit *sp = data_split_new(ds, "1", DATA_TRAIN, 8, 1, 1);
    uint32_t tok[9];
    for (int64_t s = 0; s < sp->n_samples_built; s++) data_read_sample(sp, s, tok);
    data_split_free(sp);
    h5ds_close(ds);
}

static void child_jsonl(const char *path, const char *out) {
    Tokenizer *tok = tok_byte_new();
    const char *in[1] = {path};
    DataPreprocessOptions o = {.inputs = in, .n_inputs = 1, .output = out, .tok = tok, .docs = {.json_key = "text"}};
    DataPreprocessStats st;
    char err[1024];
    if (data_preprocess(&o, &st, err, sizeof err)) core_usage_error("%s", err);
    tok_free(tok);
}

// Runs one case in a child; returns its exit code, or -signal (crash; SIGALRM: a hang).
static int run_case(int is_hdf5, const char *path, const char *out) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
#ifndef __SANITIZE_ADDRESS__  // ASan reserves terabytes of shadow address space
        struct rlimit as = {(rlim_t)1 << 30, (rlim_t)1 << 30};  // 1 GiB: a huge allocation fails
        setrlimit(RLIMIT_AS, &as);
#endif
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        if (is_hdf5) child_hdf5(path);
        else child_jsonl(path, out);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

static void fuzz(const char *seed_path, int is_hdf5, int n_cases, const char *dir, int *outcome) {
    TokBytes src = slurp(seed_path), bad = {0};
    char path[512], out[512];
    snprintf(path, sizeof path, "%s/case.%s", dir, is_hdf5 ? "h5" : "jsonl");
    snprintf(out, sizeof out, "%s/out.h5", dir);
    for (int c = 0; c < n_cases; c++) {
        mutate(&src, (uint64_t)c + (is_hdf5 ? 0 : 1000000), is_hdf5 ? 2048 : 64, &bad);
        FILE *f = fopen(path, "wb");
        fwrite(bad.v, 1, bad.n, f);
        fclose(f);
        int rc = run_case(is_hdf5, path, out);
        if (rc == 0 || rc == 2) {
            outcome[rc / 2]++;
            continue;
        }
        char keep[600];
        snprintf(keep, sizeof keep, "/tmp/megac-fuzz-fail-%d.%s", c, is_hdf5 ? "h5" : "jsonl");
        if (rename(path, keep)) keep[0] = '\0';
        EXPECT(0, "%s case %d: %s %d (kept as %s)", is_hdf5 ? "HDF5" : "JSONL", c,
               rc < 0 ? "killed by signal" : "exit code", rc < 0 ? -rc : rc, keep);
    }
    free(src.v);
    free(bad.v);
}

int main(void) {
    char dir[] = "/tmp/megac-test-fuzz-XXXXXX", h5[600], jl[600], cmd[700];
    if (!mkdtemp(dir)) return 1;
    snprintf(h5, sizeof h5, "%s/seed.h5", dir);
    snprintf(jl, sizeof jl, "%s/seed.jsonl", dir);
    synth_write(h5, 40, 12, 300, 3);
    FILE *f = fopen(jl, "w");
    for (int i = 0; i < 30; i++)
        fprintf(f, "{\"text\": \"doc %d: caf\\u00e9 \\\"quoted\\\"\\n line\", \"n\": [%d, {\"x\": null}]}\n", i, i);
    fclose(f);
    int ok_h5[2] = {0}, ok_jl[2] = {0};  // cases ending with exit code 0, 2
    int scale = getenv("MEGAC_FUZZ_SCALE") ? atoi(getenv("MEGAC_FUZZ_SCALE")) : 1;
    scale = scale < 1 ? 1 : scale;
    fuzz(h5, 1, N_HDF5 * scale, dir, ok_h5);
    fuzz(jl, 0, N_JSONL * scale, dir, ok_jl);
    printf("fuzz: HDF5 %d cases: %d read fine, %d refused (exit 2); JSON Lines %d cases: %d fine, %d "
           "refused\n", N_HDF5 * scale, ok_h5[0], ok_h5[1], N_JSONL * scale, ok_jl[0], ok_jl[1]);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_result("test_fuzz");
}
