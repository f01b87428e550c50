// tests/model/test_gpt_cp.c: context parallelism's split (model/gpt_cp.h): the chunk
// positions of each rank and the rows it takes from a micro-batch. Every position of every
// sequence lands on exactly one rank, and rank i holds chunks i and 2*CP-1-i.
#include "model/gpt_cp.h"

#include <stdio.h>
#include <stdlib.h>

static int fails;
#define EXPECT(cond, ...) do { if (!(cond)) { printf("FAIL: " __VA_ARGS__); printf("\n"); fails++; } } while (0)

int main(void) {
    EXPECT(cp_chunk_pos(32, 2, 0, 0) == 0 && cp_chunk_pos(32, 2, 0, 1) == 24, "CP 2 rank 0: chunks 0 and 3");
    EXPECT(cp_chunk_pos(32, 2, 1, 0) == 8 && cp_chunk_pos(32, 2, 1, 1) == 16, "CP 2 rank 1: chunks 1 and 2");
    EXPECT(cp_chunk_pos(24, 3, 2, 0) == 8 && cp_chunk_pos(24, 3, 2, 1) == 12, "CP 3 rank 2: chunks 2 and 3");
    int sizes[][2] = {{32, 2}, {24, 3}, {64, 4}, {34, 1}};
    for (int k = 0; k < 4; k++) {
        int T = sizes[k][0], cp = sizes[k][1], B = 3, c = T / (2 * cp);
        int *full = malloc(sizeof(int) * B * T), *seen = calloc((size_t)B * T, sizeof(int));
        int *local = malloc(sizeof(int) * B * T / cp);
        for (int i = 0; i < B * T; i++) full[i] = 1000 * (i / T) + i % T;  // sample, position
        for (int r = 0; r < cp; r++) {
            gpt_cp_select(local, full, B, T, cp, r);
            for (int h = 0; h < 2; h++)
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < c; t++) {
                        int v = local[(h * B + b) * c + t], pos = cp_chunk_pos(T, cp, r, h) + t;
                        EXPECT(v == 1000 * b + pos, "T %d CP %d rank %d half %d sample %d row %d: got %d, want %d",
                               T, cp, r, h, b, t, v, 1000 * b + pos);
                        seen[b * T + pos]++;
                    }
        }
        for (int i = 0; i < B * T; i++) EXPECT(seen[i] == 1, "T %d CP %d: position %d held %d times", T, cp, i % T, seen[i]);
        free(full), free(seen), free(local);
    }
    printf("%s\n", fails ? "gpt_cp: FAILED" : "gpt_cp: ok");
    return fails != 0;
}
