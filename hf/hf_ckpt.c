// hf/hf_ckpt.c: serial reading and writing of a megac checkpoint's model (see hf_ckpt.h and
// ckpt/CHECKPOINT.md). Reading: DIR/latest (or --iteration), the root attributes through
// ckpt_h5_read_meta, then every /model dataset of ckpt_full_table whole. Writing: the
// attributes and datasets through ckpt_h5_write_meta / ckpt_h5_create_datasets, full-tensor
// writes, moments zero, then ckpt_fs_publish.
#include "hf_ckpt.h"
#include "core/check.h"             // defines: core_calloc, H5_CHECK, core_hdf5_last_error
#include "ckpt/ckpt_fs.h"         // defines: ckpt_fs_path, ckpt_fs_mkdirs, ckpt_fs_publish

#include <errno.h>
#include <math.h>  // defines: isfinite
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The root attributes a GPT-2 checkpoint has (ckpt/CHECKPOINT.md), besides the untied
// output layer's and the Llama-style ones (ckpt/ckpt_arch.c). Any other attribute
// means a format this export does not know (another architecture): refused, not guessed.
static const char *const KNOWN_ATTRS[] = {
    "format", "format_version", "iteration", "consumed_samples", "adam_step", "nan_iterations",
    "seed", "global_batch_size", "num_layers", "hidden_size", "num_attention_heads",
    "ffn_hidden_size", "seq_length", "max_position_embeddings", "vocab_size", "saved_tp",
    "saved_pp", "saved_dp", "saved_zero1"};

static herr_t unknown_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
    for (size_t i = 0; i < sizeof KNOWN_ATTRS / sizeof KNOWN_ATTRS[0]; i++)
        if (!strcmp(name, KNOWN_ATTRS[i])) return 0;
    if (!strcmp(name, "untie_embeddings_and_output_weights") || ckpt_arch_is_attr(name))
        return 0;  // an untied output layer, a Llama-style architecture: in the config
    snprintf(data, 128, "%s", name);
    return 1;  // stop: found one
}

static GPTConfig config_of(const CkptMeta *m) {
    GPTConfig c = {.num_layers = (int)m->num_layers, .hidden_size = (int)m->hidden_size,
                   .num_heads = (int)m->num_attention_heads,
                   .ffn_hidden_size = (int)m->ffn_hidden_size, .seq_length = (int)m->seq_length,
                   .max_position_embeddings = (int)m->max_position_embeddings,
                   .vocab_size = (int)m->vocab_size, .vocab_divisible_by = 1,
                   .untie_embeddings = (int)m->untie};
    ckpt_arch_to_config(m, &c);  // Llama-style settings
    return c;
}

HfCkpt *hf_ckpt_new(const GPTConfig *cfg) {
    HfCkpt *c = core_calloc(1, sizeof *c);
    c->cfg = *cfg;
    c->cfg.vocab_divisible_by = 1;
    c->table = ckpt_full_table(&c->cfg, &c->n);
    c->data = core_calloc((size_t)c->n, sizeof *c->data);
    for (int i = 0; i < c->n; i++)
        c->data[i] = core_calloc((size_t)c->table[i].rows * (size_t)c->table[i].cols, sizeof(float));
    CkptMeta *m = &c->meta;
    m->format_version = CKPT_VERSION;
    m->num_layers = cfg->num_layers;
    m->hidden_size = cfg->hidden_size;
    m->num_attention_heads = cfg->num_heads;
    m->ffn_hidden_size = cfg->ffn_hidden_size;
    m->seq_length = cfg->seq_length;
    m->max_position_embeddings = cfg->max_position_embeddings;
    m->vocab_size = cfg->vocab_size;
    m->untie = cfg->untie_embeddings;
    ckpt_arch_from_config(m, cfg);
    return c;
}

int hf_ckpt_find(const HfCkpt *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->table[i].name, name)) return i;
    return -1;
}

// Reads dataset /model/<p->name> whole into out after checking it is float32 of p's shape;
// -1 with the reason in why when it does not read or holds a NaN or Inf.
static int read_tensor(hid_t grp, const ParamInfo *p, float *out, char *why, size_t n) {
    if (ckpt_h5_check_dataset(grp, "/model", p, why, n) != 0) return -1;
    hid_t ds = H5Dopen2(grp, p->name, H5P_DEFAULT);
    int ok = ds >= 0 && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0;
    if (!ok) {
        char h5[256];
        core_hdf5_last_error(h5, sizeof h5);
        snprintf(why, n, "cannot read dataset /model/%s (HDF5: %s)", p->name, h5);
    }
    if (ds >= 0) H5Dclose(ds);
    for (size_t e = 0; ok && e < p->numel; e++)  // as megac train --load refuses them
        if (!isfinite(out[e])) {
            snprintf(why, n, "dataset /model/%s holds a NaN or Inf (element %zu): refusing "
                     "non-finite values", p->name, e);
            ok = 0;
        }
    return ok ? 0 : -1;
}

