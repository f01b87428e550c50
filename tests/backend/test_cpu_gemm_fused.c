// tests/backend/test_cpu_gemm_fused.c: the linear layer with its bias and GELU done inside
// each GEMM panel (cpu_gemm_fused) gives the same bits as the unfused sequence (bias rows,
// the product with beta 1, then GELU / GELU' over the whole output), for 1 and 2 threads,
// every panel policy, and shapes with ragged panels cut along rows and along columns.
// (A panel's offset into bias, pre or the GELU output that is wrong fails it.)
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"  // defines: cpu_act_forward, cpu_act_grad_span, cpu_colsum_acc
#include "backend/cpu/cpu_blas.h"
#include "backend/cpu/cpu_gemm.h"  // defines: cpu_gemm, CPU_GEMM_SPLIT_*
#include "tests/backend/backend_test_util.h"

#include <string.h>

// out/pre (N, OC) and dinp (N, C), dweight (OC, C), dbias (OC) the unfused way.
static void unfused(Backend *be, float *out, float *pre, float *dinp, float *dw, float *db,
                    const float *x, const float *w, const float *b, const float *g,
                    const float *pre_c, int N, int C, int OC) {
    for (int i = 0; i < N; i++) memcpy(pre + (size_t)i * OC, b, (size_t)OC * sizeof(float));
    cpu_gemm(be, 0, 1, N, OC, C, 1.0f, x, C, w, C, 1.0f, pre, OC);  // pre (N, OC) = x w^T + b
    cpu_act_forward(be, out, pre, 1, (int)((size_t)N * OC), BACKEND_ACT_GELU);
    // Backward through a layer whose input was gelu(pre_c): g (N, OC) is its output gradient.
    cpu_gemm(be, 0, 0, N, C, OC, 1.0f, g, OC, w, C, 0.0f, dinp, C);  // (N, C)
    cpu_gemm(be, 1, 0, OC, C, N, 1.0f, g, OC, x, C, 1.0f, dw, C);   // (OC, C) accumulated
    cpu_colsum_acc(be, db, g, N, OC);
    cpu_act_grad_span(BACKEND_ACT_GELU, dinp, pre_c, dinp, (size_t)N * C);  // GELU' over the whole output, in place
}

static void test_fused(Backend *be, TestRng *r) {
    // N, C, OC; C = 320 lets the input-gradient product (N, C) be cut into column panels.
    const int shapes[4][3] = {{300, 72, 260}, {130, 96, 400}, {1024, 64, 192}, {200, 320, 160}};
    const int policies[5][2] = {{CPU_GEMM_SPLIT_RULE, 0}, {CPU_GEMM_SPLIT_M, 1},
                                {CPU_GEMM_SPLIT_M, 4}, {CPU_GEMM_SPLIT_N, 1}, {CPU_GEMM_SPLIT_N, 3}};
    for (int s = 0; s < 4; s++) {
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        size_t no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
        float *x = test_floats((int)ni), *w = test_floats((int)nw), *b = test_floats(OC);
        float *g = test_floats((int)no), *pc = test_floats((int)ni);
        rng_fill(r, x, ni, -1, 1), rng_fill(r, w, nw, -1, 1), rng_fill(r, b, OC, -1, 1);
        rng_fill(r, g, no, -1, 1), rng_fill(r, pc, ni, -3, 3);
        float *buf[2][5];  // [fused, unfused][out, pre, dinp, dweight, dbias]
        size_t len[5] = {no, no, ni, nw, (size_t)OC};
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 5; j++) {
                buf[k][j] = test_floats((int)len[j]);
                rng_fill(r, buf[k][j], len[j], -1, 1);  // dweight/dbias accumulate onto these
            }
        for (int j = 3; j < 5; j++) memcpy(buf[1][j], buf[0][j], len[j] * sizeof(float));
        for (int pol = 0; pol < 5; pol++) {
            be->u.cpu.gemm_split = policies[pol][0], be->u.cpu.gemm_panels = policies[pol][1];
            be->ops->matmul_act_forward(be, buf[0][0], buf[0][1], x, w, b, N, C, OC, BACKEND_ACT_GELU);
            be->ops->matmul_act_backward(be, buf[0][2], buf[0][3], buf[0][4], g, x, w, pc, N,
                                           C, OC, BACKEND_ACT_GELU);
            unfused(be, buf[1][0], buf[1][1], buf[1][2], buf[1][3], buf[1][4], x, w, b, g, pc, N,
                    C, OC);
            static const char *what[5] = {"gelu out", "pre", "dinp", "dweight", "dbias"};
            for (int j = 0; j < 5; j++) EXPECT_SAME_BITS(buf[0][j], buf[1][j], len[j], what[j]);
            int gelu_taken = 1;  // out really is gelu(pre): smaller where pre < 0, equal never
            for (size_t i = 0; i < no; i++)
                gelu_taken &= buf[0][1][i] >= 0 ? buf[0][0][i] <= buf[0][1][i] : buf[0][0][i] > buf[0][1][i];
            EXPECT(gelu_taken, "shape %d, policy %d: out is not gelu(pre)", s, pol);
            // matmul_forward without bias: beta 0, whatever the output held.
            be->ops->matmul_forward(be, buf[0][1], x, w, NULL, N, C, OC);
            cpu_gemm(be, 0, 1, N, OC, C, 1.0f, x, C, w, C, 0.0f, buf[1][1], OC);
            EXPECT_SAME_BITS(buf[0][1], buf[1][1], no, "matmul without bias");
        }
        be->u.cpu.gemm_split = CPU_GEMM_SPLIT_RULE, be->u.cpu.gemm_panels = 0;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 5; j++) free(buf[k][j]);
        free(x), free(w), free(b), free(g), free(pc);
    }
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    Backend *be1 = backend_cpu_create(1, BACKEND_F32);
    Backend *be2 = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {7};
    test_fused(be1, &r);
    test_fused(be2, &r);
    backend_destroy(be2), backend_destroy(be1);
    return test_result("test_cpu_gemm_fused");
}
