// tests/parallel_state/test_pgrid_expert.c: the expert decomposition of the grid (pgrid.h's
// second decomposition, etp x ep x edp x pp) against Megatron-Core.
//
// The golden tables were derived once, by a script that is not part of the tree, two ways
// that agree: Megatron-Core's RankGenerator(tp=ETP, ep=EP, dp=EDP, pp=PP, cp=1,
// order='tp-cp-ep-dp-pp') from megatron/core/parallel_state.py, get_ranks('ep'), ('tp'),
// ('tp-ep'), ('dp'), ('tp-ep-pp') (the groups its initialize_model_parallel builds for the
// experts), and the reshape its tests/unit_tests/test_parallel_state.py uses as the golden
// expert groups (ranks as a (pp, edp, ep, etp) array: tp-ep groups its rows of ep * etp,
// expert-data groups its (pp, ep, etp, edp) transpose). Then the same reshape written here,
// over twenty of the layouts Megatron's test_rank_generator_for_tp_dp_pp runs; invariants over many
// layouts (one group per kind for every rank, the same pp_rank and pipeline groups in both
// decompositions, EP = 1 and ETP = TP giving edp = dp x cp); and the refusals.
#include "parallel_state/pgrid.h"
#include "tests/testing.h"
#include "tests/parallel_state/pgrid_expect.h"  // defines: expect_kind

#include <stdlib.h>
#include <string.h>

static PGridDims dims(int world, int tp, int cp, int pp, int ep, int etp) {
    PGridDims d;
    char err[256];
    EXPECT(dims_moe(&d, world, tp, cp, pp, ep, etp, err, sizeof err) == 0, "%s", err);
    return d;
}

