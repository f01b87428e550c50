// tests/backend/emu/test_emu_kernel.cpp: the emulator's kernel side. Kernels are written in
// CUDA style and launched with cuda_common.cuh's CUDA_LAUNCH (and its warp_sum/block_sum):
// a warp-per-row mean/rstd reduction with shuffles, block reductions through static and
// dynamic shared memory over 2-D/3-D grids, a partial last warp, every shuffle variant,
// early-returning threads, launch-limit violations, and exit() from a kernel thread.
// The fake runtime (memory limit, devices, events) is tested in test_emu_runtime.cpp.
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, DYNAMIC_SHARED, block_sum

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "tests/testing.h"  // defines: EXPECT, test_failures_

template <class T>
static T *to_device(const std::vector<T> &h) {
    T *d;
    CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <class T>
static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// --- warp per row: mean (N), rstd (N) of x (N, C) ----------------------------------------
__global__ void row_stats_kernel(float *mean, float *rstd, const float *__restrict__ x, int N,
                                 int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;  // whole warps leave together
    const float *xr = x + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += WARP) s += xr[c];
    float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += WARP) v += (xr[c] - m) * (xr[c] - m);
    v = warp_sum(v) / C;
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rsqrtf(v + 1e-5f);
    }
}

static void test_row_stats(void) {
    const int N = 37, C = 100, rows_per_block = 4;
    std::vector<float> x((size_t)N * C);
    for (size_t i = 0; i < x.size(); i++) x[i] = sinf(0.37f * i) * 3.0f + (float)(i % 7);
    float *dx = to_device(x), *dmean, *drstd;
    CUDA_CHECK(cudaMalloc(&dmean, N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&drstd, N * sizeof(float)));
    CUDA_LAUNCH(row_stats_kernel, (N + rows_per_block - 1) / rows_per_block,
                rows_per_block * WARP, 0, (cudaStream_t)0, dmean, drstd, dx, N, C);
    std::vector<float> mean = to_host(dmean, N), rstd = to_host(drstd, N);
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[(size_t)r * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[(size_t)r * C + c] - m) * (x[(size_t)r * C + c] - m);
        double rs = 1.0 / sqrt(v / C + 1e-5);
        EXPECT(fabs(mean[r] - m) < 1e-5 * (1 + fabs(m)), "row %d mean %g vs %g", r, mean[r], m);
        EXPECT(fabs(rstd[r] - rs) < 1e-5 * rs, "row %d rstd %g vs %g", r, rstd[r], rs);
    }
    cudaFree(dx), cudaFree(dmean), cudaFree(drstd);
}

// --- block sums: out (blocks) = sum of the block's chunk of x, over a 3-D grid -----------
__global__ void block_sum_static_kernel(float *out, const float *x, int chunk) {
    __shared__ float buf[32];
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    float s = 0.0f;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) s += x[(size_t)b * chunk + i];
    s = block_sum(s, buf);
    if (threadIdx.x == 0) out[b] = s;
}

// Same sums through dynamic shared memory: every thread stores its partial, thread 0 adds.
__global__ void block_sum_dynamic_kernel(float *out, const float *x, int chunk) {
    DYNAMIC_SHARED(float, part);  // (blockDim.x)
    int b = blockIdx.x + gridDim.x * blockIdx.y;
    float s = 0.0f;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) s += x[(size_t)b * chunk + i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (unsigned i = 0; i < blockDim.x; i++) t += part[i];
        out[b] = t;
    }
}

static void test_block_sums(void) {
    const int chunk = 300, nblocks = 3 * 2 * 4;
    std::vector<float> x((size_t)nblocks * chunk);
    for (size_t i = 0; i < x.size(); i++) x[i] = (float)((i * 7919) % 13) - 6.0f;
    float *dx = to_device(x), *dout;
    CUDA_CHECK(cudaMalloc(&dout, nblocks * sizeof(float)));
    CUDA_LAUNCH(block_sum_static_kernel, dim3(3, 2, 4), 256, 0, (cudaStream_t)0, dout, dx, chunk);
    std::vector<float> s3 = to_host(dout, nblocks);
    CUDA_LAUNCH(block_sum_dynamic_kernel, dim3(6, 4), 128, 128 * sizeof(float), (cudaStream_t)0,
                dout, dx, chunk);
    std::vector<float> s2 = to_host(dout, nblocks);
    for (int b = 0; b < nblocks; b++) {
        double ref = 0;
        for (int i = 0; i < chunk; i++) ref += x[(size_t)b * chunk + i];
        EXPECT(s3[b] == (float)ref, "3-D grid block %d: %g vs %g", b, s3[b], ref);
        EXPECT(s2[b] == (float)ref, "dynamic smem block %d: %g vs %g", b, s2[b], ref);
    }
    cudaFree(dx), cudaFree(dout);
}

