// backend/cuda/cuda_norm.cu: launchers of LayerNorm, RMSNorm, add and the column sums
// (bias gradients), kernels in norm.cuh and norm_row.cuh. Contracts: backend/backend.h,
// cuda_internal.h.
//
// Norms run norm_row.cuh's block-per-row kernels (16-byte accesses; the backward one kernel
// plus norm_finish_kernel) when a row fits NORM_ROW_MAX_ELEMS elements per thread of at most
// NORM_ROW_MAX_THREADS threads (C <= 8192), else norm.cuh's per-warp
// kernels and column sums. Column sums (colsum_acc, parameter gradients) take two passes
// when there are enough rows: per-chunk partials into the backend's reduction scratch
// (cuda_state()->partials, seen as floats), then an ordered sum over chunks. The scratch is
// reused by later ops; the single stream orders them.
#include "backend/cuda/norm_row.cuh"  // defines: the kernels, NORM_THREADS, NORM_ROWLANES

#define NORM_SCRATCH_FLOATS (2 * (long long)CUDA_PARTIALS)  // partials (doubles) as floats
#define NORM_MIN_ROWS 64      // rows per chunk at least (fewer chunks: less second pass)
#define NORM_MAX_CHUNKS 1024  // enough blocks to fill an H200 for any C
#define NORM_GRID_CAP 4096    // grid-stride kernels: at most this many blocks

// Rows per chunk of a column sum over (N, C) with `nout` outputs (1 or 2): at least
// NORM_MIN_ROWS, and few enough chunks for nout partial arrays of C floats each to fit the
// scratch. Depends only on the shape (so the summation order does too). Pure.
static int norm_rows_per_chunk(int N, int C, int nout) {
    long long k = (N + NORM_MIN_ROWS - 1) / NORM_MIN_ROWS;
    long long cap = NORM_SCRATCH_FLOATS / ((long long)nout * C);
    if (k > cap) k = cap;
    if (k > NORM_MAX_CHUNKS) k = NORM_MAX_CHUNKS;
    if (k < 1) k = 1;
    return (int)((N + k - 1) / k);
}

// acc_b (C) += sum over k of part_b (nchunk, C), k in order; acc_w, part_w the same (either
// pair skipped when its acc is NULL): norm_finish_kernel, a thread per 4 columns.
static void norm_finish(Backend *be, float *acc_b, const float *part_b, float *acc_w,
                        const float *part_w, int nchunk, int C) {
    size_t chunks = ((size_t)C + Vec16<float>::N - 1) / Vec16<float>::N;
    CUDA_LAUNCH(norm_finish_kernel, cuda_blocks(chunks, NORM_THREADS, NORM_GRID_CAP),
                NORM_THREADS, 0, cuda_stream(be), acc_b, part_b, acc_w, part_w, nchunk, C);
}

// acc_b (C) += sum over rows of dy (N, C); acc_w (C) += sum over rows of dy * (inp - mean)
// * rstd (layernorm's dweight; inp (N, C), mean (N) or NULL for 0 (RMSNorm's), rstd (N)).
// Either acc may be NULL.
// dy and inp of type T; everything else fp32.
template <typename T>
static void norm_colsum(Backend *be, float *acc_b, float *acc_w, const void *dy,
                        const void *inp, const float *mean, const float *rstd, int N, int C) {
    int nout = (acc_b != NULL) + (acc_w != NULL);
    if (nout == 0 || N <= 0 || C <= 0) return;
    int rows_per = norm_rows_per_chunk(N, C, nout);
    int nchunk = (N + rows_per - 1) / rows_per;
    long long col_chunks = (C + Vec16<T>::N - 1) / Vec16<T>::N;  // 16 bytes of columns each
    dim3 grid((unsigned)((col_chunks + WARP - 1) / WARP), (unsigned)nchunk);
    cudaStream_t st = cuda_stream(be);
    const T *y = (const T *)dy, *x = (const T *)inp;
    if (nchunk == 1) {  // one chunk: add straight into the gradients
        CUDA_LAUNCH(colsum_partial_kernel<T>, grid, NORM_THREADS, 0, st, acc_b, acc_w, y, x,
                    mean, rstd, N, C, rows_per, 1);
        return;
    }
    float *scratch = (float *)cuda_state(be)->partials;        // (nout, nchunk, C)
    float *part_b = acc_b ? scratch : (float *)NULL;           // (nchunk, C)
    float *part_w = acc_w ? scratch + (acc_b ? (size_t)nchunk * C : 0) : (float *)NULL;
    CUDA_LAUNCH(colsum_partial_kernel<T>, grid, NORM_THREADS, 0, st, part_b, part_w, y, x, mean,
                rstd, N, C, rows_per, 0);
    norm_finish(be, acc_b, part_b, acc_w, part_w, nchunk, C);
}

