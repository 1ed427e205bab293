/* `trident topo` — placeholder until its issue lands. */
#include "launch/commands.h"

#include <stdio.h>

int tr_cmd_topo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "trident topo: not built yet\n");
    return 1;
}
