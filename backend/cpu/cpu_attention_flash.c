// backend/cpu/cpu_attention_flash.c: fused causal self-attention (--use-flash-attn), the
// reference for the CUDA kernels: the (T, T) probabilities are never stored.
//
// Row (b, h, t) of a head: scaled scores s_u = q_t . k_u / sqrt(hs) for keys u <= t.
//   forward:  m = max_u s_u; l = sum_u exp(s_u - m); out_t = sum_u exp(s_u - m) v_u / l;
//             lse_t = m + log(l), with m and l kept online over blocks of keys (a new block
//             rescales what the earlier ones summed by exp(m_old - m_new)).
//   backward: D_t = dout_t . out_t; p_tu = exp(s_tu - lse_t); dp_tu = dout_t . v_u;
//             ds_tu = p_tu (dp_tu - D_t);
//             dq_t = scale sum_{u<=t} ds_tu k_u,  dk_u = scale sum_{t>=u} ds_tu q_t,
//             dv_u = sum_{t>=u} p_tu dout_t.
// Blocked as in FlashAttention: queries and keys in blocks of CPU_FA_B rows, causal block
// pairs only (key block <= query block), each pair's products as one-thread OpenBLAS calls
// on a (CPU_FA_B, CPU_FA_B) tile on the stack. One OpenMP region over the B*NH heads; a
// thread does a whole head, blocks in a fixed order (forward: key blocks ascending; backward:
// key blocks ascending, and for each the query blocks ascending), so the results do not
// depend on the thread count. The views into qkv are those of cpu_attention.c.
// With dropout (d not NULL, dropout.h) the row sums l and lse are those of
// the probabilities without dropout; the mask multiplies the exponentials that meet v
// (forward) and is regenerated in the backward: dv = sum (p z) dout, ds = p (z dp - D), where
// D = dout . out still holds because out is the dropped output.
// Windows (BackendAttnWindow): query t sees key u iff u <= t + q0 - k0 (and, with document
// starts qstart, u >= qstart[t] - k0: the visible keys of a row are [lo, cnt)). The forward with
// accumulate starts each row from the state that out and lse stand for (m = lse, l = 1,
// accumulator = out; lse -inf: m -FLT_MAX, l 0); the windowed backward is the same blocked
// loop on the window's (T, Tk) rectangle with the final out and lse, adding into dq and dkv.
// Packed kv rows (w->kv_heads = G > 0, grouped-query attention): query head h reads kv head
// h / (NH/G) of rows 2*G*hs wide; the backward runs one OpenMP item per (b, kv head), its
// query heads in order, so a kv head's dk, dv sum over them in a fixed order.
#include "core/check.h"  // defines: core_fatal
#include "cpu_backend.h"
#include "cpu_gemm.h"
#include "cpu_math.h"

#include <float.h>  // defines: FLT_MAX
#include <math.h>   // defines: sqrtf, logf

#define CPU_FA_B 64  // query / key rows per block

// The first key block (a multiple of CPU_FA_B) that any of the n query rows from t0 may see
// with document starts qs (global; key rows from k0): 0 without. Earlier blocks are all
// hidden, and skipping them changes no bit (they would add exp 0 = 0 terms). Pure.
static int cpu_fa_first_block(const int *qs, int t0, int n, int k0) {
    if (!qs) return 0;
    int lo = qs[t0] - k0;
    for (int i = 1; i < n; i++) lo = qs[t0 + i] - k0 < lo ? qs[t0 + i] - k0 : lo;
    return lo <= 0 ? 0 : lo / CPU_FA_B * CPU_FA_B;
}

// Online-softmax step of one query row over one key block: s (w) holds its scaled scores,
// of which those in [lo, cnt) are visible (causal; lo > 0: the document starts there).
// Overwrites s with exp(s - m_new) (0 where not visible), updates *m and *l, and returns the
// factor exp(m_old - m_new) that the row's output accumulator must be scaled by.
CPU_SIMD_CLONES static float cpu_flash_online_row(float *s, int lo, int cnt, int w, float *m,
                                                  float *l) {
    float mx = *m;
    for (int j = 0; j < lo && j < w; j++) s[j] = 0.0f;
#pragma omp simd reduction(max : mx)
    for (int j = lo; j < cnt; j++) mx = s[j] > mx ? s[j] : mx;
    float corr = cpu_expf(*m - mx), sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = lo; j < cnt; j++) {
        s[j] = cpu_expf(s[j] - mx);
        sum += s[j];
    }
    for (int j = cnt > lo ? cnt : lo; j < w; j++) s[j] = 0.0f;
    *l = *l * corr + sum;
    *m = mx;
    return corr;
}

