// train/batches.c: micro-batches from token datasets (HDF5 or Megatron prefixes, data/h5ds.h;
// data/sampler.h) or from --mock-data.
#include "batches.h"
#include "core/check.h"
#include "core/philox.h"
#include "data/blend.h"
#include "data/sampler.h"
#include "model/gpt_cp.h"  // defines: gpt_cp_select
#include "train/train_args.h"  // defines: TrainArgs, train_rampup_after

#include <stdlib.h>
#include <string.h>

struct BatchSource {
    uint64_t seed;
    int64_t megatron_vocab;   // --vocab-size (0: not given)
    int64_t tok_vocab, tok_eod;  // --tokenizer-type's (0: none)
    const char *tok_name;
    int vocab, n_samples;
    uint32_t *sample;         // (T + 1) scratch, allocated once (mock data)
    int n_ds;                 // open files (0 for mock data)
    H5Dataset **ds;           // (n_ds) the train blend's files, then the validation blend's
    DataBlend *blends[3];     // train, valid, test (NULL when unused)
    DataBlendSpec train_spec; // the train blend, to rebuild it longer (batches_reserve_train)
    const char *train_split;
};

// Parses one blend flag (checked at start-up already).
static DataBlendSpec parse_spec(const char *flag, const CoreStrList *l) {
    DataBlendSpec spec;
    char err[512];
    if (data_blend_parse(flag, l->items, l->n, &spec, err, sizeof err)) core_usage_error("%s", err);
    return spec;
}

// Megatron data: a notice on rank 0 when documents do not end with the end-of-document id
// (Megatron's preprocess_data.py writes none unless --append-eod). Checks the last token of up
// to 4096 documents spread over the file (reading every one would touch the whole file).
static void eod_notice(const H5Dataset *ds) {
    if (!ds->megatron || core_world_rank() != 0) return;
    int64_t step = ds->n_docs > 4096 ? ds->n_docs / 4096 : 1, checked = 0, lacking = 0;
    for (int64_t d = 0; d < ds->n_docs; d += step, checked++) {
        uint32_t last;
        h5ds_read((H5Dataset *)ds, (int64_t)ds->doc_offsets[d + 1] - 1, 1, &last);
        lacking += last != (uint32_t)ds->eod_id;
    }
    if (lacking)
        printf("megac train: notice: %s: %lld of %lld documents checked do not end with the end-of-document "
               "id %lld: nothing is added, samples run from one document into the next (as in Megatron)\n",
               ds->path, (long long)lacking, (long long)checked, (long long)ds->eod_id);
}

// Opens path: HDF5, or a Megatron prefix read with --vocab-size (ids < N + 1, EOD N).
static H5Dataset *open_file(const BatchSource *s, const char *path) {
    H5dsVocab v = {s->megatron_vocab + 1, s->megatron_vocab}, tv = {s->tok_vocab, s->tok_eod};
    H5Dataset *ds = h5ds_open(path, s->tok_vocab ? &tv : s->megatron_vocab ? &v : NULL, MPI_COMM_WORLD);
    if (!ds->megatron && s->tok_vocab && (ds->vocab_size != tv.vocab_size || ds->eod_id != tv.eod_id))
        core_usage_error("%s has %lld ids, end of document %lld, but the tokenizer %s has %lld, %lld: not the "
                         "data's tokenizer", path, (long long)ds->vocab_size, (long long)ds->eod_id, s->tok_name,
                         (long long)tv.vocab_size, (long long)tv.eod_id);
    if (!ds->megatron && s->megatron_vocab && ds->vocab_size != v.vocab_size)
        core_usage_error("--vocab-size %lld means %lld ids (the end of document included), but %s has %lld",
                         (long long)s->megatron_vocab, (long long)v.vocab_size, path, (long long)ds->vocab_size);
    eod_notice(ds);
    return ds;
}

// Opens spec's files (appended to s->ds) and builds its blend for one split.
static DataBlend *open_blend(BatchSource *s, const DataBlendSpec *spec, const char *split,
                             DataSplitKind kind, int seq_length, int64_t samples) {
    H5Dataset **ds = s->ds + s->n_ds;
    for (int k = 0; k < spec->n; k++) s->ds[s->n_ds++] = open_file(s, spec->paths[k]);
    if (s->vocab && ds[0]->vocab_size != s->vocab)
        core_usage_error("the training and the validation or test data disagree on the vocabulary: %s has %d ids, "
                         "%s has %lld", s->ds[0]->path, s->vocab, ds[0]->path, (long long)ds[0]->vocab_size);
    s->vocab = (int)ds[0]->vocab_size;
    return data_blend_new(ds, spec, split, kind, seq_length, s->seed, samples);
}

