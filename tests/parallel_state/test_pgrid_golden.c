// tests/parallel_state/test_pgrid_golden.c: the grid's group tables against Megatron-Core's
// rank generator, written out as literal golden tables.
//
// How the tables were derived (once, by a script that is not part of the tree): Megatron-
// Core's RankGenerator(tp, ep=1, dp, pp, cp, order='tp-cp-dp-pp') from
// megatron/core/parallel_state.py, run on its own (its two pure functions need no torch):
// get_ranks('tp'), ('cp'), ('dp'), ('pp'), ('dp-cp'), ('tp-cp'), ('tp-pp') for the model
// group, and default_embedding_ranks of each 'pp' group; checked against an independent
// brute force (group all ranks by their coordinates outside the mask, groups ordered by
// smallest member). The expert table is RankGenerator(tp=2, ep=2, dp=2, pp=2, cp=1,
// order='tp-cp-ep-dp-pp'), the generator Megatron-Core builds for the expert layers.
#include "parallel_state/pgrid.h"
#include "tests/testing.h"
#include "tests/parallel_state/pgrid_expect.h"  // defines: expect_kind

#include <string.h>

static PGridDims dims(int world, int tp, int cp, int pp) {
    PGridDims d;
    char err[256];
    EXPECT(dims_cp(&d, world, tp, cp, pp, err, sizeof err) == 0, "%s", err);
    return d;
}

