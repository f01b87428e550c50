// megac/cmd_ablate.c: `megac ablate`: a sweep of layouts, run and reported. The
// orchestration and the plots are Python (plan/ablate.py): this hands it the arguments and
// the path of this megac binary (MEGAC_BIN), which it runs for `plan` and `train`.
#include "commands.h"
#include "plan/plan_paths.h"  // defines: MEGAC_ABLATE_PY (the script in the source tree)

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_ablate(int argc, char **argv) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "megac ablate: cannot find the megac binary (/proc/self/exe)\n");
        return 2;
    }
    self[n] = 0;
    setenv("MEGAC_BIN", self, 1);
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return 2;
    args[0] = "python3";
    args[1] = MEGAC_ABLATE_PY;
    for (int i = 0; i < argc; i++) args[i + 2] = argv[i];
    execvp("python3", args);
    fprintf(stderr, "megac ablate: cannot run python3 %s\n", MEGAC_ABLATE_PY);
    free(args);
    return 2;
}
