// megac/cmd_tokenizer.c: placeholder until its issue lands.
#include "commands.h"
#include <stdio.h>
int cmd_tokenizer(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "megac: 'tokenizer' is not implemented yet\n");
    return 2;
}
