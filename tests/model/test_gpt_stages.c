// tests/model/test_gpt_stages.c: the pipeline split of the layers (gpt_stage_layers,
// gpt_chunks_check): Megatron's uneven first/last ranks, each rank's layers in v chunks of
// the interleaved schedule, virtual stage c*PP + r holding chunk c of rank r.
#include "model/gpt_config.h"

#include <stdio.h>
#include <string.h>

static int fails;
#define EXPECT(cond, ...) do { if (!(cond)) { printf("FAIL: " __VA_ARGS__); printf("\n"); fails++; } } while (0)

// "n0 n1 ..." the layers of each virtual stage of pp ranks x v chunks, in stage order.
static void split(int L, int first, int last, int pp, int v, char *out, size_t len) {
    GPTConfig c = {0};
    c.num_layers = L, c.first_stage_layers = first, c.last_stage_layers = last;
    size_t k = 0;
    out[0] = 0;
    for (int s = 0, l0, n; s < pp * v && k < len; s++) {
        gpt_stage_layers(&c, pp, v, s, &l0, &n);
        k += (size_t)snprintf(out + k, len - k, "%s%d@%d", s ? " " : "", n, l0);
    }
}

int main(void) {
    char got[256], err[512];
    split(8, 0, 0, 4, 1, got, sizeof got);  // even, one chunk: PP stages of L / PP
    EXPECT(!strcmp(got, "2@0 2@2 2@4 2@6"), "even PP 4: %s", got);
    split(8, 1, 1, 4, 1, got, sizeof got);  // 1 | 3 | 3 | 1
    EXPECT(!strcmp(got, "1@0 3@1 3@4 1@7"), "first 1, last 1: %s", got);
    split(8, 6, 0, 2, 2, got, sizeof got);  // ranks 6 | 2 in 2 chunks: 3 1 3 1
    EXPECT(!strcmp(got, "3@0 1@3 3@4 1@7"), "PP 2 v 2, first 6: %s", got);
    split(12, 2, 6, 4, 2, got, sizeof got);  // ranks 2 | 2 | 2 | 6: 1 1 1 3 1 1 1 3
    EXPECT(!strcmp(got, "1@0 1@1 1@2 3@3 1@6 1@7 1@8 3@9"), "PP 4 v 2, first 2 last 6: %s", got);
    // every layer exactly once, in order, for every split the checks accept
    for (int L = 1; L <= 24; L++)
        for (int pp = 1; pp <= 6; pp++)
            for (int v = 1; v <= 4; v++)
                for (int f = 0; f < L; f++)
                    for (int l = 0; l < L - f; l++) {
                        GPTConfig c = {0};
                        c.num_layers = L, c.first_stage_layers = f, c.last_stage_layers = l;
                        c.hidden_size = c.num_heads = c.ffn_hidden_size = c.seq_length = c.vocab_size = 1;
                        c.max_position_embeddings = 1;
                        int fixed = (f > 0) + (l > 0), rest = L - f - l;
                        if ((fixed && pp == 1) || fixed > pp || (pp > fixed && rest % (pp - fixed)) ||
                            (pp == fixed && rest) || gpt_chunks_check(&c, pp, v, err, sizeof err))
                            continue;
                        for (int s = 0, next = 0, l0, n; s < pp * v; s++) {
                            gpt_stage_layers(&c, pp, v, s, &l0, &n);
                            EXPECT(l0 == next && n >= 0, "L %d PP %d v %d first %d last %d stage %d: "
                                   "layers %d from %d, want from %d", L, pp, v, f, l, s, n, l0, next);
                            next = l0 + n;
                            if (s == pp * v - 1) EXPECT(next == L, "L %d PP %d v %d: ends at %d", L, pp, v, next);
                        }
                    }
    GPTConfig c = {0};
    c.num_layers = 8, c.first_stage_layers = 3;  // 3 | 5 at PP 2: v 2 divides neither
    EXPECT(gpt_chunks_check(&c, 2, 2, err, sizeof err) && strstr(err, "the 3 layers of pipeline rank 0"),
           "v 2 over 3 | 5: %s", err);
    c.first_stage_layers = 2;  // 2 | 6
    EXPECT(!gpt_chunks_check(&c, 2, 2, err, sizeof err), "v 2 over 2 | 6: %s", err);
    EXPECT(gpt_chunks_check(&c, 2, 3, err, sizeof err) && strstr(err, "pipeline rank 0"), "v 3: %s", err);
    printf(fails ? "test_gpt_stages: %d failure(s)\n" : "test_gpt_stages: ok\n", fails);
    return fails != 0;
}
