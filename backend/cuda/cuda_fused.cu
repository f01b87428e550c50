// backend/cuda/cuda_fused.cu: the fused ops (contracts: backend/backend.h).
//
//   residual_layernorm_forward: one kernel instead of add + layernorm_forward: norm_row.cuh's
//     block-per-row LayerNorm with the add fused in (16-byte accesses, the row in registers;
//     bitwise add + layernorm_forward), or for rows longer than it takes (C > 8192) fused.cuh's
//     per-warp kernel (bitwise add + norm.cuh's per-warp LayerNorm, which serves those rows).
//     Per element of the (N, C) residual stream, the pair reads a, b, writes res (add), then
//     reads res and writes ln: 3 reads + 2 writes; fused: 2 reads + 2 writes, one launch fewer.
//   matmul_act_forward, act GELU: one cuBLASLt GEMM with the GELU_AUX_BIAS epilogue (GELU_AUX without
//     bias): out = gelu(inp W^T + b), the pre-activation written as the aux output. Saves the
//     GELU kernel's read of pre and write of out: 2 of the 3 passes over (N, OC) that follow
//     the GEMM's own write (the GEMM writes out and pre instead of pre alone).
//   matmul_act_backward, act GELU: the dinp GEMM with the DGELU epilogue: dinp = (dout W) * gelu'(pre).
//     Saves the GELU backward kernel's passes (read dinp, read pre, write dinp -> the GEMM
//     reads pre in its epilogue): one read and one write of (N, C) fewer.
// cuBLASLt's rules for the GELU epilogues (cublasLt.h): the aux leading dimension a multiple
// of 8 elements; its pointer (and the bias's) are used by the heuristic for the alignment,
// which megac requires to be 16 bytes (cuda_gelu_epilogue_ok). Other pointers, or a shape
// for which the heuristic has no algorithm with the epilogue, take the unfused path (GEMM +
// kernel), which gives the same function; so do the other activations (no epilogue), and
// every GELU linear when the backend was created with MEGAC_CUDA_NO_GELU_EPILOGUE=1
// (CudaState.gelu_epilogue 0: the GEMM with the bias epilogue, then megac's GELU kernel).
// Real cuBLASLt's GELU formula (tanh form?) and rounding are not checked here (no GPU): the
// emulator computes the CUDA kernels' expression; test_cuda_fused compares the fused ops with
// the CPU on a GPU build too.
#include "backend/cuda/fused.cuh"

template <typename T>
static void residual_layernorm_t(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                 const void *a, const void *b, const void *weight,
                                 const void *bias, int N, int C) {
    unsigned blocks = cuda_blocks((size_t)N, FUSED_THREADS / WARP, 4096);  // a warp per row
    CUDA_LAUNCH(residual_layernorm_forward_kernel<T>, blocks, FUSED_THREADS, 0, cuda_stream(be),
                (T *)res, (T *)ln, mean, rstd, (const T *)a, (const T *)b, (const T *)weight,
                (const T *)bias, N, C);
}

// res (N, C) = a + b; ln (N, C) = layernorm(res); mean, rstd (N) when not NULL.
void cuda_residual_layernorm_forward(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                     const void *a, const void *b, const void *weight,
                                     const void *bias, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (cuda_residual_layernorm_row(be, res, ln, mean, rstd, a, b, weight, bias, N, C)) return;
    ACT_DISPATCH(be->act, residual_layernorm_t, be, res, ln, mean, rstd, a, b, weight, bias, N, C);
}

// pre (N, OC) = inp @ weight^T + bias; out = act(pre): one GEMM for GELU when aligned.
void cuda_matmul_act_forward(Backend *be, void *out, void *pre, const void *inp,
                             const void *weight, const void *bias, int N, int C, int OC,
                             BackendAct act) {
    // row-major pre (N, OC) is column-major (OC, N): aux leading dimension OC
    if (act == BACKEND_ACT_GELU && cuda_state(be)->gelu_epilogue &&
        cuda_gelu_epilogue_ok(bias, pre, OC) &&
        cuda_gemm_ex(be, 0, 1, N, OC, C, 1.0f, inp, C, 0, weight, C, 0, 0.0f, out, OC, 0, 1,
                     bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias,
                     pre, OC, be->act, be->act))
        return;
    cuda_matmul_forward(be, pre, inp, weight, bias, N, C, OC);  // unfused
    cuda_act_forward(be, out, pre, N, backend_act_width(act, OC), act);
}

// matmul_backward with dinp (N, C) = (dout @ weight) * act'(pre (N, C)), act pointwise.
void cuda_matmul_act_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                              const void *dout, const void *inp, const void *weight,
                              const void *pre, int N, int C, int OC, BackendAct act) {
    if (backend_act_gated(act)) core_fatal("matmul_act_backward: a gated activation");
    if (act == BACKEND_ACT_GELU && cuda_state(be)->gelu_epilogue &&
        cuda_gelu_epilogue_ok(NULL, pre, C) &&
        cuda_gemm_ex(be, 0, 0, N, C, OC, 1.0f, dout, OC, 0, weight, C, 0, 0.0f, dinp, C, 0, 1,
                     CUBLASLT_EPILOGUE_DGELU, NULL, pre, C, be->act, be->act)) {
        cuda_matmul_backward(be, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
        return;
    }
    cuda_matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);  // unfused
    cuda_act_backward(be, dinp, pre, dinp, N, C, act);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_fused_ops(BackendOps *t) {
    t->residual_layernorm_forward = cuda_residual_layernorm_forward;
    t->matmul_act_forward = cuda_matmul_act_forward;
    t->matmul_act_backward = cuda_matmul_act_backward;
}
