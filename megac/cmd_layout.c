// megac/cmd_layout.c: `megac layout`: show the process grid (TP x CP x DP x PP, see
// parallel_state/pgrid.h) without starting MPI, so a user checks a layout before submitting
// a job. Context parallelism, its coordinate and the groups spanning it are printed only when
// CP > 1, and the expert decomposition (ETP x EP x EDP x PP) only when EP > 1 or ETP != TP,
// so a TP x DP x PP grid prints as it always has.
#include "commands.h"
#include "core/args.h"
#include "core/check.h"
#include "parallel_state/pgrid.h"

#include <stdio.h>
#include <stdlib.h>

// Per dense dimension (PGridDim) and expert dimension (PGridExpertDim): the name in the text
// header.
static const char *DIM_NAMES[PGRID_DENSE_NDIMS] = {"tensor-parallel", "context-parallel",
                                                  "data-parallel", "pipeline-parallel"};
static const char *EXPERT_DIM_NAMES[PGRID_EXPERT_NDIMS] = {
    "expert-tensor-parallel", "expert-model-parallel", "expert-data-parallel", "pipeline-parallel"};

// The kinds in the order they are printed, with their JSON key and text name.
static const struct {
    PGridKind kind;
    const char *json_key, *text_name;
} KINDS[PGRID_NKINDS] = {
    {PGRID_TP, "tp_groups", "tensor-parallel"},
    {PGRID_CP, "cp_groups", "context-parallel"},
    {PGRID_TP_CP, "tp_cp_groups", "tensor x context-parallel"},
    {PGRID_DP, "dp_groups", "data-parallel"},
    {PGRID_DP_CP, "dp_cp_groups", "data x context-parallel"},
    {PGRID_PP, "pp_groups", "pipeline-parallel"},
    {PGRID_MODEL, "model_parallel_groups", "model-parallel"},
    {PGRID_EMBEDDING, "embedding_groups", "embedding"},
    {PGRID_ETP, "etp_groups", "expert-tensor-parallel"},
    {PGRID_EP, "ep_groups", "expert-model-parallel"},
    {PGRID_ETP_EP, "etp_ep_groups", "expert-tensor x expert-model-parallel"},
    {PGRID_EDP, "edp_groups", "expert-data-parallel"},
    {PGRID_ETP_EP_PP, "etp_ep_pp_groups", "expert-tensor x expert-model x pipeline-parallel"},
};

// A dense dimension is shown unless it is context parallelism of size 1.
static int dim_shown(const PGridDecomp *g, int dim) {
    return dim != PGRID_DIM_CP || g->size[dim] > 1;
}

// A dense kind is shown when every dimension it spans is; an expert kind when there are
// experts (EP > 1 or ETP != TP).
static int kind_shown(const PGridDims *d, PGridKind k) {
    if (pgrid_kind_is_expert(k)) return pgrid_dims_has_experts(d);
    PGridDecomp g = pgrid_dense(d);
    for (int i = 0; i < g.ndims; i++)
        if ((pgrid_kind_mask(k) & PGRID_MASK(i)) && !dim_shown(&g, i)) return 0;
    return 1;
}

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
    PGridDecomp g = pgrid_dense(d);
    int cp = dim_shown(&g, PGRID_DIM_CP), ex = pgrid_dims_has_experts(d);
    printf("{\"world_size\":%d,\"tp\":%d,\"pp\":%d,\"dp\":%d", d->world_size, d->tp, d->pp, d->dp);
    if (cp) printf(",\"cp\":%d", pgrid_dims_cp(d));
    if (ex) printf(",\"etp\":%d,\"ep\":%d,\"edp\":%d", pgrid_dims_etp(d), pgrid_dims_ep(d),
                   pgrid_dims_edp(d));
    for (int k = 0; k < PGRID_NKINDS; k++) {
        if (!kind_shown(d, KINDS[k].kind)) continue;
        printf(",\"%s\":", KINDS[k].json_key);
        print_groups(d, KINDS[k].kind, 1);
    }
    printf(",\"ranks\":[");
    for (int r = 0; r < d->world_size; r++) {
        PGridCoord c = pgrid_coord(d, r);
        printf("%s{\"rank\":%d,\"tp_rank\":%d,\"pp_rank\":%d,\"dp_rank\":%d", r ? "," : "", r,
               c.tp_rank, c.pp_rank, c.dp_rank);
        if (cp) printf(",\"cp_rank\":%d", c.cp_rank);
        if (ex) printf(",\"etp_rank\":%d,\"ep_rank\":%d,\"edp_rank\":%d", c.etp_rank, c.ep_rank,
                       c.edp_rank);
        printf("}");
    }
    printf("]}\n");
}

