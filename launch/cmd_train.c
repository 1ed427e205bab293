/* `trident train` — placeholder until its issue lands. */
#include "launch/commands.h"

#include <stdio.h>

int tr_cmd_train(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "trident train: not built yet\n");
    return 1;
}
