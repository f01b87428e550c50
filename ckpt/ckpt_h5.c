// ckpt/ckpt_h5.c: the HDF5 side of checkpoints: the root group's attributes, one
// full-shape dataset per parameter and moment, and moving a range of a rank's local
// elements to or from the full tensor with hyperslab selections.
//
// A rank's local view of a parameter is a (local_rows, local_cols) matrix; gpt_param_slices
// says which rectangles of the full tensor its rows hold. A range of local elements (a
// ZeRO-1 slice starts and ends anywhere) is cut into pieces that are each contiguous in
// memory and rectangular in the file: a partial row, or a run of whole local rows.
#include "ckpt_format.h"
#include "core/check.h"

#include <stddef.h>  // defines: offsetof
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>  // defines: INT32_MAX
#include <string.h>

static const struct {
    const char *name;
    size_t off;
} META_ATTRS[] = {
#define A(field) {#field, offsetof(CkptMeta, field)}
    A(format_version), A(iteration), A(consumed_samples), A(adam_step), A(nan_iterations),
    A(seed), A(global_batch_size), A(num_layers), A(hidden_size), A(num_attention_heads),
    A(ffn_hidden_size), A(seq_length), A(max_position_embeddings), A(vocab_size),
    A(saved_tp), A(saved_pp), A(saved_dp), A(saved_zero1),
#undef A
};
#define N_META (int)(sizeof META_ATTRS / sizeof META_ATTRS[0])

const char *ckpt_group_path(CkptGroup g) {
    static const char *const PATHS[CKPT_NGROUPS] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};
    return PATHS[g];
}

ParamInfo *ckpt_full_table(const GPTConfig *c, int *n) {
    size_t total = 0;
    return gpt_params_build(c, 1, c->vocab_size, 0, c->num_layers, 1, 1, n, &total);
}

double ckpt_h5_file_bytes(const GPTConfig *c) {
    int n = 0;
    ParamInfo *full = ckpt_full_table(c, &n);
    double floats = 0;
    for (int i = 0; i < n; i++) floats += (double)full[i].numel;
    free(full);
    return CKPT_NGROUPS * (floats * 4.0 * 1.02 + 2048.0 * n);
}

void ckpt_h5_set_format(hid_t fapl) {
    H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
}

void ckpt_h5_write_meta(hid_t f, const CkptMeta *m) {
    hid_t scalar = H5Screate(H5S_SCALAR), str = H5Tcopy(H5T_C_S1);
    H5_CHECK(scalar);
    H5_CHECK(str);
    H5_CHECK(H5Tset_size(str, sizeof CKPT_FORMAT));  // with the terminating NUL
    hid_t a = H5Acreate2(f, "format", str, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(a);
    H5_CHECK(H5Awrite(a, str, CKPT_FORMAT));
    H5_CHECK(H5Aclose(a));
    for (int i = 0; i < N_META; i++) {
        const int64_t *v = (const int64_t *)((const char *)m + META_ATTRS[i].off);
        a = H5Acreate2(f, META_ATTRS[i].name, H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
        H5_CHECK(a);
        H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, v));
        H5_CHECK(H5Aclose(a));
    }
    if (m->untie) {  // --untie-embeddings-and-output-weights (tied files carry nothing)
        a = H5Acreate2(f, "untie_embeddings_and_output_weights", H5T_STD_I64LE, scalar, H5P_DEFAULT,
                       H5P_DEFAULT);
        H5_CHECK(a);
        H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &m->untie));
        H5_CHECK(H5Aclose(a));
    }
    ckpt_arch_write(f, m);  // Llama-style models only
    if (m->has_loss_scale) {  // --fp16 with a dynamic scale: its state, to resume it
        a = H5Acreate2(f, "fp16_loss_scale", H5T_IEEE_F64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
        H5_CHECK(a);
        H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &m->loss_scale));
        H5_CHECK(H5Aclose(a));
        const char *names[2] = {"fp16_loss_scale_good_steps", "fp16_loss_scale_overflows_left"};
        const int64_t *v[2] = {&m->loss_scale_good_steps, &m->loss_scale_overflows_left};
        for (int i = 0; i < 2; i++) {
            a = H5Acreate2(f, names[i], H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
            H5_CHECK(a);
            H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, v[i]));
            H5_CHECK(H5Aclose(a));
        }
    }
    if (m->skipped_iterations > 0) {  // fp16 overflow steps: where the lr schedule stands
        const char *names[2] = {"fp16_skipped_iterations", "fp16_skipped_samples"};
        const int64_t *v[2] = {&m->skipped_iterations, &m->skipped_samples};
        for (int i = 0; i < 2; i++) {
            a = H5Acreate2(f, names[i], H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
            H5_CHECK(a);
            H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, v[i]));
            H5_CHECK(H5Aclose(a));
        }
    }
    H5_CHECK(H5Tclose(str));
    H5_CHECK(H5Sclose(scalar));
}

