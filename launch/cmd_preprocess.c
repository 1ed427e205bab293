/* `trident preprocess` — placeholder until its issue lands. */
#include "launch/commands.h"

#include <stdio.h>

int tr_cmd_preprocess(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "trident preprocess: not built yet\n");
    return 1;
}
