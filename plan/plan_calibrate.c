// plan/plan_calibrate.c: measuring a hardware profile (see plan_calibrate.h).
#include "plan_calibrate.h"
#include "backend/backend.h"  // defines: backend_cpu_create, matmul_forward
#include "comm/comm.h"        // defines: comm_mpi_create, comm_all_reduce
#include "core/check.h"       // defines: MPI_CHECK, core_calloc
#include "core/timer.h"       // defines: core_now
#ifdef MEGAC_HAVE_CUDA
#include "core/check_cuda.h"  // defines: CUDA_CHECK (and the CUDA runtime)
#endif

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { HOST = 64 };

// Seconds of the slowest rank for `reps` calls of fn after one warm-up.
static double slowest(void (*fn)(void *), void *ctx, int reps) {
    fn(ctx);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = core_now();
    for (int i = 0; i < reps; i++) fn(ctx);
    double t = (core_now() - t0) / reps, worst = 0.0;
    MPI_CHECK(MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return worst;
}

typedef struct {
    Backend *be;
    void *out, *inp, *w;
    int N, C, OC;
} Gemm;

static void gemm_once(void *ctx) {
    Gemm *g = ctx;
    g->be->ops->matmul_forward(g->be, g->out, g->inp, g->w, NULL, g->N, g->C, g->OC);
    g->be->ops->sync(g->be);
}

// Tokens per GEMM: GPT-2 small's 1024, 256 under the CPU emulator of the CUDA backend (its
// figures mean nothing; only that calibration runs is tested there).
#ifdef MEGAC_CUDA_EMU
enum { GEMM_N = 256 };
#else
enum { GEMM_N = 1024 };
#endif

// GEMM FLOP/s at the shapes of a GPT-2 small layer (N = 1024 tokens, C = 768): QKV, MLP up,
// MLP down. best: the fastest shape; mean: their average.
static void measure_gemm(Backend *be, double *best, double *mean, FILE *log) {
    const int shapes[3][3] = {{GEMM_N, 768, 2304}, {GEMM_N, 768, 3072}, {GEMM_N, 3072, 768}};
    Gemm g = {be, be->ops->alloc(be, 1024u * 3072 * 4), be->ops->alloc(be, 1024u * 3072 * 4),
              be->ops->alloc(be, 3072u * 3072 * 4), 0, 0, 0};
    *best = *mean = 0.0;
    for (int i = 0; i < 3; i++) {
        g.N = shapes[i][0], g.C = shapes[i][1], g.OC = shapes[i][2];
        double rate = 2.0 * g.N * g.C * g.OC / slowest(gemm_once, &g, 3);
        if (log) fprintf(log, "  GEMM %4d x %4d x %4d: %8.1f GFLOP/s per rank (%s)\n", g.N, g.C, g.OC,
                         rate / 1e9, be->name);
        if (rate > *best) *best = rate;
        *mean += rate / 3;
    }
    be->ops->free(be, g.out);
    be->ops->free(be, g.inp);
    be->ops->free(be, g.w);
}

typedef struct {
    Backend *be;
    void *src, *dst;
    size_t bytes;
} Copy;

static void copy_once(void *ctx) {
    Copy *c = ctx;
    c->be->ops->copy(c->be, c->dst, c->src, c->bytes, BACKEND_D2D);
    c->be->ops->sync(c->be);
}

typedef struct {
    Backend *be;
    Comm *c;
    float *buf;  // the backend's memory: host (MPI) or device (NCCL)
    size_t n;
} Reduce;

static void reduce_once(void *ctx) {
    Reduce *r = ctx;
    if (r->c) comm_all_reduce(r->c, r->buf, r->n, COMM_F32, COMM_SUM);
    r->be->ops->sync(r->be);  // NCCL queues on the stream: time until it is done
}

// A communicator over `split`: MPI on the CPU backend, NCCL on the backend's stream on CUDA.
static Comm *group_comm(Backend *be, MPI_Comm split, const int *members) {
#ifdef MEGAC_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return comm_nccl_create(split, "calibrate", members, be->u.cuda.stream, 0);
#endif
    return comm_mpi_create(split, "calibrate", members, 0);
}

// All-reduce bus bandwidth (bytes/s) and latency per ring step (s) of groups of g
// consecutive ranks (the ranks past the last whole group idle).
static void measure_group(Backend *be, int g, int rank, int world, double *bus, double *lat) {
    int color = rank < world / g * g ? rank / g : MPI_UNDEFINED;
    MPI_Comm split;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &split));
    Reduce r = {be, NULL, NULL, (size_t)4 << 20};  // 16 MiB
    if (split != MPI_COMM_NULL) {
        int *members = core_calloc((size_t)g, sizeof(int));
        for (int i = 0; i < g; i++) members[i] = rank / g * g + i;
        r.c = group_comm(be, split, members);
        free(members);
        MPI_CHECK(MPI_Comm_free(&split));
    }
    r.buf = be->ops->alloc(be, r.n * sizeof(float));
    *bus = 2.0 * (g - 1) / g * r.n * sizeof(float) / slowest(reduce_once, &r, 5);
    r.n = 2;
    *lat = slowest(reduce_once, &r, 50) / (2.0 * (g - 1));
    be->ops->free(be, r.buf);
    comm_destroy(r.c);
}

