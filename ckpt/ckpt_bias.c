// ckpt/ckpt_bias.c: the expert bias of aux-loss-free balancing (--moe-router-enable-expert-
// bias) in a checkpoint: state beside the model, not a parameter (no optimizer moments, no
// sharding), one float32 dataset (E) per MoE layer, /state/layers.L.mlp.router.expert_bias.
// It is the same on every rank (train_moe.c), so rank 0 writes it and every rank reads it.
#include "ckpt_format.h"
#include "core/check.h"  // defines: H5_CHECK
#include "model/gpt_moe.h"  // defines: gpt_moe_layer

#include <math.h>  // defines: isfinite
#include <stdio.h>

static void bias_path(char *out, size_t n, int layer) {
    snprintf(out, n, "%s/layers.%d.mlp.router.expert_bias", CKPT_STATE_GROUP, layer);
}

int ckpt_bias_write(hid_t f, const GPTConfig *c, const float *bias, int rank0, char *err,
                    size_t errlen) {
    if (!bias) return 0;
    int rc = 0;
    hid_t g = H5Gcreate2(f, CKPT_STATE_GROUP, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0 || H5Gclose(g) < 0) {
        snprintf(err, errlen, "group %s cannot be created", CKPT_STATE_GROUP);
        rc = -1;
    }
    hsize_t E = (hsize_t)c->num_experts;
    for (int l = 0; l < c->num_layers; l++) {  // every rank: the same calls, in order
        if (!gpt_moe_layer(c, l)) continue;
        char path[96];
        bias_path(path, sizeof path, l);
        hid_t space = H5Screate_simple(1, &E, NULL);
        H5_CHECK(space);
        hid_t ds = H5Dcreate2(f, path, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        int bad = ds < 0;  // (independent raw-data write: rank 0 alone)
        if (!bad && rank0)
            bad = H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                           bias + (size_t)l * E) < 0;
        if (ds >= 0 && H5Dclose(ds) < 0) bad = 1;
        H5_CHECK(H5Sclose(space));
        if (bad && rc == 0) {
            snprintf(err, errlen, "dataset %s cannot be written", path);
            rc = -1;
        }
    }
    return rc;
}

int ckpt_bias_read(hid_t f, const GPTConfig *c, float *bias, char *err, size_t errlen) {
    if (!bias) return 0;
    hsize_t E = (hsize_t)c->num_experts;
    for (int l = 0; l < c->num_layers; l++) {
        if (!gpt_moe_layer(c, l)) continue;
        char path[96];
        bias_path(path, sizeof path, l);
        hid_t ds = H5Lexists(f, CKPT_STATE_GROUP, H5P_DEFAULT) > 0 && H5Lexists(f, path, H5P_DEFAULT) > 0
                 ? H5Dopen2(f, path, H5P_DEFAULT) : -1;
        hid_t space = ds < 0 ? -1 : H5Dget_space(ds);
        hsize_t dims[2] = {0, 0};
        int ok = space >= 0 && H5Sget_simple_extent_ndims(space) == 1 &&
                 H5Sget_simple_extent_dims(space, dims, NULL) == 1 && dims[0] == E &&
                 H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         bias + (size_t)l * E) >= 0;
        for (hsize_t e = 0; ok && e < E; e++) ok = isfinite(bias[(size_t)l * E + e]);
        if (space >= 0) H5Sclose(space);
        if (ds >= 0) H5Dclose(ds);
        if (!ok) {
            snprintf(err, errlen, "dataset %s (float32, %llu experts, finite) is missing or "
                     "unreadable", path, (unsigned long long)E);
            return -1;
        }
    }
    return 0;
}
