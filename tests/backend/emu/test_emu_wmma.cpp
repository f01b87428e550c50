// tests/backend/emu/test_emu_wmma.cpp: the emulator's warp matrix functions (emu/include/
// mma.h), through kernels written as for a GPU: two warps each multiply a 16x32 bf16 or fp16
// tile (row_major) by a 32x16 tile read as col_major, accumulating onto a float tile loaded
// row-major or col-major, scale every fragment element (x[], num_elements), store row-major
// to shared memory, __syncwarp, and copy out (each lane the elements another lane stored).
// Checked against a double reference on the same 16-bit inputs (fp32 sums of 32 products:
// 1e-5 relative); a misaligned pointer and a bad ldm abort with "emu: wmma" (in a child).
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, WARP

#include <mma.h>  // defines: nvcuda::wmma (emulated)

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "tests/testing.h"  // defines: EXPECT, test_failures_

namespace wmma = nvcuda::wmma;

// out (2, 16, 16) = 0.5 * (a_w (16, 32) @ b_w (32, 16) + c) per warp w; a_w row-major
// (ld 40), b_w stored transposed (16, 32) (ld 40), c (16, 16) row-major or col-major.
template <typename E>
__global__ void wmma_kernel(float *out, const E *a, const E *b, const float *c, int c_col) {
    __shared__ __align__(128) E sa[2][16 * 40], sb[2][16 * 40];
    __shared__ __align__(128) float sc[2][16 * 20], so[2][16 * 20];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    for (int i = lane; i < 16 * 32; i += WARP) {
        sa[warp][(i / 32) * 40 + i % 32] = a[warp * 512 + i];
        sb[warp][(i / 32) * 40 + i % 32] = b[warp * 512 + i];
    }
    for (int i = lane; i < 256; i += WARP) sc[warp][(i / 16) * 20 + i % 16] = c[warp * 256 + i];
    __syncwarp();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, sc[warp], 20, c_col ? wmma::mem_col_major : wmma::mem_row_major);
    for (int k = 0; k < 2; k++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, sa[warp] + 16 * k, 40);
        wmma::load_matrix_sync(fb, sb[warp] + 16 * k, 40);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 0.5f;
    wmma::store_matrix_sync(so[warp], acc, 20, wmma::mem_row_major);
    __syncwarp();  // other lanes stored parts of the tile (ThreadSanitizer: a race without it)
    for (int i = lane; i < 256; i += WARP) {  // element j was stored by lane (lane + 1) % 32
        int j = (i + 1) % 256;
        out[warp * 256 + j] = so[warp][(j / 16) * 20 + j % 16];
    }
}

// A fragment load from p + off with leading dimension ld (the rules: abort when broken).
__global__ void wmma_bad_kernel(int off, int ld) {
    __shared__ __align__(128) __half s[16 * 64];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, s + off, (unsigned)ld);
}

static float to_f(__half h) { return __half2float(h); }
static float to_f(__nv_bfloat16 h) { return __bfloat162float(h); }
static void set(__half *p, float v) { *p = __float2half_rn(v); }
static void set(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

template <typename E>
static void check(const char *name, int c_col) {
    std::vector<E> a(1024), b(1024);
    std::vector<float> c(512), out(512);
    for (int i = 0; i < 1024; i++) set(&a[i], sinf(0.37f * i)), set(&b[i], cosf(0.11f * i) * 2);
    for (int i = 0; i < 512; i++) c[i] = 0.01f * (i % 37) - 0.2f;
    E *da, *db;
    float *dc, *dout;
    CUDA_CHECK(cudaMalloc(&da, 2048));
    CUDA_CHECK(cudaMalloc(&db, 2048));
    CUDA_CHECK(cudaMalloc(&dc, 2048));
    CUDA_CHECK(cudaMalloc(&dout, 2048));
    CUDA_CHECK(cudaMemcpy(da, a.data(), 2048, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.data(), 2048, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dc, c.data(), 2048, cudaMemcpyHostToDevice));
    CUDA_LAUNCH(wmma_kernel<E>, 1, 2 * WARP, 0, (cudaStream_t)0, dout, da, db, dc, c_col);
    CUDA_CHECK(cudaMemcpy(out.data(), dout, 2048, cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int w = 0; w < 2; w++)
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                double s = c[w * 256 + (c_col ? n * 16 + m : m * 16 + n)];
                for (int k = 0; k < 32; k++)  // b_w stored transposed: b[n][k]
                    s += (double)to_f(a[w * 512 + m * 32 + k]) * to_f(b[w * 512 + n * 32 + k]);
                worst = fmax(worst, fabs(out[w * 256 + m * 16 + n] - 0.5 * s) / fmax(1.0, fabs(0.5 * s)));
            }
    EXPECT(worst < 1e-5, "wmma %s (accumulator %s): max rel err %.2e", name,
           c_col ? "col-major" : "row-major", worst);
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dout);
}

// The child launches the bad load and must die with "emu: wmma" on stderr.
static void check_abort(const char *self, const char *mode, const char *what) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "(%s %s 2>&1; true) 2>/dev/null | grep -q 'emu: wmma %s'", self, mode, what);
    EXPECT(system(cmd) == 0, "%s: no 'emu: wmma %s' abort", mode, what);
}

int main(int argc, char **argv) {
    if (argc > 1) {  // the child: a rule broken on purpose
        int misaligned = strcmp(argv[1], "--misaligned") == 0;
        CUDA_LAUNCH(wmma_bad_kernel, 1, WARP, 0, (cudaStream_t)0, misaligned ? 8 : 0, misaligned ? 64 : 20);
        return 0;
    }
    check<__half>("fp16", 0);
    check<__half>("fp16", 1);
    check<__nv_bfloat16>("bf16", 0);
    check<__nv_bfloat16>("bf16", 1);
    check_abort(argv[0], "--misaligned", "load_matrix_sync: pointer");
    check_abort(argv[0], "--bad-ldm", "load_matrix_sync: ldm");
    return test_result("emu_wmma");
}
