// backend/cpu/cpu_ops.c: the CPU backend's ops table, filled by its op families.
//
// Each family's file registers its entries for be->act (cpu_*_ops, cpu_backend.h): the fp32
// ops, or for --bf16 / --fp16 its 16-bit entries (cpu_half.c's rules) where an entry takes
// `void *` activations. A new entry of an existing family is registered in that family's
// file; a new family is one more line here.
#include "cpu_backend.h"

void cpu_ops_fill(BackendOps *t, BackendDType act) {
    void (*const families[])(BackendOps *, BackendDType) = {
        cpu_memory_ops, cpu_matmul_ops,    cpu_norm_ops,       cpu_act_ops,   cpu_cast_ops, cpu_dropout_ops,
        cpu_attention_ops, cpu_flash_ops, cpu_embed_xent_ops, cpu_optim_ops, cpu_rope_ops, cpu_moe_ops,
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) families[i](t, act);
}