// Reads the optional scalar attribute `name` as mem_type into v. Returns 1 if read, 0 if
// absent or unreadable.
static int read_optional(hid_t f, const char *name, hid_t mem_type, void *v) {
    hid_t a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
    hid_t s = a < 0 ? -1 : H5Aget_space(a);
    int ok = s >= 0 && H5Sget_simple_extent_npoints(s) == 1 && H5Aread(a, mem_type, v) >= 0;
    if (s >= 0) H5Sclose(s);
    if (a >= 0) H5Aclose(a);
    return ok;
}

// The "format" attribute: a fixed-length string equal to CKPT_FORMAT.
static int read_format(hid_t f, char *err, size_t n) {
    char got[64] = "";
    htri_t has = H5Aexists(f, "format");
    if (has < 0) {  // the root group's header does not read: its checksum (or more) is wrong
        snprintf(err, n, "the root group's attributes do not read (HDF5 metadata damaged): the "
                 "file is damaged");
        return -1;
    }
    if (has == 0) {
        snprintf(err, n, "no 'format' attribute: not a megac checkpoint");
        return -1;
    }
    hid_t a = H5Aopen(f, "format", H5P_DEFAULT), t = a < 0 ? -1 : H5Aget_type(a);
    int ok = t >= 0 && H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) &&
             H5Tget_size(t) < sizeof got && H5Aread(a, t, got) >= 0;
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    if (!ok || strcmp(got, CKPT_FORMAT) != 0) {
        snprintf(err, n, "format is '%.63s', expected '%s'", ok ? got : "(unreadable)", CKPT_FORMAT);
        return -1;
    }
    return 0;
}

// Every attribute a run reads back, with the values it can hold: a damaged or hand-edited
// file (adam_step -1 turns Adam's bias correction into NaN two steps later) is refused with
// one line naming the attribute, before any of it is used.
#define COUNT_MAX ((int64_t)1 << 53)  // iterations, samples, steps: far beyond any run
#define SIZE_MAX32 ((int64_t)INT32_MAX)
static const struct {
    const char *name;
    size_t off;
    int64_t lo, hi;
} RANGES[] = {
#define R(name, field, lo, hi) {name, offsetof(CkptMeta, field), lo, hi}
    R("iteration", iteration, 0, COUNT_MAX), R("consumed_samples", consumed_samples, 0, COUNT_MAX),
    R("adam_step", adam_step, 0, COUNT_MAX), R("nan_iterations", nan_iterations, 0, COUNT_MAX),
    R("global_batch_size", global_batch_size, 1, SIZE_MAX32), R("num_layers", num_layers, 1, 1 << 20),
    R("hidden_size", hidden_size, 1, 1 << 24), R("num_attention_heads", num_attention_heads, 1, 1 << 20),
    R("ffn_hidden_size", ffn_hidden_size, 1, 1 << 26), R("seq_length", seq_length, 1, 1 << 24),
    R("max_position_embeddings", max_position_embeddings, 1, 1 << 24),
    R("vocab_size", vocab_size, 1, SIZE_MAX32), R("saved_tp", saved_tp, 1, 1 << 20),
    R("saved_pp", saved_pp, 1, 1 << 20), R("saved_dp", saved_dp, 1, 1 << 20),
    R("saved_zero1", saved_zero1, 0, 3), R("untie_embeddings_and_output_weights", untie, 0, 1),
    R("fp16_loss_scale_good_steps", loss_scale_good_steps, 0, SIZE_MAX32),
    R("fp16_loss_scale_overflows_left", loss_scale_overflows_left, INT32_MIN, SIZE_MAX32),
    R("fp16_skipped_iterations", skipped_iterations, 0, COUNT_MAX),
    R("fp16_skipped_samples", skipped_samples, 0, COUNT_MAX),
    R("normalization_rmsnorm", rmsnorm, 0, 1), R("swiglu", swiglu, 0, 1),
    R("position_embedding_rope", rope, 0, 1), R("num_query_groups", num_query_groups, 0, 1 << 20),
    R("disable_bias_linear", disable_bias_linear, 0, 1), R("kv_channels", kv_channels, 0, 1 << 20),
    R("apply_layernorm_1p", layernorm_1p, 0, 1), R("calculate_per_token_loss", per_token_loss, 0, 1),
#undef R
};

