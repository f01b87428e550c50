// backend/cpu/cpu_half.c: the load/store helpers of the CPU ops on 16-bit activations
// (--bf16 / --fp16); each op family's file holds its 16-bit entries beside its fp32 ones and
// registers the ones of be->act (cpu_*_ops).
//
// With be->act BACKEND_BF16 or BACKEND_F16 the `void *` activations and weight copies of
// BackendOps hold 16-bit elements. Each 16-bit entry converts its 16-bit inputs to fp32 in
// the backend's scratch (exact: every 16-bit value is an fp32), calls the fp32 op, and rounds
// its 16-bit outputs back to nearest even (core/half.h, as CUDA's __float2bfloat16_rn):
// fp32 arithmetic inside every op, rounding at loads and stores only, the contract of
// backend.h. The rounding points are the CUDA backend's where it has them between ops: a
// fused op that CUDA rounds in the middle of (residual_layernorm_forward: res before the
// statistics; matmul_act_* other than GELU: pre, dinp before the act) is the unfused pair
// here; a GELU linear keeps its fp32 pre-activation as CUDA's GEMM epilogue does. Inside an
// op (attention's scores and probabilities) CUDA rounds more often than this; that is the
// difference left between the two backends' bf16 runs.
// Entries that are elementwise (add, cast, embedding_forward) and the optimizer's weight
// copy work on the 16-bit elements directly, without scratch. OpenBLAS's bf16 GEMM
// (cblas_sbgemm) is not used: Debian's OpenBLAS 0.3.21 is built without it (no symbol), so
// every product converts its operands and calls sgemm.
// The scratch grows to the largest call's need (the output layer's logits, with its input
// and weight: N*V_local + V_local*C + N*C floats) and is kept until the backend is destroyed.
#include "core/check.h"  // defines: core_fatal
#include "cpu_backend.h"

#include <stdlib.h>  // defines: free

size_t cpu_pad(size_t n) { return (n + 15) / 16 * 16; }

CpuArena cpu_arena(Backend *be, size_t nfloats) {
    if (nfloats * sizeof(float) > be->u.cpu.half_bytes) {
        free(be->u.cpu.half_scratch);
        be->u.cpu.half_scratch = cpu_alloc(be, nfloats * sizeof(float));
        be->u.cpu.half_bytes = nfloats * sizeof(float);
    }
    return (CpuArena){be, be->u.cpu.half_scratch};
}

float *cpu_take(CpuArena *a, size_t n) {
    float *p = a->cur;
    a->cur += cpu_pad(n);
    return p;
}

float *cpu_in(CpuArena *a, const void *p, size_t n) {
    if (!p) return NULL;
    float *f = cpu_take(a, n);
    cpu_cast(a->be, f, BACKEND_F32, p, a->be->act, n);
    return f;
}

void cpu_out(Backend *be, void *dst, const float *f, size_t n) {
    cpu_cast(be, dst, be->act, f, BACKEND_F32, n);
}

// A window's kv in the scratch (w NULL: NULL); *fw the window the fp32 op gets.
const BackendAttnWindow *cpu_win_in(CpuArena *a, const BackendAttnWindow *w,
                                       BackendAttnWindow *fw, int B, size_t row) {
    if (!w) return NULL;
    *fw = *w;
    fw->kv = cpu_in(a, w->kv, (size_t)B * w->Tk * row);
    return fw;
}