// Whether the first group of g consecutive ranks spans two hosts.
static int crosses(const char *hosts, int g) {
    for (int i = 1; i < g; i++)
        if (strncmp(hosts + (size_t)i * HOST, hosts, HOST)) return 1;
    return 0;
}

// The median of n values (sorted in place).
static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Each link's figures are the median over the group sizes measured on it (one noisy size,
// e.g. ranks sharing cores, does not decide).
static void measure_links(Backend *be, PlanHardware *hw, const char *hosts, int rank, int world, FILE *log) {
    enum { MAXG = 32 };
    double bw[2][MAXG], lat[2][MAXG];  // [inside a node, across nodes][group size index]
    int n[2] = {0, 0};
    for (int g = 2; g <= world && n[0] + n[1] < MAXG; g *= 2) {
        double b, l;
        measure_group(be, g, rank, world, &b, &l);
        int x = crosses(hosts, g);
        bw[x][n[x]] = b;
        lat[x][n[x]++] = l;
        if (log) fprintf(log, "  all-reduce, groups of %3d (%s): bus bandwidth %8.2f GB/s, latency %7.1f us per ring step\n",
                         g, x ? "across nodes" : "inside a node", b / 1e9, l * 1e6);
    }
    if (n[0]) hw->intra_gbps = median(bw[0], n[0]) / 1e9, hw->intra_latency_us = median(lat[0], n[0]) * 1e6;
    if (n[1]) hw->inter_gbps = median(bw[1], n[1]) / 1e9, hw->inter_latency_us = median(lat[1], n[1]) * 1e6;
    else if (n[0]) hw->inter_gbps = hw->intra_gbps, hw->inter_latency_us = hw->intra_latency_us;
    if (log && world == 1) fprintf(log, "  one rank: no collective measured; link figures kept from the base profile\n");
    else if (log && n[1] == 0) fprintf(log, "  one node: links across nodes set to the in-node figures\n");
    if (log && n[0] + n[1]) fprintf(log, "  profile: %.3g GB/s, %.3g us in a node; %.3g GB/s, %.3g us across nodes (medians)\n",
                                    hw->intra_gbps, hw->intra_latency_us, hw->inter_gbps, hw->inter_latency_us);
    hw->link_efficiency = 1.0;  // measured bus bandwidths are what collectives reach
}