BatchSource *batches_hdf5_create(const BatchDataPaths *p, uint64_t seed, int seq_length,
                                 int64_t train_samples, int64_t eval_samples) {
    BatchSource *s = core_calloc(1, sizeof *s);
    s->seed = seed;
    s->megatron_vocab = p->megatron_vocab;
    s->tok_vocab = p->tok_vocab, s->tok_eod = p->tok_eod, s->tok_name = p->tok_name;
    s->ds = core_calloc(3 * DATA_BLEND_MAX, sizeof *s->ds);
    if (p->data.n) {  // one blend, every file cut by --split
        DataBlendSpec spec = parse_spec("--data-path", &p->data);
        s->train_spec = spec, s->train_split = p->split;
        s->blends[0] = open_blend(s, &spec, p->split, DATA_TRAIN, seq_length, train_samples);
        double w[3] = {0, 0, 0};
        char err[512];
        data_parse_split(p->split, w, err, sizeof err);  // checked by data_split_new already
        if (eval_samples > 0 && w[1] > 0)  // Megatron: a validation weight of 0, no evaluation
            s->blends[1] = data_blend_new(s->ds, &spec, p->split, DATA_VALID, seq_length, seed, eval_samples);
        int test = eval_samples > 0 && w[2] > 0;  // a small test share (969,30,1) may hold nothing
        for (int k = 0; k < spec.n && test; k++)
            test = data_split_usable(s->ds[k], p->split, DATA_TEST, seq_length);
        if (test) s->blends[2] = data_blend_new(s->ds, &spec, p->split, DATA_TEST, seq_length, seed, eval_samples);
        return s;
    }
    DataBlendSpec train = parse_spec("--train-data-path", &p->train);  // whole files per split
    s->train_spec = train, s->train_split = "1,0,0";
    s->blends[0] = open_blend(s, &train, "1,0,0", DATA_TRAIN, seq_length, train_samples);
    if (p->valid.n && eval_samples > 0) {
        DataBlendSpec valid = parse_spec("--valid-data-path", &p->valid);
        s->blends[1] = open_blend(s, &valid, "0,1,0", DATA_VALID, seq_length, eval_samples);
    }
    if (p->test.n && eval_samples > 0) {
        DataBlendSpec test = parse_spec("--test-data-path", &p->test);
        s->blends[2] = open_blend(s, &test, "0,0,1", DATA_TEST, seq_length, eval_samples);
    }
    return s;
}

BatchSource *batches_from_args(const TrainArgs *a) {
    BatchDataPaths paths = {a->data_path, a->train_data_path, a->valid_data_path, a->test_data_path,
                            a->split, a->data_vocab, a->tok_vocab, a->tok_eod,
                            a->tok_type ? (a->tok_model ? a->tok_model : a->vocab_file) : NULL};
    return batches_hdf5_create(&paths, a->seed, a->model.seq_length,
                               train_rampup_after(&a->rampup, 0, a->train_iters),
                               a->eval_iters * (int64_t)a->global_batch);
}

int batches_read_sample(BatchSource *s, SplitKind k, int64_t pos, uint32_t *tokens) {
    DataBlend *b = s->n_ds ? s->blends[k] : NULL;
    if (!b || pos < 0 || pos >= b->num_samples) return -1;
    data_blend_sample(b, pos, tokens);
    return 0;
}

int64_t batches_available(const BatchSource *s, SplitKind k) {
    return s->n_ds && s->blends[k] ? s->blends[k]->num_samples : 0;
}

void batches_print_summary(const BatchSource *s, FILE *f) {
    static const char *names[3] = {"train", "valid", "test"};
    for (int i = 0; i < 3; i++) {
        const DataBlend *b = s->blends[i];
        for (int k = 0; b && k < b->n; k++) {
            const DataSplit *sp = b->splits[k];
            double epochs = sp->tokens_per_epoch > 0 ? (double)sp->num_samples * sp->seq_length /
                                                           (double)sp->tokens_per_epoch : 0.0;
            int seqs = sp->order_kind == DATA_ORDER_MEGATRON;  // Megatron's order samples sequences
            fprintf(f, "  %-5s weight %.4f  %s: %lld of %lld %s, %lld samples (%.3g epochs)\n",
                    names[i], b->weights[k], sp->ds->path, (long long)sp->n_docs,
                    (long long)(seqs ? sp->ds->n_seqs : sp->ds->n_docs), seqs ? "sequences" : "documents",
                    (long long)sp->num_samples, epochs);
        }
    }
}

