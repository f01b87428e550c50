// plan/plan_ilv.c: the plan's memo of interleaved 1F1B's slot counts (see plan_model.h).
#include "plan_model.h"
#include "core/check.h"                 // defines: core_calloc, core_fatal
#include "pipeline/pp_interleaved.h"    // defines: pp_ilv_slots_all

#include <stdlib.h>
#include <string.h>

void plan_memo_init(PlanMemo *memo) { *memo = (PlanMemo){0}; }

void plan_memo_free(PlanMemo *memo) {
    for (int i = 0; i < memo->n_slots; i++) {
        free(memo->slots[i].act);
        free(memo->slots[i].grad);
    }
    free(memo->slots);
    *memo = (PlanMemo){0};
}

// Every rank's slots at (p, v, m): the schedule's warm-up holds at most 2 (p - 1) + (v - 1) p
// forwards, under (v + 1) p; from m = 2 p on, more micro-batches lengthen only the steady
// phase and leave every count as it is (plan_formulas compares with the simulation at full m).
static void slots_at(int p, int v, int m, PlanIlvSlots *out) {
    int mc = m < 2 * p ? m : 2 * p;
    *out = (PlanIlvSlots){p, v, mc, core_calloc((size_t)p * v, sizeof(int)), core_calloc((size_t)p * v, sizeof(int))};
    pp_ilv_slots_all(p, v, mc, out->act, out->grad);
}

void plan_ilv_slots(PlanMemo *memo, int p, int v, int m, int rank, int *act, int *grad) {
    int mc = m < 2 * p ? m : 2 * p;
    PlanIlvSlots own, *e = NULL;
    for (int i = 0; memo && i < memo->n_slots && !e; i++)
        if (memo->slots[i].p == p && memo->slots[i].v == v && memo->slots[i].m == mc) e = &memo->slots[i];
    if (!e) {
        slots_at(p, v, m, &own);
        e = &own;
        if (memo) {
            PlanIlvSlots *grown = realloc(memo->slots, (size_t)(memo->n_slots + 1) * sizeof *grown);
            if (!grown) core_fatal("megac plan: out of memory");
            memo->slots = grown;
            e = &memo->slots[memo->n_slots++];
            *e = own;
        }
    }
    memcpy(act, e->act + (size_t)rank * v, (size_t)v * sizeof(int));
    memcpy(grad, e->grad + (size_t)rank * v, (size_t)v * sizeof(int));
    if (e == &own) {
        free(own.act);
        free(own.grad);
    }
}
