// ckpt/ckpt.c: saving and loading checkpoints, layout-independent (format in
// ckpt_format.h and ckpt/CHECKPOINT.md).
//
// Save: rank 0 makes DIR/iter_N/; every rank opens DIR/iter_N/checkpoint.h5.tmp with
// parallel HDF5, creates the same datasets (collective) and writes its own slices
// (collective, chunked, Fletcher-32 checksums); the file is flushed and closed; rank 0
// fsyncs it, renames it to checkpoint.h5, then replaces DIR/latest_checkpointed_iteration.txt
// (tmp + rename).
// A crash at any point leaves `latest` naming the previous, complete checkpoint.
// Load: rank 0 validates the file and broadcasts the verdict; every rank reads its slices.
#include "ckpt.h"
#include "ckpt_format.h"
#include "ckpt_fs.h"
#include "ckpt_lock.h"   // defines: ckpt_lock_heartbeat, ckpt_lock_release
#include "ckpt_state.h"  // defines: ckpt_state_to_meta, ckpt_loss_scale_restore
#include "core/check.h"
#include "core/timer.h"
#include "core/watchdog.h"

#include <errno.h>
#include <math.h>    // defines: isfinite
#include <stdint.h>  // defines: SIZE_MAX
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>  // defines: access, unlink, rmdir

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

// The buffers of model chunk c (interleaved schedule; else c = 0: the model) to save from
// (loading = 0) or load into (1). For loading, the moments start at zero (elements outside
// every slice stay so) and the parameters keep their values.
static HostState host_state(const CkptModel *cm, int c, int loading) {
    Backend *be = cm->be;
    const Optimizer *o = cm->opts[c];
    const GPT *mc = cm->chunks[c];
    float *params = o->master ? o->master : mc->param_mem;  // ZeRO-3: this rank's shard
    size_t pbytes = (o->master ? o->shard_len : mc->n_floats) * sizeof(float);
    size_t mbytes = o->shard_len * sizeof(float);
    if (be->kind == BACKEND_CPU) {
        if (loading) {
            be->ops->zero(be, o->m, mbytes);
            be->ops->zero(be, o->v, mbytes);
        }
        return (HostState){params, o->m, o->v, 0};
    }
    HostState h = {core_calloc(pbytes, 1), core_calloc(mbytes, 1), core_calloc(mbytes, 1), 1};
    if (o->master_host) memcpy(h.params, params, pbytes);  // --offload-params: in host memory
    else be->ops->copy(be, h.params, params, pbytes, BACKEND_D2H);
    if (!loading) optim_moments_read(o, h.m, h.v);  // (device and --optimizer-cpu-offload parts)
    be->ops->sync(be);
    return h;
}

// Ends the use of chunk c's h: after a load (loaded = 1) copies to the device, and on every
// backend refreshes the --bf16/--fp16 weight copies the forward reads; frees the copies.
static void host_state_done(const CkptModel *cm, int c, HostState *h, int loaded) {
    if (!h->copies) {  // the CPU backend: loaded in place
        if (loaded) gpt_refresh_weight_copies(cm->chunks[c]);
        return;
    }
    Backend *be = cm->be;
    const Optimizer *o = cm->opts[c];
    if (loaded) {
        float *params = o->master ? o->master : cm->chunks[c]->param_mem;  // ZeRO-3: this rank's shard
        size_t pbytes = (o->master ? o->shard_len : cm->chunks[c]->n_floats) * sizeof(float);
        if (o->master_host) memcpy(params, h->params, pbytes);  // --offload-params
        else be->ops->copy(be, params, h->params, pbytes, BACKEND_H2D);
        gpt_refresh_weight_copies(cm->chunks[c]);  // --bf16/--fp16: the copies the forward reads
        optim_reload_masters(o);  // --optimizer-cpu-offload: its host masters
        optim_moments_write(o, h->m, h->v);  // (syncs)
    }
    free(h->params);
    free(h->m);
    free(h->v);
}

