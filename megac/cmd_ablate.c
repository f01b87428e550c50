// megac/cmd_ablate.c: `megac ablate`: a sweep of layouts, run and reported. The
// orchestration and the plots are Python (plan/ablate.py): this hands it the arguments and
// the path of this megac binary (MEGAC_BIN), which it runs for `plan` and `train`. The
// folder it writes goes through the output guard first (core/outpath.h), as every command's.
#include "commands.h"
#include "core/outpath.h"     // defines: core_out_check_dir
#include "plan/plan_paths.h"  // defines: MEGAC_ABLATE_PY (the script in the source tree)

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// What plan/ablate.py writes in its folder, and the temporary names (".NAME.tmp") that it
// renames over them once whole. PNGs are gnuplot's.
static const char *const OWN[] = {
    "runs", "slurm", "records.jsonl", "sweep.json", "records.csv", "REPORT.md", "plots.gp",
    "plot_data.tsv", "throughput.png", "memory.png", "traffic.png", "predicted_vs_measured.png",
    ".sweep.json.tmp", ".records.csv.tmp", ".REPORT.md.tmp", ".plots.gp.tmp", ".plot_data.tsv.tmp", NULL};

// The folder the command writes: a sweep's --output (before "--"), or collect's / report's
// DIR; NULL when none is given (ablate.py's usage message then says so). Sets *sweep.
static const char *output_dir(int argc, char **argv, int *sweep) {
    *sweep = !(argc > 0 && (!strcmp(argv[0], "collect") || !strcmp(argv[0], "report")));
    if (!*sweep) return argc == 2 ? argv[1] : NULL;
    const char *dir = NULL;
    for (int i = 0; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--output") && i + 1 < argc) dir = argv[i + 1];
        else if (!strncmp(argv[i], "--output=", 9)) dir = argv[i] + 9;
    }
    return dir;
}

int cmd_ablate(int argc, char **argv) {
    int sweep = 0;
    const char *dir = output_dir(argc, argv, &sweep);
    char err[1024];
    // a sweep's folder is new, empty, or an earlier sweep's (resumed: its sweep.json names
    // the train flags); collect and report rebuild files in a folder holding ablate's only
    if (dir && core_out_check_dir(sweep ? "--output" : "DIR", dir, OWN, sweep ? "sweep.json" : NULL, "\"train_flags\"",
                                  err, sizeof err) != 0) {
        fprintf(stderr, "megac ablate: %s\n", err);
        return 2;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "megac ablate: cannot find the megac binary (/proc/self/exe)\n");
        return 2;
    }
    self[n] = 0;
    setenv("MEGAC_BIN", self, 1);
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return 2;
    args[0] = "python3";
    args[1] = MEGAC_ABLATE_PY;
    for (int i = 0; i < argc; i++) args[i + 2] = argv[i];
    execvp("python3", args);
    fprintf(stderr, "megac ablate: cannot run python3 %s\n", MEGAC_ABLATE_PY);
    free(args);
    return 2;
}
