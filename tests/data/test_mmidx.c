// tests/data/test_mmidx.c: Megatron .bin/.idx prefixes read directly (data/mmidx.h through
// h5ds_open_serial / h5ds_read): documents and tokens as written (empty documents dropped,
// multi-sequence documents joined, no end-of-document id added), the sampler over them, and
// every inconsistency of the index refused with one message naming the file.
#include "data/h5ds.h"
#include "data/sampler.h"
#include "tests/testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/megac-test-mmidx-XXXXXX";

// Tokens: 11 int32 ids in 5 sequences: docs [5 6 7], [8 9 99], (empty), [1 2][3], [99 4].
static const int32_t TOK[] = {5, 6, 7, 8, 9, 99, 1, 2, 3, 99, 4};
static const int32_t SIZES[] = {3, 3, 2, 1, 2};
static const int64_t DOC_IDX[] = {0, 1, 2, 2, 4, 5};

typedef struct {
    uint8_t code;                       // token type (4: int32)
    uint64_t version;
    int64_t ptr_shift;                  // added to pointer 2
    int64_t doc2;                       // doc_idx[2]
    long bin_bytes;                     // bytes of the .bin written
    int magic_bad;
} Damage;

static const char *write_prefix(const char *name, Damage d) {
    static char prefix[512];
    char p[600];
    snprintf(prefix, sizeof prefix, "%s/%s", dir, name);
    snprintf(p, sizeof p, "%s.bin", prefix);
    FILE *f = fopen(p, "wb");
    fwrite(TOK, 1, (size_t)d.bin_bytes, f);
    fclose(f);
    snprintf(p, sizeof p, "%s.idx", prefix);
    f = fopen(p, "wb");
    uint64_t ns = 5, nd = 6;
    fwrite(d.magic_bad ? "MMIDIDY\0\0" : "MMIDIDX\0\0", 1, 9, f);
    fwrite(&d.version, 8, 1, f);
    fwrite(&d.code, 1, 1, f);
    fwrite(&ns, 8, 1, f);
    fwrite(&nd, 8, 1, f);
    fwrite(SIZES, 4, 5, f);
    int64_t ptr = 0;
    for (int i = 0; i < 5; i++) {
        int64_t q = ptr + (i == 2 ? d.ptr_shift : 0);
        fwrite(&q, 8, 1, f);
        ptr += 4 * SIZES[i];
    }
    int64_t docs[6];
    memcpy(docs, DOC_IDX, sizeof docs);
    docs[2] = d.doc2;
    fwrite(docs, 8, 6, f);
    fclose(f);
    return prefix;
}

static Damage good(void) { return (Damage){.code = 4, .version = 1, .doc2 = 2, .bin_bytes = sizeof TOK}; }

static void expect_refused(const char *name, Damage d, const char *want) {
    char err[1024] = "";
    H5dsVocab v = {100, 99};
    H5Dataset *ds = h5ds_open_serial(write_prefix(name, d), &v, err, sizeof err);
    EXPECT(!ds && strstr(err, name) && strstr(err, want), "%s: got '%s', want '%s'", name, err, want);
    if (ds) h5ds_close(ds);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char err[1024] = "";
    H5dsVocab v = {100, 99};
    const char *prefix = write_prefix("good", good());
    H5Dataset *ds = h5ds_open_serial(prefix, &v, err, sizeof err);
    EXPECT(ds != NULL, "%s", err);
    if (!ds) return test_result("test_mmidx");
    const uint64_t want_off[] = {0, 3, 6, 9, 11};
    EXPECT(ds->megatron && ds->n_docs == 4 && ds->n_tokens == 11 && ds->token_bytes == 4 &&
           ds->vocab_size == 100 && ds->eod_id == 99 && !strcmp(ds->tokenizer, "external"),
           "%lld docs, %lld tokens, %d-byte tokens", (long long)ds->n_docs, (long long)ds->n_tokens, ds->token_bytes);
    EXPECT(ds->n_docs == 4 && !memcmp(ds->doc_offsets, want_off, sizeof want_off), "document offsets");
    uint32_t got[11];
    h5ds_read(ds, 0, 11, got);
    for (int i = 0; i < 11; i++) EXPECT_EQ_INT((int)got[i], TOK[i]);
    h5ds_read(ds, 6, 3, got);  // the document of two sequences, read alone
    EXPECT(got[0] == 1 && got[1] == 2 && got[2] == 3, "document 2: %u %u %u", got[0], got[1], got[2]);

    // The sequences, for Megatron's order (GPTDataset samples sequences, not documents).
    const uint64_t want_seq[] = {0, 3, 6, 8, 9, 11};
    EXPECT(ds->n_seqs == 5 && !memcmp(ds->seq_offsets, want_seq, sizeof want_seq), "sequence offsets");

    // The sampler takes Megatron's order: T = 2, split 1,0,0, 5 samples: one epoch of
    // (11 - 1) / 2 = 5 samples over the 5 sequences, every sample in range.
    DataSplit *sp = data_split_new(ds, "1,0,0", DATA_TRAIN, 2, 7, 5);
    EXPECT(sp->order_kind == DATA_ORDER_MEGATRON && sp->tokens_per_epoch == 11 && sp->n_docs == 5 &&
           sp->n_epochs == 1 && sp->n_samples_built == 5 && !sp->separate_final_epoch,
           "L %lld, %lld units, %lld epochs, %lld samples", (long long)sp->tokens_per_epoch,
           (long long)sp->n_docs, (long long)sp->n_epochs, (long long)sp->n_samples_built);
    uint32_t sample[3];
    for (int64_t s = 0; s < sp->n_samples_built; s++) data_read_sample(sp, s, sample);
    data_split_free(sp);
    h5ds_close(ds);

    // No vocabulary given: the format holds none.
    EXPECT(!h5ds_open_serial(prefix, NULL, err, sizeof err) && strstr(err, "--vocab-size"), "%s", err);
    // A missing path names both formats.
    snprintf(err, sizeof err, "%s/absent", dir);
    char path[600];
    snprintf(path, sizeof path, "%s", err);
    EXPECT(!h5ds_open_serial(path, &v, err, sizeof err) && strstr(err, "absent.idx"), "%s", err);

    Damage d = good();
    d.magic_bad = 1;
    expect_refused("magic", d, "magic MMIDIDX missing");
    d = good(), d.version = 2;
    expect_refused("version", d, "version 2");
    d = good(), d.code = 6;  // float64
    expect_refused("dtype", d, "token type code 6 is not an integer type");
    d = good(), d.ptr_shift = 4;
    expect_refused("pointer", d, "sequence 2 has 2 tokens at byte 28");
    d = good(), d.bin_bytes = sizeof TOK - 4;
    expect_refused("short", d, "describes 44");
    d = good(), d.doc2 = 0;
    expect_refused("docidx", d, "doc_idx[2] = 0 is not in [1, 5]");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_result("test_mmidx");
}