// acc (C, fp32) += column sums of x (N, C, be->act); each column in a fixed order for a shape.
void cuda_colsum_acc(Backend *be, float *acc, const void *x, int N, int C) {
    const float *none = NULL;
    ACT_DISPATCH(be->act, norm_colsum, be, acc, (float *)NULL, x, (const void *)NULL, none, none,
                 N, C);
}

// --- block-per-row kernels (norm_row.cuh) ---------------------------------------------------
// Chunks per thread (1 or norm_row_vpt<T>) and threads per block of a row of C elements of T,
// or 0 when the row is too long for norm_row.cuh. Depend only on (C, T). Pure.
template <typename T>
static constexpr int norm_row_vpt() { return NORM_ROW_MAX_ELEMS / Vec16<T>::N; }
template <typename T>
static int norm_row_shape(int C, int *threads) {
    long long chunks = (C + Vec16<T>::N - 1) / Vec16<T>::N, most = norm_row_vpt<T>();
    int vpt = chunks <= NORM_ROW_MAX_THREADS ? 1
              : chunks <= most * NORM_ROW_MAX_THREADS ? (int)most : 0;
    if (vpt == 0) return 0;
    long long t = (chunks + vpt - 1) / vpt;
    *threads = (int)((t + WARP - 1) / WARP * WARP);
    return vpt;
}

// LayerNorm (RMS false) or RMSNorm (RMS true) forward of N rows by norm_row_forward_kernel;
// with res and inp2 (RES true) the rows normalised are res = inp + inp2 (written). 0 when the
// row is too long for it (nothing launched).
template <typename T, bool RMS, bool RES>
static int norm_row_forward(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                            const void *weight, const void *bias, int N, int C, float w0,
                            void *res, const void *inp2) {
    int threads = 0, vpt = norm_row_shape<T>(C, &threads);
    if (vpt == 0) return 0;
    unsigned blocks = cuda_blocks((size_t)N, 1, NORM_GRID_CAP);  // a block per row
    cudaStream_t st = cuda_stream(be);
    if (vpt == 1)
        CUDA_LAUNCH((norm_row_forward_kernel<T, 1, RMS, RES>), blocks, threads, 0, st, (T *)out,
                    mean, rstd, (const T *)inp, (const T *)weight, (const T *)bias, N, C, w0,
                    (T *)res, (const T *)inp2);
    else
        CUDA_LAUNCH((norm_row_forward_kernel<T, norm_row_vpt<T>(), RMS, RES>), blocks, threads, 0,
                    st, (T *)out, mean, rstd, (const T *)inp, (const T *)weight,
                    (const T *)bias, N, C, w0, (T *)res, (const T *)inp2);
    return 1;
}

template <typename T>
static void residual_layernorm_row_t(Backend *be, int *done, void *res, void *ln, float *mean,
                                     float *rstd, const void *a, const void *b,
                                     const void *weight, const void *bias, int N, int C) {
    *done = norm_row_forward<T, false, true>(be, ln, mean, rstd, a, weight, bias, N, C, 0.0f,
                                             res, b);
}

// res (N, C) = a + b, ln = layernorm(res) by the block-per-row kernel (the bits of cuda_add
// then cuda_norm_forward); 0 when C is too long for it (nothing launched), else 1.
int cuda_residual_layernorm_row(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                const void *a, const void *b, const void *weight,
                                const void *bias, int N, int C) {
    int done = 0;
    ACT_DISPATCH(be->act, residual_layernorm_row_t, be, &done, res, ln, mean, rstd, a, b, weight,
                 bias, N, C);
    return done;
}

