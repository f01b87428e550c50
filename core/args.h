// core/args.h: table-driven long-flag parsing for megac's subcommands.
//
// Each subcommand declares a table of flags (Megatron-LM's names where Megatron has the
// setting). Parsing is strict: an unknown flag, a missing value or a value that is not a
// number is a usage error (one line, exit code 2) naming the flag. All unknown flags are
// listed in one message, each with the closest known name when one is near (edit distance).
#pragma once
#include <stdint.h>

typedef enum {
    ARG_INT,     // int      --flag 4
    ARG_I64,     // int64_t  --flag 4000000000
    ARG_FLOAT,   // double   --flag 3e-4
    ARG_STR,     // const char*  --flag value
    ARG_BOOL,    // int, set to 1 by --flag (no value)
    ARG_LIST,    // CoreStrList: every value up to the next "--flag"
    ARG_COMPAT,  // CoreCompatSlot: a Megatron flag megac accepts with no effect or refuses
                 // (core/args_compat.h); help is unused, the slot's entry gives the reason
} ArgType;

typedef struct {
    const char **items;  // points into argv
    int n;
} CoreStrList;

typedef struct {
    const char *name;  // "--hidden-size"
    ArgType type;
    void *dst;         // int*, int64_t*, double*, const char**, int*, CoreStrList*
    const char *help;  // one line; the default is printed from *dst
} ArgSpec;

// Parses argv[0..argc) (flags only, no program name) into the table. "--help"/"-h" prints
// the help and exits 0. Bad input: core_usage_error (exit 2). Returns on success.
void core_args_parse(const char *usage, const ArgSpec *specs, int n_specs, int argc, char **argv);

// Prints "usage" and one line per flag with its current (default) value to stdout.
void core_args_print_help(const char *usage, const ArgSpec *specs, int n_specs);

// Levenshtein distance between a and b (insertions, deletions, substitutions). Pure.
int core_edit_distance(const char *a, const char *b);

// The known name nearest to flag (without any "=value"), or NULL when none is within a third
// of the flag's length (at least 1 edit). Pure.
const char *core_args_suggest(const char *flag, const ArgSpec *specs, int n_specs);

// Parses a whole decimal integer; 0 and sets *ok = 0 when s is not one. Pure.
int64_t core_parse_i64(const char *s, int *ok);
