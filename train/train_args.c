// train/train_args.c: `megac train`'s flags: the groups' tables (train_args_flags.h) joined
// with Megatron's accepted-or-refused flags (core/args_compat.h), parsed once, then each
// group's checks in turn.
#include "train_args_flags.h"
#include "core/check.h"

#include <string.h>

static const char *USAGE =
    "usage: [mpiexec -n N] megac train [flags]\n"
    "  Pretrain a GPT-2 model. TP x PP x DP = N ranks; DP = N / (TP x PP).\n"
    "  Data: --data-path FILE.h5 (from `megac preprocess`) or a Megatron PREFIX (PREFIX.bin/.idx, with\n"
    "  --vocab-size), a blend --data-path 0.7 a.h5 0.3 b.h5,\n"
    "  --train-data-path/--valid-data-path (whole files per split), or --mock-data.";

// The groups in the order of --help and of their finishes: the system group's sharding and
// device before the parallel group's interleaving and fused-attention checks.
static const TrainFlagGroup *const GROUPS[] = {&TRAIN_ARGS_MODEL, &TRAIN_ARGS_SCHEDULE, &TRAIN_ARGS_DATA,
                                               &TRAIN_ARGS_RUN,   &TRAIN_ARGS_SYSTEM,   &TRAIN_ARGS_PARALLEL};
enum { N_GROUPS = sizeof GROUPS / sizeof GROUPS[0], TRAIN_ARGS_MAX = 256 };  // entries, compat's besides

int train_args_put(ArgSpec *out, int cap, const ArgSpec *own, int n) {
    if (n > cap) core_fatal("train flags: %d entries, room for %d (raise TRAIN_ARGS_MAX)", n, cap);
    memcpy(out, own, (size_t)n * sizeof *own);
    return n;
}

int train_args_given(const TrainFlagText *x, const char *flag) {
    for (int i = 0; i < x->argc; i++)
        if (!strcmp(x->argv[i], flag)) return 1;
    return 0;
}

void train_args_parse(TrainArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->argc = argc;
    a->argv = argv;
    TrainFlagText x = {.argc = argc, .argv = argv};
    ArgSpec all[TRAIN_ARGS_MAX + CORE_COMPAT_MAX];
    int n = 0;
    for (int g = 0; g < N_GROUPS; g++) n += GROUPS[g]->specs(all + n, TRAIN_ARGS_MAX - n, a, &x);
    n += core_compat_specs(all + n, &a->compat);  // Megatron's flags megac takes or refuses
    core_args_parse(USAGE, all, n, argc, argv);
    if (core_world_rank() <= 0) core_compat_notice(&a->compat, "megac train: ", stdout);
    for (int g = 0; g < N_GROUPS; g++) GROUPS[g]->finish(a, &x);
}
