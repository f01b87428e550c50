// tests/core/test_outpath.c: the output guard (core/outpath.h): each refusal rule with its
// message, and the temporary-file write that leaves the old file whole when a write fails
// (ulimit -f here, as a full disk would).
#include "core/outpath.h"
#include "tests/testing.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static const char *at(const char *name) {
    static char bufs[4][256];
    static int k = 0;
    char *b = bufs[k++ % 4];
    snprintf(b, 256, "%s/%s", dir, name);
    return b;
}

static void put(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

// core_out_check_file's result and, for a refusal, that err holds `want`.
static void expect_file(const char *path, const CoreOutInput *in, int n_in, int may, const char *want) {
    char err[1024] = "";
    int rc = core_out_check_file("--out", path, in, n_in, may, err, sizeof err);
    if (!want) EXPECT(rc == 0, "%s refused: %s", path, err);
    else EXPECT(rc == -1 && strstr(err, want), "%s: rc %d, err '%s', want '%s'", path, rc, err, want);
}

static void expect_dir(const char *path, const char *const *own, const char *want) {
    char err[1024] = "";
    int rc = core_out_check_dir("--output", path, own, "model.safetensors", "megac_iteration", err, sizeof err);
    if (!want) EXPECT(rc == 0, "%s refused: %s", path, err);
    else EXPECT(rc == -1 && strstr(err, want), "%s: rc %d, err '%s', want '%s'", path, rc, err, want);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/megac_outpath_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    // files
    expect_file(at("new.txt"), NULL, 0, 0, NULL);
    EXPECT(access(at("new.txt"), F_OK) != 0, "the check created the file");
    expect_file(at("nodir/x.txt"), NULL, 0, 0, "No such file or directory");
    expect_file(dir, NULL, 0, 0, "it is a directory");
    expect_file("/dev/null", NULL, 0, 0, NULL);
    put(at("input.txt"), "abc", 3);
    EXPECT(link(at("input.txt"), at("alias.txt")) == 0, "link");
    CoreOutInput in[2] = {{"--tokenizer", NULL}, {"--input", at("input.txt")}};
    expect_file(at("alias.txt"), in, 2, 0, "is the same file as --input's");
    put(at("old.txt"), "old", 3);
    expect_file(at("old.txt"), in, 2, 0, NULL);  // an earlier output: replaced
    put(at("data.h5"), "\x89HDF\r\n\x1a\n0000", 12);
    expect_file(at("data.h5"), NULL, 0, 0, "is a data or model file");
    expect_file(at("data.h5"), NULL, 0, 1, NULL);  // preprocess may replace a dataset
    put(at("model.safetensors"), "\x10\0\0\0\0\0\0\0{}", 10);
    expect_file(at("model.safetensors"), NULL, 0, 0, "is a data or model file");
    mkdir(at("ck"), 0777);
    mkdir(at("ck/iter_0000004"), 0777);
    put(at("ck/latest_checkpointed_iteration.txt"), "4\n", 2);
    put(at("ck/iter_0000004/notes.txt"), "x", 1);
    expect_file(at("ck/iter_0000004/notes.txt"), NULL, 0, 1, "is part of a checkpoint");
    expect_file(at("ck/latest_checkpointed_iteration.txt"), NULL, 0, 1, "is part of a checkpoint");
    put(at("ck/train_log.jsonl"), "{}\n", 3);  // a log beside the checkpoints (the Slurm script)
    expect_file(at("ck/train_log.jsonl"), NULL, 0, 1, NULL);
    put(at("checkpoint.h5"), "x", 1);
    expect_file(at("checkpoint.h5"), NULL, 0, 1, "is part of a checkpoint");
    // folders
    const char *own[] = {"config.json", "model.safetensors", NULL};
    expect_dir(at("fresh"), own, NULL);
    expect_dir(at("input.txt"), own, "is a file, not a folder");
    mkdir(at("empty"), 0777);
    expect_dir(at("empty"), own, NULL);
    mkdir(at("other"), 0777);
    put(at("other/config.json"), "{}", 2);
    put(at("other/model.safetensors"), "\x10\0\0\0\0\0\0\0{}", 10);
    expect_dir(at("other"), own, "its model.safetensors was not written by megac");
    put(at("other/weights.bin"), "x", 1);
    expect_dir(at("other"), own, "it holds weights.bin");
    mkdir(at("mine"), 0777);
    put(at("mine/model.safetensors"), "\x20\0\0\0\0\0\0\0{\"megac_iteration\":\"4\"}", 31);
    expect_dir(at("mine"), own, NULL);
    // writes: a temporary name, renamed at the end; a failed write leaves the old file whole
    FILE *f;
    char tmp[512], err[1024];
    EXPECT(core_out_open("--out", at("old.txt"), &f, tmp, sizeof tmp, err, sizeof err) == 0, "%s", err);
    EXPECT(strstr(tmp, "old.txt.tmp.") != NULL, "tmp '%s'", tmp);
    fputs("new", f);
    EXPECT(core_out_publish("--out", at("old.txt"), f, tmp, err, sizeof err) == 0, "%s", err);
    char got[8] = "";
    FILE *r = fopen(at("old.txt"), "r");
    EXPECT(r && fgets(got, sizeof got, r) && !strcmp(got, "new"), "old.txt holds '%s'", got);
    if (r) fclose(r);
    EXPECT(access(tmp, F_OK) != 0, "the temporary file stayed");
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    EXPECT(core_out_open("--out", at("old.txt"), &f, tmp, sizeof tmp, err, sizeof err) == 0, "%s", err);
    static char big[65536];
    fwrite(big, 1, sizeof big, f);
    EXPECT(core_out_publish("--out", at("old.txt"), f, tmp, err, sizeof err) == -1 && strstr(err, "File too large"),
           "publish past ulimit -f: '%s'", err);
    r = fopen(at("old.txt"), "r");
    EXPECT(r && fgets(got, sizeof got, r) && !strcmp(got, "new"), "after a failed write old.txt holds '%s'", got);
    if (r) fclose(r);
    EXPECT(access(tmp, F_OK) != 0, "the failed temporary file stayed");
    EXPECT(core_out_open("--out", "/dev/full", &f, tmp, sizeof tmp, err, sizeof err) == 0 && !tmp[0], "%s", err);
    fputs("x", f);
    EXPECT(core_out_publish("--out", "/dev/full", f, tmp, err, sizeof err) == -1 && strstr(err, "No space left"),
           "/dev/full: '%s'", err);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return test_result("core_outpath");
}