// 16 ranks, TP 2, PP 2 (DP 4), EP 2, ETP 1: EDP 4.
static void test_world16_etp1(void) {
    PGridDims d = dims(16, 2, 1, 2, 2, 1);
    EXPECT_EQ_INT(pgrid_dims_edp(&d), 4);
    int etp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int ep[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int edp[] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
    int etp_ep_pp[] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
    expect_kind(&d, PGRID_ETP, 16, 1, etp);
    expect_kind(&d, PGRID_EP, 8, 2, ep);
    expect_kind(&d, PGRID_ETP_EP, 8, 2, ep);
    expect_kind(&d, PGRID_EDP, 4, 4, edp);
    expect_kind(&d, PGRID_ETP_EP_PP, 4, 4, etp_ep_pp);
    // The dense groups are untouched: tp [0,1] ..., dp [0,2,4,6] ...
    int tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    expect_kind(&d, PGRID_TP, 8, 2, tp);
    expect_kind(&d, PGRID_DP, 4, 4, edp);
    PGridCoord c = pgrid_coord(&d, 6);  // 6 = etp 0 + 1 * (ep 0 + 2 * (edp 3 + 4 * pp 0))
    EXPECT(c.etp_rank == 0 && c.ep_rank == 0 && c.edp_rank == 3 && c.pp_rank == 0,
           "rank 6 -> etp %d ep %d edp %d pp %d", c.etp_rank, c.ep_rank, c.edp_rank, c.pp_rank);
}

// 16 ranks, TP 2, PP 2 (DP 4), EP 2, ETP 2: EDP 2.
static void test_world16_etp2(void) {
    PGridDims d = dims(16, 2, 1, 2, 2, 2);
    EXPECT_EQ_INT(pgrid_dims_edp(&d), 2);
    int etp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int ep[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    int etp_ep[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int edp[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
    int etp_ep_pp[] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
    expect_kind(&d, PGRID_ETP, 8, 2, etp);
    expect_kind(&d, PGRID_EP, 8, 2, ep);
    expect_kind(&d, PGRID_ETP_EP, 4, 4, etp_ep);
    expect_kind(&d, PGRID_EDP, 8, 2, edp);
    expect_kind(&d, PGRID_ETP_EP_PP, 2, 8, etp_ep_pp);
    PGridCoord c = pgrid_coord(&d, 6);  // 6 = etp 0 + 2 * (ep 1 + 2 * (edp 1 + 2 * pp 0))
    EXPECT(c.etp_rank == 0 && c.ep_rank == 1 && c.edp_rank == 1 && c.pp_rank == 0,
           "rank 6 -> etp %d ep %d edp %d pp %d", c.etp_rank, c.ep_rank, c.edp_rank, c.pp_rank);
}

// pgrid.h's worked example: 16 ranks, TP 2, PP 4 with EP 2 and ETP 1 or 2.
static void test_header_example(void) {
    PGridDims d = dims(16, 2, 1, 4, 2, 1);
    int ep1[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int edp1[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    expect_kind(&d, PGRID_EP, 8, 2, ep1);
    expect_kind(&d, PGRID_EDP, 8, 2, edp1);
    d = dims(16, 2, 1, 4, 2, 2);
    int ep2[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    expect_kind(&d, PGRID_EP, 8, 2, ep2);
    expect_kind(&d, PGRID_ETP, 8, 2, ep1);
    expect_kind(&d, PGRID_ETP_EP, 4, 4, ep1);
    expect_kind(&d, PGRID_EDP, 16, 1, ep1);
    PGridCoord c = pgrid_coord(&d, 6);
    EXPECT(c.etp_rank == 0 && c.ep_rank == 1 && c.edp_rank == 0 && c.pp_rank == 1,
           "rank 6 -> etp %d ep %d edp %d pp %d", c.etp_rank, c.ep_rank, c.edp_rank, c.pp_rank);
}

// Megatron's golden expert groups (its test's reshape of the ranks as (pp, edp, ep, etp)):
// tp-ep group i is row i of (pp * edp, ep * etp); expert-data group i is row i of the
// (pp, ep, etp, edp) transpose.
static void check_reshape(int world, int tp, int cp, int pp, int ep, int etp) {
    PGridDims d;
    char err[256];
    if (dims_moe(&d, world, tp, cp, pp, ep, etp, err, sizeof err) != 0) {
        EXPECT(0, "%s", err);
        return;
    }
    int edp = world / (etp * ep * pp), *m = calloc((size_t)world, sizeof(int));
    EXPECT_EQ_INT(pgrid_num_groups(&d, PGRID_ETP_EP), pp * edp);
    for (int i = 0; i < pp * edp; i++) {
        pgrid_group_members(&d, PGRID_ETP_EP, i, m);
        for (int j = 0; j < ep * etp; j++)
            EXPECT(m[j] == i * ep * etp + j, "world %d tp-ep group %d member %d: %d", world, i, j, m[j]);
    }
    EXPECT_EQ_INT(pgrid_num_groups(&d, PGRID_EDP), pp * ep * etp);
    for (int i = 0; i < pp * ep * etp; i++) {
        int p = i / (ep * etp), e = i / etp % ep, t = i % etp;
        pgrid_group_members(&d, PGRID_EDP, i, m);
        for (int j = 0; j < edp; j++)
            EXPECT(m[j] == ((p * edp + j) * ep + e) * etp + t, "world %d edp group %d member %d: %d",
                   world, i, j, m[j]);
    }
    free(m);
}

// The layouts of Megatron's test_rank_generator_for_tp_dp_pp (nodes x 8 GPUs, tp, pp, cp,
// ep; its expert generator has etp = tp), each also with ETP 1.
static void test_megatron_layouts(void) {
    static const int cases[][5] = {
        {1, 1, 1, 1, 1}, {1, 2, 2, 1, 1}, {1, 8, 1, 1, 1}, {2, 2, 2, 1, 1}, {2, 4, 2, 1, 1},
        {3, 8, 3, 1, 1}, {4, 2, 4, 1, 1}, {8, 8, 8, 1, 1}, {8, 2, 1, 1, 4}, {8, 2, 2, 2, 4},
        {8, 2, 1, 4, 8}, {8, 2, 2, 2, 8}, {16, 4, 8, 1, 1}, {16, 4, 8, 1, 4}, {16, 4, 8, 4, 1},
        {16, 8, 8, 1, 1}, {32, 4, 8, 1, 4}, {32, 8, 8, 4, 1}, {64, 4, 2, 8, 8}, {128, 4, 2, 8, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        check_reshape(c[0] * 8, c[1], c[3], c[2], c[4], c[1]);
        check_reshape(c[0] * 8, c[1], c[3], c[2], c[4], 1);
    }
}

// Every rank in exactly one group of each expert kind at its own index and position; the
// coordinates round-trip; pp_rank and the pipeline groups are the same in both
// decompositions; without experts edp is dp x cp, etp and etp_ep are tp, etp_ep_pp is model.
static int check_layout(int world, int tp, int cp, int pp, int ep, int etp) {
    PGridDims d;
    char err[256];
    if (dims_moe(&d, world, tp, cp, pp, ep, etp, err, sizeof err) != 0) return 0;
    PGridDecomp g = pgrid_expert(&d), dense = pgrid_dense(&d);
    EXPECT_EQ_INT(pgrid_decomp_world(&g), world);
    int *seen = calloc((size_t)world, sizeof(int)), *m = calloc((size_t)world, sizeof(int));
    int *m2 = calloc((size_t)world, sizeof(int));
    for (int r = 0; r < world; r++) {
        PGridCoord c = pgrid_coord(&d, r);
        EXPECT_EQ_INT(c.etp_rank + etp * (c.ep_rank + ep * (c.edp_rank + pgrid_dims_edp(&d) * c.pp_rank)), r);
        int dc[PGRID_MAX_DIMS];
        pgrid_decomp_coord(&dense, r, dc);
        EXPECT_EQ_INT(dc[PGRID_DIM_PP], c.pp_rank);
    }
    for (int k = PGRID_EP; k < PGRID_NKINDS; k++) {
        memset(seen, 0, (size_t)world * sizeof(int));
        int n = pgrid_num_groups(&d, (PGridKind)k), s = pgrid_group_size(&d, (PGridKind)k);
        EXPECT_EQ_INT(n * s, world);
        for (int i = 0; i < n; i++) {
            pgrid_group_members(&d, (PGridKind)k, i, m);
            for (int j = 0; j < s; j++) {
                int pos;
                seen[m[j]]++;
                EXPECT_EQ_INT(pgrid_group_index(&d, (PGridKind)k, m[j], &pos), i);
                EXPECT_EQ_INT(pos, j);
            }
        }
        for (int r = 0; r < world; r++)
            EXPECT(seen[r] == 1, "%s: rank %d in %d groups (world %d tp %d cp %d pp %d ep %d etp %d)",
                   pgrid_kind_name((PGridKind)k), r, seen[r], world, tp, cp, pp, ep, etp);
    }
    // Megatron asserts the pipeline groups of both generators are equal.
    unsigned pp_mask = PGRID_MASK(PGRID_EDIM_PP);
    for (int i = 0; i < world / pp; i++) {
        pgrid_mask_members(&g, pp_mask, i, m);
        pgrid_group_members(&d, PGRID_PP, i, m2);
        EXPECT(memcmp(m, m2, (size_t)pp * sizeof(int)) == 0, "pp groups differ (world %d)", world);
    }
    PGridKind same[][2] = {{PGRID_EDP, PGRID_DP_CP}, {PGRID_ETP, PGRID_TP},
                           {PGRID_ETP_EP, PGRID_TP}, {PGRID_ETP_EP_PP, PGRID_MODEL}};
    for (int p = 0; !pgrid_dims_has_experts(&d) && p < 4; p++) {
        int s = pgrid_group_size(&d, same[p][1]);
        EXPECT_EQ_INT(pgrid_group_size(&d, same[p][0]), s);
        EXPECT_EQ_INT(pgrid_num_groups(&d, same[p][0]), pgrid_num_groups(&d, same[p][1]));
        for (int i = 0; i < pgrid_num_groups(&d, same[p][1]); i++) {
            pgrid_group_members(&d, same[p][0], i, m);
            pgrid_group_members(&d, same[p][1], i, m2);
            EXPECT(memcmp(m, m2, (size_t)s * sizeof(int)) == 0, "%s != %s without experts",
                   pgrid_kind_name(same[p][0]), pgrid_kind_name(same[p][1]));
        }
    }
    free(seen);
    free(m);
    free(m2);
    return 1;
}

// The refusals: one line naming the numbers.
static void test_messages(void) {
    PGridDims d;
    char err[256];
    struct { int world, tp, cp, pp, ep, etp; const char *want; } bad[] = {
        {16, 2, 1, 2, 3, 2, "world size 16 is not divisible by expert-tensor-parallel-size 2 x "
                           "expert-model-parallel-size 3 x pipeline-model-parallel-size 2 = 12"},
        // EP not dividing DP (ETP = TP, CP = 1): DP 4, EP 8
        {16, 2, 1, 2, 8, 2, "world size 16 is not divisible by expert-tensor-parallel-size 2 x "
                           "expert-model-parallel-size 8 x pipeline-model-parallel-size 2 = 32"},
        {16, 4, 1, 1, 1, 2, "expert-tensor-parallel-size 2 must be 1 or tensor-model-parallel-size 4"},
        {16, 2, 1, 1, 0, 2, "sizes must be positive: expert-model-parallel-size 0, "
                           "expert-tensor-parallel-size 2"},
        {16, 2, 1, 1, 2, -1, "sizes must be positive: expert-model-parallel-size 2, "
                            "expert-tensor-parallel-size -1"},
        // the dense checks come first
        {12, 2, 1, 4, 2, 1, "world size 12 is not divisible by tensor-model-parallel-size 2 x "
                           "pipeline-model-parallel-size 4 = 8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_EQ_INT(dims_moe(&d, bad[i].world, bad[i].tp, bad[i].cp, bad[i].pp, bad[i].ep,
                                          bad[i].etp, err, sizeof err), -1);
        EXPECT(!strcmp(err, bad[i].want), "message %zu: %s", i, err);
    }
    // EP with ETP 1 may exceed DP (Megatron-Core's folding): TP 2 x DP 2 as EP 4.
    EXPECT_EQ_INT(dims_moe(&d, 4, 2, 1, 1, 4, 1, err, sizeof err), 0);
    EXPECT_EQ_INT(pgrid_dims_edp(&d), 1);
    // EP and CP together: the expert decomposition folds CP away.
    EXPECT_EQ_INT(dims_moe(&d, 8, 1, 2, 1, 4, 1, err, sizeof err), 0);
    EXPECT_EQ_INT(pgrid_dims_edp(&d), 2);
    // {world, tp, pp, dp} initialisers mean no experts, as pgrid_dims_init does.
    PGridDims plain = {.world_size = 16, .tp = 2, .pp = 2, .dp = 4}, init;
    EXPECT_EQ_INT(dims_dense(&init, 16, 2, 2, err, sizeof err), 0);
    EXPECT(pgrid_dims_ep(&plain) == 1 && pgrid_dims_etp(&plain) == 2 && pgrid_dims_edp(&plain) == 4,
           "ep %d etp %d edp %d", pgrid_dims_ep(&plain), pgrid_dims_etp(&plain), pgrid_dims_edp(&plain));
    EXPECT(pgrid_dims_ep(&init) == 1 && pgrid_dims_etp(&init) == 2 && !pgrid_dims_has_experts(&init),
           "init: ep %d etp %d", pgrid_dims_ep(&init), pgrid_dims_etp(&init));
    EXPECT(!pgrid_dims_has_experts(&plain), "plain has experts");
}

int main(void) {
    test_world16_etp1();
    test_world16_etp2();
    test_header_example();
    test_megatron_layouts();
    test_messages();
    int worlds[] = {1, 2, 8, 12, 16, 64, 128, 1024}, n = 0;
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++)
        for (int tp = 1; tp <= 8; tp *= 2)
            for (int cp = 1; cp <= 2; cp++)
                for (int pp = 1; pp <= 8; pp++)
                    for (int ep = 1; ep <= 16; ep *= 2)
                        for (int etp = 1; etp <= tp; etp *= tp > 1 ? tp : 2)
                            n += check_layout(worlds[w], tp, cp, pp, ep, etp);
    printf("checked %d expert layouts\n", n);
    return test_result("test_pgrid_expert");
}
