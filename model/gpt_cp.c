// model/gpt_cp.c: context parallelism's split of a GPT stage (gpt_cp.h): the check, the rows
// and tokens of this rank's two chunks, and the stage's attention layer
// (layers/cp_attention.h).
#include "gpt_cp.h"

#include <stdio.h>
#include <string.h>

int gpt_cp_check(const GPTConfig *cfg, int tp, int cp, CPCommType type, char *err, size_t errlen) {
    if (cp < 1) return snprintf(err, errlen, "--context-parallel-size must be >= 1, got %d", cp), -1;
    if (cp > 1 && cfg->seq_length % (2 * cp))
        return snprintf(err, errlen, "--context-parallel-size %d: --seq-length %d is not divisible "
                        "by 2 x %d (each rank holds two of the 2 x CP chunks of a sequence)", cp,
                        cfg->seq_length, cp), -1;
    if (cp > 1 && !cfg->use_flash_attn)
        return snprintf(err, errlen, "--context-parallel-size %d needs --use-flash-attn (the ring "
                        "merges attention blocks by their log-sum-exp)", cp), -1;
    if (cp == 1 || tp < 1) return 0;
    CPAttnDims d = {type, cp, 0, 1, cfg->seq_length, cfg->num_heads / tp, gpt_kv_heads(cfg) / tp,
                    gpt_head_size(cfg)};
    return cp_attention_check(&d, err, errlen);
}

GPTRows gpt_cp_rows(const GPT *m, const GPTActs *a) {
    GPTRows r = {m->B, m->T, cp_chunk_pos(m->T_seq, m->cp, m->cp_rank, 0), a->sample0, 1,
                 cp_chunk_pos(m->T_seq, m->cp, m->cp_rank, 1), a->doc_pos, a->doc_start,
                 a->doc_start_seq};
    return r;
}

void gpt_cp_select(int *local, const int *full, int B, int T_seq, int cp, int cp_rank) {
    int c = T_seq / (2 * cp);
    for (int h = 0; h < 2; h++)
        for (int b = 0; b < B; b++)
            memcpy(local + ((size_t)h * B + b) * c,
                   full + (size_t)b * T_seq + cp_chunk_pos(T_seq, cp, cp_rank, h),
                   (size_t)c * sizeof(int));
}

CPAttention gpt_cp_attention(const GPT *m) {
    CPAttention L = {{m->cp_comm_type, m->cp, m->cp_rank, m->B, m->T_seq, m->NH_tp, m->G_tp, m->hs},
                     m->be, m->cp_comm, m->s.cp_buf};
    return L;
}