// "PREFIXworld size N = tensor-parallel T x ... " and "order: rank = tp_rank + T * (dp_rank +
// ...)", over the shown dimensions of g (every dimension when `all`), named by names[].
static void print_header(const PGridDecomp *g, int world, const char *const *names,
                         const char *prefix, int all) {
    int shown[PGRID_MAX_DIMS], n = 0;
    for (int i = 0; i < g->ndims; i++)
        if (all || dim_shown(g, i)) shown[n++] = i;
    printf("%sworld size %d =", prefix, world);
    for (int j = 0; j < n; j++)
        printf("%s %s %d", j ? " x" : "", names[shown[j]], g->size[shown[j]]);
    printf("\norder: rank = ");
    for (int j = 0; j + 1 < n; j++)
        printf("%s_rank + %d * %s", g->name[shown[j]], g->size[shown[j]], j + 2 < n ? "(" : "");
    printf("%s_rank", g->name[shown[n - 1]]);
    for (int j = 0; j + 2 < n; j++) printf(")");
    printf("\n");
}

static void print_text(const PGridDims *d) {
    PGridDecomp g = pgrid_dense(d), e = pgrid_expert(d);
    int ex = pgrid_dims_has_experts(d);
    print_header(&g, d->world_size, DIM_NAMES, "", 0);
    if (ex) print_header(&e, d->world_size, EXPERT_DIM_NAMES, "expert layers: ", 1);
    printf("\n%6s", "rank");
    for (int i = 0; i < g.ndims; i++)
        if (dim_shown(&g, i)) printf(" %3s_rank", g.name[i]);
    for (int i = 0; ex && i < PGRID_EDIM_PP; i++) printf(" %3s_rank", e.name[i]);  // pp: shared
    printf("\n");
    for (int r = 0; r < d->world_size; r++) {
        int c[PGRID_MAX_DIMS];
        pgrid_decomp_coord(&g, r, c);
        printf("%6d", r);
        for (int i = 0; i < g.ndims; i++)
            if (dim_shown(&g, i)) printf(" %8d", c[i]);
        pgrid_decomp_coord(&e, r, c);
        for (int i = 0; ex && i < PGRID_EDIM_PP; i++) printf(" %8d", c[i]);
        printf("\n");
    }
    printf("\n");
    for (int k = 0; k < PGRID_NKINDS; k++) {
        PGridKind kind = KINDS[k].kind;
        if (!kind_shown(d, kind)) continue;
        printf("%s groups (%d of %d): ", KINDS[k].text_name, pgrid_num_groups(d, kind),
               pgrid_group_size(d, kind));
        print_groups(d, kind, 0);
    }
}

int cmd_layout(int argc, char **argv) {
    int world = 0, tp = 1, cp = 1, pp = 1, ep = 1, etp = 0, json = 0;
    ArgSpec specs[] = {
        {"--world-size", ARG_INT, &world, "number of ranks (GPUs)"},
        {"--tensor-model-parallel-size", ARG_INT, &tp, "TP: ranks sharing each layer"},
        {"--context-parallel-size", ARG_INT, &cp, "CP: ranks sharing each sequence (megac train --context-parallel-size)"},
        {"--pipeline-model-parallel-size", ARG_INT, &pp, "PP: pipeline stages"},
        {"--expert-model-parallel-size", ARG_INT, &ep, "EP: ranks splitting the experts of each MoE layer"},
        {"--expert-tensor-parallel-size", ARG_INT, &etp, "ETP: ranks sharing each expert, 1 or TP (0: TP, Megatron's default)"},
        {"--json", ARG_BOOL, &json, "print JSON instead of a table"},
    };
    core_args_parse("usage: megac layout --world-size N [--tensor-model-parallel-size T] "
                    "[--context-parallel-size C] [--pipeline-model-parallel-size P] "
                    "[--expert-model-parallel-size E] [--expert-tensor-parallel-size 1|T] [--json]",
                    specs, 7, argc, argv);
    PGridDims d = {.tp = tp, .cp = cp, .pp = pp, .ep = ep, .etp = etp ? etp : tp};
    char err[256];
    if (pgrid_dims_init(&d, world, err, sizeof err) != 0)
        core_usage_error("%s", err);
    if (json) print_json(&d);
    else print_text(&d);
    return 0;
}
