// tests/hf/hf_ckpt_diff.c A B: exits 0 when checkpoints A and B (directories, latest
// iteration) hold the same model config and bit-identical model tensors; else names the
// first difference and exits 1. Reads through hf/hf_ckpt.h (serial, no MPI).
#include "hf/hf_ckpt.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: hf_ckpt_diff CKPT_A CKPT_B\n");
        return 2;
    }
    char err[2048];
    HfCkpt *a = hf_ckpt_read(argv[1], -1, err, sizeof err), *b = a ? hf_ckpt_read(argv[2], -1, err, sizeof err) : NULL;
    if (!a || !b) {
        fprintf(stderr, "hf_ckpt_diff: %s\n", err);
        return 2;
    }
    const CkptMeta *x = &a->meta, *y = &b->meta;
    if (x->num_layers != y->num_layers || x->hidden_size != y->hidden_size ||
        x->num_attention_heads != y->num_attention_heads || x->ffn_hidden_size != y->ffn_hidden_size ||
        x->max_position_embeddings != y->max_position_embeddings || x->vocab_size != y->vocab_size) {
        fprintf(stderr, "hf_ckpt_diff: the model configs differ\n");
        return 1;
    }
    size_t total = 0;
    for (int i = 0; i < a->n; i++) {
        size_t n = (size_t)a->table[i].rows * a->table[i].cols;
        if (memcmp(a->data[i], b->data[i], n * sizeof(float)) != 0) {
            fprintf(stderr, "hf_ckpt_diff: tensor %s differs\n", a->table[i].name);
            return 1;
        }
        total += n;
    }
    printf("hf_ckpt_diff: %d tensors, %zu floats, bit-identical (iterations %lld and %lld)\n", a->n,
           total, (long long)x->iteration, (long long)y->iteration);
    hf_ckpt_free(a);
    hf_ckpt_free(b);
    return 0;
}
