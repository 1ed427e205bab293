/* `trident launch` — placeholder until its issue lands. */
#include "launch/commands.h"

#include <stdio.h>

int tr_cmd_launch(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "trident launch: not built yet\n");
    return 1;
}