#ifdef MEGAC_HAVE_CUDA
// The CUDA backend on this rank's GPU (one per rank on each node, as NCCL needs; every rank
// exits 2 with one line when a node has fewer), after measuring its GEMM peaks: strict fp32,
// TF32 and bf16 tensor cores (the efficiency from bf16, the training precision). Returns the
// bf16 backend, for the copy and the NCCL collectives.
static Backend *cuda_backend(int local_index, int local, PlanHardware *hw, FILE *log) {
    int n_dev = 0;
    if (backend_cuda_available()) CUDA_CHECK(cudaGetDeviceCount(&n_dev));
    char msg[256] = "";
    if (n_dev < local)
        snprintf(msg, sizeof msg, "--calibrate --device cuda: %d rank(s) on this node but %d usable CUDA "
                 "device(s): NCCL needs one GPU per rank (--device cpu measures the CPU)", local, n_dev);
    core_agree_or_exit(n_dev < local, msg, (int)sizeof msg);
    const struct { BackendMath math; BackendDType act; } peak[PLAN_NPEAK] = {
        {BACKEND_MATH_FP32, BACKEND_F32}, {BACKEND_MATH_TF32, BACKEND_F32}, {BACKEND_MATH_TF32, BACKEND_BF16}};
    Backend *be = NULL;
    for (int p = 0; p < PLAN_NPEAK; p++) {
        backend_destroy(be);
        be = backend_cuda_create(local_index, peak[p].math, peak[p].act);
        double best, mean;
        measure_gemm(be, &best, &mean, log);
        hw->peak_tflops[p] = best / 1e12;
        hw->gemm_efficiency = mean / best;  // the last, bf16, stays
    }
    size_t free_b = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    hw->memory_gb = (double)total / 1e9;
    if (hw->reserve_gb > 0.5 * hw->memory_gb) hw->reserve_gb = 0.1 * hw->memory_gb;  // else the base's
    return be;
}
#endif

void plan_calibrate(const PlanHardware *base, int threads, int cuda, PlanHardware *hw, FILE *log) {
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    if (rank != 0) log = NULL;
    char *hosts = core_calloc((size_t)world, HOST), mine[HOST] = {0};
    gethostname(mine, HOST - 1);
    MPI_CHECK(MPI_Allgather(mine, HOST, MPI_CHAR, hosts, HOST, MPI_CHAR, MPI_COMM_WORLD));
    int local = 0, local_index = 0;  // ranks on this host, and those of them before this one
    for (int r = 0; r < world; r++)
        if (!strncmp(hosts + (size_t)r * HOST, mine, HOST)) local_index += r < rank, local++;
    *hw = *base;
    hw->gpus_per_node = local;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0) threads = cores / local > 0 ? (int)(cores / local) : 1;
    if (log) fprintf(log, "megac plan --calibrate: %d rank(s), %d on %s, %s\n", world, local, mine,
                     cuda ? "one GPU each (CUDA backend, NCCL)" : "CPU backend, MPI");

    Backend *be = NULL;
    if (cuda) {
#ifdef MEGAC_HAVE_CUDA
        be = cuda_backend(local_index, local, hw, log);
#else
        core_usage_error("--calibrate --device cuda: megac was built without CUDA (add --device cpu)");
#endif
    } else {
        if (log) fprintf(log, "  %d thread(s) per rank\n", threads);
        be = backend_cpu_create(threads, BACKEND_F32);
        double best, mean;
        measure_gemm(be, &best, &mean, log);
        for (int p = 0; p < PLAN_NPEAK; p++) hw->peak_tflops[p] = best / 1e12;  // one rate on a CPU
        hw->gemm_efficiency = mean / best;
        // megac's CPU attention kernels, timed as its GEMMs (not measured apart)
        hw->attn_cudnn_efficiency = hw->attn_megac_efficiency = hw->gemm_efficiency;
        double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        hw->memory_gb = mem / local / 1e9;
        hw->reserve_gb = 0.1 * hw->memory_gb;  // the OS, MPI buffers, the program itself
    }
    snprintf(hw->name, sizeof hw->name, "calibrated: %.16s, %d ranks, %.24s", mine, world, be->name);
    Copy c = {be, be->ops->alloc(be, (size_t)64 << 20), be->ops->alloc(be, (size_t)64 << 20), (size_t)64 << 20};
    hw->hbm_gbps = 2.0 * c.bytes / slowest(copy_once, &c, 5) / 1e9;  // read + write, per rank
    be->ops->free(be, c.src);
    be->ops->free(be, c.dst);
    if (log) fprintf(log, "  memory: %.1f GB per rank, copy bandwidth %.1f GB/s per rank\n", hw->memory_gb, hw->hbm_gbps);
    measure_links(be, hw, hosts, rank, world, log);
    backend_destroy(be);
    free(hosts);
}