// The ranges of group g of model chunk c this rank writes (saving = 1) or reads (0);
// returns their count.
// Parameters are written by rank 0 of the group that reduces them (dp x cp, or expert data
// parallelism for the experts: dist_sync_param_comm; every rank reads all its own); moments
// follow the optimizer's segments, written by every rank under ZeRO-1/2/3, by that rank 0
// otherwise.
// ZeRO-3 (o->master): the parameters too follow the segments (each rank holds only its shard).
static int plan(const CkptModel *cm, int c, CkptGroup g, int saving, const HostState *h,
                CkptRange *out) {
    const GPT *m = cm->chunks[c];
    const Optimizer *o = cm->opts[c];
    // the data-parallel rank over every copy of the weights (dp x cp: the sync group's)
    int tp_rank = cm->grid->coord.tp_rank, n = 0;
    if (g == CKPT_MODEL && !o->master) {
        for (int i = 0; i < m->n_params; i++) {
            const ParamInfo *p = &m->params[i];
            int dp_rank = dist_sync_param_comm(o->sync, p)->rank;
            if (saving && (dp_rank != 0 || !gpt_param_is_owner(p, tp_rank))) continue;
            out[n++] = (CkptRange){i, 0, p->numel, h->params + p->offset};
        }
        return n;
    }
    float *base = g == CKPT_MODEL ? h->params : g == CKPT_EXP_AVG ? h->m : h->v;
    for (int i = 0; i < o->n_segs; i++) {
        const OptSegment *s = &o->segs[i];
        const ParamInfo *p = &m->params[s->param];
        if (saving && !o->sync->sharded && dist_sync_param_comm(o->sync, p)->rank != 0) continue;
        if (saving && !gpt_param_is_owner(p, tp_rank)) continue;
        size_t e0 = s->begin - p->offset;
        out[n++] = (CkptRange){s->param, e0, e0 + s->len, base + s->at};
    }
    return n;
}

// Moves every range of every group between the host states h (one per model chunk) and file
// f; a dataset is moved by the chunk that holds its parameter. Every rank opens and
// closes every dataset of the whole model in the same order (H5Dclose is collective under
// parallel HDF5) and moves its own ranges in between (one collective write per dataset;
// independent reads, each chunk's Fletcher-32 checksum verified). Returns 0, or -1 with the
// first failing dataset in err. model_only (reading): the /model group alone.
// The ranges of every chunk for one group, and the workspace of one dataset's transfer.
typedef struct {
    CkptRange *rs;  // (v, most + 1) each chunk's ranges
    int *ns;        // (v) how many
    int most;
    size_t *e0s, *e1s;  // (most + 1) one dataset's ranges
    float **bufs;       // (most + 1)
} Plans;