// One head, forward: o (T, hs) (rows of stride ldo) and lse (T) from q (T rows of stride
// ld), k, v (Tk rows of stride ldk), query row t seeing key rows u <= t + off (none: o 0,
// lse -inf) and, with qs (T document starts, global positions), u >= qs[t] - k0. d: dropout
// or NULL; base: mask index of the head's element (0, 0), rows Tg apart. acc: o and lse hold
// earlier windows' result, continued (a row that sees no key here keeps it).
static void cpu_flash_head_forward(float *o, float *lse, const float *q, const float *k,
                                   const float *v, int T, int Tk, int off, int hs, int ld,
                                   int ldk, int ldo, float scale, const BackendDropout *d,
                                   uint64_t base, int Tg, int acc, const int *qs, int k0) {
    float s[CPU_FA_B * CPU_FA_B], m[CPU_FA_B], l[CPU_FA_B];
    for (int t0 = 0; t0 < T; t0 += CPU_FA_B) {
        int n = T - t0 < CPU_FA_B ? T - t0 : CPU_FA_B;
        float *ob = o + (size_t)t0 * ldo;
        for (int i = 0; i < n; i++) {
            int seen = acc && lse[t0 + i] > -INFINITY;  // out = acc / l with l = 1
            m[i] = seen ? lse[t0 + i] : -FLT_MAX, l[i] = seen ? 1.0f : 0.0f;
            for (int c = 0; c < hs && !seen; c++) ob[(size_t)i * ldo + c] = 0.0f;
        }
        for (int u0 = cpu_fa_first_block(qs, t0, n, k0); u0 < Tk && u0 <= t0 + n - 1 + off;
             u0 += CPU_FA_B) {  // visible blocks
            int w = Tk - u0 < CPU_FA_B ? Tk - u0 : CPU_FA_B;
            cpu_sgemm(0, 1, n, w, hs, scale, q + (size_t)t0 * ld, ld, k + (size_t)u0 * ldk, ldk,
                      0.0f, s, CPU_FA_B);
            for (int i = 0; i < n; i++) {
                int cnt = t0 + i + off - u0 + 1;  // keys u0..t + off visible
                cnt = cnt < 0 ? 0 : cnt < w ? cnt : w;
                int lo = qs ? qs[t0 + i] - k0 - u0 : 0;  // and keys from the document's start
                lo = lo < 0 ? 0 : lo;
                float corr = cpu_flash_online_row(s + i * CPU_FA_B, lo, cnt, w, &m[i], &l[i]);
                for (int c = 0; c < hs; c++) ob[(size_t)i * ldo + c] *= corr;
                uint64_t idx = base + (uint64_t)(t0 + i) * Tg + u0;
                if (d && cnt > lo)  // the mask, vectorised (the same bits as dropout_factor)
                    cpu_dropout_span(s + i * CPU_FA_B + lo, s + i * CPU_FA_B + lo, cnt - lo, d,
                                     idx + (uint64_t)lo);
            }
            cpu_sgemm(0, 0, n, hs, w, 1.0f, s, CPU_FA_B, v + (size_t)u0 * ldk, ldk, 1.0f, ob, ldo);
        }
        for (int i = 0; i < n; i++) {
            float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;  // 0: a row that sees no key
            for (int c = 0; c < hs; c++) ob[(size_t)i * ldo + c] *= inv;
            lse[t0 + i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;  // log 1 = 0 exactly
        }
    }
}

// Mask index of element (0, 0) of local head (b, h) (dropout.h) on a sequence of Tg
// positions whose queries start at q0, keys at k0. Pure.
static uint64_t cpu_fa_base(const BackendDropout *d, int b, int h, int Tg, int q0, int k0) {
    return !d ? 0 : (((uint64_t)(d->sample0 + b) * d->NH + d->h0 + h) * Tg + q0) * Tg + k0;
}

// The layout of a window's kv rows: row stride ldk; query head h's keys at k0 + (h / R) * hs
// of a row, its values vo further. Aborts on a bad kv_heads (bwd: dkv needed too).
typedef struct { int ldk, k0, vo, R; } CpuKvLayout;
static CpuKvLayout cpu_kv_layout(const BackendAttnWindow *w, int NH, int hs, int bwd) {
    int G = w->kv_heads, C = NH * hs;
    if (G < 0 || (G && (NH % G || !w->kv || (bwd && !w->dkv))))
        core_fatal("flash_attention_%s: kv_heads %d with %d heads (must divide them; kv%s given)",
                   bwd ? "backward" : "forward", G, NH, bwd ? " and dkv" : "");
    CpuKvLayout L = {3 * C, C, C, 1};
    if (G) L = (CpuKvLayout){2 * G * hs, 0, G * hs, NH / G};
    return L;
}

// out (B, T, C) from qkv (B, T, 3*C) (keys and values of w->kv with a window w); lse (B, NH,
// T). One OpenMP region over the heads.
void cpu_flash_attention_forward(Backend *be, void *out_, float *lse, const void *qkv_,
                                 int B, int T, int NH, int hs, const BackendDropout *d,
                                 const BackendAttnWindow *w) {
    float *out = out_;
    const float *qkv = qkv_;
    if (d && d->threshold == 0) d = NULL;
    BackendAttnWindow all = {0, 0, T, NULL, 0, NULL, 0, NULL}, win = w ? *w : all;
    const float *kv = win.kv ? win.kv : qkv;
    CpuKvLayout L = cpu_kv_layout(&win, NH, hs, 0);
    int C = NH * hs, C3 = 3 * C, nt = cpu_nt(be), heads = B * NH, Tk = win.Tk;
    int Tg = d && d->T ? d->T : T;
    float scale = 1.0f / sqrtf((float)hs);
    int prev = cpu_blas_single_begin();
#pragma omp parallel for num_threads(nt) schedule(static) if (heads > 1)
    for (int bh = 0; bh < heads; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + h * hs;
        const float *k = kv + (size_t)b * Tk * L.ldk + L.k0 + (size_t)(h / L.R) * hs;
        cpu_flash_head_forward(out + (size_t)b * T * C + h * hs, lse + (size_t)bh * T, q, k,
                               k + L.vo, T, Tk, win.q0 - win.k0, hs, C3, L.ldk, C, scale, d,
                               cpu_fa_base(d, b, h, Tg, win.q0, win.k0), Tg, win.accumulate,
                               win.qstart ? win.qstart + (size_t)b * T : NULL, win.k0);
    }
    cpu_blas_single_end(prev);
}

// p (n, w) tile: exp(s - lse_t) where key u0 + j <= query t0 + i + off (and, with qs,
// u0 + j >= qs[t0 + i] - k0), else 0 (s overwritten); rows whose lse is -inf are 0.
CPU_SIMD_CLONES static void cpu_flash_probs(float *p, const float *lse, int t0, int u0, int n,
                                            int w, int off, const int *qs, int k0) {
    for (int i = 0; i < n; i++) {
        float *r = p + i * CPU_FA_B, ls = lse[t0 + i];
        int cnt = t0 + i + off - u0 + 1 < w ? t0 + i + off - u0 + 1 : w;
        int lo = qs ? qs[t0 + i] - k0 - u0 : 0;
        lo = lo < 0 ? 0 : lo > w ? w : lo;
        if (!(ls > -INFINITY)) cnt = 0;
        for (int j = 0; j < lo; j++) r[j] = 0.0f;
#pragma omp simd
        for (int j = lo; j < cnt; j++) r[j] = cpu_expf(r[j] - ls);
        for (int j = cnt < lo ? lo : cnt; j < w; j++) r[j] = 0.0f;
    }
}

// One head, backward, ADDING into dq (T rows of stride ld) and dk, dv (Tk rows of stride
// ldk): q (stride ld), dy, o (stride ldy), lse of T query rows, k, v of Tk key rows (stride
// ldk); query t sees key u iff u <= t + off (and, with qs, u >= qs[t] - k0). D (T) gets
// dout . out. base: mask index of the head's element (0, 0), rows Tg apart.
static void cpu_flash_head_backward(float *dq, float *dk, float *dv, float *D, const float *dy,
                                    const float *q, const float *k, const float *v,
                                    const float *o, const float *lse, int T, int Tk, int off,
                                    int hs, int ld, int ldk, int ldy, float scale,
                                    const BackendDropout *d, uint64_t base, int Tg,
                                    const int *qs, int k0) {
    float p[CPU_FA_B * CPU_FA_B], ds[CPU_FA_B * CPU_FA_B];
    for (int t = 0; t < T; t++) {
        const float *a = dy + (size_t)t * ldy, *b = o + (size_t)t * ldy;
        float s = 0.0f;
        for (int c = 0; c < hs; c++) s += a[c] * b[c];
        D[t] = s;
    }
    for (int u0 = 0; u0 < Tk; u0 += CPU_FA_B) {
        int w = Tk - u0 < CPU_FA_B ? Tk - u0 : CPU_FA_B;
        const float *kb = k + (size_t)u0 * ldk, *vb = v + (size_t)u0 * ldk;
        float *dkb = dk + (size_t)u0 * ldk, *dvb = dv + (size_t)u0 * ldk;
        for (int t0 = 0; t0 < T; t0 += CPU_FA_B) {
            int n = T - t0 < CPU_FA_B ? T - t0 : CPU_FA_B;
            if (t0 + n - 1 + off < u0) continue;  // the query block sees none of the key block
            if (cpu_fa_first_block(qs, t0, n, k0) > u0) continue;  // nor (documents) here
            const float *qb = q + (size_t)t0 * ld, *dyb = dy + (size_t)t0 * ldy;
            cpu_sgemm(0, 1, n, w, hs, scale, qb, ld, kb, ldk, 0.0f, p, CPU_FA_B);
            cpu_flash_probs(p, lse, t0, u0, n, w, off, qs, k0);
            if (d) {  // ds = p (z dp - D_t), then p *= z for dv
                cpu_sgemm(0, 1, n, w, hs, 1.0f, dyb, ldy, vb, ldk, 0.0f, ds, CPU_FA_B);
                for (int i = 0; i < n; i++) {
                    float z[CPU_FA_B];  // the row's mask, vectorised (dropout_factor's bits)
                    cpu_dropout_factors(z, w, d, base + (uint64_t)(t0 + i) * Tg + u0);
                    for (int j = 0; j < w; j++) {
                        int e = i * CPU_FA_B + j;
                        ds[e] = p[e] * (z[j] * ds[e] - D[t0 + i]);
                        p[e] *= z[j];
                    }
                }
                cpu_sgemm(1, 0, w, hs, n, 1.0f, p, CPU_FA_B, dyb, ldy, 1.0f, dvb, ldk);
            } else {
                cpu_sgemm(1, 0, w, hs, n, 1.0f, p, CPU_FA_B, dyb, ldy, 1.0f, dvb, ldk);
                cpu_sgemm(0, 1, n, w, hs, 1.0f, dyb, ldy, vb, ldk, 0.0f, ds, CPU_FA_B);
                for (int i = 0; i < n; i++)  // ds = p (dp - D_t); p = 0 where masked
                    for (int j = 0; j < w; j++)
                        ds[i * CPU_FA_B + j] = p[i * CPU_FA_B + j] *
                                               (ds[i * CPU_FA_B + j] - D[t0 + i]);
            }
            cpu_sgemm(1, 0, w, hs, n, scale, ds, CPU_FA_B, qb, ld, 1.0f, dkb, ldk);
            cpu_sgemm(0, 0, n, hs, w, scale, ds, CPU_FA_B, kb, ldk, 1.0f, dq + (size_t)t0 * ld,
                      ld);
        }
    }
}

// dqkv (B, T, 3*C) from dout (B, T, C), qkv, out (B, T, C), lse (B, NH, T): overwritten
// without a window; with one, dq added into dqkv and dk, dv into w->dkv (keys and values of
// w->kv). scratch (B, NH, T) gets D. One OpenMP region over the heads.
void cpu_flash_attention_backward(Backend *be, void *dqkv_, float *scratch, const void *dout_,
                                  const void *qkv_, const void *out_, const float *lse,
                                  int B, int T, int NH, int hs, const BackendDropout *d,
                                  const BackendAttnWindow *w) {
    float *dqkv = dqkv_;
    const float *dout = dout_, *qkv = qkv_, *out = out_;
    if (d && d->threshold == 0) d = NULL;
    BackendAttnWindow all = {0, 0, T, NULL, 0, NULL, 0, NULL}, win = w ? *w : all;
    if (!win.dkv && win.kv)
        core_fatal("flash_attention_backward: a window with kv needs its dkv (Tk %d)", win.Tk);
    const float *kv = win.kv ? win.kv : qkv;
    float *dkv = win.dkv ? win.dkv : dqkv;
    CpuKvLayout L = cpu_kv_layout(&win, NH, hs, 1);
    int C = NH * hs, C3 = 3 * C, nt = cpu_nt(be), heads = B * (NH / L.R), Tk = win.Tk;
    int Tg = d && d->T ? d->T : T;
    float scale = 1.0f / sqrtf((float)hs);
    if (!w)  // overwrite: the whole dqkv starts at 0
        for (size_t i = 0; i < (size_t)B * T * C3; i++) dqkv[i] = 0.0f;
    int prev = cpu_blas_single_begin();
#pragma omp parallel for num_threads(nt) schedule(static) if (heads > 1)
    for (int bg = 0; bg < heads; bg++)  // a kv head: its query heads in order
        for (int h = bg % (NH / L.R) * L.R; h < (bg % (NH / L.R) + 1) * L.R; h++) {
            int b = bg / (NH / L.R), bh = b * NH + h;
            size_t qo = (size_t)b * T * C3 + h * hs, o = (size_t)b * T * C + h * hs;
            size_t ko = (size_t)b * Tk * L.ldk + L.k0 + (size_t)(h / L.R) * hs;
            cpu_flash_head_backward(dqkv + qo, dkv + ko, dkv + ko + L.vo, scratch + (size_t)bh * T,
                                    dout + o, qkv + qo, kv + ko, kv + ko + L.vo, out + o,
                                    lse + (size_t)bh * T, T, Tk, win.q0 - win.k0, hs, C3, L.ldk,
                                    C, scale, d, cpu_fa_base(d, b, h, Tg, win.q0, win.k0), Tg,
                                    win.qstart ? win.qstart + (size_t)b * T : NULL, win.k0);
        }
    cpu_blas_single_end(prev);
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

// Elements of a window's kv row: 3C, or 2*G*hs packed (w->kv_heads = G).
static size_t kv_row(const BackendAttnWindow *w, int NH, int hs) {
    return w && w->kv_heads ? 2 * CPU_SZ(w->kv_heads) * hs : 3 * CPU_SZ(NH) * hs;
}

static void h_flash_forward(Backend *be, void *o, float *lse, const void *qkv, int B, int T,
                            int NH, int hs, const BackendDropout *d, const BackendAttnWindow *w) {
    int C = NH * hs, Tk = w ? w->Tk : T;
    size_t row = kv_row(w, NH, hs);
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(B) * T * 3 * C) + cpu_pad(CPU_SZ(B) * Tk * row) + cpu_pad(CPU_SZ(B) * T * C));
    BackendAttnWindow fwin;
    const float *fq = cpu_in(&a, qkv, CPU_SZ(B) * T * 3 * C);
    const BackendAttnWindow *fw = cpu_win_in(&a, w, &fwin, B, row);
    float *fo = w && w->accumulate ? cpu_in(&a, o, CPU_SZ(B) * T * C) : cpu_take(&a, CPU_SZ(B) * T * C);
    cpu_flash_attention_forward(be, fo, lse, fq, B, T, NH, hs, d, fw);
    cpu_out(be, o, fo, CPU_SZ(B) * T * C);
}

