// model/gpt_acts.h: the activation layout of a GPT stage (internal to model/; gpt_acts.c).
#pragma once
#include "gpt.h"

// Allocates m->s (the backward workspace, with the recomputation chunk's layers m->rc) and
// n_slots activation slots, each one backend allocation; m's sizes must be set. Aborts the
// job if a slot's carving and its count (gpt_measure's) disagree.
void gpt_acts_alloc(GPT *m, int n_slots);
// Full recomputation: the table of one chunk's layers (m->rc, m->n_rc), whose buffers the
// slots share; nothing otherwise. Never fails.
void gpt_acts_recompute_chunk(GPT *m);
// The bytes gpt_acts_alloc would allocate (a slot, the workspace; the MoE layers' buffers
// gpt_moe_create allocates), from m's sizes, without allocating (m->rc left empty).
GPTActBytes gpt_acts_measure(GPT *m);