// Dataset `path` of full tensor `name`: written from (write 1) or read into this rank's
// ranges (collective: every rank calls it for every dataset). 0, or -1 with the reason in err
// (a NaN or Inf read, a negative value where nonneg (Adam's second moments), a damaged or
// unreadable dataset) unless *rc already holds one.
static int transfer_dataset(hid_t f, const CkptModel *cm, const Plans *pl, const ParamInfo *full,
                            const char *path, int write, int nonneg, char *err, size_t errlen) {
    int v = cm->n_chunks, c = 0, rc = 0;  // the chunk holding the parameter (at most one on a rank)
    while (c < v - 1 && gpt_param_index(cm->chunks[c], full->name) < 0) c++;
    const GPT *m = cm->chunks[c];
    const CkptRange *r = pl->rs + (size_t)c * (pl->most + 1);
    int n = pl->ns[c], local = gpt_param_index(m, full->name), bad = 0;
    hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
    if (write) {  // one collective write per dataset, on every rank (ckpt_h5.c)
        int nk = 0;
        for (int k = 0; k < n && local >= 0; k++)
            if (r[k].param == local) {
                pl->e0s[nk] = r[k].e0;
                pl->e1s[nk] = r[k].e1;
                pl->bufs[nk++] = r[k].buf;
            }
        bad = ds < 0 || ckpt_h5_write_ranges(ds, local >= 0 ? &m->params[local] : full, m->tp,
                                             m->tp_rank, pl->e0s, pl->e1s, pl->bufs, nk) != 0;
    }
    size_t nonfinite = SIZE_MAX, negative = SIZE_MAX;  // the first such value, a global element
    for (int k = 0; k < n && local >= 0 && !bad && !write; k++)
        if (r[k].param == local) {
            bad = ds < 0 || ckpt_h5_transfer(ds, &m->params[local], m->tp, m->tp_rank,
                                             r[k].e0, r[k].e1, r[k].buf, write) != 0;
            for (size_t e = 0; !bad && e < r[k].e1 - r[k].e0; e++)
                if (!isfinite(r[k].buf[e])) nonfinite = r[k].e0 + e, bad = 1;
                else if (nonneg && r[k].buf[e] < 0.0f) negative = r[k].e0 + e, bad = 1;
        }
    if (nonfinite != SIZE_MAX) {  // never trained on: a NaN spreads everywhere
        snprintf(err, errlen, "dataset %s holds a NaN or Inf (local element %zu): refusing "
                 "non-finite values", path, nonfinite);
        rc = -1;
    } else if (negative != SIZE_MAX) {  // sqrt of it in AdamW: NaN steps from the first one
        snprintf(err, errlen, "dataset %s holds a negative second moment (local element %zu): "
                 "refusing it", path, negative);
        rc = -1;
    }
    char h5[512] = "";
    if (bad) core_hdf5_last_error(h5, sizeof h5);  // before H5Dclose clears the stack
    if (ds < 0 || H5Dclose(ds) < 0) bad = 1;
    if (bad && rc == 0 && strstr(h5, "Fletcher32"))  // a chunk's checksum did not match
        snprintf(err, errlen, "dataset %s: checksum mismatch (Fletcher-32): the file is "
                 "damaged", path);
    else if (bad && rc == 0)
        snprintf(err, errlen, "dataset %s cannot be %s%s%s", path, write ? "written" : "read",
                 h5[0] ? ": " : "", h5);
    return bad ? -1 : rc;
}

static int transfer_all(hid_t f, const CkptModel *cm, const HostState *h, int write, int model_only,
                        char *err, size_t errlen) {
    int n_full = 0, rc = 0, v = cm->n_chunks, most = 0;
    ParamInfo *full = ckpt_full_table(cm->config, &n_full);
    for (int c = 0; c < v; c++) {  // ranges per chunk and group at most (ZeRO-1 buckets split tensors)
        if (cm->chunks[c]->n_params > most) most = cm->chunks[c]->n_params;
        if (cm->opts[c]->n_segs > most) most = cm->opts[c]->n_segs;
    }
    Plans pl = {core_calloc((size_t)v * (most + 1), sizeof *pl.rs), core_calloc((size_t)v, sizeof *pl.ns),
                most, core_calloc((size_t)most + 1, 2 * sizeof *pl.e0s), NULL,
                core_calloc((size_t)most + 1, sizeof *pl.bufs)};
    pl.e1s = pl.e0s + most + 1;
    char why[1024];
    for (int g = 0; g < (model_only ? CKPT_MODEL + 1 : CKPT_NGROUPS); g++) {  // same on every rank
        for (int c = 0; c < v; c++)
            pl.ns[c] = plan(cm, c, (CkptGroup)g, write, &h[c], pl.rs + (size_t)c * (most + 1));
        for (int i = 0; i < n_full; i++) {
            char path[128];
            snprintf(path, sizeof path, "%s/%s", ckpt_group_path((CkptGroup)g), full[i].name);
            if (transfer_dataset(f, cm, &pl, &full[i], path, write, g == CKPT_EXP_AVG_SQ, why,
                                 sizeof why) && rc == 0) {
                snprintf(err, errlen, "%s", why);  // the first failure is the one reported
                rc = -1;
            }
            core_watchdog_progress();  // one collective step done
        }
    }
    free(pl.rs);
    free(pl.ns);
    free(pl.e0s);
    free(pl.bufs);
    free(full);
    return rc;
}

