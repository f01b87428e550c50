// core/args.c: strict long-flag parser (see args.h).
#include "args.h"
#include "args_compat.h"  // defines: CoreCompatSlot
#include "check.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t core_parse_i64(const char *s, int *ok) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    *ok = (s[0] != '\0' && end && *end == '\0' && errno == 0);
    return *ok ? (int64_t)v : 0;
}

static void print_value(const ArgSpec *a) {
    switch (a->type) {
    case ARG_INT: printf("%d", *(int *)a->dst); break;
    case ARG_I64: printf("%lld", (long long)*(int64_t *)a->dst); break;
    case ARG_FLOAT: printf("%g", *(double *)a->dst); break;
    case ARG_STR: printf("%s", *(const char **)a->dst ? *(const char **)a->dst : "(none)"); break;
    case ARG_BOOL: printf("%s", *(int *)a->dst ? "on" : "off"); break;
    case ARG_LIST: printf("(%d values)", ((CoreStrList *)a->dst)->n); break;
    case ARG_COMPAT: break;
    }
}

void core_args_print_help(const char *usage, const ArgSpec *specs, int n_specs) {
    printf("%s\n\nflags:\n", usage);
    for (int i = 0; i < n_specs; i++) {
        if (specs[i].type == ARG_COMPAT) {  // Megatron's flag: the mark, then the reason
            const CoreCompatFlag *c = ((const CoreCompatSlot *)specs[i].dst)->flag;
            printf("  %-40s [%s] %s\n", specs[i].name,
                   c->kind == CORE_COMPAT_NO_EFFECT ? "accepted, no effect" : "refused", c->reason);
            continue;
        }
        printf("  %-40s %s [", specs[i].name, specs[i].help);
        print_value(&specs[i]);
        printf("]\n");
    }
}

// 1 if v is one of the '|'-separated choices. Pure.
static int in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

// A Megatron flag of core/args_compat.h's table (v: "" for a boolean; one word of a list):
// checks the value and records it in the slot; a refused flag is recorded too, for
// refuse_compat to name with the others. A refused flag's listed value (megac's own
// behaviour) is not recorded.
static void set_compat(CoreCompatSlot *s, const char *v) {
    const CoreCompatFlag *f = s->flag;
    int ok = 1;
    char *end = NULL;
    if (f->value == 'i') core_parse_i64(v, &ok);
    if (f->value == 'f') ok = v[0] != '\0' && (strtod(v, &end), *end == '\0');
    if (!ok) core_usage_error("%s expects %s, got '%s'", f->name, f->value == 'i' ? "an integer" : "a number", v);
    int listed = f->choices && in_choices(f->choices, v);
    if (f->kind == CORE_COMPAT_REFUSED) {
        if (!listed) s->value = v;  // listed: the value megac implements (e.g. --context-parallel-size 1)
        return;
    }
    if (f->choices && !listed)
        core_usage_error("%s expects one of %s, got '%s'", f->name, f->choices, v);
    s->value = v;
}

// The refused Megatron flag of specs[i] when it was given, else NULL. Pure.
static const CoreCompatSlot *refused_given(const ArgSpec *specs, int i) {
    const CoreCompatSlot *s = specs[i].type == ARG_COMPAT ? specs[i].dst : NULL;
    return s && s->value && s->flag->kind == CORE_COMPAT_REFUSED ? s : NULL;
}

// Refuses every refused Megatron flag given, in one usage error (exit 2): the flags that share
// a reason named together, "--a, --b 3 are not supported: why; --c is not supported: why".
// Returns when none was given.
static void refuse_compat(const ArgSpec *specs, int n_specs) {
    char msg[4096];
    size_t len = 0;
    for (int i = 0; i < n_specs; i++) {
        const CoreCompatSlot *s = refused_given(specs, i);
        int seen = 0;  // its reason already written with an earlier flag
        for (int k = 0; s && k < i && !seen; k++)
            seen = refused_given(specs, k) && !strcmp(refused_given(specs, k)->flag->reason, s->flag->reason);
        if (!s || seen) continue;
        int n = 0;
        for (int k = i; k < n_specs; k++) {
            const CoreCompatSlot *t = refused_given(specs, k);
            if (!t || strcmp(t->flag->reason, s->flag->reason) || len >= sizeof msg) continue;
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s%s%s", n ? ", " : len ? "; " : "",
                                    t->flag->name, t->flag->value ? " " : "", t->value);
            n++;
        }
        if (len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len, " %s not supported: %s",
                                    n > 1 ? "are" : "is", s->flag->reason);
    }
    if (len) core_usage_error("%s", msg);
}

// A Megatron list flag (value 'l': Megatron's nargs='+') at argv[*i]: each word up to the
// next "--flag" checked; the slot records the first. Advances *i past the words.
static void set_compat_list(CoreCompatSlot *s, int *i, int argc, char **argv) {
    const char *first = NULL;
    int n = 0;
    for (; *i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0; n++) {
        s->value = NULL;
        set_compat(s, argv[++*i]);
        if (!first) first = s->value;
    }
    if (n == 0) core_usage_error("%s expects at least one value", s->flag->name);
    s->value = first;
}