// With a window dq (and dk, dv into w->dkv) are added: those buffers are loaded first.
static void h_flash_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *o, const float *lse, int B, int T,
                             int NH, int hs, const BackendDropout *d, const BackendAttnWindow *w) {
    int C = NH * hs, Tk = w ? w->Tk : T;
    size_t nq = CPU_SZ(B) * T * 3 * C, row = kv_row(w, NH, hs), nk = CPU_SZ(B) * Tk * row;
    int own_dkv = w && w->dkv && w->dkv != dqkv;
    CpuArena a = cpu_arena(be, 2 * cpu_pad(nq) + 2 * cpu_pad(nk) + 2 * cpu_pad(CPU_SZ(B) * T * C));
    BackendAttnWindow fwin;
    const float *fq = cpu_in(&a, qkv, nq), *fd = cpu_in(&a, dout, CPU_SZ(B) * T * C);
    const float *fo = cpu_in(&a, o, CPU_SZ(B) * T * C);
    const BackendAttnWindow *fw = cpu_win_in(&a, w, &fwin, B, row);
    float *fdq = w ? cpu_in(&a, dqkv, nq) : cpu_take(&a, nq);
    if (w) fwin.dkv = own_dkv ? cpu_in(&a, w->dkv, nk) : w->dkv ? fdq : NULL;
    cpu_flash_attention_backward(be, fdq, scratch, fd, fq, fo, lse, B, T, NH, hs, d, fw);
    cpu_out(be, dqkv, fdq, nq);
    if (own_dkv) cpu_out(be, w->dkv, fwin.dkv, nk);
}

void cpu_flash_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->flash_attention_forward = f32 ? cpu_flash_attention_forward : h_flash_forward;
    t->flash_attention_backward = f32 ? cpu_flash_attention_backward : h_flash_backward;
}