// Backward of norm_row_forward: one norm_row_backward_kernel launch (dinp, per-block column
// partials), then norm_finish_kernel adds the blocks' partials in order (skipped with one
// block, which adds into dweight/dbias itself). The block count depends only on (N, C): at
// least NORM_ROW_MIN_ROWS rows a block, at most NORM_MAX_CHUNKS blocks and as many as the
// scratch holds partials for. 0 when the row is too long (nothing launched).
#define NORM_ROW_MIN_ROWS 16
template <typename T, bool RMS>
static int norm_row_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                             const void *dout, const void *inp, const void *weight,
                             const float *mean, const float *rstd, int N, int C, float w0) {
    int threads = 0, vpt = norm_row_shape<T>(C, &threads);
    if (vpt == 0) return 0;
    int nout = (dweight != NULL) + (dbias != NULL);
    long long cap = nout ? NORM_SCRATCH_FLOATS / ((long long)nout * C) : NORM_GRID_CAP;
    cap = cap > NORM_MAX_CHUNKS ? NORM_MAX_CHUNKS : cap < 1 ? 1 : cap;
    unsigned blocks = cuda_blocks((size_t)N, NORM_ROW_MIN_ROWS, (unsigned)cap);
    int add = blocks == 1;
    float *scratch = (float *)cuda_state(be)->partials;  // (nout, blocks, C)
    float *part_b = !dbias ? (float *)NULL : add ? dbias : scratch;
    float *part_w = !dweight ? (float *)NULL : add ? dweight
                    : scratch + (dbias ? (size_t)blocks * C : 0);
    cudaStream_t st = cuda_stream(be);
    if (vpt == 1)
        CUDA_LAUNCH((norm_row_backward_kernel<T, 1, RMS>), blocks, threads, 0, st, (T *)dinp,
                    part_b, part_w, (const T *)dout, (const T *)inp, (const T *)weight, mean,
                    rstd, N, C, w0, add);
    else
        CUDA_LAUNCH((norm_row_backward_kernel<T, norm_row_vpt<T>(), RMS>), blocks, threads, 0, st,
                    (T *)dinp, part_b, part_w, (const T *)dout, (const T *)inp,
                    (const T *)weight, mean, rstd, N, C, w0, add);
    if (nout && !add) norm_finish(be, dbias, part_b, dweight, part_w, (int)blocks, C);
    return 1;
}

template <typename T>
static void layernorm_forward_t(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                                const void *weight, const void *bias, int N, int C, float w0) {
    if (norm_row_forward<T, false, false>(be, out, mean, rstd, inp, weight, bias, N, C, w0, NULL,
                                          NULL))
        return;
    unsigned blocks = cuda_blocks((size_t)N, NORM_ROWLANES, NORM_GRID_CAP);  // warp per row
    CUDA_LAUNCH(layernorm_forward_kernel<T>, blocks, NORM_THREADS, 0, cuda_stream(be), (T *)out,
                mean, rstd, (const T *)inp, (const T *)weight, (const T *)bias, N, C, w0);
}

template <typename T>
static void layernorm_backward_t(Backend *be, void *dinp, float *dweight, float *dbias,
                                 const void *dout, const void *inp, const void *weight,
                                 const float *mean, const float *rstd, int N, int C, float w0) {
    if (norm_row_backward<T, false>(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
                                    C, w0))
        return;
    if (dinp) {
        unsigned blocks = cuda_blocks((size_t)N, NORM_ROWLANES, NORM_GRID_CAP);
        CUDA_LAUNCH(layernorm_dinp_kernel<T>, blocks, NORM_THREADS, 0, cuda_stream(be), (T *)dinp,
                    (const T *)dout, (const T *)inp, (const T *)weight, mean, rstd, N, C, w0);
    }
    norm_colsum<T>(be, dbias, dweight, dout, inp, mean, rstd, N, C);
}

// --- RMSNorm ---------------------------------------------------------------------------
template <typename T>
static void rmsnorm_forward_t(Backend *be, void *out, float *rstd, const void *inp,
                              const void *weight, int N, int C, float w0) {
    if (norm_row_forward<T, true, false>(be, out, NULL, rstd, inp, weight, NULL, N, C, w0, NULL,
                                         NULL))
        return;
    unsigned blocks = cuda_blocks((size_t)N, NORM_ROWLANES, NORM_GRID_CAP);  // warp per row
    CUDA_LAUNCH(rmsnorm_forward_kernel<T>, blocks, NORM_THREADS, 0, cuda_stream(be), (T *)out,
                rstd, (const T *)inp, (const T *)weight, N, C, w0);
}