// 16 ranks, TP 2 x CP 2 x DP 2 x PP 2 (the worked example of pgrid.h).
static void test_tp2_cp2_dp2_pp2(void) {
    PGridDims d = dims(16, 2, 2, 2);
    EXPECT_EQ_INT(d.dp, 2);
    EXPECT_EQ_INT(pgrid_dims_cp(&d), 2);
    int tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int cp[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    int dp[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
    int pp[] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
    int dp_cp[] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
    int tp_cp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int model[] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
    int emb[] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
    expect_kind(&d, PGRID_TP, 8, 2, tp);
    expect_kind(&d, PGRID_CP, 8, 2, cp);
    expect_kind(&d, PGRID_DP, 8, 2, dp);
    expect_kind(&d, PGRID_PP, 8, 2, pp);
    expect_kind(&d, PGRID_DP_CP, 4, 4, dp_cp);
    expect_kind(&d, PGRID_TP_CP, 4, 4, tp_cp);
    expect_kind(&d, PGRID_MODEL, 4, 4, model);
    expect_kind(&d, PGRID_EMBEDDING, 8, 2, emb);
    PGridCoord c = pgrid_coord(&d, 6);
    EXPECT(c.tp_rank == 0 && c.cp_rank == 1 && c.dp_rank == 1 && c.pp_rank == 0,
           "rank 6 -> tp %d cp %d dp %d pp %d", c.tp_rank, c.cp_rank, c.dp_rank, c.pp_rank);
}

// 8 ranks, TP 1 x CP 2 x DP 2 x PP 2.
static void test_tp1_cp2_dp2_pp2(void) {
    PGridDims d = dims(8, 1, 2, 2);
    EXPECT_EQ_INT(d.dp, 2);
    int tp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    int cp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    int dp[] = {0, 2, 1, 3, 4, 6, 5, 7};
    int pp[] = {0, 4, 1, 5, 2, 6, 3, 7};
    int dp_cp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    int tp_cp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    int model[] = {0, 4, 1, 5, 2, 6, 3, 7};
    int emb[] = {0, 4, 1, 5, 2, 6, 3, 7};
    expect_kind(&d, PGRID_TP, 8, 1, tp);
    expect_kind(&d, PGRID_CP, 4, 2, cp);
    expect_kind(&d, PGRID_DP, 4, 2, dp);
    expect_kind(&d, PGRID_PP, 4, 2, pp);
    expect_kind(&d, PGRID_DP_CP, 2, 4, dp_cp);
    expect_kind(&d, PGRID_TP_CP, 4, 2, tp_cp);
    expect_kind(&d, PGRID_MODEL, 4, 2, model);
    expect_kind(&d, PGRID_EMBEDDING, 4, 2, emb);
}

// 12 ranks, TP 1 x CP 3 x DP 2 x PP 2: unequal sizes, so a swapped size or stride shows.
static void test_tp1_cp3_dp2_pp2(void) {
    PGridDims d = dims(12, 1, 3, 2);
    EXPECT_EQ_INT(d.dp, 2);
    int tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int cp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int dp[] = {0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11};
    int pp[] = {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11};
    int dp_cp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int tp_cp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int model[] = {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11};
    expect_kind(&d, PGRID_TP, 12, 1, tp);
    expect_kind(&d, PGRID_CP, 4, 3, cp);
    expect_kind(&d, PGRID_DP, 6, 2, dp);
    expect_kind(&d, PGRID_PP, 6, 2, pp);
    expect_kind(&d, PGRID_DP_CP, 2, 6, dp_cp);
    expect_kind(&d, PGRID_TP_CP, 4, 3, tp_cp);
    expect_kind(&d, PGRID_MODEL, 6, 2, model);
    expect_kind(&d, PGRID_EMBEDDING, 6, 2, pp);
}

// Today's layout, 12 ranks as TP 2 x PP 3 (DP 2, CP 1): the five kinds as before, and the
// groups spanning CP collapse onto their CP = 1 counterparts.
static void test_tp2_pp3_cp1(void) {
    PGridDims d = dims(12, 2, 1, 3);
    PGridDims legacy;
    char err[256];
    EXPECT_EQ_INT(dims_dense(&legacy, 12, 2, 3, err, sizeof err), 0);
    EXPECT(memcmp(&d, &legacy, sizeof d) == 0, "pgrid_dims_init != dims_cp(cp = 1)");
    EXPECT_EQ_INT(pgrid_dims_cp(&d), 1);
    int tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int dp[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11};
    int pp[] = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
    int model[] = {0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11};
    int emb[] = {0, 8, 1, 9, 2, 10, 3, 11};
    expect_kind(&d, PGRID_TP, 6, 2, tp);
    expect_kind(&d, PGRID_DP, 6, 2, dp);
    expect_kind(&d, PGRID_PP, 4, 3, pp);
    expect_kind(&d, PGRID_MODEL, 2, 6, model);
    expect_kind(&d, PGRID_EMBEDDING, 4, 2, emb);
    expect_kind(&d, PGRID_CP, 12, 1, tp);  // singletons 0..11
    expect_kind(&d, PGRID_DP_CP, 6, 2, dp);
    expect_kind(&d, PGRID_TP_CP, 6, 2, tp);
    int pos;
    EXPECT_EQ_INT(pgrid_group_index(&d, PGRID_EMBEDDING, 5, &pos), -1);  // a middle stage
    EXPECT_EQ_INT(pos, -1);
    pgrid_group_index(&d, PGRID_EMBEDDING, 9, &pos);
    EXPECT_EQ_INT(pos, 1);  // last stage
}

// A second decomposition of the same 16 ranks, as the expert layers will have: expert-tensor
// 2 x expert 2 x expert-data 2 x pp 2, through the generic mask functions.
static void test_second_decomposition(void) {
    PGridDecomp g = {.ndims = 4, .size = {2, 2, 2, 2}, .name = {"tp", "ep", "dp", "pp"}};
    EXPECT_EQ_INT(pgrid_decomp_world(&g), 16);
    unsigned TP = PGRID_MASK(0), EP = PGRID_MASK(1), DP = PGRID_MASK(2), PP = PGRID_MASK(3);
    struct { unsigned mask; int n, s; int golden[16]; } cases[] = {
        {EP, 8, 2, {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15}},
        {DP, 8, 2, {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15}},
        {TP | EP, 4, 4, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
        {TP | EP | PP, 2, 8, {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15}},
        {PP, 8, 2, {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        EXPECT_EQ_INT(pgrid_mask_size(&g, cases[c].mask), cases[c].s);
        int m[16];
        for (int i = 0; i < cases[c].n; i++) {
            pgrid_mask_members(&g, cases[c].mask, i, m);
            for (int j = 0; j < cases[c].s; j++) {
                EXPECT(m[j] == cases[c].golden[i * cases[c].s + j],
                       "mask %u group %d member %d: %d", cases[c].mask, i, j, m[j]);
                int pos = -1;
                EXPECT_EQ_INT(pgrid_mask_index(&g, cases[c].mask, m[j], &pos), i);
                EXPECT_EQ_INT(pos, j);
            }
        }
    }
}

// The validation message names every factor.
static void test_message(void) {
    PGridDims d;
    char err[256];
    EXPECT_EQ_INT(dims_cp(&d, 16, 2, 3, 2, err, sizeof err), -1);
    EXPECT(!strcmp(err, "world size 16 is not divisible by tensor-model-parallel-size 2 x "
                   "context-parallel-size 3 x pipeline-model-parallel-size 2 = 12"),
           "message: %s", err);
    EXPECT_EQ_INT(dims_cp(&d, 16, 2, 0, 2, err, sizeof err), -1);
    EXPECT(strstr(err, "context-parallel-size 0") != NULL, "message: %s", err);
    // CP = 1 (today's layouts) is not named: megac train cannot set CP yet.
    EXPECT_EQ_INT(dims_dense(&d, 12, 2, 4, err, sizeof err), -1);
    EXPECT(!strcmp(err, "world size 12 is not divisible by tensor-model-parallel-size 2 x "
                   "pipeline-model-parallel-size 4 = 8"), "message: %s", err);
}

int main(void) {
    test_tp2_cp2_dp2_pp2();
    test_tp1_cp2_dp2_pp2();
    test_tp1_cp3_dp2_pp2();
    test_tp2_pp3_cp1();
    test_second_decomposition();
    test_message();
    return test_result("test_pgrid_golden");
}
