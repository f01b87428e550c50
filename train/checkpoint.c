// train/checkpoint.c: saving and loading checkpoints, layout-independent (format in
// checkpoint_format.h and train/CHECKPOINT.md).
//
// Save: rank 0 makes DIR/iter_N/; every rank opens DIR/iter_N/checkpoint.h5.tmp with
// parallel HDF5, creates the same datasets (collective) and writes its own slices
// (independent); the file is flushed and closed; rank 0 fsyncs it, renames it to
// checkpoint.h5, then replaces DIR/latest_checkpointed_iteration.txt (tmp + rename).
// A crash at any point leaves `latest` naming the previous, complete checkpoint.
// Load: rank 0 validates the file and broadcasts the verdict; every rank reads its slices.
#include "checkpoint.h"
#include "checkpoint_format.h"
#include "checkpoint_fs.h"
#include "core/check.h"
#include "core/timer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>  // defines: access

// Elements [e0, e1) of parameter `param` (index into the rank's table), host copy at buf.
typedef struct {
    int param;
    size_t e0, e1;
    float *buf;
} CkptRange;

// The host buffers HDF5 moves data between: the backend's own on the CPU, copies otherwise.
typedef struct {
    float *params;  // (n_floats) the model's flat parameter buffer
    float *m, *v;   // (shard_len) the optimizer's moment slice
    int copies;     // 1: host copies of device buffers (freed by host_state_done)
} HostState;


static void meta_from_trainer(const Trainer *t, CkptMeta *m) {
    const TrainArgs *a = &t->args;
    const GPTConfig *c = &a->model;
    const PGridDims *d = &t->grid->dims;
    *m = (CkptMeta){.format_version = CKPT_VERSION, .iteration = t->iteration,
                    .consumed_samples = t->iteration * a->global_batch, .adam_step = t->opt->step,
                    .nan_iterations = t->nan_total, .seed = (int64_t)a->seed,
                    .global_batch_size = a->global_batch, .num_layers = c->num_layers,
                    .hidden_size = c->hidden_size, .num_attention_heads = c->num_heads,
                    .ffn_hidden_size = c->ffn_hidden_size, .seq_length = c->seq_length,
                    .max_position_embeddings = c->max_position_embeddings,
                    .vocab_size = c->vocab_size, .saved_tp = d->tp, .saved_pp = d->pp,
                    .saved_dp = d->dp, .saved_zero1 = t->opt->zero1};
}

// The buffers to save from (loading = 0) or load into (1). For loading, the moments start
// at zero (elements outside every slice stay so) and the parameters keep their values.
static HostState host_state(const Trainer *t, int loading) {
    Backend *be = t->be;
    const Optimizer *o = t->opt;
    size_t pbytes = t->model->n_floats * sizeof(float), mbytes = o->shard_len * sizeof(float);
    if (be->kind == BACKEND_CPU) {
        if (loading) {
            be->ops->zero(be, o->m, mbytes);
            be->ops->zero(be, o->v, mbytes);
        }
        return (HostState){t->model->param_mem, o->m, o->v, 0};
    }
    HostState h = {core_calloc(pbytes, 1), core_calloc(mbytes, 1), core_calloc(mbytes, 1), 1};
    be->ops->copy(be, h.params, t->model->param_mem, pbytes, BACKEND_D2H);
    if (!loading) {
        be->ops->copy(be, h.m, o->m, mbytes, BACKEND_D2H);
        be->ops->copy(be, h.v, o->v, mbytes, BACKEND_D2H);
    }
    be->ops->sync(be);
    return h;
}

// Ends the use of h: after a load (loaded = 1) copies to the device; frees the copies.
static void host_state_done(const Trainer *t, HostState *h, int loaded) {
    if (!h->copies) return;
    Backend *be = t->be;
    const Optimizer *o = t->opt;
    if (loaded) {
        size_t mbytes = o->shard_len * sizeof(float);
        be->ops->copy(be, t->model->param_mem, h->params, t->model->n_floats * sizeof(float), BACKEND_H2D);
        be->ops->copy(be, o->m, h->m, mbytes, BACKEND_H2D);
        be->ops->copy(be, o->v, h->v, mbytes, BACKEND_H2D);
        be->ops->sync(be);
    }
    free(h->params);
    free(h->m);
    free(h->v);
}

