/* `trident schedule` — placeholder until its issue lands. */
#include "launch/commands.h"

#include <stdio.h>

int tr_cmd_schedule(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "trident schedule: not built yet\n");
    return 1;
}