// Everything after the file opened: attributes, the tensor set, the tensors.
static HfCkpt *read_open_file(hid_t f, char *why, size_t n) {
    CkptMeta m;
    if (ckpt_h5_read_meta(f, &m, why, n) != 0) return NULL;
    if (m.format_version != CKPT_VERSION) {
        snprintf(why, n, "format version %lld, this megac reads version %d",
                 (long long)m.format_version, CKPT_VERSION);
        return NULL;
    }
    char extra[128] = "";
    hsize_t idx = 0;
    if (H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &idx, unknown_attr, extra) > 0) {
        snprintf(why, n, "attribute '%s' is not part of a megac GPT checkpoint (another architecture "
                 "or a newer format): not converted", extra);
        return NULL;
    }
    GPTConfig cfg = config_of(&m);
    char cerr[256];
    if (gpt_config_check(&cfg, 1, 1, cerr, sizeof cerr) != 0) {
        snprintf(why, n, "model config: %s", cerr);
        return NULL;
    }
    HfCkpt *c = hf_ckpt_new(&cfg);
    c->meta = m;
    hid_t grp = H5Lexists(f, "/model", H5P_DEFAULT) > 0 ? H5Gopen2(f, "/model", H5P_DEFAULT) : -1;
    H5G_info_t gi = {0};
    int rc = grp < 0 ? -1 : 0;
    if (rc) snprintf(why, n, "group /model is missing");
    if (rc == 0 && (H5Gget_info(grp, &gi) < 0 || gi.nlinks != (hsize_t)c->n)) {
        snprintf(why, n, "/model holds %llu tensors, a model of this config has %d (another "
                 "architecture?): not converted", (unsigned long long)gi.nlinks, c->n);
        rc = -1;
    }
    for (int i = 0; i < c->n && rc == 0; i++) rc = read_tensor(grp, &c->table[i], c->data[i], why, n);
    if (grp >= 0) H5Gclose(grp);
    if (rc != 0) {
        hf_ckpt_free(c);
        return NULL;
    }
    return c;
}

HfCkpt *hf_ckpt_read(const char *dir, int64_t iteration, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX], why[CKPT_MSG_MAX] = "";
    if (iteration < 0 && ckpt_read_latest(dir, &iteration, err, errlen) != 0) return NULL;
    if (ckpt_fs_path(path, dir, iteration, CKPT_FILE) != 0) {
        snprintf(err, errlen, "%.200s...: path too long", dir);
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (ckpt_fs_check_regular(path, err, errlen) != 0) return NULL;
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    HfCkpt *c = NULL;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        char h5[256];
        core_hdf5_last_error(h5, sizeof h5);
        snprintf(why, sizeof why, "not a readable HDF5 file, truncated or damaged (HDF5: %s)", h5);
    } else {
        c = read_open_file(f, why, sizeof why);
        H5Fclose(f);
    }
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    if (!c) snprintf(err, errlen, "%s: %s", path, why);
    else snprintf(c->path, sizeof c->path, "%s", path);
    return c;
}

// Writes every group's datasets: /model from c, the moments zero.
static void write_tensors(hid_t f, const HfCkpt *c) {
    size_t most = 0;
    for (int i = 0; i < c->n; i++)
        if ((size_t)c->table[i].rows * c->table[i].cols > most) most = (size_t)c->table[i].rows * c->table[i].cols;
    float *zero = core_calloc(most, sizeof(float));
    for (int g = 0; g < CKPT_NGROUPS; g++) {
        hid_t grp = H5Gopen2(f, ckpt_group_path((CkptGroup)g), H5P_DEFAULT);
        H5_CHECK(grp);
        for (int i = 0; i < c->n; i++) {
            hid_t ds = H5Dopen2(grp, c->table[i].name, H5P_DEFAULT);
            H5_CHECK(ds);
            H5_CHECK(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                              g == CKPT_MODEL ? c->data[i] : zero));
            H5_CHECK(H5Dclose(ds));
        }
        H5_CHECK(H5Gclose(grp));
    }
    free(zero);
}

int hf_ckpt_write(const char *dir, const HfCkpt *c, char *err, size_t errlen) {
    char latest[CKPT_PATH_MAX], idir[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    if (ckpt_fs_path(latest, dir, -1, CKPT_LATEST) || ckpt_fs_path(idir, dir, c->meta.iteration, NULL) ||
        ckpt_fs_path(tmp, dir, c->meta.iteration, CKPT_TMP_FILE)) {
        snprintf(err, errlen, "%.200s...: path too long", dir);
        return -1;
    }
    struct stat st;
    if (stat(latest, &st) == 0) {
        snprintf(err, errlen, "%s: already holds a checkpoint (%s exists): choose a new directory",
                 dir, CKPT_LATEST);
        return -1;
    }
    if (ckpt_fs_mkdirs(idir, err, errlen) != 0) return -1;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5_CHECK(fapl);
    ckpt_h5_set_format(fapl);  // checksummed metadata, as megac train's checkpoints
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5_CHECK(H5Pclose(fapl));
    if (f < 0) {
        snprintf(err, errlen, "%s: cannot create the file", tmp);
        return -1;
    }
    ckpt_h5_write_meta(f, &c->meta);
    if (ckpt_h5_create_datasets(f, c->table, c->n, err, errlen) != 0) {
        H5Fclose(f);
        return -1;
    }
    write_tensors(f, c);
    H5_CHECK(H5Fclose(f));
    return ckpt_fs_publish(dir, c->meta.iteration, err, errlen);
}

void hf_ckpt_free(HfCkpt *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->data[i]);
    free(c->data);
    free(c->table);
    free(c);
}
