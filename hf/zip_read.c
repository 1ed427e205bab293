/* A minimal reader of the ZIP archives torch.save writes (PyTorch >= 1.6, miniz): the end of
 * central directory record (and ZIP64's locator and record), the central directory, each
 * entry's local header for its data offset. Every entry STORED; every offset and size checked
 * against the file with overflow-safe arithmetic; CRCs are not checked. pread, no mapping. */
#include "hf/pt_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EOCD_SIG 0x06054b50u
#define EOCD64_SIG 0x06064b50u
#define LOC64_SIG 0x07064b50u
#define CEN_SIG 0x02014b50u
#define LOC_SIG 0x04034b50u
#define EOCD_LEN 22
#define LOC64_LEN 20
#define EOCD64_LEN 56
#define CEN_LEN 46
#define LOC_LEN 30

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int pt_read_at(int fd, const char *path, void *buf, size_t n, uint64_t off)
{
    if (tr_pread_all(fd, buf, n, off))
        return errno ? tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno))
                     : pt_bad(path, "the file ends before the %zu bytes at %llu it should "
                              "hold", n, (unsigned long long)off);
    return TR_OK;
}

/* The end of central directory record: its offset (the last signature in the tail). */
static int find_eocd(int fd, uint64_t base, uint64_t size, const char *path, uint64_t *at)
{
    if (size < EOCD_LEN)
        return pt_bad(path, "%llu bytes: too short for a ZIP archive", (unsigned long long)size);
    size_t tail = size < EOCD_LEN + 65535 ? (size_t)size : EOCD_LEN + 65535;
    unsigned char *b = malloc(tail);
    if (!b)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    int rc = pt_read_at(fd, path, b, tail, base + size - tail);
    for (size_t i = tail - EOCD_LEN + 1; !rc && i-- > 0;)
        if (le(b + i, 4) == EOCD_SIG && i + EOCD_LEN + le(b + i + 20, 2) == tail) {
            *at = size - tail + i;
            free(b);
            return TR_OK;
        }
    free(b);
    return rc ? rc : pt_bad(path, "no ZIP end of central directory record");
}

/* The central directory's entry count, offset and size (ZIP64 where the record says so). */
static int read_directory_place(int fd, uint64_t base, uint64_t size, const char *path,
                                uint64_t *count,
                                uint64_t *cd_off, uint64_t *cd_size)
{
    uint64_t at = 0;
    unsigned char e[EOCD64_LEN];
    int rc = find_eocd(fd, base, size, path, &at);
    if (!rc)
        rc = pt_read_at(fd, path, e, EOCD_LEN, base + at);
    if (rc)
        return rc;
    if (le(e + 4, 2) || le(e + 6, 2) || le(e + 8, 2) != le(e + 10, 2))
        return pt_bad(path, "a ZIP archive of several disks");
    *count = le(e + 10, 2), *cd_size = le(e + 12, 4), *cd_off = le(e + 16, 4);
    if (*count == 0xffff || *cd_size == 0xffffffffu || *cd_off == 0xffffffffu) {
        unsigned char l[LOC64_LEN];
        if (at < LOC64_LEN || (rc = pt_read_at(fd, path, l, LOC64_LEN, base + at - LOC64_LEN)))
            return rc ? rc : pt_bad(path, "no ZIP64 end of central directory locator");
        if (le(l, 4) != LOC64_SIG)
            return pt_bad(path, "no ZIP64 end of central directory locator");
        uint64_t r = le(l + 8, 8);
        if (le(l + 4, 4) || le(l + 16, 4) > 1)
            return pt_bad(path, "a ZIP64 archive of several disks");
        if (r > at - LOC64_LEN || at - LOC64_LEN - r < EOCD64_LEN)
            return pt_bad(path, "the ZIP64 end of central directory record at %llu is out of "
                          "place", (unsigned long long)r);
        if ((rc = pt_read_at(fd, path, e, EOCD64_LEN, base + r)))
            return rc;
        if (le(e, 4) != EOCD64_SIG)
            return pt_bad(path, "no ZIP64 end of central directory record at %llu",
                          (unsigned long long)r);
        if (le(e + 16, 4) || le(e + 20, 4) || le(e + 24, 8) != le(e + 32, 8))
            return pt_bad(path, "a ZIP64 archive of several disks");
        *count = le(e + 32, 8), *cd_size = le(e + 40, 8), *cd_off = le(e + 48, 8);
        at = r;
    }
    if (*count > PT_ZIP_MAX_ENTRIES)
        return pt_bad(path, "a ZIP archive of %llu entries (at most %u are read)",
                      (unsigned long long)*count, PT_ZIP_MAX_ENTRIES);
    if (*cd_off > at || *cd_size > at - *cd_off)
        return pt_bad(path, "the ZIP central directory (%llu bytes at %llu) runs past its end "
                      "record at %llu", (unsigned long long)*cd_size, (unsigned long long)*cd_off,
                      (unsigned long long)at);
    if (*cd_size / CEN_LEN < *count)
        return pt_bad(path, "a ZIP central directory of %llu bytes cannot hold %llu entries",
                      (unsigned long long)*cd_size, (unsigned long long)*count);
    return TR_OK;
}

