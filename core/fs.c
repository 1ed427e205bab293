/* File-system helpers shared by the run directory, sweeps and checkpoints. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"

int tr_make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return tr_fail(TR_ERR_IO, "path too long: %.64s...", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return tr_fail(TR_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
    return TR_OK;
}
