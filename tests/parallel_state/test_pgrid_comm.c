// tests/parallel_state/test_pgrid_comm.c: ProcessGrid's communicators, under mpiexec.
// usage: mpiexec -n N test_pgrid_comm KIND TP CP PP [EP ETP]   (KIND: mpi, or nccl / staged:
// the CUDA Comms on device buffers, exit 77 = skip without a device; EP 1, ETP TP by default)
// Every group kind's Comm holds the ranks of pgrid.h's table in group order: an all-gather of
// the global ranks over it returns exactly pgrid_group_members. With CP = 1 the groups
// spanning CP are today's: cp is this rank alone, dp x cp is dp and tp x cp is tp, member by
// member. The expert groups have sizes ETP, EP, ETP x EP, EDP, ETP x EP x PP; without experts
// they are today's: ep is this rank alone, etp and etp x ep are tp, edp is dp x cp and
// etp x ep x pp is model.
#include "parallel_state/pgrid_comm.h"
#include "core/check.h"
#include "tests/testing.h"
#include "tests/comm/comm_test_buf.h"  // defines: buf_test_start, buf_alloc, buf_copy, buf_free

#include <stdlib.h>

static void check_kind(const ProcessGrid *g, PGridKind k) {
    const PGridDims *d = &g->dims;
    int rank = g->coord.rank, pos, index = pgrid_group_index(d, k, rank, &pos);
    int n = pgrid_group_size(d, k);
    Comm *c = pgrid_comm(g, k);
    EXPECT((c != NULL) == (index >= 0), "%s: comm %p, group %d", pgrid_kind_name(k), (void *)c,
           index);
    if (!c) return;
    EXPECT_EQ_INT(c->size, n);
    EXPECT_EQ_INT(c->rank, pos);
    int *want = core_calloc((size_t)n, sizeof(int)), *got = core_calloc((size_t)n, sizeof(int));
    int *in = buf_alloc(sizeof(int)), *out = buf_alloc((size_t)n * sizeof(int));
    pgrid_group_members(d, k, index, want);
    buf_copy(in, &rank, sizeof(int), 1);
    comm_all_gather(c, in, out, 1, COMM_I32);
    buf_copy(got, out, (size_t)n * sizeof(int), 0);
    buf_free(in);
    buf_free(out);
    for (int i = 0; i < n; i++) {
        EXPECT(got[i] == want[i], "%s member %d: %d, want %d", pgrid_kind_name(k), i, got[i],
               want[i]);
        EXPECT_EQ_INT(c->members[i], want[i]);
    }
    free(want);
    free(got);
}

// CP = 1: the same members, in the same order, as the group without CP.
static void check_same(const Comm *a, const Comm *b) {
    EXPECT_EQ_INT(a->size, b->size);
    EXPECT_EQ_INT(a->rank, b->rank);
    for (int i = 0; i < a->size && i < b->size; i++) EXPECT_EQ_INT(a->members[i], b->members[i]);
}

int main(int argc, char **argv) {
    const char *kind;
    void *stream;
    int dev = buf_test_start(&argc, &argv, &kind, &stream);
    if (argc != 5 && argc != 7) core_usage_error("usage: test_pgrid_comm mpi|nccl|staged TP CP PP [EP ETP]");
    PGridCommKind ck = !dev ? PGRID_COMM_MPI : !strcmp(kind, "nccl") ? PGRID_COMM_NCCL : PGRID_COMM_STAGED;
    int tp = atoi(argv[2]), cp = atoi(argv[3]), pp = atoi(argv[4]);
    int ep = argc == 7 ? atoi(argv[5]) : 1, etp = argc == 7 ? atoi(argv[6]) : tp;
    ProcessGrid *g = pgrid_create(&(PGridDims){.tp = tp, .cp = cp, .pp = pp, .ep = ep, .etp = etp},
                                  ck, stream, 120.0);
    for (int k = 0; k < PGRID_NKINDS; k++) check_kind(g, (PGridKind)k);
    EXPECT(g->tp == pgrid_comm(g, PGRID_TP) && g->dp_cp == pgrid_comm(g, PGRID_DP_CP), "fields");
    EXPECT_EQ_INT(g->coord.cp_rank, (g->coord.rank / g->dims.tp) % cp);
    if (cp == 1) {
        EXPECT_EQ_INT(g->cp->size, 1);
        check_same(g->dp_cp, g->dp);
        check_same(g->tp_cp, g->tp);
    } else {
        EXPECT_EQ_INT(g->dp_cp->size, g->dims.dp * cp);
    }
    int edp = g->dims.world_size / (etp * ep * pp);
    EXPECT(g->ep == pgrid_comm(g, PGRID_EP) && g->edp == pgrid_comm(g, PGRID_EDP), "expert fields");
    EXPECT_EQ_INT(g->ep->size, ep);
    EXPECT_EQ_INT(g->etp->size, etp);
    EXPECT_EQ_INT(g->etp_ep->size, etp * ep);
    EXPECT_EQ_INT(g->edp->size, edp);
    EXPECT_EQ_INT(g->etp_ep_pp->size, etp * ep * pp);
    EXPECT_EQ_INT(g->coord.etp_rank + etp * (g->coord.ep_rank + ep * (g->coord.edp_rank + edp * g->coord.pp_rank)),
                  g->coord.rank);
    EXPECT_EQ_INT(g->ep->rank, g->coord.ep_rank);
    EXPECT_EQ_INT(g->edp->rank, g->coord.edp_rank);
    if (ep == 1 && etp == tp) {
        check_same(g->edp, g->dp_cp);
        check_same(g->etp, g->tp);
        check_same(g->etp_ep, g->tp);
        check_same(g->etp_ep_pp, g->model);
    }
    int fails = test_failures_;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    int rank = g->coord.rank;
    pgrid_destroy(g);
    MPI_CHECK(MPI_Finalize());
    if (rank == 0) printf("test_pgrid_comm %s tp=%d cp=%d pp=%d ep=%d etp=%d: %s\n", kind, tp, cp,
                          pp, ep, etp, fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
