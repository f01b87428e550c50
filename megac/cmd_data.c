// megac/cmd_data.c: `megac data samples`: the tokens of the first N training samples, in the
// order `megac train` reads them with the same flags (data/sampler.h: Megatron-Core's order
// for .bin/.idx prefixes, megac's for HDF5 files), written to a file to compare with another
// trainer's samples (Megatron's dataset[0 .. N-1]["text"]).
#include "commands.h"
#include "core/check.h"  // defines: MPI_CHECK, core_usage_error
#include "train/batches.h"
#include "train/train_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: megac data samples --first N --output FILE [megac train's data flags]\n"
    "  Writes the tokens of training order positions 0 .. N-1 (global batch i is positions\n"
    "  i*G .. i*G+G-1) as int32 little endian, N rows of seq_length + 1 tokens (the sample's\n"
    "  inputs are its first seq_length tokens, targets its last): Megatron's GPTDataset /\n"
    "  BlendedDataset dataset[i]['text'] for .bin/.idx prefixes. The train flags give the\n"
    "  data and the order: --data-path (blends too), --split, --seq-length, --seed,\n"
    "  --vocab-size or --tokenizer-type, --global-batch-size with --train-iters (or\n"
    "  --train-samples): Megatron's order depends on the number of samples requested.\n";

// Removes `--first N` and `--output FILE` from argv (into *first, *out); the rest is for
// train_args_parse. One line and exit 2 on a missing or bad value.
static int take_own_flags(int argc, char **argv, char **rest, int64_t *first, const char **out) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        int is_first = !strcmp(argv[i], "--first"), is_out = !strcmp(argv[i], "--output");
        if (!is_first && !is_out) {
            rest[n++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) core_usage_error("data samples: %s needs a value", argv[i]);
        if (is_out) {
            *out = argv[++i];
            continue;
        }
        char *end;
        errno = 0;
        long long v = strtoll(argv[++i], &end, 10);
        if (end == argv[i] || *end || errno || v < 1)
            core_usage_error("data samples: --first '%s' is not a positive whole number", argv[i]);
        *first = v;
    }
    return n;
}

// Writes positions [0, first) of the train order to path. 0, or 2 with one line.
static int write_samples(BatchSource *src, int64_t first, int T, const char *path) {
    int64_t have = batches_available(src, SPLIT_TRAIN);
    if (first > have)
        core_usage_error("data samples: --first %lld, but the training order has %lld samples (the flags ask "
                         "for --train-iters x --global-batch-size of them)", (long long)first, (long long)have);
    FILE *f = fopen(path, "wb");
    if (!f) core_usage_error("data samples: %s: %s", path, strerror(errno));
    uint32_t *tok = calloc((size_t)T + 1, sizeof *tok);
    int32_t *row = calloc((size_t)T + 1, sizeof *row);
    int ok = tok && row;
    for (int64_t p = 0; p < first && ok; p++) {
        ok = batches_read_sample(src, SPLIT_TRAIN, p, tok) == 0;
        for (int t = 0; t <= T; t++) row[t] = (int32_t)tok[t];  // little endian hosts only (x86, arm64)
        ok = ok && fwrite(row, sizeof *row, (size_t)T + 1, f) == (size_t)T + 1;
    }
    ok = (fclose(f) == 0) && ok;
    free(tok);
    free(row);
    if (!ok) {
        remove(path);
        core_usage_error("data samples: %s: cannot write (%s)", path, strerror(errno));
    }
    printf("megac data samples: wrote %s: %lld samples of %d tokens (int32), training order positions 0..%lld\n",
           path, (long long)first, T + 1, (long long)first - 1);
    return 0;
}

static int cmd_data_samples(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int64_t first = 0;
    const char *out = NULL;
    int n = take_own_flags(argc, argv, rest, &first, &out);
    if (!first || !out) {
        fputs(USAGE, stderr);
        core_usage_error("data samples needs --first N and --output FILE");
    }
    MPI_CHECK(MPI_Init(NULL, NULL));
    TrainArgs a;
    train_args_parse(&a, n, rest);
    if (a.mock_data) core_usage_error("data samples: --mock-data has no sample order to write; give --data-path");
    BatchSource *src = batches_from_args(&a);
    int rc = core_world_rank() == 0 ? write_samples(src, first, a.model.seq_length, out) : 0;
    batches_destroy(src);
    MPI_CHECK(MPI_Finalize());
    free(rest);
    return rc;
}

int cmd_data(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "samples")) return cmd_data_samples(argc - 1, argv + 1);
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        fputs(USAGE, stdout);
        return 0;
    }
    fputs(USAGE, stderr);
    fprintf(stderr, "megac data: %s\n", argc ? "unknown subcommand (the one is 'samples')" : "which one? (samples)");
    return 2;
}
