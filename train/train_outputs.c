// train/train_outputs.c: output paths checked at start-up; the appended --log-json file.
#include "train_outputs.h"
#include "ckpt/ckpt_format.h"  // defines: CKPT_PATH_MAX, CKPT_LATEST, ckpt_read_latest
#include "ckpt/ckpt_fs.h"      // defines: ckpt_fs_path
#include "core/check.h"
#include "core/outpath.h"  // defines: core_out_check_file
#include "train_log.h"  // defines: train_log_run_record
#include "tb_events.h"  // defines: tb_open

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MSG = 1024 };

typedef struct {
    const char *what;
    char path[CKPT_PATH_MAX];
} Input;

// The files this run reads or must keep: the data, `latest` and its checkpoint of each dir.
// Returns the count; *out (allocated) holds them.
static int list_inputs(const TrainArgs *a, Input **out) {
    const struct { const char *flag; const CoreStrList *l; } data[] = {
        {"--data-path", &a->data_path}, {"--train-data-path", &a->train_data_path},
        {"--valid-data-path", &a->valid_data_path}, {"--test-data-path", &a->test_data_path}};
    int cap = 4;
    for (int i = 0; i < 4; i++) cap += data[i].l->n;
    Input *in = *out = core_calloc((size_t)cap, sizeof *in);
    int n = 0;
    for (int i = 0; i < 4 && !a->mock_data; i++)
        for (int k = 0; k < data[i].l->n; k++) {  // every item (weights too: never files here)
            in[n].what = data[i].flag;
            snprintf(in[n++].path, CKPT_PATH_MAX, "%s", data[i].l->items[k]);
        }
    const char *dirs[2] = {a->load, a->save}, *names[2] = {"--load", "--save"};
    for (int d = 0; d < 2; d++) {
        char err[MSG];
        int64_t it = 0;
        if (!dirs[d]) continue;
        in[n].what = names[d];
        if (ckpt_fs_path(in[n].path, dirs[d], -1, CKPT_LATEST) == 0) n++;
        if (ckpt_read_latest(dirs[d], &it, err, sizeof err) == 0) {
            in[n].what = names[d];
            if (ckpt_fs_path(in[n].path, dirs[d], it, CKPT_FILE) == 0) n++;
        }
    }
    return n;
}

// Checks one output path against the run's inputs (core/outpath.h); 0, or -1 with one line.
static int check_output(const char *flag, const char *path, const Input *in, int n_in,
                        char *err, size_t n) {
    CoreOutInput *ins = core_calloc((size_t)n_in + 1, sizeof *ins);
    for (int i = 0; i < n_in; i++) ins[i] = (CoreOutInput){in[i].what, in[i].path};
    int rc = core_out_check_file(flag, path, ins, n_in, 0, err, n);
    free(ins);
    return rc;
}

// A --log-json file whose last line has no newline holds a record cut short (a crash, a
// full disk before records were written whole): removes that line. Returns the bytes
// removed (0: none), or -1 (errno set) if the file cannot be truncated.
static long cut_last_line(FILE *f, long size) {
    long at = size;  // the last line starts at `at`
    while (at > 0 && fseek(f, at - 1, SEEK_SET) == 0 && fgetc(f) != '\n') at--;
    if (at == size) return 0;
    if (ftruncate(fileno(f), at) != 0) return -1;
    return size - at;
}

// --tensorboard-dir: a new or empty folder, or one holding only event files (a resumed run
// adds its own file), never the --save or --load folder. 0, or -1 with one line in msg.
static int check_tensorboard_dir(const TrainArgs *a, char *msg, size_t n) {
    const char *dir = a->logf.tensorboard_dir, *own[] = {"events.out.tfevents.*", NULL};
    if (!dir) return 0;
    if (core_out_check_dir("--tensorboard-dir", dir, own, NULL, NULL, msg, n)) return -1;
    const char *ckpt[2] = {a->save, a->load}, *flag[2] = {"--save", "--load"};
    struct stat s1, s2;
    for (int i = 0; i < 2; i++)
        if (ckpt[i] && stat(dir, &s1) == 0 && stat(ckpt[i], &s2) == 0 && s1.st_dev == s2.st_dev &&
            s1.st_ino == s2.st_ino) {
            snprintf(msg, n, "--tensorboard-dir %s is the %s folder %s: give a folder of its own", dir,
                     flag[i], ckpt[i]);
            return -1;
        }
    return 0;
}

// Rank 0's checks and the opening of --log-json (its cut last line removed). Returns 0, or -1 with one line in msg.
static int outputs_rank0(Trainer *t, char *msg, size_t n) {
    const TrainArgs *a = &t->args;
    Input *in = NULL;
    int n_in = list_inputs(a, &in);
    int bad = (a->log_json && check_output("--log-json", a->log_json, in, n_in, msg, n)) ||
              (a->trace && check_output("--trace", a->trace, in, n_in, msg, n));
    free(in);
    if (bad || check_tensorboard_dir(a, msg, n)) return -1;
    struct stat s1, s2;
    if (a->log_json && a->trace && stat(a->log_json, &s1) == 0 && stat(a->trace, &s2) == 0 &&
        s1.st_dev == s2.st_dev && s1.st_ino == s2.st_ino) {
        snprintf(msg, n, "--log-json %s and --trace %s are the same file", a->log_json, a->trace);
        return -1;
    }
    if (a->logf.tensorboard_dir && !(t->tb = tb_open(a->logf.tensorboard_dir, msg, n))) return -1;
    if (!a->log_json) return 0;
    t->log_json = fopen(a->log_json, "a+");  // appends; reads start at the beginning
    if (!t->log_json) {
        snprintf(msg, n, "cannot write --log-json %s: %s", a->log_json, strerror(errno));
        return -1;
    }
    fseek(t->log_json, 0, SEEK_END);
    long size = ftell(t->log_json);
    long cut = size > 0 ? cut_last_line(t->log_json, size) : 0;
    if (cut < 0) {
        snprintf(msg, n, "cannot repair --log-json %s (its last record is cut short): %s",
                 a->log_json, strerror(errno));
        return -1;
    }
    if (cut > 0)
        printf("megac train: --log-json %s: removed its last record, cut short after %ld bytes "
               "(a crash or a full disk)\n", a->log_json, cut);
    size -= cut;
    t->log_json_prior = size > 0 ? size : 0;
    fseek(t->log_json, 0, SEEK_END);
    return 0;
}

void train_outputs_check(Trainer *t) {
    char msg[MSG] = "";
    int status = t->grid->coord.rank == 0 ? outputs_rank0(t, msg, sizeof msg) : 0;
    core_agree_or_exit(status, msg, (int)sizeof msg);
}

// Records of the file (from the beginning) whose "iteration" is above `after`.
static long count_after(FILE *f, int64_t after) {
    char line[4096];
    long n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        long long it = 0;
        if (sscanf(line, "{\"iteration\":%lld", &it) == 1 && it > after) n++;
    }
    fseek(f, 0, SEEK_END);
    return n;
}

void train_outputs_run_start(Trainer *t) {
    FILE *f = t->log_json;
    if (!f) return;
    train_log_run_record(t, t->log_json_prior > 0 ? count_after(f, t->iteration) : 0);
}
