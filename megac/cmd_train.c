// megac/cmd_train.c: placeholder until its issue lands.
#include "commands.h"
#include <stdio.h>
int cmd_train(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "megac: 'train' is not implemented yet\n");
    return 2;
}