// 0, or -1 with "attribute 'NAME' is V, out of range [LO, HI]" in err.
static int check_ranges(const CkptMeta *m, char *err, size_t n) {
    for (size_t i = 0; i < sizeof RANGES / sizeof RANGES[0]; i++) {
        int64_t v = *(const int64_t *)((const char *)m + RANGES[i].off);
        if (v >= RANGES[i].lo && v <= RANGES[i].hi) continue;
        snprintf(err, n, "attribute '%s' is %lld, out of range [%lld, %lld]", RANGES[i].name,
                 (long long)v, (long long)RANGES[i].lo, (long long)RANGES[i].hi);
        return -1;
    }
    const struct { const char *name; double v, lo, hi; int used; } reals[] = {
        {"fp16_loss_scale", m->loss_scale, 0x1p-126, 0x1p127, (int)m->has_loss_scale},
        {"rotary_base", m->rotary_base, 1.0, 1e12, (int)m->rope},
        {"rotary_percent", m->rotary_percent, 1e-6, 1.0, (int)m->rope},
        {"decoupled_lr", m->decoupled_lr, 0.0, 1e6, 1},
        {"decoupled_min_lr", m->decoupled_min_lr, 0.0, 1e6, 1},
    };
    for (int i = 0; i < (int)(sizeof reals / sizeof reals[0]); i++) {
        if (!reals[i].used || (reals[i].v >= reals[i].lo && reals[i].v <= reals[i].hi)) continue;
        snprintf(err, n, "attribute '%s' is %g, out of range [%g, %g]", reals[i].name, reals[i].v,
                 reals[i].lo, reals[i].hi);
        return -1;
    }
    return 0;
}

int ckpt_h5_read_meta(hid_t f, CkptMeta *m, char *err, size_t n) {
    memset(m, 0, sizeof *m);
    if (read_format(f, err, n) != 0) return -1;
    for (int i = 0; i < N_META; i++) {
        const char *name = META_ATTRS[i].name;
        int64_t *v = (int64_t *)((char *)m + META_ATTRS[i].off);
        hid_t a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
        hid_t s = a < 0 ? -1 : H5Aget_space(a);
        int ok = s >= 0 && H5Sget_simple_extent_npoints(s) == 1 && H5Aread(a, H5T_NATIVE_INT64, v) >= 0;
        if (s >= 0) H5Sclose(s);
        if (a >= 0) H5Aclose(a);
        if (!ok) {
            snprintf(err, n, "attribute '%s' is missing or not an integer", name);
            return -1;
        }
    }
    if (!read_optional(f, "untie_embeddings_and_output_weights", H5T_NATIVE_INT64, &m->untie)) m->untie = 0;
    ckpt_arch_read(f, m);
    m->has_loss_scale = read_optional(f, "fp16_loss_scale", H5T_NATIVE_DOUBLE, &m->loss_scale) &&
                        read_optional(f, "fp16_loss_scale_good_steps", H5T_NATIVE_INT64,
                                      &m->loss_scale_good_steps) &&
                        read_optional(f, "fp16_loss_scale_overflows_left", H5T_NATIVE_INT64,
                                      &m->loss_scale_overflows_left) &&
                        m->loss_scale != 0;  // (0: none; NaN, Inf, < 0: refused below)
    if (!read_optional(f, "fp16_skipped_iterations", H5T_NATIVE_INT64, &m->skipped_iterations) ||
        !read_optional(f, "fp16_skipped_samples", H5T_NATIVE_INT64, &m->skipped_samples))
        m->skipped_iterations = m->skipped_samples = 0;
    return check_ranges(m, err, n);
}

