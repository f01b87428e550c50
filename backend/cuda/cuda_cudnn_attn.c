// backend/cuda/cuda_cudnn_attn.c: fused causal attention (flash_attention_forward/backward)
// through cuDNN's fused scaled-dot-product attention, built as a cuDNN operation graph of
// matmuls, pointwise ops and reductions that cuDNN fuses into one flash-attention engine
// (the graph cuDNN's own frontend builds for SDPA). Taken by cuda_flash_attention.cu when
// the backend's attention kernels (be->attn, --attention-backend) allow it and the call is
// one cuDNN runs with megac's semantics (backend_attn_cudnn_case); anything cuDNN refuses
// returns 0 and megac's kernels run instead.
//
// Layout: qkv (B, T, 3C), C = NH*hs, is read in place through strides (no copies): Q, K, V
// are (B, NH, T, hs) views with row stride 3C; out, dout (B, T, C); lse (B, NH, T) fp32 is
// cuDNN's softmax statistics (max + log(sum exp), natural log: megac's lse, so a cuDNN
// forward and a megac backward, or the reverse, agree); the backward's scratch (B, NH, T)
// holds rowsum(dout * out) as the contract says. Scale 1/sqrt(hs); causal: key j <= query i.
// The backward is the dP-workspace form (dQ written by a matmul, not accumulated with
// atomics) and engines marked non-deterministic are skipped: the same bits every run.
// Plans are built once per (direction, B, T, NH, hs, type) and cached; the workspace grows
// to the largest plan's.
#include "backend/cuda/cuda_cudnn.h"
#include "backend/cuda/cuda_internal.h"

#include <float.h>   // defines: FLT_MAX
#include <math.h>    // defines: sqrtf, INFINITY
#include <stdint.h>  // defines: uintptr_t
#include <stdio.h>   // defines: snprintf
#include <stdlib.h>  // defines: free
#include <string.h>  // defines: memset

enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF, U_DO, U_DQ, U_DK, U_DV, U_SOFTSUM,
       U_VIRTUAL = 100 };

#define CUDNN_ATTN_PLANS 16
typedef struct {
    int used, bwd, B, T, NH, hs, act;
    cudnnBackendDescriptor_t plan;  // NULL: cuDNN has no plan for this case (megac's kernels)
    CudnnGraph *g;                  // the descriptors the plan was made from, kept as long
                                    // as it (the backend API does not say it copies them)
    int64_t ws;                     // its workspace bytes
    char why[160];                  // why there is no plan
} CudnnAttnPlan;

struct CudnnAttn {
    void *lib;
    CudnnApi api;
    cudnnHandle_t h;
    int usable;      // library and handle ready
    char why[256];   // why not usable
    size_t version;  // cudnnGetVersion() of the loaded library
    CudnnAttnPlan plans[CUDNN_ATTN_PLANS];
    int next;        // the slot the next new plan takes (round robin)
    void *ws;        // device workspace of ws_bytes
    size_t ws_bytes;
};

// The state, made on first use: the library opened, a handle on the backend's stream.
static CudnnAttn *attn_state(Backend *be) {
    CudaState *st = cuda_state(be);
    if (st->cudnn) return st->cudnn;
    CudnnAttn *c = core_calloc(1, sizeof *c);
    st->cudnn = c;
    if (cudnn_api_open(&c->api, &c->lib, c->why, sizeof c->why)) return c;
    c->version = c->api.GetVersion();
    cudnnStatus_t s = c->api.Create(&c->h);
    if (s == CUDNN_STATUS_SUCCESS) s = c->api.SetStream(c->h, st->stream);
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(c->why, sizeof c->why, "cudnnCreate: %s", c->api.GetErrorString(s));
        return c;
    }
    c->usable = 1;
    return c;
}

// Destroys a cached plan and its graph; the slot becomes unused.
static void plan_drop(CudnnAttn *c, CudnnAttnPlan *p) {
    if (p->plan) c->api.DestroyDescriptor(p->plan);
    if (p->g) cudnn_graph_free(p->g);
    free(p->g);
    memset(p, 0, sizeof *p);
}

void cuda_cudnn_attn_free(CudnnAttn *c) {
    if (!c) return;
    for (int i = 0; i < CUDNN_ATTN_PLANS; i++) plan_drop(c, &c->plans[i]);
    if (c->ws) cudaFree(c->ws);
    if (c->usable) c->api.Destroy(c->h);
    free(c);  // the library stays open: cuDNN's own threads may still reference it
}

