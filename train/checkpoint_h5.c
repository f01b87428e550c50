// train/checkpoint_h5.c: the HDF5 side of checkpoints: the root group's attributes, one
// full-shape dataset per parameter and moment, and moving a range of a rank's local
// elements to or from the full tensor with hyperslab selections.
//
// A rank's local view of a parameter is a (local_rows, local_cols) matrix; gpt_param_slices
// says which rectangles of the full tensor its rows hold. A range of local elements (a
// ZeRO-1 slice starts and ends anywhere) is cut into pieces that are each contiguous in
// memory and rectangular in the file: a partial row, or a run of whole local rows.
#include "checkpoint_format.h"
#include "core/check.h"

#include <stddef.h>  // defines: offsetof
#include <stdio.h>
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
    H5_CHECK(H5Tclose(str));
    H5_CHECK(H5Sclose(scalar));
}

// The "format" attribute: a fixed-length string equal to CKPT_FORMAT.
static int read_format(hid_t f, char *err, size_t n) {
    char got[64] = "";
    if (H5Aexists(f, "format") <= 0) {
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
    return 0;
}


static hid_t full_space(const ParamInfo *p) {
    hsize_t dims[2] = {(hsize_t)p->rows, (hsize_t)p->cols};
    hid_t s = H5Screate_simple(p->cols == 1 ? 1 : 2, dims, NULL);
    H5_CHECK(s);
    return s;
}

void ckpt_h5_create_datasets(hid_t f, const ParamInfo *full, int n) {
    // Contiguous storage allocated at creation (what parallel HDF5 needs), never filled:
    // every element is written by exactly one rank.
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5_CHECK(dcpl);
    H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    const char *groups[] = {"/model", "/optim", "/optim/exp_avg", "/optim/exp_avg_sq"};
    for (int i = 0; i < 4; i++) {
        hid_t g = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5_CHECK(g);
        H5_CHECK(H5Gclose(g));
    }
    for (int g = 0; g < CKPT_NGROUPS; g++) {
        hid_t grp = H5Gopen2(f, ckpt_group_path((CkptGroup)g), H5P_DEFAULT);
        H5_CHECK(grp);
        for (int i = 0; i < n; i++) {
            hid_t space = full_space(&full[i]);
            hid_t ds = H5Dcreate2(grp, full[i].name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl,
                                  H5P_DEFAULT);
            H5_CHECK(ds);
            H5_CHECK(H5Dclose(ds));
            H5_CHECK(H5Sclose(space));
        }
        H5_CHECK(H5Gclose(grp));
    }
    H5_CHECK(H5Pclose(dcpl));
}

// One piece: local rows [r, r+nr) x cols [c, c+nc) of slice sl, contiguous at buf.
static int piece(hid_t ds, const ParamSlice *sl, size_t r, size_t c, size_t nr, size_t nc,
                 float *buf, int write) {
    hsize_t start[2] = {(hsize_t)sl->row0 + (r - (size_t)sl->local_row0), (hsize_t)sl->col0 + c};
    hsize_t count[2] = {nr, nc}, n = nr * nc;
    hid_t fs = H5Dget_space(ds);
    if (fs < 0) return -1;
    hid_t ms = H5Screate_simple(1, &n, NULL);
    herr_t e = ms < 0 ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    if (e >= 0)
        e = write ? H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf)
                  : H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
    hid_t why = e < 0 ? H5Eget_current_stack() : -1;  // kept: the closes below clear it
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    if (why >= 0) H5Eset_current_stack(why);  // the caller reads the reason (full disk, ...)
    return e < 0 ? -1 : 0;
}

int ckpt_h5_transfer(hid_t ds, const ParamInfo *p, int tp, int tp_rank, size_t e0, size_t e1,
                     float *buf, int write) {
    ParamSlice sl[3];
    int ns = gpt_param_slices(p, tp, tp_rank, sl);
    size_t lc = (size_t)p->local_cols;
    for (int s = 0; s < ns; s++) {
        size_t lo = (size_t)sl[s].local_row0 * lc, hi = lo + (size_t)sl[s].nrows * lc;
        size_t a = e0 > lo ? e0 : lo, b = e1 < hi ? e1 : hi;
        while (a < b) {
            size_t r = a / lc, c = a % lc, nr = 1, nc = lc - c;
            if (c == 0 && b - a >= lc) nr = (b - a) / lc;  // a run of whole rows
            else if (nc > b - a) nc = b - a;               // part of one row
            if (piece(ds, &sl[s], r, c, nr, nc, buf + (a - e0), write) != 0) return -1;
            a += nr * nc;
        }
    }
    return 0;
}