// --- partial last warp (48 threads), 3-D thread indices, early return ---------------------
__global__ void reverse_kernel(int *out) {
    __shared__ int s[48];
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    s[t] = 2 * t + 1000 * (int)blockIdx.x;
    __syncthreads();
    out[blockIdx.x * 48 + t] = s[47 - t];
    __syncthreads();  // s is rewritten by the next block
}

__global__ void early_return_kernel(int *out, int live) {
    __shared__ int s[128];
    if ((int)threadIdx.x >= live) return;  // returned threads no longer count at barriers
    s[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[live - 1 - (int)threadIdx.x];
}

static void test_partial_warp(void) {
    int *dout;
    CUDA_CHECK(cudaMalloc(&dout, 2 * 128 * sizeof(int)));
    CUDA_LAUNCH(reverse_kernel, 2, 48, 0, (cudaStream_t)0, dout);
    std::vector<int> a = to_host(dout, 96);
    CUDA_LAUNCH(reverse_kernel, 2, dim3(4, 3, 4), 0, (cudaStream_t)0, dout);
    std::vector<int> b = to_host(dout, 96);
    for (int blk = 0; blk < 2; blk++) {
        for (int t = 0; t < 48; t++) {
            int want = 2 * (47 - t) + 1000 * blk;
            int i = blk * 48 + t;
            EXPECT(a[i] == want, "blockDim 48: out[%d] %d", i, a[i]);
            EXPECT(b[i] == want, "blockDim 4x3x4: out[%d] %d", i, b[i]);
        }
    }
    CUDA_LAUNCH(early_return_kernel, 1, 128, 0, (cudaStream_t)0, dout, 100);
    std::vector<int> c = to_host(dout, 100);
    for (int t = 0; t < 100; t++) EXPECT(c[t] == 99 - t, "early return: out[%d] %d", t, c[t]);
    cudaFree(dout);
}

// --- every shuffle variant, against PTX's rules computed on the host ----------------------
__global__ void shuffle_kernel(int *out, double *outd) {
    int l = (int)threadIdx.x % WARP, base = (int)threadIdx.x * 6;
    int v = 100 * (int)threadIdx.x;
    out[base + 0] = __shfl_sync(FULL_MASK, v, 5);
    out[base + 1] = __shfl_up_sync(FULL_MASK, v, 3, 16);
    out[base + 2] = __shfl_down_sync(FULL_MASK, v, 4);
    out[base + 3] = __shfl_xor_sync(FULL_MASK, v, 9, 8);
    out[base + 4] = (int)__ballot_sync(FULL_MASK, l % 3 == 0);
    out[base + 5] = __all_sync(FULL_MASK, v >= 0) + 2 * __any_sync(FULL_MASK, l == 31);
    outd[threadIdx.x] = __shfl_xor_sync(FULL_MASK, (double)v + 0.5, 1);
}

static void test_shuffles(void) {
    int *d;
    double *dd;
    CUDA_CHECK(cudaMalloc(&d, 64 * 6 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dd, 64 * sizeof(double)));
    CUDA_LAUNCH(shuffle_kernel, 1, 64, 0, (cudaStream_t)0, d, dd);
    std::vector<int> o = to_host(d, 64 * 6);
    std::vector<double> od = to_host(dd, 64);
    unsigned ballot = 0;
    for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
    for (int t = 0; t < 64; t++) {
        int w = t / 32 * 32, l = t % 32;
        int up = l % 16 >= 3 ? l - 3 : l, down = l + 4 < 32 ? l + 4 : l;
        int x = ((l ^ 9) / 8 <= l / 8) ? l ^ 9 : l;  // width 8: later segments give own value
        const int want[6] = {100 * (w + 5), 100 * (w + up), 100 * (w + down), 100 * (w + x),
                             (int)ballot, 3};
        for (int k = 0; k < 6; k++)
            EXPECT(o[t * 6 + k] == want[k], "thread %d shuffle %d: %d, want %d", t, k,
                   o[t * 6 + k], want[k]);
        EXPECT(od[t] == 100.0 * (t ^ 1) + 0.5, "thread %d double xor: %g", t, od[t]);
    }
    cudaFree(d), cudaFree(dd);
}

// --- launch limits: nothing runs, cudaErrorInvalidConfiguration once ----------------------
__global__ void flag_kernel(int *flag) {
    if (threadIdx.x == 0) *flag = 1;
}

static void test_launch_limits(void) {
    int *flag;
    CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
    const struct { dim3 grid, block; size_t smem; } bad[] = {
        {dim3(1), dim3(1025), 0},        {dim3(1), dim3(32, 33), 0}, {dim3(1), dim3(1, 1, 65), 0},
        {dim3(1), dim3(64), 300 << 10}, {dim3(1, 65536), dim3(32), 0}, {dim3(0), dim3(32), 0},
        {dim3(1u << 31), dim3(32), 0},
    };
    for (const auto &c : bad) {
        emu_launch("flag_kernel", flag_kernel, c.grid, c.block, c.smem, (cudaStream_t)0, flag);
        EXPECT(cudaPeekAtLastError() == cudaErrorInvalidConfiguration, "peek after bad launch");
        EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration, "bad launch not refused");
        EXPECT(cudaGetLastError() == cudaSuccess, "last error not reset");
    }
    EXPECT(to_host(flag, 1)[0] == 0, "a refused launch ran");
    CUDA_LAUNCH(flag_kernel, 1, 1024, 227 << 10, (cudaStream_t)0, flag);  // at the limits
    EXPECT(to_host(flag, 1)[0] == 1, "launch at the limits did not run");
    cudaFree(flag);
}