static cudnnDataType_t cudnn_type(BackendDType t) {
    return t == BACKEND_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

// The views of the graphs: qkv-strided Q/K/V (and K, V transposed), out-strided O and dO,
// the statistics (B, NH, T, 1) and the scores (B, NH, T, T).
typedef struct { int64_t q[4], qs[4], kt[4], kts[4], o[4], os[4], st[4], sts[4], s[4], ss[4]; } Views;

static Views views(int B, int T, int NH, int hs) {
    int64_t C = (int64_t)NH * hs, ld = 3 * C;
    Views v = {{B, NH, T, hs}, {T * ld, hs, ld, 1}, {B, NH, hs, T}, {T * ld, hs, 1, ld},
               {B, NH, T, hs}, {T * C, hs, C, 1}, {B, NH, T, 1}, {(int64_t)NH * T, T, 1, 1},
               {B, NH, T, T}, {0}};
    cudnn_packed_strides(v.s, v.ss);
    return v;
}

// The causal mask on scores x (B, NH, T, T) fp32: y = x where key <= query, else neginf.
static cudnnBackendDescriptor_t causal(CudnnGraph *g, const Views *v, cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t neginf) {
    cudnnBackendDescriptor_t row = cudnn_tensor(g, 0, CUDNN_DATA_INT32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t col = cudnn_tensor(g, 0, CUDNN_DATA_INT32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t keep = cudnn_tensor(g, 0, CUDNN_DATA_BOOLEAN, v->s, v->ss, 0);
    cudnnBackendDescriptor_t y = cudnn_tensor(g, 0, CUDNN_DATA_FLOAT, v->s, v->ss, 0);
    cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neginf, keep, y, -1);
    return y;
}

// Forward: S = Q K^T * scale, causal mask, softmax (statistics out), O = P V.
static void build_forward(CudnnGraph *g, const Views *v, cudnnDataType_t dt) {
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t q = cudnn_tensor(g, U_Q, dt, v->q, v->qs, 0);
    cudnnBackendDescriptor_t kt = cudnn_tensor(g, U_K, dt, v->kt, v->kts, 0);
    cudnnBackendDescriptor_t val = cudnn_tensor(g, U_V, dt, v->q, v->qs, 0);
    cudnnBackendDescriptor_t o = cudnn_tensor(g, U_O, dt, v->o, v->os, 0);
    cudnnBackendDescriptor_t stats = cudnn_tensor(g, U_STATS, f32, v->st, v->sts, 0);
    cudnnBackendDescriptor_t scale = cudnn_tensor(g, U_SCALE, f32, NULL, NULL, 1);
    cudnnBackendDescriptor_t neginf = cudnn_tensor(g, U_NEGINF, f32, NULL, NULL, 1);
    cudnnBackendDescriptor_t s = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t s1 = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnn_matmul(g, q, kt, s);
    cudnn_pointwise(g, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, s1, -1);
    cudnnBackendDescriptor_t sm = causal(g, v, s1, neginf);
    cudnnBackendDescriptor_t mx = cudnn_tensor(g, 0, f32, v->st, v->sts, 0);
    cudnnBackendDescriptor_t sub = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t e = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t sum = cudnn_tensor(g, 0, f32, v->st, v->sts, 0);
    cudnnBackendDescriptor_t lg = cudnn_tensor(g, 0, f32, v->st, v->sts, 0);
    cudnnBackendDescriptor_t p = cudnn_tensor(g, 0, dt, v->s, v->ss, 0);  // bmm2 reads P as dt
    cudnn_reduction(g, CUDNN_REDUCE_TENSOR_MAX, sm, mx);
    cudnn_pointwise(g, CUDNN_POINTWISE_SUB, f32, sm, mx, NULL, sub, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_EXP, f32, sub, NULL, NULL, e, -1);
    cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cudnn_pointwise(g, CUDNN_POINTWISE_LOG, f32, sum, NULL, NULL, lg, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_ADD, f32, mx, lg, NULL, stats, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_DIV, f32, e, sum, NULL, p, -1);
    cudnn_matmul(g, p, val, o);
}

// Backward: softsum = rowsum(dO * O); P = exp(mask(S * scale - stats)); dV = P^T dO;
// dS = P * (dO V^T - softsum) * scale; dK = dS^T Q; dQ = dS K.
static void build_backward(CudnnGraph *g, const Views *v, cudnnDataType_t dt) {
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    int64_t B = v->q[0], NH = v->q[1], T = v->q[2], hs = v->q[3];
    int64_t xs[4] = {NH * T * hs, T * hs, NH * hs, 1};   // dO * O, as cuDNN's frontend lays it
    int64_t tt[4] = {B, NH, T, T}, tts[4] = {NH * T * T, T * T, 1, T};  // a transposed (T, T)
    cudnnBackendDescriptor_t q = cudnn_tensor(g, U_Q, dt, v->q, v->qs, 0);
    cudnnBackendDescriptor_t kt = cudnn_tensor(g, U_K, dt, v->kt, v->kts, 0);
    cudnnBackendDescriptor_t vt = cudnn_tensor(g, U_V, dt, v->kt, v->kts, 0);
    cudnnBackendDescriptor_t o = cudnn_tensor(g, U_O, dt, v->o, v->os, 0);
    cudnnBackendDescriptor_t dout = cudnn_tensor(g, U_DO, dt, v->o, v->os, 0);
    cudnnBackendDescriptor_t stats = cudnn_tensor(g, U_STATS, f32, v->st, v->sts, 0);
    cudnnBackendDescriptor_t softsum = cudnn_tensor(g, U_SOFTSUM, f32, v->st, v->sts, 0);
    cudnnBackendDescriptor_t dq = cudnn_tensor(g, U_DQ, dt, v->q, v->qs, 0);
    cudnnBackendDescriptor_t dk = cudnn_tensor(g, U_DK, dt, v->q, v->qs, 0);
    cudnnBackendDescriptor_t dv = cudnn_tensor(g, U_DV, dt, v->q, v->qs, 0);
    cudnnBackendDescriptor_t scale = cudnn_tensor(g, U_SCALE, f32, NULL, NULL, 1);
    cudnnBackendDescriptor_t neginf = cudnn_tensor(g, U_NEGINF, f32, NULL, NULL, 1);
    cudnnBackendDescriptor_t dxo = cudnn_tensor(g, 0, f32, v->q, xs, 0);
    cudnn_pointwise(g, CUDNN_POINTWISE_MUL, f32, dout, o, NULL, dxo, -1);
    cudnn_reduction(g, CUDNN_REDUCE_TENSOR_ADD, dxo, softsum);
    cudnnBackendDescriptor_t s = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t s1 = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t s2 = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnn_matmul(g, q, kt, s);
    cudnn_pointwise(g, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, s1, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_SUB, f32, s1, stats, NULL, s2, -1);
    cudnnBackendDescriptor_t sm = causal(g, v, s2, neginf);
    cudnnBackendDescriptor_t p = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnn_pointwise(g, CUDNN_POINTWISE_EXP, f32, sm, NULL, NULL, p, -1);
    cudnnBackendDescriptor_t pt = cudnn_tensor(g, 0, dt, tt, tts, 0);
    cudnn_reshape(g, p, pt);
    cudnn_matmul(g, pt, dout, dv);
    cudnnBackendDescriptor_t dp = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t dp1 = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t dp2 = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnnBackendDescriptor_t ds = cudnn_tensor(g, 0, f32, v->s, v->ss, 0);
    cudnn_matmul(g, dout, vt, dp);
    cudnn_pointwise(g, CUDNN_POINTWISE_SUB, f32, dp, softsum, NULL, dp1, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_MUL, f32, dp1, p, NULL, dp2, -1);
    cudnn_pointwise(g, CUDNN_POINTWISE_MUL, f32, dp2, scale, NULL, ds, -1);
    cudnnBackendDescriptor_t dst = cudnn_tensor(g, 0, dt, tt, tts, 0);
    cudnn_reshape(g, ds, dst);
    cudnn_matmul(g, dst, q, dk);
    cudnnBackendDescriptor_t k = cudnn_tensor(g, 0, dt, v->q, v->qs, 0);  // K again, untransposed
    cudnn_reshape(g, kt, k);
    cudnn_matmul(g, ds, k, dq);
}

int cuda_cudnn_attn_graph_check(const CudnnApi *api, int bwd, BackendDType act, int B, int T,
                                int NH, int hs, char *why, size_t n) {
    CudnnGraph *g = core_calloc(1, sizeof *g);
    cudnn_graph_init(g, api, U_VIRTUAL);
    Views v = views(B, T, NH, hs);
    if (bwd) build_backward(g, &v, cudnn_type(act));
    else build_forward(g, &v, cudnn_type(act));
    int ok = g->status == CUDNN_STATUS_SUCCESS && cudnn_graph_finalize(g, NULL) != NULL;
    if (!ok) snprintf(why, n, "%s (%d operations built)", g->failed, g->nops);
    cudnn_graph_free(g);
    free(g);
    return ok ? 0 : -1;
}

// The cached plan for this case, built on first use (its plan NULL if cuDNN has none).
static CudnnAttnPlan *attn_plan(CudnnAttn *c, int bwd, BackendDType act, int B, int T, int NH,
                                int hs) {
    for (int i = 0; i < CUDNN_ATTN_PLANS; i++) {
        CudnnAttnPlan *p = &c->plans[i];
        if (p->used && p->bwd == bwd && p->B == B && p->T == T && p->NH == NH && p->hs == hs &&
            p->act == (int)act)
            return p;
    }
    CudnnAttnPlan *p = &c->plans[c->next];
    c->next = (c->next + 1) % CUDNN_ATTN_PLANS;
    plan_drop(c, p);
    *p = (CudnnAttnPlan){1, bwd, B, T, NH, hs, (int)act, NULL, NULL, 0, ""};
    CudnnGraph *g = core_calloc(1, sizeof *g);  // ~1.5 KB of handles: not on the stack
    cudnn_graph_init(g, &c->api, U_VIRTUAL);
    Views v = views(B, T, NH, hs);
    if (bwd) build_backward(g, &v, cudnn_type(act));
    else build_forward(g, &v, cudnn_type(act));
    if (g->status == CUDNN_STATUS_SUCCESS) p->plan = cudnn_graph_plan(g, c->h, &p->ws);
    if (!p->plan)
        snprintf(p->why, sizeof p->why, "cuDNN %zu has no %s plan for B %d T %d NH %d hs %d %s (%s)",
                 c->version, bwd ? "backward" : "forward", B, T, NH, hs, backend_dtype_name(act),
                 g->failed);
    if (p->plan) {
        p->g = g;
    } else {
        cudnn_graph_free(g);
        free(g);
    }
    return p;
}

// The plan ready to run (workspace grown to it), or NULL with *why set.
static CudnnAttnPlan *ready(Backend *be, int bwd, int B, int T, int NH, int hs, const char **why) {
    CudnnAttn *c = attn_state(be);
    if (!c->usable) {
        *why = c->why;
        return NULL;
    }
    CudnnAttnPlan *p = attn_plan(c, bwd, be->act, B, T, NH, hs);
    if (!p->plan) {
        *why = p->why;
        return NULL;
    }
    if ((size_t)p->ws > c->ws_bytes) {
        if (c->ws) CUDA_CHECK(cudaFree(c->ws));  // synchronises: no queued work still uses it
        c->ws = NULL;
        CUDA_CHECK(cudaMalloc(&c->ws, (size_t)p->ws));
        c->ws_bytes = (size_t)p->ws;
    }
    return p;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Runs the plan; a failure to run one that cuDNN planned ends the job (a GPU fault, not a
// missing feature).
static void run(Backend *be, CudnnAttnPlan *p, const int64_t *uids, void *const *ptrs, int n) {
    CudnnAttn *c = cuda_state(be)->cudnn;
    cudnnStatus_t s = cudnn_plan_execute(&c->api, c->h, p->plan, uids, ptrs, n, c->ws);
    if (s != CUDNN_STATUS_SUCCESS)
        core_fatal("cuDNN fused attention (%s, B %d T %d NH %d hs %d): %s", p->bwd ? "backward" : "forward",
                   p->B, p->T, p->NH, p->hs, c->api.GetErrorString(s));
}

static float neg_inf(const CudnnAttn *c) {
    return c->version < 91000 ? -FLT_MAX : -INFINITY;  // older releases want the lowest float
}

int cuda_cudnn_attn_forward(Backend *be, void *out, float *lse, const void *qkv, int B, int T,
                            int NH, int hs, const char **why) {
    size_t esz = backend_dtype_size(be->act), C = (size_t)NH * hs;
    if (!aligned16(qkv) || !aligned16(out) || !aligned16(lse) || (C * esz) % 16) {
        *why = "cuDNN needs 16-byte aligned tensors";
        return 0;
    }
    CudnnAttnPlan *p = ready(be, 0, B, T, NH, hs, why);
    if (!p) return 0;
    float scale = 1.0f / sqrtf((float)hs), ninf = neg_inf(cuda_state(be)->cudnn);
    const char *base = qkv;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF};
    void *ptrs[] = {(void *)base, (void *)(base + C * esz), (void *)(base + 2 * C * esz), out, lse,
                    &scale, &ninf};
    run(be, p, uids, ptrs, 7);
    return 1;
}

int cuda_cudnn_attn_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *out, const float *lse, int B, int T,
                             int NH, int hs, const char **why) {
    size_t esz = backend_dtype_size(be->act), C = (size_t)NH * hs;
    if (!aligned16(qkv) || !aligned16(out) || !aligned16(lse) || !aligned16(dqkv) ||
        !aligned16(dout) || !aligned16(scratch) || (C * esz) % 16) {
        *why = "cuDNN needs 16-byte aligned tensors";
        return 0;
    }
    CudnnAttnPlan *p = ready(be, 1, B, T, NH, hs, why);
    if (!p) return 0;
    float scale = 1.0f / sqrtf((float)hs), ninf = neg_inf(cuda_state(be)->cudnn);
    const char *in = qkv;
    char *d = dqkv;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_DO, U_STATS, U_SOFTSUM, U_DQ, U_DK, U_DV, U_SCALE, U_NEGINF};
    void *ptrs[] = {(void *)in, (void *)(in + C * esz), (void *)(in + 2 * C * esz), (void *)out,
                    (void *)dout, (void *)lse, scratch, d, d + C * esz, d + 2 * C * esz, &scale, &ninf};
    run(be, p, uids, ptrs, 12);
    return 1;
}
