/* File-system helpers shared by the run directory, sweeps and checkpoints. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

int tr_read_file(const char *path, size_t max_bytes, const char *what, char **text, size_t *n)
{
    *text = NULL, *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tr_fail(errno == ENOENT ? TR_ERR_INVALID : TR_ERR_IO, "cannot open %s: %s", path,
                       strerror(errno));
    struct stat st;
    int rc = TR_OK;
    char *buf = NULL;
    if (fstat(fd, &st))
        rc = tr_fail(TR_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = tr_fail(TR_ERR_INVALID, "%s: not a regular file", path);
    else if ((uint64_t)st.st_size > max_bytes)
        rc = tr_fail(TR_ERR_INVALID, "%s: %lld bytes, more than the %zu %s may have", path,
                     (long long)st.st_size, max_bytes, what);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    else if (tr_pread_all(fd, buf, (size_t)st.st_size, 0))
        rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path, errno ? strerror(errno) : "short file");
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[st.st_size] = 0;
    *text = buf, *n = (size_t)st.st_size;
    return TR_OK;
}
