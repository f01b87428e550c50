// megac/main.c: one program, many subcommands (git style): megac <command> [flags].
#include "commands.h"
#include "backend/cpu/cpu_blas.h"  // defines: backend_cpu_select_blas_kernels
#include "core/rank_guard.h"       // defines: core_rank_guard
#include "core/stop.h"             // defines: core_stop_ignore_output_signals

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} Command;

static const Command COMMANDS[] = {
    {"layout", cmd_layout, "print every rank's coordinates and groups for a TP x PP x DP layout"},
    {"plan", cmd_plan, "predict memory, traffic, step time and MFU of every layout, ranked"},
    {"ablate", cmd_ablate, "run a sweep of layouts, record it, report it with plots (megac ablate report DIR)"},
    {"train", cmd_train, "pretrain a GPT model (run under mpiexec for TP/PP/DP > 1)"},
    {"data", cmd_data, "write the first N training samples' tokens (megac data samples --first N --output F ...)"},
    {"preprocess", cmd_preprocess, "tokenize text / JSON Lines into an HDF5 token dataset"},
    {"tokenizer", cmd_tokenizer, "train a byte-level BPE tokenizer (megac tokenizer train ...)"},
    {"export", cmd_export, "write a checkpoint as a Hugging Face model folder (GPT-2 or Llama)"},
    {"import", cmd_import, "read a Hugging Face GPT-2 or Llama folder into a checkpoint (iteration 0)"},
    {"generate", cmd_generate, "continue a prompt with a checkpoint's model (one CPU rank)"},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "usage: megac <command> [flags]   (megac <command> --help for its flags)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n  --version    print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("megac %s\n", MEGAC_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    core_stop_ignore_output_signals();  // | head, ulimit -f: a failed write, not a dead process
    if (!strcmp(argv[1], "train") || !strcmp(argv[1], "plan")) {  // plan: --calibrate runs GEMMs
        core_rank_guard(argc, argv);                   // a killed rank is named (under mpiexec/srun)
        backend_cpu_select_blas_kernels(argc, argv);  // may re-execute: before MPI_Init
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 2, argv + 2);
    fprintf(stderr, "megac: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