static hid_t mpio_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5_CHECK(fapl);
    H5_CHECK(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    ckpt_h5_set_format(fapl);
    return fapl;
}

// The system's reason inside an HDF5 / MPI-IO message ("... Other I/O error No space left
// on device'"), else the message's last line, into out (n bytes).
static void io_reason(const char *h5msg, char *out, size_t n) {
    static const int codes[] = {ENOSPC, EDQUOT, EFBIG, EROFS, EACCES, EIO, ENOENT};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strstr(h5msg, strerror(codes[i]))) {
            snprintf(out, n, "%s", strerror(codes[i]));
            return;
        }
    const char *last = strrchr(h5msg, '\n');
    snprintf(out, n, "%s", last ? last + 1 : h5msg);
}

// Every rank: creates the file, its attributes and datasets, writes its slices, flushes and
// closes it. Collective: after a failure of its own a rank still takes part in every
// collective step (dataset closes, flush, close), so no rank waits forever. HDF5's error
// stack is not printed (MEGAC_HDF5_DEBUG=1 prints it). Returns 0, or -1 with one line
// (the file, the system's reason, the step) in err.
static int write_file(const CkptModel *cm, const CkptRun *r, const char *path, char *err,
                      size_t errlen) {
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    if (!getenv("MEGAC_HDF5_DEBUG")) H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char h5[CKPT_MSG_MAX] = "", step[CKPT_MSG_MAX] = "", why[256] = "";
    hid_t fapl = mpio_fapl();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5_CHECK(H5Pclose(fapl));
    int rc = 0;
    if (f < 0) {
        core_hdf5_last_error(h5, sizeof h5);
        snprintf(step, sizeof step, "cannot create the file");
        rc = -1;
    } else {
        CkptMeta meta;
        ckpt_state_to_meta(cm, r, &meta);
        int n_full = 0;
        ParamInfo *full = ckpt_full_table(cm->config, &n_full);
        ckpt_h5_write_meta(f, &meta);
        rc = ckpt_h5_create_datasets(f, full, n_full, step, sizeof step);
        free(full);
        core_watchdog_test_stop("save", cm->grid->coord.rank);  // test hook
        int any = rc != 0;  // the collective writes below need every rank's datasets
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        if (any && rc == 0) snprintf(step, sizeof step, "another rank could not create the datasets");
        if (any) rc = -1;
        HostState *h = core_calloc((size_t)cm->n_chunks, sizeof *h);  // one per model chunk
        for (int c = 0; c < cm->n_chunks; c++) h[c] = host_state(cm, c, 0);
        if (!any) rc = transfer_all(f, cm, h, 1, 0, step, sizeof step);
        if (!any) {  // (collective: every rank, whatever its transfer did)
            char later[CKPT_MSG_MAX];  // (a failure of the transfer is reported first)
            int rb = ckpt_bias_write(f, cm->config, cm->moe_bias, cm->grid->coord.rank == 0,
                                     rc ? later : step, sizeof step);
            if (rc == 0) rc = rb;
        }
        for (int c = 0; c < cm->n_chunks; c++) host_state_done(cm, c, &h[c], 0);
        free(h);
        const char *what[2] = {"flushing the file", "closing the file"};
        for (int k = 0; k < 2; k++) {  // H5Fflush: MPI_File_sync on every rank
            if ((k == 0 ? H5Fflush(f, H5F_SCOPE_GLOBAL) : H5Fclose(f)) >= 0 || rc != 0) continue;
            core_hdf5_last_error(h5, sizeof h5);
            snprintf(step, sizeof step, "%s", what[k]);
            rc = -1;
        }
    }
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    if (rc != 0) {
        io_reason(h5[0] ? h5 : step, why, sizeof why);
        step[strcspn(step, ":")] = '\0';  // "dataset X cannot be written", without HDF5's words
        snprintf(err, errlen, "%.600s: %s (%.200s)", path, why, step);
    }
    return rc;
}

