// ckpt/ckpt_check.c: rank 0's validation of a checkpoint before any rank reads it:
// DIR/latest names an iteration, its checkpoint.h5 opens (HDF5 notices a truncated file),
// has our format, version and model config, and holds every dataset with its full shape.
// Every failure is one line naming the file; the caller broadcasts it so all ranks exit 2.
#include "ckpt_format.h"
#include "ckpt_fs.h"
#include "core/check.h"  // defines: core_hdf5_last_error

#include <errno.h>
#include <stddef.h>  // defines: offsetof
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int ckpt_read_latest(const char *dir, int64_t *it, char *err, size_t n) {
    char path[CKPT_PATH_MAX], text[64] = "", *end = NULL;
    if (ckpt_fs_path(path, dir, -1, CKPT_LATEST) != 0) {
        snprintf(err, n, "--load: directory name too long: %.200s...", dir);
        return -1;
    }
    if (ckpt_fs_check_regular(path, err, n) != 0) return -1;  // a FIFO would block fopen
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, n, "%s: %s (is --load a directory written by --save?)", path, strerror(errno));
        return -1;
    }
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = '\0';
    for (size_t i = 0; i < len; i++)  // keep the message on one line
        if (text[i] < ' ' && text[i] != '\n') text[i] = '?';
    errno = 0;
    long long v = strtoll(text, &end, 10);
    while (end && (*end == '\n' || *end == ' ' || *end == '\r')) end++;
    if (len == 0 || errno || end == text || *end != '\0' || v < 0) {
        text[strcspn(text, "\n")] = '\0';
        snprintf(err, n, "%s: expected an iteration number, found '%.20s'", path, text);
        return -1;
    }
    *it = v;
    return 0;
}

// Appends "name N (this run M)" to err for every model setting that differs.
static int compare_config(const CkptMeta *got, const CkptMeta *want, char *err, size_t n) {
    static const struct {
        const char *flag;
        size_t off;
    } FIELDS[] = {
        {"num-layers", offsetof(CkptMeta, num_layers)},
        {"hidden-size", offsetof(CkptMeta, hidden_size)},
        {"num-attention-heads", offsetof(CkptMeta, num_attention_heads)},
        {"ffn-hidden-size", offsetof(CkptMeta, ffn_hidden_size)},
        {"seq-length", offsetof(CkptMeta, seq_length)},
        {"max-position-embeddings", offsetof(CkptMeta, max_position_embeddings)},
        {"vocab size", offsetof(CkptMeta, vocab_size)},
        {"untie-embeddings-and-output-weights", offsetof(CkptMeta, untie)},
    };
    int bad = 0;
    size_t used = strlen(err);
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        int64_t g = *(const int64_t *)((const char *)got + FIELDS[i].off);
        int64_t w = *(const int64_t *)((const char *)want + FIELDS[i].off);
        if (g == w || used >= n) continue;
        used += (size_t)snprintf(err + used, n - used, "%s%s %lld (this run %lld)", bad ? ", " : " ",
                                 FIELDS[i].flag, (long long)g, (long long)w);
        bad = 1;
    }
    bad = ckpt_arch_compare(got, want, err, n, &used, bad);  // Llama-style settings
    return bad ? -1 : 0;
}

int ckpt_h5_check_dataset(hid_t grp, const char *gpath, const ParamInfo *p, char *err, size_t n) {
    if (H5Lexists(grp, p->name, H5P_DEFAULT) <= 0) {
        snprintf(err, n, "dataset %s/%s is missing", gpath, p->name);
        return -1;
    }
    hid_t ds = H5Dopen2(grp, p->name, H5P_DEFAULT);
    hid_t ty = ds < 0 ? -1 : H5Dget_type(ds), sp = ds < 0 ? -1 : H5Dget_space(ds);
    hsize_t dims[3] = {0, 0, 0};
    int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    if (rank >= 1 && rank <= 3) H5Sget_simple_extent_dims(sp, dims, NULL);
    int is_f32 = ty >= 0 && H5Tget_class(ty) == H5T_FLOAT && H5Tget_size(ty) == 4;
    if (sp >= 0) H5Sclose(sp);
    if (ty >= 0) H5Tclose(ty);
    if (ds >= 0) H5Dclose(ds);
    int want_rank = p->cols == 1 ? 1 : 2;
    if (!is_f32 || rank != want_rank || dims[0] != (hsize_t)p->rows ||
        (want_rank == 2 && dims[1] != (hsize_t)p->cols)) {
        char want_s[48], got_s[80];
        if (want_rank == 1) snprintf(want_s, sizeof want_s, "(%d)", p->rows);
        else snprintf(want_s, sizeof want_s, "(%d, %d)", p->rows, p->cols);
        if (rank == 1) snprintf(got_s, sizeof got_s, "(%llu)", (unsigned long long)dims[0]);
        else if (rank == 2)
            snprintf(got_s, sizeof got_s, "(%llu, %llu)", (unsigned long long)dims[0],
                     (unsigned long long)dims[1]);
        else snprintf(got_s, sizeof got_s, "rank %d", rank);
        snprintf(err, n, "dataset %s/%s: expected float32 of shape %s, found %s of shape %s",
                 gpath, p->name, want_s, is_f32 ? "float32" : "another type", got_s);
        return -1;
    }
    return 0;
}