/* ZIP64's extended information (extra field 0x0001): the fields the header set to all ones. */
static int zip64_extra(const unsigned char *x, size_t n, uint64_t *usize, uint64_t *csize,
                       uint64_t *off)
{
    while (n >= 4) {
        size_t id = (size_t)le(x, 2), len = (size_t)le(x + 2, 2);
        if (len > n - 4)
            return 0;
        if (id == 1) {
            const unsigned char *p = x + 4, *end = x + 4 + len;
            uint64_t *f[3] = {usize, csize, off};
            for (int i = 0; i < 3; i++)
                if (*f[i] == 0xffffffffu) {
                    if (end - p < 8)
                        return 0;
                    *f[i] = le(p, 8), p += 8;
                }
            return 1;
        }
        x += 4 + len, n -= 4 + len;
    }
    return *usize != 0xffffffffu && *csize != 0xffffffffu && *off != 0xffffffffu;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const pt_zip_entry *)a)->name, ((const pt_zip_entry *)b)->name);
}

/* Central directory entry at c (avail bytes of the directory left) into e; *len: its bytes;
 * offsets relative to the archive's first byte, file offset base. */
static int read_entry(int fd, uint64_t base, uint64_t size, const char *path,
                      const unsigned char *c, size_t avail, pt_zip_entry *e, size_t *len)
{
    if (avail < CEN_LEN || le(c, 4) != CEN_SIG)
        return pt_bad(path, "a broken ZIP central directory entry");
    size_t nl = (size_t)le(c + 28, 2), xl = (size_t)le(c + 30, 2), cl = (size_t)le(c + 32, 2);
    if (CEN_LEN + nl + xl + cl > avail)
        return pt_bad(path, "a ZIP central directory entry runs past the directory");
    *len = CEN_LEN + nl + xl + cl;
    if (!(e->name = malloc(nl + 1)))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    memcpy(e->name, c + CEN_LEN, nl);
    e->name[nl] = '\0';
    if (memchr(c + CEN_LEN, 0, nl))
        return pt_bad(path, "a ZIP entry name holds a NUL byte ('%.200s...')", e->name);
    unsigned flags = (unsigned)le(c + 8, 2), method = (unsigned)le(c + 10, 2);
    uint64_t csize = le(c + 20, 4), usize = le(c + 24, 4), off = le(c + 42, 4);
    if (flags & 1)
        return pt_bad(path, "ZIP entry '%.200s' is encrypted", e->name);
    if (method != 0)
        return pt_bad(path, "ZIP entry '%.200s' is compressed (method %u); torch.save stores "
                      "entries uncompressed (method 0) and only those are read", e->name, method);
    if (!zip64_extra(c + CEN_LEN + nl, xl, &usize, &csize, &off))
        return pt_bad(path, "ZIP entry '%.200s': a broken ZIP64 extra field", e->name);
    if (usize != csize)
        return pt_bad(path, "ZIP entry '%.200s' is stored with %llu bytes for %llu", e->name,
                      (unsigned long long)csize, (unsigned long long)usize);
    unsigned char l[LOC_LEN];
    int rc;
    if (off > size || size - off < LOC_LEN)
        return pt_bad(path, "ZIP entry '%.200s': its local header at %llu is past the end of the "
                      "file", e->name, (unsigned long long)off);
    if ((rc = pt_read_at(fd, path, l, LOC_LEN, base + off)))
        return rc;
    size_t lnl = (size_t)le(l + 26, 2), lxl = (size_t)le(l + 28, 2);
    if (le(l, 4) != LOC_SIG || lnl != nl)
        return pt_bad(path, "ZIP entry '%.200s': no matching local header at %llu", e->name,
                      (unsigned long long)off);
    e->offset = off + LOC_LEN + lnl + lxl; /* off <= size: no overflow */
    e->size = usize;
    if (e->offset > size || usize > size - e->offset)
        return pt_bad(path, "ZIP entry '%.200s' (%llu bytes at %llu) runs past the end of the "
                      "file (%llu bytes)", e->name, (unsigned long long)usize,
                      (unsigned long long)e->offset, (unsigned long long)size);
    char *lname = malloc(nl + 1);
    if (!lname)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    rc = pt_read_at(fd, path, lname, nl, base + off + LOC_LEN);
    if (!rc && memcmp(lname, e->name, nl))
        rc = pt_bad(path, "ZIP entry '%.200s': its local header names another file", e->name);
    free(lname);
    return rc;
}

