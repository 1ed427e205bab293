/* File-system helpers shared by the run directory, sweeps and checkpoints. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int tr_pread_all(int fd, void *buf, size_t bytes, uint64_t off)
{
    char *p = buf;
    while (bytes) {
        ssize_t n = pread(fd, p, bytes, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = 0;
            return -1;
        }
        p += n, bytes -= (size_t)n, off += (uint64_t)n;
    }
    return 0;
}

int tr_pwrite_all(int fd, const void *buf, size_t bytes, uint64_t off)
{
    const char *p = buf;
    while (bytes) {
        ssize_t n = pwrite(fd, p, bytes, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n, bytes -= (size_t)n, off += (uint64_t)n;
    }
    return 0;
}

int tr_write_all(int fd, const void *buf, size_t bytes)
{
    const char *p = buf;
    while (bytes) {
        ssize_t n = write(fd, p, bytes);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n, bytes -= (size_t)n;
    }
    return 0;
}