static int check_datasets(hid_t f, const CkptMeta *want, char *err, size_t n) {
    GPTConfig c = {.num_layers = (int)want->num_layers, .hidden_size = (int)want->hidden_size,
                   .num_heads = (int)want->num_attention_heads,
                   .ffn_hidden_size = (int)want->ffn_hidden_size, .seq_length = (int)want->seq_length,
                   .max_position_embeddings = (int)want->max_position_embeddings,
                   .vocab_size = (int)want->vocab_size, .vocab_divisible_by = 1,
                   .untie_embeddings = (int)want->untie};
    ckpt_arch_to_config(want, &c);  // Llama-style tensors
    int np = 0, rc = 0;
    ParamInfo *full = ckpt_full_table(&c, &np);
    for (int g = 0; g < CKPT_NGROUPS && rc == 0; g++) {
        const char *gpath = ckpt_group_path((CkptGroup)g);
        // (H5Lexists fails, < 0, when a parent group is missing: also "missing")
        hid_t grp = H5Lexists(f, gpath, H5P_DEFAULT) > 0 ? H5Gopen2(f, gpath, H5P_DEFAULT) : -1;
        if (grp < 0) {
            snprintf(err, n, "group %s is missing", gpath);
            rc = -1;
            break;
        }
        for (int i = 0; i < np && rc == 0; i++) rc = ckpt_h5_check_dataset(grp, gpath, &full[i], err, n);
        H5Gclose(grp);
    }
    free(full);
    return rc;
}

// The attributes: version, iteration against DIR/latest, model config against this run.
static int check_meta(const CkptMeta *got, int64_t latest, const CkptMeta *want, char *why,
                      size_t n) {
    if (got->format_version != CKPT_VERSION) {
        snprintf(why, n, "format version %lld, this megac reads version %d",
                 (long long)got->format_version, CKPT_VERSION);
        return -1;
    }
    // consumed samples: at least one per iteration (not iteration x G: a ramp-up or a resume
    // with another --global-batch-size change the batch)
    if (got->iteration != latest || got->consumed_samples < got->iteration) {
        snprintf(why, n, "iteration %lld, consumed samples %lld and global batch %lld disagree "
                 "(%s says %lld)", (long long)got->iteration, (long long)got->consumed_samples,
                 (long long)got->global_batch_size, CKPT_LATEST, (long long)latest);
        return -1;
    }
    snprintf(why, n, "written for a different run:");
    return compare_config(got, want, why, n);
}

// Opens path (serial, read-only) and runs every check.
static int check_file(const char *path, int64_t latest, const CkptMeta *want, CkptMeta *got,
                      char *err, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, n, "%s: %s (named by %s)", path, strerror(errno), CKPT_LATEST);
        return -1;
    }
    if (ckpt_fs_check_regular(path, err, n) != 0) return -1;  // FIFO, device; no read permission
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        char why[256];
        core_hdf5_last_error(why, sizeof why);
        snprintf(err, n, "%s: not a readable HDF5 file, truncated or damaged (HDF5: %s)", path, why);
        return -1;
    }
    char why[CKPT_MSG_MAX] = "";
    int rc = ckpt_h5_read_meta(f, got, why, sizeof why);
    if (rc == 0) rc = check_meta(got, latest, want, why, sizeof why);
    if (rc == 0) rc = check_datasets(f, want, why, sizeof why);
    if (H5Fclose(f) < 0 && rc == 0) {
        snprintf(why, sizeof why, "HDF5 cannot close it");
        rc = -1;
    }
    if (rc != 0) snprintf(err, n, "%s: %s", path, why);
    return rc;
}

int ckpt_check(const char *dir, const CkptMeta *want, CkptMeta *got, char *path,
               char *err, size_t errlen) {
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int64_t it = 0;
    int rc = ckpt_read_latest(dir, &it, err, errlen);
    if (rc == 0) {
        rc = ckpt_fs_path(path, dir, it, CKPT_FILE);
        if (rc != 0) snprintf(err, errlen, "--load: directory name too long: %.200s...", dir);
    }
    if (rc == 0) {
        rc = check_file(path, it, want, got, err, errlen);
    }
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return rc;
}
