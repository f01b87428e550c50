// tests/core/test_args.c: the flag parser (core/args.h): edit distances and the nearest-name
// suggestion of an unknown flag. The one-message listing of unknown flags exits 2 and is
// checked through `megac train` (tests/parallel/train_bad_input.sh).
#include "core/args.h"
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
    ArgSpec specs[3] = {
        {"--hidden-size", ARG_INT, &n, "C"},
        {"--foo-baz", ARG_BOOL, &b, "b"},
        {"--seq-length", ARG_STR, &s, "T"},
    };
    int n_all = 3;
    const char *hit = core_args_suggest("--hiden-size", specs, n_all);
    EXPECT(hit && !strcmp(hit, "--hidden-size"), "suggested %s", hit ? hit : "(none)");
    hit = core_args_suggest("--foo-bar=3", specs, n_all);  // the value is not part of the name
    EXPECT(hit && !strcmp(hit, "--foo-baz"), "suggested %s", hit ? hit : "(none)");
    EXPECT(core_args_suggest("--qux", specs, n_all) == NULL, "nothing is near --qux");
    EXPECT(core_args_suggest("--xyz-size", specs, n_all) == NULL, "3 edits of 8 letters is too far");

    char *argv[] = {"--hidden-size", "64", "--foo-baz"};
    core_args_parse("usage", specs, n_all, 3, argv);
    EXPECT_EQ_INT(n, 64);
    EXPECT_EQ_INT(b, 1);
    return test_result("core_args");
}