// After a failed save, known to every rank (the failing rank's message in msg): rank 0
// removes the partial file (and the iteration's directory when this save created it) and
// says what is left; every rank exits 1. Collective. Never returns.
static CORE_NORETURN void save_failed(const CkptModel *cm, const char *save, int64_t iteration,
                                      int bad_rank, const char *msg, const char *tmp,
                                      const char *dir, int dir_was_there) {
    if (cm->grid->coord.rank == 0) {
        unlink(tmp);
        if (!dir_was_there) rmdir(dir);
        char latest[64] = "no earlier checkpoint";
        int64_t it = 0;
        char ignored[CKPT_MSG_MAX];
        if (ckpt_read_latest(save, &it, ignored, sizeof ignored) == 0)
            snprintf(latest, sizeof latest, "`latest` still names iteration %lld", (long long)it);
        fprintf(stderr, "megac: [rank %d] cannot save the checkpoint of iteration %lld: %s; the "
                "partial file was removed, %s\n", bad_rank, (long long)iteration, msg, latest);
        ckpt_lock_release();
    }
    // Nobody leaves until rank 0 has cleaned up and said so; core_exit_all finalizes MPI, so
    // hydra sees every rank exit 1 instead of SIGKILLing the others after the first.
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    core_exit_all(1);
}

void ckpt_prepare_save(int rank, const char *dir) {
    int status = 0;
    char msg[CKPT_MSG_MAX] = "";
    if (rank == 0) {
        status = ckpt_fs_mkdirs(dir, msg, sizeof msg);
        if (status == 0 && access(dir, W_OK | X_OK) != 0) {
            snprintf(msg, sizeof msg, "--save: cannot write into %s: %s", dir, strerror(errno));
            status = -1;
        }
    }
    core_agree_or_exit(status, msg, (int)sizeof msg);
}

void ckpt_save(const CkptModel *cm, const CkptRun *r, const char *save) {
    double t0 = core_now();
    int rank0 = cm->grid->coord.rank == 0, status = 0;
    int64_t it = r->iteration;
    char dir[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], msg[CKPT_MSG_MAX] = "";
    if (ckpt_fs_path(dir, save, it, NULL) || ckpt_fs_path(tmp, save, it, CKPT_TMP_FILE))
        core_usage_error("--save: directory name too long: %.200s...", save);
    ckpt_lock_heartbeat();
    static char phase[96];  // the watchdog bounds every collective step of the save
    snprintf(phase, sizeof phase, "saving the checkpoint of iteration %lld (collective HDF5 I/O)",
             (long long)it);
    core_watchdog_arm(phase);
    int dir_was_there = access(dir, F_OK) == 0;  // only rank 0's answer is used
    if (rank0) status = ckpt_fs_mkdirs(dir, msg, sizeof msg);
    core_agree_or_exit(status, msg, (int)sizeof msg);
    if (rank0) status = ckpt_fs_check_room(dir, tmp, ckpt_h5_file_bytes(cm->config), msg, sizeof msg);
    int bad = core_agree(status, msg, (int)sizeof msg);
    if (bad >= 0) save_failed(cm, save, it, bad, msg, tmp, dir, dir_was_there);
    bad = core_agree(write_file(cm, r, tmp, msg, sizeof msg), msg, (int)sizeof msg);
    if (bad >= 0) save_failed(cm, save, it, bad, msg, tmp, dir, dir_was_there);
    if (rank0) status = ckpt_fs_publish(save, it, msg, sizeof msg);
    bad = core_agree(status, msg, (int)sizeof msg);
    if (bad >= 0) save_failed(cm, save, it, bad, msg, tmp, dir, 1);
    core_watchdog_disarm();
    if (rank0) {
        printf(" saved checkpoint at iteration %lld to %s in %.3f s\n", (long long)it, dir,
               core_now() - t0);
        fflush(stdout);
    }
}

