// tests/hf/test_hf_kv.c: the key/value cache of `megac generate` (hf/hf_kv.h) on a trained
// checkpoint: after a prompt, every cached step's logits equal the full forward's logits at
// the same position (relative 1e-5 of the row's largest logit), up to the full context (the
// full forwards run on a second copy of the model, since the cache is the model's slot); and
// the time per token with and without the cache (printed, not asserted).
// usage: test_hf_kv CKPT_DIR
#include "hf/hf_kv.h"
#include "core/timer.h"
#include "tests/testing.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    MPI_Init(&argc, &argv);
    char err[2048];
    HfCkpt *c = hf_ckpt_read(argv[1], -1, err, sizeof err);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    HfLm *lm = hf_lm_create(c, 1), *ref = hf_lm_create(c, 1);
    HfKv *kv = hf_kv_create(lm);
    int T = lm->T, V = lm->V, Vp = lm->Vp, prompt = 5;
    int *tokens = calloc((size_t)T, sizeof(int));
    for (int i = 0; i < T; i++) tokens[i] = (i * 7919 + 13) % V;
    float *cached = malloc(sizeof(float) * (size_t)Vp);
    const float *first = hf_kv_prefill(kv, tokens, prompt);
    (void)first;
    double worst = 0;
    int worst_at = -1;
    double t_kv = 0, t_full = 0;
    for (int p = prompt; p < T; p++) {  // token p joins the cache; its logits predict p + 1
        double t0 = core_now();
        const float *row = hf_kv_step(kv, tokens[p]);
        t_kv += core_now() - t0;
        for (int j = 0; j < Vp; j++) cached[j] = row[j];
        t0 = core_now();
        const float *full = hf_lm_forward(ref, tokens, p + 1) + (size_t)p * Vp;
        t_full += core_now() - t0;
        double big = 0, diff = 0;
        for (int j = 0; j < V; j++) {
            big = fmax(big, fabs(full[j]));
            diff = fmax(diff, fabs((double)cached[j] - full[j]));
        }
        if (diff / fmax(big, 1e-30) > worst) worst = diff / fmax(big, 1e-30), worst_at = p;
    }
    EXPECT(kv->n == T, "cache holds %d positions, want %d", kv->n, T);
    EXPECT(worst <= 1e-5, "cached logits differ from the full forward by %.3g (relative to the row's "
           "largest) at position %d", worst, worst_at);
    printf("positions %d..%d: largest relative difference %.3g; per token %.3f ms cached, %.3f ms "
           "full forward (%.1fx)\n", prompt, T - 1, worst, 1e3 * t_kv / (T - prompt),
           1e3 * t_full / (T - prompt), t_full / fmax(t_kv, 1e-12));
    free(tokens);
    free(cached);
    hf_kv_free(kv);
    hf_lm_free(lm);
    hf_lm_free(ref);
    hf_ckpt_free(c);
    int rc = test_result("hf_kv");
    MPI_Finalize();
    return rc;
}