template <typename T>
static void rmsnorm_backward_t(Backend *be, void *dinp, float *dweight, const void *dout,
                               const void *inp, const void *weight, const float *rstd, int N,
                               int C, float w0) {
    if (norm_row_backward<T, true>(be, dinp, dweight, NULL, dout, inp, weight, NULL, rstd, N, C,
                                   w0))
        return;
    cudaStream_t st = cuda_stream(be);
    if (dinp) {
        unsigned blocks = cuda_blocks((size_t)N, NORM_ROWLANES, NORM_GRID_CAP);
        CUDA_LAUNCH(rmsnorm_dinp_kernel<T>, blocks, NORM_THREADS, 0, st, (T *)dinp,
                    (const T *)dout, (const T *)inp, (const T *)weight, rstd, N, C, w0);
    }
    norm_colsum<T>(be, NULL, dweight, dout, inp, NULL, rstd, N, C);  // sum dout * inp * rstd
}

// LayerNorm or RMSNorm of every row (contract: BackendOps.norm_forward).
void cuda_norm_forward(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                       const void *weight, const void *bias, int N, int C, BackendNorm kind) {
    if (N <= 0 || C <= 0) return;
    float w0 = (kind & BACKEND_NORM_1P) ? 1.0f : 0.0f;  // --apply-layernorm-1p: 1 + weight
    if (kind & BACKEND_RMSNORM)
        ACT_DISPATCH(be->act, rmsnorm_forward_t, be, out, rstd, inp, weight, N, C, w0);
    else
        ACT_DISPATCH(be->act, layernorm_forward_t, be, out, mean, rstd, inp, weight, bias, N, C, w0);
}

// dinp (N, C) += ..., dweight (C) += ..., dbias (C) += ... (LayerNorm); each skipped when
// NULL. mean (N), rstd (N) as saved by the forward.
void cuda_norm_backward(Backend *be, void *dinp, float *dweight, float *dbias, const void *dout,
                        const void *inp, const void *weight, const float *mean, const float *rstd,
                        int N, int C, BackendNorm kind) {
    if (N <= 0 || C <= 0) return;
    float w0 = (kind & BACKEND_NORM_1P) ? 1.0f : 0.0f;
    if (kind & BACKEND_RMSNORM)
        ACT_DISPATCH(be->act, rmsnorm_backward_t, be, dinp, dweight, dout, inp, weight, rstd, N, C, w0);
    else
        ACT_DISPATCH(be->act, layernorm_backward_t, be, dinp, dweight, dbias, dout, inp, weight,
                     mean, rstd, N, C, w0);
}

template <typename T>
static void add_t(Backend *be, void *out, const void *a, const void *b, size_t n) {
    size_t chunks = (n + Vec16<T>::N - 1) / Vec16<T>::N;  // a thread per 16-byte chunk
    CUDA_LAUNCH(add_kernel<T>, cuda_blocks(chunks, NORM_THREADS, NORM_GRID_CAP), NORM_THREADS, 0,
                cuda_stream(be), (T *)out, (const T *)a, (const T *)b, n);
}

// out (n) = a + b; out may alias a or b.
void cuda_add(Backend *be, void *out, const void *a, const void *b, size_t n) {
    if (n == 0) return;
    ACT_DISPATCH(be->act, add_t, be, out, a, b, n);
}

// x (n) *= alpha in fp32 whatever be->act.
void cuda_scale_f32(Backend *be, float *x, float alpha, size_t n) {
    if (n == 0) return;
    size_t chunks = (n + Vec16<float>::N - 1) / Vec16<float>::N;
    CUDA_LAUNCH(scale_f32_kernel, cuda_blocks(chunks, NORM_THREADS, NORM_GRID_CAP), NORM_THREADS, 0,
                cuda_stream(be), x, alpha, n);
}

// out (n) = a + b in fp32 whatever be->act; out may alias a or b.
void cuda_add_f32(Backend *be, float *out, const float *a, const float *b, size_t n) {
    if (n == 0) return;
    add_t<float>(be, out, a, b, n);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_norm_ops(BackendOps *t) {
    t->norm_forward = cuda_norm_forward;
    t->norm_backward = cuda_norm_backward;
    t->add = cuda_add;
    t->add_f32 = cuda_add_f32;
    t->scale_f32 = cuda_scale_f32;
}
