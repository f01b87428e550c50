// core/args_compat.h: the Megatron-LM flags megac accepts with no effect, or refuses with a
// reason, so that a Megatron launch script never has a flag silently ignored.
//
// One data table (args_compat.c) says for each flag: boolean or valued, the values Megatron
// accepts, accepted-with-no-effect or refused, and why. The table joins a subcommand's own
// flags as ARG_COMPAT entries (core/args.h): core_args_parse checks the values and refuses
// every refused flag given in one line (exit 2), the flags that share a reason named together;
// `--help` prints the mark and the reason.
#pragma once
#include "args.h"

#include <stdio.h>

typedef enum {
    CORE_COMPAT_NO_EFFECT,  // tunes Megatron's own machinery; the result in megac is the same
    CORE_COMPAT_REFUSED,    // would change the result and megac does not implement it
} CoreCompatKind;

typedef struct {
    const char *name;     // "--manual-gc"
    char value;           // 0: boolean (no value); 'i' integer, 'f' number, 's' string,
                          // 'l' a list of strings (Megatron's nargs='+': up to the next flag)
    const char *choices;  // "a|b|c": no effect: the values Megatron accepts (NULL: any);
                          // refused: the values that mean megac's own behaviour (accepted,
                          // with no notice), e.g. --context-parallel-size 1
    CoreCompatKind kind;
    const char *reason;   // one clause, printed after the flag
} CoreCompatFlag;

typedef struct {
    const CoreCompatFlag *flag;
    const char *value;    // set by core_args_parse: the value given ("" for a boolean, a
                          // list's first word not of choices for a refused flag, else its
                          // first), or NULL when the flag was not given or means megac's own
                          // behaviour
} CoreCompatSlot;

enum { CORE_COMPAT_MAX = 96 };  // at least the table's length (checked in core_compat_specs)

typedef struct {
    CoreCompatSlot slot[CORE_COMPAT_MAX];
    int n;
} CoreCompat;

// Fills *c from the table and writes its c->n ARG_COMPAT entries into specs[0..c->n), pointing
// at c's slots. Returns c->n. Pure.
int core_compat_specs(ArgSpec *specs, CoreCompat *c);

// Number of accepted-with-no-effect flags given; names[0..min(n, max)) their names. Pure.
int core_compat_given(const CoreCompat *c, const char **names, int max);

// Writes one line per accepted-with-no-effect flag given: "<prefix>--flag: accepted, no effect
// in megac: <reason>". Call on one rank only.
void core_compat_notice(const CoreCompat *c, const char *prefix, FILE *f);