void batches_reserve_train(BatchSource *s, int64_t samples) {
    DataBlend *b = s->blends[0];
    if (!b || samples <= b->num_samples) return;
    DataBlendSpec spec = s->train_spec;
    H5Dataset **ds = s->ds;  // the train blend's files come first
    const char *split = s->train_split;
    int T = b->seq_length;
    data_blend_free(b);
    s->blends[0] = data_blend_new(ds, &spec, split, DATA_TRAIN, T, s->seed, samples);
}

int batches_has_split(const BatchSource *s, SplitKind k) {
    return !s->n_ds ? k != SPLIT_TEST : s->blends[k] != NULL;  // mock data: no test split
}

BatchSource *batches_mock_create(uint64_t seed, int vocab, int n_samples, int seq_length) {
    BatchSource *s = core_calloc(1, sizeof *s);
    s->sample = core_calloc((size_t)seq_length + 1, sizeof *s->sample);
    s->seed = seed;
    s->vocab = vocab;
    s->n_samples = n_samples;
    return s;
}

int batches_vocab_size(const BatchSource *s) { return s->vocab; }

int64_t batches_eod_id(const BatchSource *s) { return s->n_ds ? s->ds[0]->eod_id : -1; }

void batches_destroy(BatchSource *s) {
    if (!s) return;
    for (int i = 0; i < 3; i++) data_blend_free(s->blends[i]);
    for (int k = 0; k < s->n_ds; k++) h5ds_close(s->ds[k]);
    free(s->ds);
    free(s->sample);
    free(s);
}

// One sample of T + 1 tokens.
static void mock_sample(const BatchSource *s, SplitKind split, int64_t sample, int T, uint32_t *out) {
    int64_t k = s->n_samples ? sample % s->n_samples : sample;
    for (int t = 0; t <= T; t++) {
        uint32_t r[4];
        core_philox4x32(s->seed, 0x6d6f636bull + (uint64_t)split, (uint64_t)k * (uint64_t)(T + 1) + (uint64_t)t, r);
        out[t] = r[0] % (uint32_t)s->vocab;
    }
}

// Reads micro-batch `micro` at the cursor from the source.
static void read_batch(const BatchCursor *c, int micro, int *tokens, int *targets) {
    if (c->src->n_ds) {
        DataBlend *b = c->src->blends[c->split];
        if (!b) core_fatal("no %s split built", c->split == SPLIT_TRAIN ? "train" : c->split == SPLIT_VALID ? "validation" : "test");
        data_blend_get_batch(b, c->batch_start, c->global_batch, c->dp_rank, c->dp, c->micro_batch,
                             micro, tokens, targets);
        return;
    }
    int64_t first = data_micro_first("mock data", c->batch_start, c->global_batch, c->dp_rank, c->dp,
                                     c->micro_batch, micro, INT64_MAX);
    for (int b = 0; b < c->micro_batch; b++) {
        mock_sample(c->src, c->split, first + b, c->seq_length, c->src->sample);
        data_sample_to_rows(c->src->sample, c->seq_length, b, tokens, targets);
    }
}

void batches_get(void *cursor, int micro, int *tokens, int *targets) {
    const BatchCursor *c = cursor;
    int whole = !c->tp || c->tp->size == 1;
    if (whole && c->cp <= 1) {
        read_batch(c, micro, tokens, targets);
        return;
    }
    size_t n = (size_t)c->micro_batch * c->seq_length;
    if (whole || c->tp->rank == 0) read_batch(c, micro, c->bcast, c->bcast + n);
    if (!whole) comm_broadcast(c->tp, c->bcast, 2 * n, COMM_I32, 0);
    if (c->cp > 1) {  // this rank's two chunks of each sequence
        gpt_cp_select(tokens, c->bcast, c->micro_batch, c->seq_length, c->cp, c->cp_rank);
        gpt_cp_select(targets, c->bcast + n, c->micro_batch, c->seq_length, c->cp, c->cp_rank);
        return;
    }
    memcpy(tokens, c->bcast, n * sizeof(int));
    memcpy(targets, c->bcast + n, n * sizeof(int));
}