// Every rank: opens the validated file and reads its slices into cm (each chunk's
// Fletcher-32 checksum is verified by HDF5); model_only: the parameters alone.
static int read_file(const CkptModel *cm, const char *path, int model_only, char *err,
                     size_t errlen) {
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    // Every rank opens the file on its own, read-only (HDF5's default driver): parallel
    // HDF5 1.10 reads chunked datasets through MPI-IO 20-30x slower (bench_checksum).
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int rc = -1;
    if (f < 0) {
        snprintf(err, errlen, "%s: cannot be opened on this rank", path);
    } else {
        char why[CKPT_MSG_MAX] = "";
        HostState *h = core_calloc((size_t)cm->n_chunks, sizeof *h);  // one per model chunk
        for (int c = 0; c < cm->n_chunks; c++) h[c] = host_state(cm, c, 1);
        rc = transfer_all(f, cm, h, 0, model_only, why, sizeof why);
        if (rc == 0) rc = ckpt_bias_read(f, cm->config, cm->moe_bias, why, sizeof why);
        if (H5Fclose(f) < 0 && rc == 0) rc = -1;
        if (rc != 0) snprintf(err, errlen, "%s: %s", path, why);
        for (int c = 0; c < cm->n_chunks; c++) host_state_done(cm, c, &h[c], rc == 0);
        free(h);
    }
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return rc;
}

void ckpt_load(const CkptModel *cm, CkptRun *r, const char *load, CkptLoadMode mode) {
    int rank0 = cm->grid->coord.rank == 0, status = 0;
    int finetune = mode == CKPT_LOAD_FINETUNE, fresh = mode != CKPT_LOAD_ALL;  // fresh: moments stay zero
    char path[CKPT_PATH_MAX] = "", msg[CKPT_MSG_MAX] = "";
    CkptMeta want, got;
    ckpt_state_to_meta(cm, r, &want);
    memset(&got, 0, sizeof got);
    core_watchdog_arm("loading the checkpoint (validation and HDF5 reads)");
    if (rank0) status = ckpt_check(load, &want, &got, path, msg, sizeof msg);
    core_agree_or_exit(status, msg, (int)sizeof msg);
    MPI_CHECK(MPI_Bcast(&got, (int)sizeof got, MPI_BYTE, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD));
    status = read_file(cm, path, fresh, msg, sizeof msg);
    core_agree_or_exit(status, msg, (int)sizeof msg);
    core_watchdog_disarm();
    r->iteration = got.iteration;
    r->consumed_samples = got.consumed_samples;  // batches continue there, whatever G is now
    for (int c = 0; c < cm->n_chunks; c++) cm->opts[c]->step = fresh ? 0 : got.adam_step;
    r->nan_total = (int)got.nan_iterations;
    if (finetune) r->iteration = 0, r->consumed_samples = 0, r->nan_total = 0;
    if (!finetune) ckpt_loss_scale_restore(r, &got, rank0);
    if (!rank0) return;
    printf(" loaded checkpoint %s at iteration %lld (consumed samples %lld; written by TP %lld x "
           "PP %lld x DP %lld%s)\n", path, (long long)got.iteration, (long long)got.consumed_samples,
           (long long)got.saved_tp, (long long)got.saved_pp, (long long)got.saved_dp,
           got.saved_zero1 == 1 ? ", ZeRO-1" : got.saved_zero1 == 2 ? ", ZeRO-2"
           : got.saved_zero1 == 3 ? ", ZeRO-3" : "");
    if (fresh)
        printf(" %s: the model only (fresh AdamW state)%s\n", finetune ? "--finetune" : "--no-load-optim",
               finetune ? "; training starts at iteration 0, from the first sample" : "");
    if (got.seed != want.seed)
        printf(" warning: the checkpoint was trained with --seed %lld, this run uses %lld\n",
               (long long)got.seed, (long long)want.seed);
    fflush(stdout);
}
