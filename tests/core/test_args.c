// tests/core/test_args.c: the flag parser (core/args.h): edit distances and the nearest-name
// suggestion of an unknown flag, and the Megatron flags of core/args_compat.h as a table
// joins a subcommand's flags (accepted values recorded, a list's words up to the next flag,
// megac's own value of a refused flag taken silently). The refusals and the one-message listing of unknown flags exit 2 and are
// checked through `megac train` (tests/train/megatron_flags.sh).
#include "core/args.h"
#include "core/args_compat.h"
#include "tests/testing.h"

#include <string.h>

int main(void) {
    EXPECT_EQ_INT(core_edit_distance("", ""), 0);
    EXPECT_EQ_INT(core_edit_distance("abc", ""), 3);
    EXPECT_EQ_INT(core_edit_distance("kitten", "sitting"), 3);
    EXPECT_EQ_INT(core_edit_distance("--hiden-size", "--hidden-size"), 1);
    EXPECT_EQ_INT(core_edit_distance("--foo-bar", "--foo-baz"), 1);

    int n = 0, b = 0;
    const char *s = NULL;
    ArgSpec specs[3 + CORE_COMPAT_MAX] = {
        {"--hidden-size", ARG_INT, &n, "C"},
        {"--foo-baz", ARG_BOOL, &b, "b"},
        {"--seq-length", ARG_STR, &s, "T"},
    };
    CoreCompat c;
    int n_all = 3 + core_compat_specs(specs + 3, &c);
    EXPECT(c.n > 20 && c.n <= CORE_COMPAT_MAX, "table of %d flags", c.n);
    const char *hit = core_args_suggest("--hiden-size", specs, n_all);
    EXPECT(hit && !strcmp(hit, "--hidden-size"), "suggested %s", hit ? hit : "(none)");
    hit = core_args_suggest("--foo-bar=3", specs, n_all);  // the value is not part of the name
    EXPECT(hit && !strcmp(hit, "--foo-baz"), "suggested %s", hit ? hit : "(none)");
    hit = core_args_suggest("--manual-gcc", specs, n_all);  // Megatron's names are suggested too
    EXPECT(hit && !strcmp(hit, "--manual-gc"), "suggested %s", hit ? hit : "(none)");
    EXPECT(core_args_suggest("--qux", specs, n_all) == NULL, "nothing is near --qux");
    EXPECT(core_args_suggest("--xyz-size", specs, n_all) == NULL, "3 edits of 8 letters is too far");

    char *argv[] = {"--hidden-size", "64", "--manual-gc", "--tiktoken-pattern", "v2",
                    "--num-workers=8", "--recompute-modules", "mlp", "core_attn", "--foo-baz",
                    "--norm-epsilon", "1e-5"};  // megac's own epsilon: taken silently
    core_args_parse("usage", specs, n_all, 12, argv);
    EXPECT_EQ_INT(n, 64);
    EXPECT_EQ_INT(b, 1);  // after a list: its words end at the next flag
    const char *names[CORE_COMPAT_MAX] = {0};
    int k = core_compat_given(&c, names, CORE_COMPAT_MAX);
    EXPECT_EQ_INT(k, 4);
    EXPECT(k == 4 && !strcmp(names[0], "--manual-gc") && !strcmp(names[1], "--num-workers") &&
           !strcmp(names[2], "--tiktoken-pattern") && !strcmp(names[3], "--recompute-modules"),
           "given: %s %s %s %s", names[0], names[1], names[2], names[3]);
    for (int i = 0; i < c.n; i++) {
        if (!strcmp(c.slot[i].flag->name, "--num-workers")) EXPECT(!strcmp(c.slot[i].value, "8"), "value");
        if (!strcmp(c.slot[i].flag->name, "--recompute-modules")) EXPECT(!strcmp(c.slot[i].value, "mlp"), "list");
        if (!strcmp(c.slot[i].flag->name, "--norm-epsilon")) EXPECT(c.slot[i].value == NULL, "own value");
        if (!strcmp(c.slot[i].flag->name, "--manual-gc")) EXPECT(!strcmp(c.slot[i].value, ""), "boolean");
        EXPECT(c.slot[i].flag->reason && strlen(c.slot[i].flag->reason) > 10, "%s has a reason",
               c.slot[i].flag->name);
    }
    return test_result("core_args");
}
