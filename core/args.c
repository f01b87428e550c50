// core/args.c: strict long-flag parser (see args.h).
#include "args.h"
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
    }
}

void core_args_print_help(const char *usage, const ArgSpec *specs, int n_specs) {
    printf("%s\n\nflags:\n", usage);
    for (int i = 0; i < n_specs; i++) {
        printf("  %-40s %s [", specs[i].name, specs[i].help);
        print_value(&specs[i]);
        printf("]\n");
    }
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
    default: break;
    }
}

void core_args_parse(const char *usage, const ArgSpec *specs, int n_specs, int argc, char **argv) {
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
        if (a->type == ARG_BOOL) {
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
}
