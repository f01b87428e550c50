// tests/parallel_state/pgrid_expect.h: one check of a group kind against a golden table, for
// test_pgrid.c, test_pgrid_golden.c and test_pgrid_expert.c; and the tests' shorthands for
// pgrid_dims_init of a layout's named sizes.
#pragma once
#include "parallel_state/pgrid.h"
#include "tests/testing.h"  // defines: EXPECT

// pgrid_dims_init of sizes tp, cp, pp, ep, etp (the dense-only shorthands: ep 1, etp tp).
static inline int dims_moe(PGridDims *d, int world, int tp, int cp, int pp, int ep, int etp,
                           char *err, size_t errlen) {
    *d = (PGridDims){.tp = tp, .cp = cp, .pp = pp, .ep = ep, .etp = etp};
    return pgrid_dims_init(d, world, err, errlen);
}
static inline int dims_cp(PGridDims *d, int world, int tp, int cp, int pp, char *err, size_t errlen) {
    return dims_moe(d, world, tp, cp, pp, 1, tp, err, errlen);
}
static inline int dims_dense(PGridDims *d, int world, int tp, int pp, char *err, size_t errlen) {
    return dims_cp(d, world, tp, 1, pp, err, errlen);
}

// Groups of `kind` are n groups of s members equal to golden[g * s + i]; every member's
// pgrid_group_index (and its position) point back to (g, i).
static inline void expect_kind(const PGridDims *d, PGridKind k, int n, int s, const int *golden) {
    EXPECT(pgrid_num_groups(d, k) == n && pgrid_group_size(d, k) == s,
           "%s: %d groups of %d, want %d of %d", pgrid_kind_name(k), pgrid_num_groups(d, k),
           pgrid_group_size(d, k), n, s);
    if (pgrid_num_groups(d, k) != n || pgrid_group_size(d, k) != s) return;
    int m[64];
    for (int g = 0; g < n; g++) {
        pgrid_group_members(d, k, g, m);
        for (int i = 0; i < s; i++) {
            EXPECT(m[i] == golden[g * s + i], "%s group %d member %d: %d != %d",
                   pgrid_kind_name(k), g, i, m[i], golden[g * s + i]);
            int pos, index = pgrid_group_index(d, k, m[i], &pos);
            EXPECT(index == g && pos == i, "%s: rank %d at (%d, %d), want (%d, %d)",
                   pgrid_kind_name(k), m[i], index, pos, g, i);
        }
    }
}