// The ranges of group g this rank writes (saving = 1) or reads (0); returns their count.
// Parameters are written by dp rank 0 (every rank reads all its own); moments follow the
// optimizer's segments, written by every dp rank under ZeRO-1, by dp rank 0 otherwise.
static int plan(const Trainer *t, CkptGroup g, int saving, const HostState *h, CkptRange *out) {
    const GPT *m = t->model;
    const Optimizer *o = t->opt;
    int tp_rank = t->grid->coord.tp_rank, dp_rank = t->grid->coord.dp_rank, n = 0;
    if (g == CKPT_MODEL) {
        for (int i = 0; i < m->n_params; i++) {
            const ParamInfo *p = &m->params[i];
            if (saving && (dp_rank != 0 || !gpt_param_is_owner(p, tp_rank))) continue;
            out[n++] = (CkptRange){i, 0, p->numel, h->params + p->offset};
        }
        return n;
    }
    if (saving && !o->zero1 && dp_rank != 0) return 0;
    float *base = g == CKPT_EXP_AVG ? h->m : h->v;
    for (int i = 0; i < o->n_segs; i++) {
        const OptSegment *s = &o->segs[i];
        const ParamInfo *p = &m->params[s->param];
        if (saving && !gpt_param_is_owner(p, tp_rank)) continue;
        size_t e0 = s->begin - p->offset;
        out[n++] = (CkptRange){s->param, e0, e0 + s->len, base + (s->begin - o->shard_begin)};
    }
    return n;
}

// Moves every range of every group between the host state and file f. Every rank opens and
// closes every dataset of the whole model in the same order (H5Dclose is collective under
// parallel HDF5) and moves its own ranges in between (independent I/O). Returns 0, or -1
// with the first failing dataset in err.
static int transfer_all(hid_t f, const Trainer *t, const HostState *h, int write, char *err,
                        size_t errlen) {
    const GPT *m = t->model;
    int n_full = 0, rc = 0;
    ParamInfo *full = ckpt_full_table(&t->args.model, &n_full);
    CkptRange *r = core_calloc((size_t)m->n_params + 1, sizeof *r);
    for (int g = 0; g < CKPT_NGROUPS; g++) {
        int n = plan(t, (CkptGroup)g, write, h, r);
        for (int i = 0; i < n_full; i++) {
            char path[128];
            snprintf(path, sizeof path, "%s/%s", ckpt_group_path((CkptGroup)g), full[i].name);
            int local = gpt_param_index(m, full[i].name), bad = 0;
            hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
            for (int k = 0; k < n && local >= 0 && !bad; k++)
                if (r[k].param == local)
                    bad = ds < 0 || ckpt_h5_transfer(ds, &m->params[local], m->tp, m->tp_rank,
                                                     r[k].e0, r[k].e1, r[k].buf, write) != 0;
            if (ds < 0 || H5Dclose(ds) < 0) bad = 1;
            if (bad && rc == 0)
                snprintf(err, errlen, "dataset %s cannot be %s", path, write ? "written" : "read");
            if (bad) rc = -1;
        }
    }
    free(r);
    free(full);
    return rc;
}

static hid_t mpio_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5_CHECK(fapl);
    H5_CHECK(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    return fapl;
}

// Every rank: creates the file, its attributes and datasets, writes its slices. Collective.
static void write_file(const Trainer *t, const char *path) {
    CkptMeta meta;
    meta_from_trainer(t, &meta);
    int n_full = 0;
    ParamInfo *full = ckpt_full_table(&t->args.model, &n_full);
    hid_t fapl = mpio_fapl();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5_CHECK(f);
    H5_CHECK(H5Pclose(fapl));
    ckpt_h5_write_meta(f, &meta);
    ckpt_h5_create_datasets(f, full, n_full);
    free(full);
    HostState h = host_state(t, 0);
    char err[CKPT_MSG_MAX];
    if (transfer_all(f, t, &h, 1, err, sizeof err) != 0) core_fatal("saving %s: %s", path, err);
    host_state_done(t, &h, 0);
    H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL));  // MPI_File_sync on every rank
    H5_CHECK(H5Fclose(f));
}

