// plan/plan_print.h: `megac plan`'s output: the ranked table with the assumptions it used,
// or one JSON document for tools.
#pragma once
#include <stdio.h>
#include "plan_enum.h"

// The ranked table: the first `top` layouts (all when top <= 0), a count of the rest, the
// hardware and the assumptions. Never fails.
void plan_print_table(FILE *f, const PlanSpec *s, const PlanHardware *hw, const PlanSet *set, int top);

// Everything as one JSON object: spec, hardware, assumptions and, per layout, the totals
// and per stage the memory by category and the bytes and calls per group by collective.
// Never fails.
void plan_print_json(FILE *f, const PlanSpec *s, const PlanHardware *hw, const PlanSet *set);