// The dataspace of p's full tensor: (rows) or (rows, cols).
static hid_t full_space(const ParamInfo *p) {
    hsize_t dims[2] = {(hsize_t)p->rows, (hsize_t)p->cols};
    hid_t s = H5Screate_simple(p->cols == 1 ? 1 : 2, dims, NULL);
    H5_CHECK(s);
    return s;
}

// Chunk shape of a (rows, cols) tensor: whole rows, about CKPT_CHUNK_ELEMS elements.
static hid_t tensor_dcpl(const ParamInfo *p) {
    hsize_t chunk[2] = {(hsize_t)p->rows, (hsize_t)p->cols};
    if (p->cols == 1) {
        chunk[0] = (hsize_t)p->rows < CKPT_CHUNK_ELEMS ? (hsize_t)p->rows : CKPT_CHUNK_ELEMS;
    } else {
        hsize_t r = CKPT_CHUNK_ELEMS / (hsize_t)p->cols;
        chunk[0] = r < 1 ? 1 : r > (hsize_t)p->rows ? (hsize_t)p->rows : r;
    }
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5_CHECK(dcpl);
    H5_CHECK(H5Pset_chunk(dcpl, p->cols == 1 ? 1 : 2, chunk));
    H5_CHECK(H5Pset_fletcher32(dcpl));  // a checksum per chunk, verified on every read
    // Chunks are allocated when written (each is written whole, once), never filled.
    H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_INCR));
    H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    return dcpl;
}

int ckpt_h5_create_datasets(hid_t f, const ParamInfo *full, int n, char *err, size_t errlen) {
    const char *groups[] = {"/model", "/optim", "/optim/exp_avg", "/optim/exp_avg_sq"};
    int rc = 0;
    for (int i = 0; i < 4; i++) {
        hid_t g = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5_CHECK(g);
        H5_CHECK(H5Gclose(g));
    }
    // A creation can fail on one rank (a metadata write meeting a full disk): every rank
    // still creates every dataset, the same calls in the same order; the caller agrees after.
    for (int g = 0; g < CKPT_NGROUPS; g++) {
        hid_t grp = H5Gopen2(f, ckpt_group_path((CkptGroup)g), H5P_DEFAULT);
        H5_CHECK(grp);
        for (int i = 0; i < n; i++) {
            hid_t space = full_space(&full[i]), dcpl = tensor_dcpl(&full[i]);
            hid_t ds = H5Dcreate2(grp, full[i].name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                  H5P_DEFAULT);
            if ((ds < 0 || H5Dclose(ds) < 0) && rc == 0) {
                char h5[512];
                core_hdf5_last_error(h5, sizeof h5);
                snprintf(err, errlen, "dataset %s/%s cannot be created: %s", ckpt_group_path((CkptGroup)g),
                         full[i].name, h5);
                rc = -1;
            }
            H5_CHECK(H5Pclose(dcpl));
            H5_CHECK(H5Sclose(space));
        }
        if (H5Gclose(grp) < 0 && rc == 0) {
            snprintf(err, errlen, "group %s cannot be closed", ckpt_group_path((CkptGroup)g));
            rc = -1;
        }
    }
    return rc;
}

// One rectangle of the full tensor (rows [row, row+nr) x cols [col, col+nc)), contiguous
// in the rank's memory at src.
typedef struct {
    hsize_t row, col, nr, nc;
    float *src;
} Piece;

static int piece_cmp(const void *a, const void *b) {
    const Piece *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return x->col < y->col ? -1 : x->col > y->col;
}

