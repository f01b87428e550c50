// megac/cmd_layout.c: `megac layout`: show a TP x PP x DP process grid without starting MPI,
// so a user checks a layout before submitting a job.
#include "commands.h"
#include "core/args.h"
#include "core/check.h"
#include "parallel_state/pgrid.h"

#include <stdio.h>
#include <stdlib.h>

static const char *JSON_KEYS[PGRID_NKINDS] = {"tp_groups", "dp_groups", "pp_groups",
                                             "model_parallel_groups", "embedding_groups"};
static const char *TEXT_NAMES[PGRID_NKINDS] = {"tensor-parallel", "data-parallel",
                                              "pipeline-parallel", "model-parallel", "embedding"};

// Prints all groups of a kind as "[a,b] [c,d]" (text) or "[[a,b],[c,d]]" (JSON).
static void print_groups(const PGridDims *d, PGridKind k, int json) {
    int n = pgrid_num_groups(d, k), s = pgrid_group_size(d, k);
    int *m = core_calloc((size_t)s, sizeof(int));
    printf(json ? "[" : "");
    for (int g = 0; g < n; g++) {
        pgrid_group_members(d, k, g, m);
        printf(json ? (g ? ",[" : "[") : (g ? " [" : "["));
        for (int i = 0; i < s; i++) printf(i ? ",%d" : "%d", m[i]);
        printf("]");
    }
    printf(json ? "]" : "\n");
    free(m);
}

static void print_json(const PGridDims *d) {
    printf("{\"world_size\":%d,\"tp\":%d,\"pp\":%d,\"dp\":%d", d->world_size, d->tp, d->pp, d->dp);
    for (int k = 0; k < PGRID_NKINDS; k++) {
        printf(",\"%s\":", JSON_KEYS[k]);
        print_groups(d, (PGridKind)k, 1);
    }
    printf(",\"ranks\":[");
    for (int r = 0; r < d->world_size; r++) {
        PGridCoord c = pgrid_coord(d, r);
        printf("%s{\"rank\":%d,\"tp_rank\":%d,\"pp_rank\":%d,\"dp_rank\":%d}", r ? "," : "", r,
               c.tp_rank, c.pp_rank, c.dp_rank);
    }
    printf("]}\n");
}

static void print_text(const PGridDims *d) {
    printf("world size %d = tensor-parallel %d x data-parallel %d x pipeline-parallel %d\n",
           d->world_size, d->tp, d->dp, d->pp);
    printf("order: rank = tp_rank + %d * (dp_rank + %d * pp_rank)\n\n", d->tp, d->dp);
    printf("%6s %8s %8s %8s\n", "rank", "tp_rank", "dp_rank", "pp_rank");
    for (int r = 0; r < d->world_size; r++) {
        PGridCoord c = pgrid_coord(d, r);
        printf("%6d %8d %8d %8d\n", r, c.tp_rank, c.dp_rank, c.pp_rank);
    }
    printf("\n");
    for (int k = 0; k < PGRID_NKINDS; k++) {
        printf("%s groups (%d of %d): ", TEXT_NAMES[k], pgrid_num_groups(d, (PGridKind)k),
               pgrid_group_size(d, (PGridKind)k));
        print_groups(d, (PGridKind)k, 0);
    }
}

int cmd_layout(int argc, char **argv) {
    int world = 0, tp = 1, pp = 1, json = 0;
    ArgSpec specs[] = {
        {"--world-size", ARG_INT, &world, "number of ranks (GPUs)"},
        {"--tensor-model-parallel-size", ARG_INT, &tp, "TP: ranks sharing each layer"},
        {"--pipeline-model-parallel-size", ARG_INT, &pp, "PP: pipeline stages"},
        {"--json", ARG_BOOL, &json, "print JSON instead of a table"},
    };
    core_args_parse("usage: megac layout --world-size N [--tensor-model-parallel-size T] "
                    "[--pipeline-model-parallel-size P] [--json]",
                    specs, 4, argc, argv);
    PGridDims d;
    char err[256];
    if (pgrid_dims_init(&d, world, tp, pp, err, sizeof err) != 0) core_usage_error("%s", err);
    if (json) print_json(&d);
    else print_text(&d);
    return 0;
}