void ckpt_prepare_save(Trainer *t) {
    int status = 0;
    char msg[CKPT_MSG_MAX] = "";
    if (t->grid->coord.rank == 0) {
        status = ckpt_fs_mkdirs(t->args.save, msg, sizeof msg);
        if (status == 0 && access(t->args.save, W_OK | X_OK) != 0) {
            snprintf(msg, sizeof msg, "--save: cannot write into %s: %s", t->args.save, strerror(errno));
            status = -1;
        }
    }
    core_agree_or_exit(status, msg, (int)sizeof msg);
}

void ckpt_save(Trainer *t) {
    double t0 = core_now();
    int rank0 = t->grid->coord.rank == 0, status = 0;
    char dir[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], msg[CKPT_MSG_MAX] = "";
    if (ckpt_fs_path(dir, t->args.save, t->iteration, NULL) ||
        ckpt_fs_path(tmp, t->args.save, t->iteration, CKPT_TMP_FILE))
        core_usage_error("--save: directory name too long: %.200s...", t->args.save);
    if (rank0) status = ckpt_fs_mkdirs(dir, msg, sizeof msg);
    core_agree_or_exit(status, msg, (int)sizeof msg);
    write_file(t, tmp);
    if (rank0) status = ckpt_fs_publish(t->args.save, t->iteration, msg, sizeof msg);
    core_agree_or_exit(status, msg, (int)sizeof msg);
    if (rank0) {
        printf(" saved checkpoint at iteration %lld to %s in %.3f s\n", (long long)t->iteration,
               dir, core_now() - t0);
        fflush(stdout);
    }
}

// Every rank: opens the validated file in parallel and reads its slices into the trainer.
static int read_file(Trainer *t, const char *path, char *err, size_t errlen) {
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fapl = mpio_fapl();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5_CHECK(H5Pclose(fapl));
    int rc = -1;
    if (f < 0) {
        snprintf(err, errlen, "%s: cannot be opened with parallel HDF5", path);
    } else {
        char why[CKPT_MSG_MAX] = "";
        HostState h = host_state(t, 1);
        rc = transfer_all(f, t, &h, 0, why, sizeof why);
        if (H5Fclose(f) < 0 && rc == 0) rc = -1;
        if (rc != 0) snprintf(err, errlen, "%s: %s", path, why);
        host_state_done(t, &h, rc == 0);
    }
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return rc;
}

void ckpt_load(Trainer *t) {
    int rank0 = t->grid->coord.rank == 0, status = 0;
    char path[CKPT_PATH_MAX] = "", msg[CKPT_MSG_MAX] = "";
    CkptMeta want, got;
    meta_from_trainer(t, &want);
    memset(&got, 0, sizeof got);
    if (rank0) status = ckpt_check(t->args.load, &want, &got, path, msg, sizeof msg);
    core_agree_or_exit(status, msg, (int)sizeof msg);
    MPI_CHECK(MPI_Bcast(&got, (int)sizeof got, MPI_BYTE, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD));
    status = read_file(t, path, msg, sizeof msg);
    core_agree_or_exit(status, msg, (int)sizeof msg);
    t->iteration = got.iteration;
    t->opt->step = got.adam_step;
    t->nan_total = (int)got.nan_iterations;
    if (!rank0) return;
    printf(" loaded checkpoint %s at iteration %lld (consumed samples %lld; written by TP %lld x "
           "PP %lld x DP %lld%s)\n", path, (long long)got.iteration, (long long)got.consumed_samples,
           (long long)got.saved_tp, (long long)got.saved_pp, (long long)got.saved_dp,
           got.saved_zero1 ? ", ZeRO-1" : "");
    if (got.seed != want.seed)
        printf(" warning: the checkpoint was trained with --seed %lld, this run uses %lld\n",
               (long long)got.seed, (long long)want.seed);
    fflush(stdout);
}