// Cuts local elements [e0, e1) at buf into pieces appended to out (grown as needed).
static void cut(const ParamInfo *p, int tp, int tp_rank, size_t e0, size_t e1, float *buf,
                Piece **out, size_t *n, size_t *cap) {
    ParamSlice sl[3];
    int ns = gpt_param_slices(p, tp, tp_rank, sl);
    size_t lc = (size_t)p->local_cols;
    for (int s = 0; s < ns; s++) {
        size_t lo = (size_t)sl[s].local_row0 * lc, hi = lo + (size_t)sl[s].nrows * lc;
        size_t a = e0 > lo ? e0 : lo, b = e1 < hi ? e1 : hi;
        while (a < b) {
            size_t r = a / lc, c = a % lc, nr = 1, nc = lc - c;
            if (c == 0 && b - a >= lc) nr = (b - a) / lc;
            else if (nc > b - a) nc = b - a;
            if (*n == *cap) {
                *cap = *cap ? 2 * *cap : 16;
                Piece *grown = realloc(*out, *cap * sizeof **out);
                if (!grown) core_fatal("out of memory (%zu checkpoint pieces)", *cap);
                *out = grown;
            }
            (*out)[(*n)++] = (Piece){(hsize_t)(sl[s].row0 + (r - (size_t)sl[s].local_row0)),
                                     (hsize_t)(sl[s].col0 + c), nr, nc, buf + (a - e0)};
            a += nr * nc;
        }
    }
}

// Reads or writes one piece (independent I/O): its rectangle of the file, contiguous at
// pc->src in memory.
static int piece(hid_t ds, const Piece *pc, int write) {
    hsize_t start[2] = {pc->row, pc->col}, count[2] = {pc->nr, pc->nc}, n = pc->nr * pc->nc;
    hid_t fs = H5Dget_space(ds);
    if (fs < 0) return -1;
    hid_t ms = H5Screate_simple(1, &n, NULL);
    herr_t e = ms < 0 ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    if (e >= 0)
        e = write ? H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, pc->src)
                  : H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, pc->src);
    hid_t why = e < 0 ? H5Eget_current_stack() : -1;  // kept: the closes below clear it
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    if (why >= 0) H5Eset_current_stack(why);  // the caller reads the reason (full disk, ...)
    return e < 0 ? -1 : 0;
}

int ckpt_h5_transfer(hid_t ds, const ParamInfo *p, int tp, int tp_rank, size_t e0, size_t e1,
                     float *buf, int write) {
    Piece *pc = NULL;
    size_t n = 0, cap = 0;
    cut(p, tp, tp_rank, e0, e1, buf, &pc, &n, &cap);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) rc = piece(ds, &pc[i], write);
    free(pc);
    return rc;
}

int ckpt_h5_write_ranges(hid_t ds, const ParamInfo *p, int tp, int tp_rank, const size_t *e0,
                         const size_t *e1, float *const *bufs, int nr) {
    Piece *pc = NULL;
    size_t n = 0, cap = 0, total = 0;
    for (int i = 0; i < nr; i++) cut(p, tp, tp_rank, e0[i], e1[i], bufs[i], &pc, &n, &cap);
    // The union of the pieces is read from memory in the file's row-major order: pack the
    // pieces in that order (a rank's pieces never interleave within a row).
    if (n) qsort(pc, n, sizeof *pc, piece_cmp);
    for (size_t i = 0; i < n; i++) total += pc[i].nr * pc[i].nc;
    float *packed = core_calloc(total ? total : 1, sizeof *packed);
    hid_t fs = H5Dget_space(ds), dxpl = H5Pcreate(H5P_DATASET_XFER);
    hsize_t mdim = total ? total : 1;
    hid_t ms = H5Screate_simple(1, &mdim, NULL);
    herr_t e = fs < 0 || ms < 0 || dxpl < 0 ? -1 : H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    if (e >= 0 && total == 0) e = H5Sselect_none(fs) < 0 || H5Sselect_none(ms) < 0 ? -1 : 0;
    for (size_t i = 0, at = 0; e >= 0 && i < n; i++) {
        hsize_t start[2] = {pc[i].row, pc[i].col}, count[2] = {pc[i].nr, pc[i].nc};
        e = H5Sselect_hyperslab(fs, i ? H5S_SELECT_OR : H5S_SELECT_SET, start, NULL, count, NULL);
        memcpy(packed + at, pc[i].src, pc[i].nr * pc[i].nc * sizeof *packed);
        at += pc[i].nr * pc[i].nc;
    }
    // Collective even with nothing to write (filtered datasets are written collectively).
    if (e >= 0) e = H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, packed);
    hid_t why = e < 0 ? H5Eget_current_stack() : -1;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (dxpl >= 0) H5Pclose(dxpl);
    if (why >= 0) H5Eset_current_stack(why);
    free(packed);
    free(pc);
    return e < 0 ? -1 : 0;
}
