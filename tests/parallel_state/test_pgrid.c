// tests/parallel_state/test_pgrid.c: the process grid's pure arithmetic.
// Golden tables for the 16-rank example of pgrid.h (the golden tables with context
// parallelism are in test_pgrid_golden.c), then invariants over many layouts up to 4096 ranks
// and CP 1..4: each rank sits in exactly one group of each kind, at the right position, and
// coordinates round-trip. Last, the samples a data-parallel rank holds (pgrid_micro_first).
#include "parallel_state/pgrid.h"
#include "tests/testing.h"
#include "tests/parallel_state/pgrid_expect.h"  // defines: expect_kind

#include <stdlib.h>
#include <string.h>

static void test_golden_16(void) {
    PGridDims d;
    char err[256];
    EXPECT_EQ_INT(dims_dense(&d, 16, 2, 4, err, sizeof err), 0);
    EXPECT_EQ_INT(d.dp, 2);
    int tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int dp[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    int pp[] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    int mp[] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
    int emb[] = {0, 12, 1, 13, 2, 14, 3, 15};
    expect_kind(&d, PGRID_TP, 8, 2, tp);
    expect_kind(&d, PGRID_DP, 8, 2, dp);
    expect_kind(&d, PGRID_PP, 4, 4, pp);
    expect_kind(&d, PGRID_MODEL, 2, 8, mp);
    expect_kind(&d, PGRID_EMBEDDING, 4, 2, emb);
    PGridCoord c = pgrid_coord(&d, 6);
    EXPECT(c.tp_rank == 0 && c.dp_rank == 1 && c.pp_rank == 1, "rank 6 -> (%d,%d,%d)",
           c.tp_rank, c.dp_rank, c.pp_rank);
    EXPECT_EQ_INT(pgrid_group_index(&d, PGRID_EMBEDDING, 6, NULL), -1);

    // PP = 1: the embedding group is the first stage alone.
    EXPECT_EQ_INT(dims_dense(&d, 8, 2, 1, err, sizeof err), 0);
    int emb1[] = {0, 1, 2, 3, 4, 5, 6, 7};
    expect_kind(&d, PGRID_EMBEDDING, 8, 1, emb1);
}

static void test_bad_layouts(void) {
    PGridDims d;
    char err[256];
    EXPECT_EQ_INT(dims_dense(&d, 12, 2, 4, err, sizeof err), -1);
    EXPECT(strstr(err, "12") && strstr(err, "2") && strstr(err, "4"), "message: %s", err);
    EXPECT_EQ_INT(dims_dense(&d, 0, 1, 1, err, sizeof err), -1);
    EXPECT_EQ_INT(dims_dense(&d, 8, -2, 1, err, sizeof err), -1);
    EXPECT_EQ_INT(dims_dense(&d, 8, 1, 0, err, sizeof err), -1);
}

// Member i of a group of `kind` has the group's coordinates (in the kind's decomposition)
// outside the kind's mask and, inside it, the digits of i (first dimension fastest);
// embedding: the first and last stage.
static void check_member(const PGridDims *d, PGridKind k, int i, int rank, int first) {
    PGridDecomp g = pgrid_kind_decomp(d, k);
    int c[PGRID_MAX_DIMS], c0[PGRID_MAX_DIMS], digits = k == PGRID_EMBEDDING ? i * (d->pp - 1) : i;
    pgrid_decomp_coord(&g, rank, c);
    pgrid_decomp_coord(&g, first, c0);
    EXPECT_EQ_INT(pgrid_decomp_rank(&g, c), rank);
    for (int j = 0; j < g.ndims; j++) {
        if (pgrid_kind_mask(k) & PGRID_MASK(j)) {
            EXPECT(c[j] == digits % g.size[j], "%s member %d: %s_rank %d", pgrid_kind_name(k), i,
                   g.name[j], c[j]);
            digits /= g.size[j];
        } else {
            EXPECT(c[j] == c0[j], "%s member %d: %s_rank %d != %d", pgrid_kind_name(k), i,
                   g.name[j], c[j], c0[j]);
        }
    }
}

// Every rank in exactly one group per dense kind, at its own index and position.
static void check_layout(int world, int tp, int cp, int pp) {
    PGridDims d;
    char err[256];
    if (dims_cp(&d, world, tp, cp, pp, err, sizeof err) != 0) return;
    EXPECT_EQ_INT(pgrid_dims_cp(&d), cp);
    for (int r = 0; r < world; r++) {
        PGridCoord c = pgrid_coord(&d, r);
        EXPECT_EQ_INT(c.rank, r);
        EXPECT_EQ_INT(c.tp_rank + tp * (c.cp_rank + cp * (c.dp_rank + d.dp * c.pp_rank)), r);
        PGridDecomp g = pgrid_dense(&d);
        int cc[PGRID_DENSE_NDIMS] = {c.tp_rank, c.cp_rank, c.dp_rank, c.pp_rank};
        EXPECT_EQ_INT(pgrid_decomp_rank(&g, cc), r);
    }
    int *seen = calloc((size_t)world, sizeof(int)), *m = calloc((size_t)world, sizeof(int));
    for (int k = 0; k < PGRID_NKINDS; k++) {
        if (pgrid_kind_is_expert((PGridKind)k)) continue;  // test_pgrid_expert.c checks those
        memset(seen, 0, (size_t)world * sizeof(int));
        int n = pgrid_num_groups(&d, (PGridKind)k), s = pgrid_group_size(&d, (PGridKind)k);
        int prev_first = -1;
        for (int g = 0; g < n; g++) {
            pgrid_group_members(&d, (PGridKind)k, g, m);
            EXPECT(m[0] > prev_first, "groups not ordered by first member");
            prev_first = m[0];
            for (int i = 0; i < s; i++) {
                seen[m[i]]++;
                int pos;
                EXPECT_EQ_INT(pgrid_group_index(&d, (PGridKind)k, m[i], &pos), g);
                EXPECT_EQ_INT(pos, i);
                check_member(&d, (PGridKind)k, i, m[i], m[0]);
                // The same for today's kinds, written out without the mask table.
                PGridCoord c = pgrid_coord(&d, m[i]), c0 = pgrid_coord(&d, m[0]);
                int same_cp = c.cp_rank == c0.cp_rank;
                if (k == PGRID_TP) EXPECT(c.tp_rank == i && c.dp_rank == c0.dp_rank && c.pp_rank == c0.pp_rank && same_cp, "tp");
                if (k == PGRID_DP) EXPECT(c.dp_rank == i && c.tp_rank == c0.tp_rank && c.pp_rank == c0.pp_rank && same_cp, "dp");
                if (k == PGRID_PP) EXPECT(c.pp_rank == i && c.tp_rank == c0.tp_rank && c.dp_rank == c0.dp_rank && same_cp, "pp");
                if (k == PGRID_MODEL) EXPECT(c.dp_rank == c0.dp_rank && same_cp, "model");
            }
        }
        for (int r = 0; r < world; r++) {
            int want = 1;
            if (k == PGRID_EMBEDDING) {
                int s_ = pgrid_coord(&d, r).pp_rank;
                want = (s_ == 0 || s_ == pp - 1);
            }
            EXPECT(seen[r] == want, "%s: rank %d in %d groups (world %d tp %d cp %d pp %d)",
                   pgrid_kind_name((PGridKind)k), r, seen[r], world, tp, cp, pp);
        }
    }
    // With CP = 1 the groups spanning it are their CP = 1 counterparts.
    PGridKind same[][2] = {{PGRID_DP_CP, PGRID_DP}, {PGRID_TP_CP, PGRID_TP}};
    for (int p = 0; cp == 1 && p < 2; p++) {
        int *m2 = calloc((size_t)world, sizeof(int)), s = pgrid_group_size(&d, same[p][1]);
        EXPECT_EQ_INT(pgrid_group_size(&d, same[p][0]), s);
        for (int g = 0; g < pgrid_num_groups(&d, same[p][1]); g++) {
            pgrid_group_members(&d, same[p][0], g, m);
            pgrid_group_members(&d, same[p][1], g, m2);
            EXPECT(memcmp(m, m2, (size_t)s * sizeof(int)) == 0, "%s != %s at cp 1",
                   pgrid_kind_name(same[p][0]), pgrid_kind_name(same[p][1]));
        }
        free(m2);
    }
    free(seen);
    free(m);
}

// pgrid_micro_first: golden tables (G = global batch, mb = micro-batch), then every layout's
// micro-batches tile the global batch exactly once, in (dp_rank, micro) order.
static void test_micro_first(void) {
    // G = 8, DP = 2, mb = 2 at sample 16: rank 0 holds 16 17 | 18 19, rank 1 holds 20 21 | 22 23.
    int64_t g8[2][2] = {{16, 18}, {20, 22}};
    for (int r = 0; r < 2; r++)
        for (int m = 0; m < 2; m++) EXPECT_EQ_INT(pgrid_micro_first(16, 8, r, 2, 2, m), g8[r][m]);
    // G = 12, DP = 3, mb = 2 at sample 0; G = 12, DP = 1, mb = 4 at sample 36.
    int64_t g12[3][2] = {{0, 2}, {4, 6}, {8, 10}};
    for (int r = 0; r < 3; r++)
        for (int m = 0; m < 2; m++) EXPECT_EQ_INT(pgrid_micro_first(0, 12, r, 3, 2, m), g12[r][m]);
    int64_t dp1[3] = {36, 40, 44};
    for (int m = 0; m < 3; m++) EXPECT_EQ_INT(pgrid_micro_first(36, 12, 0, 1, 4, m), dp1[m]);
    // Bad arguments: -1.
    EXPECT_EQ_INT(pgrid_micro_first(0, 6, 0, 4, 1, 0), -1);    // G not a multiple of DP
    EXPECT_EQ_INT(pgrid_micro_first(0, 8, 0, 2, 3, 0), -1);    // share 4 not a multiple of mb
    EXPECT_EQ_INT(pgrid_micro_first(0, 8, 2, 2, 2, 0), -1);    // dp_rank = DP
    EXPECT_EQ_INT(pgrid_micro_first(0, 8, 0, 2, 2, 2), -1);    // micro = share / mb
    EXPECT_EQ_INT(pgrid_micro_first(-8, 8, 0, 2, 2, 0), -1);   // before the first sample
    EXPECT_EQ_INT(pgrid_micro_first(0, 8, -1, 2, 2, 0), -1);
    EXPECT_EQ_INT(pgrid_micro_first(0, 8, 0, 0, 2, 0), -1);
    for (int G = 1; G <= 24; G++)
        for (int dp = 1; dp <= G; dp++)
            for (int mb = 1; mb <= G; mb++) {
                if (G % (dp * mb)) continue;
                int64_t next = 100;
                for (int r = 0; r < dp; r++)
                    for (int m = 0; m < G / dp / mb; m++, next += mb)
                        EXPECT(pgrid_micro_first(100, G, r, dp, mb, m) == next, "G %d DP %d mb %d: "
                               "rank %d micro %d", G, dp, mb, r, m);
                EXPECT_EQ_INT(next, 100 + G);
            }
}

int main(void) {
    test_golden_16();
    test_micro_first();
    test_bad_layouts();
    int worlds[] = {1, 2, 8, 12, 16, 64, 128, 1024, 4096};
    int n_layouts = 0;
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++)
        for (int tp = 1; tp <= 64; tp *= 2)
            for (int cp = 1; cp <= 4; cp++)
                for (int pp = 1; pp <= 64; pp++)
                    if (worlds[w] % (tp * cp * pp) == 0) {
                        check_layout(worlds[w], tp, cp, pp);
                        n_layouts++;
                    }
    printf("checked %d layouts\n", n_layouts);
    return test_result("test_pgrid");
}