// --- exit() from a kernel thread ends the process (run in a child) -----------------------
__global__ void exit_kernel(int code) {
    if (blockIdx.x == 1 && threadIdx.x == 70) exit(code);
    __syncthreads();  // everyone else waits here
}

// Runs `self flag` in a child (its stderr to err_fd when >= 0) for at most 10 s. Returns 1
// with its wait status in *status, or 0 if it had to be killed (a hang).
static int run_child(const char *self, const char *flag, int err_fd, int *status) {
    pid_t pid = fork();
    if (pid == 0) {
        if (err_fd >= 0) dup2(err_fd, 2);
        execl(self, self, flag, (char *)NULL);
        _exit(127);
    }
    *status = 0;
    for (int i = 0; i < 200 && waitpid(pid, status, WNOHANG) == 0; i++) usleep(50000);
    if (waitpid(pid, status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, status, 0);
        return 0;
    }
    return 1;
}

static void test_exit_in_kernel(const char *self) {
    int status;
    if (!run_child(self, "--exit-in-kernel", -1, &status)) {
        EXPECT(0, "exit() in a kernel thread hung the process");
        return;
    }
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 7, "child status %d", status);
}

// --- a deadlock (threads of one block at different barriers) is named, not a hang ---------
// Fiber engine only: with real threads it would hang, as on a GPU.
__global__ void deadlock_kernel(int unused) {
    (void)unused;
    if (threadIdx.x < 48) __syncthreads();  // warp 0 and half of warp 1 wait for the block,
    else __syncwarp();                      // the other half for the whole of warp 1
}

static void test_deadlock_named(const char *self) {
    const char *engine = getenv("MEGAC_EMU_ENGINE");
    if (engine && strcmp(engine, "threads") == 0) return;
    char path[] = "/tmp/test_emu_deadlock_XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0, "mkstemp");
    if (fd < 0) return;
    int status;
    if (!run_child(self, "--deadlock", fd, &status)) {
        EXPECT(0, "a deadlocked block hung the process");
    } else {
        EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "child status %d", status);
        char buf[1024] = {0};
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        EXPECT(n > 0 && strstr(buf, "deadlock_kernel") && strstr(buf, "deadlock"),
               "no deadlock message naming the kernel: '%s'", buf);
    }
    close(fd);
    unlink(path);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--exit-in-kernel") == 0) {
        CUDA_LAUNCH(exit_kernel, 3, 256, 0, (cudaStream_t)0, 7);
        return 0;  // not reached
    }
    if (argc > 1 && strcmp(argv[1], "--deadlock") == 0) {
        CUDA_LAUNCH(deadlock_kernel, 2, 64, 0, (cudaStream_t)0, 0);
        return 0;  // not reached
    }
    test_row_stats();
    test_block_sums();
    test_partial_warp();
    test_shuffles();
    test_launch_limits();
    test_exit_in_kernel(argv[0]);
    test_deadlock_named(argv[0]);
    if (test_failures_) {
        fprintf(stderr, "%d failure(s)\n", test_failures_);
        return 1;
    }
    printf("emu kernel tests passed\n");
    return 0;
}