static void set_value(const ArgSpec *a, const char *v) {
    int ok = 1;
    switch (a->type) {
    case ARG_INT: {
        int64_t x = core_parse_i64(v, &ok);
        if (!ok || x < -2147483647LL || x > 2147483647LL)
            core_usage_error("%s expects an integer, got '%s'", a->name, v);
        *(int *)a->dst = (int)x;
        break;
    }
    case ARG_I64: {
        int64_t x = core_parse_i64(v, &ok);
        if (!ok) core_usage_error("%s expects an integer, got '%s'", a->name, v);
        *(int64_t *)a->dst = x;
        break;
    }
    case ARG_FLOAT: {
        char *end = NULL;
        double x = strtod(v, &end);
        if (v[0] == '\0' || *end != '\0' || !isfinite(x))
            core_usage_error("%s expects a number, got '%s'", a->name, v);
        *(double *)a->dst = x;
        break;
    }
    case ARG_STR: *(const char **)a->dst = v; break;
    case ARG_COMPAT: set_compat(a->dst, v); break;
    default: break;
    }
}

int core_edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (nb > 127) return (int)(na > nb ? na : nb);  // flag names are short
    int row[128];  // row[j]: distance between a[0..i) and b[0..j)
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb];
}

const char *core_args_suggest(const char *flag, const ArgSpec *specs, int n_specs) {
    char name[128];
    const char *eq = strchr(flag, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq ? (size_t)(eq - flag) : strlen(flag)), flag);
    int body = (int)strlen(name) - (!strncmp(name, "--", 2) ? 2 : 0);
    int limit = body / 3 > 1 ? body / 3 : 1, best = limit + 1;
    const char *pick = NULL;
    for (int k = 0; k < n_specs; k++) {
        int d = core_edit_distance(name, specs[k].name);
        if (d < best) best = d, pick = specs[k].name;
    }
    return pick;
}

// The spec named by f (up to any "=value"), or NULL. Pure.
static const ArgSpec *find_spec(const ArgSpec *specs, int n_specs, const char *f) {
    const char *eq = strchr(f, '=');
    size_t flen = eq ? (size_t)(eq - f) : strlen(f);
    for (int k = 0; k < n_specs; k++)
        if (strlen(specs[k].name) == flen && !strncmp(specs[k].name, f, flen)) return &specs[k];
    return NULL;
}

// Lists every unknown flag of argv in one usage error, each with the nearest known name; the
// words after an unknown flag up to the next "--flag" are taken as its values. Returns when
// all are known.
static void check_unknown(const ArgSpec *specs, int n_specs, int argc, char **argv) {
    char msg[2048];
    size_t len = 0;
    int n_bad = 0;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) continue;
        const ArgSpec *a = find_spec(specs, n_specs, f);
        if (a) {  // skip its values
            char cv = a->type == ARG_COMPAT ? ((const CoreCompatSlot *)a->dst)->flag->value : 1;
            int list = a->type == ARG_LIST || (cv == 'l' && !strchr(f, '='));
            int takes = list || (a->type != ARG_BOOL && cv && !strchr(f, '='));
            if (list)
                while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++;
            else if (takes && i + 1 < argc)
                i++;
            continue;
        }
        const char *near = core_args_suggest(f, specs, n_specs);
        const char *eq = strchr(f, '=');
        int flen = (int)(eq ? (size_t)(eq - f) : strlen(f));
        if (len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%.*s%s%s%s", n_bad ? ", " : "",
                                    flen, f, near ? " (did you mean " : "", near ? near : "",
                                    near ? "?)" : "");
        n_bad++;
        while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++;
    }
    if (n_bad) core_usage_error("unknown flag%s: %s (see --help)", n_bad > 1 ? "s" : "", msg);
}

void core_args_parse(const char *usage, const ArgSpec *specs, int n_specs, int argc, char **argv) {
    int help = 0;
    for (int i = 0; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (!help) check_unknown(specs, n_specs, argc, argv);
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            if (core_world_rank() <= 0) core_args_print_help(usage, specs, n_specs);
            exit(0);
        }
        const char *eq = strchr(f, '=');
        size_t flen = eq ? (size_t)(eq - f) : strlen(f);
        const ArgSpec *a = NULL;
        for (int k = 0; k < n_specs; k++)
            if (strlen(specs[k].name) == flen && !strncmp(specs[k].name, f, flen)) a = &specs[k];
        if (!a) core_usage_error("unknown flag '%.*s' (see --help)", (int)flen, f);
        if (a->type == ARG_COMPAT && !((const CoreCompatSlot *)a->dst)->flag->value) {
            if (eq) core_usage_error("%s takes no value", a->name);
            set_compat(a->dst, "");
        } else if (a->type == ARG_COMPAT && !eq && ((const CoreCompatSlot *)a->dst)->flag->value == 'l') {
            set_compat_list(a->dst, &i, argc, argv);
        } else if (a->type == ARG_BOOL) {
            if (eq) core_usage_error("%s takes no value", a->name);
            *(int *)a->dst = 1;
        } else if (a->type == ARG_LIST) {
            CoreStrList *l = a->dst;
            l->items = (const char **)&argv[i + 1];
            l->n = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) { i++; l->n++; }
            if (l->n == 0) core_usage_error("%s expects at least one value", a->name);
        } else if (eq) {
            set_value(a, eq + 1);
        } else {
            if (i + 1 >= argc) core_usage_error("%s expects a value", a->name);
            set_value(a, argv[++i]);
        }
    }
    refuse_compat(specs, n_specs);
}
