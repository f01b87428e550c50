// megac/cmd_preprocess.c: placeholder until its issue lands.
#include "commands.h"
#include <stdio.h>
int cmd_preprocess(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "megac: 'preprocess' is not implemented yet\n");
    return 2;
}