int pt_zip_open(int fd, uint64_t size, const char *path, pt_zip *z)
{
    return pt_zip_open_at(fd, 0, size, path, z);
}

int pt_zip_open_at(int fd, uint64_t base, uint64_t size, const char *path, pt_zip *z)
{
    memset(z, 0, sizeof *z);
    uint64_t count = 0, cd_off = 0, cd_size = 0;
    int rc = read_directory_place(fd, base, size, path, &count, &cd_off, &cd_size);
    if (rc)
        return rc;
    if (count == 0)
        return pt_bad(path, "an empty ZIP archive");
    unsigned char *cd = malloc(cd_size ? (size_t)cd_size : 1);
    z->entries = calloc((size_t)count, sizeof *z->entries);
    if (!cd || !z->entries)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for the ZIP directory of %s", path);
    if (!rc)
        rc = pt_read_at(fd, path, cd, (size_t)cd_size, base + cd_off);
    size_t at = 0;
    for (uint64_t i = 0; !rc && i < count; i++) {
        size_t len = 0;
        rc = read_entry(fd, base, size, path, cd + at, (size_t)cd_size - at, &z->entries[i],
                        &len);
        z->entries[i].offset += base; /* (inside [base, base + size): no overflow) */
        z->n++;
        at += len;
    }
    free(cd);
    const char *first = rc ? NULL : z->entries[0].name, *slash = first ? strchr(first, '/') : NULL;
    if (!rc && (!slash || slash == first))
        rc = pt_bad(path, "the first ZIP entry '%.200s' is not in a folder (torch.save puts "
                    "everything in ARCHIVE/)", first);
    if (!rc && !(z->archive = strndup(first, (size_t)(slash - first))))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    if (!rc) {
        qsort(z->entries, z->n, sizeof *z->entries, cmp_entry);
        for (size_t i = 1; i < z->n && !rc; i++)
            if (!strcmp(z->entries[i].name, z->entries[i - 1].name))
                rc = pt_bad(path, "ZIP entry '%.200s' appears twice", z->entries[i].name);
    }
    if (rc)
        pt_zip_free(z);
    return rc;
}

const pt_zip_entry *pt_zip_find(const pt_zip *z, const char *rel)
{
    size_t n = strlen(z->archive) + 1 + strlen(rel) + 1;
    char *name = malloc(n);
    if (!name)
        return NULL;
    snprintf(name, n, "%s/%s", z->archive, rel);
    pt_zip_entry key = {.name = name};
    const pt_zip_entry *e = bsearch(&key, z->entries, z->n, sizeof key, cmp_entry);
    free(name);
    return e;
}

void pt_zip_free(pt_zip *z)
{
    for (size_t i = 0; i < z->n; i++)
        free(z->entries[i].name);
    free(z->entries);
    free(z->archive);
    memset(z, 0, sizeof *z);
}
