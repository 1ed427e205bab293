/* preprocess's inputs (prep_input.h): gzip and zstd streams decompressed behind a FILE
 * (fopencookie: the JSON Lines and text readers read them as they read a plain file), Parquet
 * rows as JSON lines. */
#include "data/prep_input.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "core/core.h"
#include "data/parquet_internal.h"

#define IN_BYTES (1 << 16)

struct prep_input {
    prep_input_kind kind;
    char *path;
    FILE *raw;            /* the file */
    FILE *f;              /* what is read: raw, or the decompressing cookie */
    z_stream z;
    int in_member;        /* gzip: inside a member (its end not reached) */
    ZSTD_DCtx *zd;
    int in_frame;         /* zstd: the last call left a frame unfinished */
    uint8_t *buf;         /* compressed bytes: buf[at, len) not yet decompressed */
    size_t at, len;
    uint64_t offset;      /* compressed bytes consumed */
    char *msg;            /* why decompressing failed (malloc'ed), or NULL */
};

/* The stream failed: "PATH: WHAT at byte N[: DETAIL]", kept for prep_input_close. */
static ssize_t stream_fail(prep_input *in, const char *what, const char *detail)
{
    char buf[768];
    snprintf(buf, sizeof buf, "%s: %s at byte %llu%s%s", in->path, what,
             (unsigned long long)in->offset, detail ? ": " : "", detail ? detail : "");
    if (!in->msg)
        in->msg = strdup(buf);
    errno = EIO;
    return -1;
}

/* The compressed bytes ran out (at == len): 1 when more were read into buf, 0 at the end of
 * the file, -1 (a failure) at a read error or at the end of a stream still unfinished. */
static int refill(prep_input *in, int unfinished, const char *kind)
{
    in->at = 0;
    in->len = fread(in->buf, 1, IN_BYTES, in->raw);
    if (in->len)
        return 1;
    if (ferror(in->raw))
        return (int)stream_fail(in, "cannot read it", strerror(errno ? errno : EIO));
    char what[64];
    snprintf(what, sizeof what, "the %s stream is truncated", kind);
    return unfinished ? (int)stream_fail(in, what, NULL) : 0;
}

static ssize_t gzip_read(void *cookie, char *out, size_t size)
{
    prep_input *in = cookie;
    for (;;) {
        in->z.next_in = in->buf + in->at;
        in->z.avail_in = (uInt)(in->len - in->at);
        in->z.next_out = (Bytef *)out;
        in->z.avail_out = (uInt)(size < (1u << 30) ? size : 1u << 30);
        uInt avail_out = in->z.avail_out;
        int zr = inflate(&in->z, Z_NO_FLUSH);
        size_t used = in->len - in->at - in->z.avail_in, made = avail_out - in->z.avail_out;
        in->at += used, in->offset += used;
        if (zr == Z_STREAM_END) { /* a member's end; another may follow */
            in->in_member = 0;
            if (inflateReset(&in->z) != Z_OK)
                return stream_fail(in, "zlib cannot restart", NULL);
        } else if (zr == Z_OK) {
            in->in_member = 1;
        } else if (zr != Z_BUF_ERROR || in->at < in->len) {
            return stream_fail(in, "corrupt gzip data", in->z.msg ? in->z.msg : "inflate failed");
        }
        if (made)
            return (ssize_t)made;
        int more = in->at < in->len ? 1 : refill(in, in->in_member, "gzip");
        if (more <= 0)
            return more;
    }
}

static ssize_t zstd_read(void *cookie, char *out, size_t size)
{
    prep_input *in = cookie;
    for (;;) {
        ZSTD_inBuffer src = {in->buf, in->len, in->at};
        ZSTD_outBuffer dst = {out, size, 0};
        size_t ret = ZSTD_decompressStream(in->zd, &dst, &src);
        size_t used = src.pos - in->at;
        in->at = src.pos, in->offset += used;
        if (ZSTD_isError(ret))
            return stream_fail(in, "corrupt zstd data", ZSTD_getErrorName(ret));
        if (used || dst.pos) /* (a call without either says nothing of the frame) */
            in->in_frame = ret != 0;
        if (dst.pos)
            return (ssize_t)dst.pos;
        int more = in->at < in->len ? 1 : refill(in, in->in_frame, "zstd");
        if (more <= 0)
            return more;
    }
}

/* A plain input that cannot rewind: its first bytes (in buf), then the rest. */
static ssize_t plain_read(void *cookie, char *out, size_t size)
{
    prep_input *in = cookie;
    if (in->at < in->len) {
        size_t k = in->len - in->at < size ? in->len - in->at : size;
        memcpy(out, in->buf + in->at, k);
        in->at += k, in->offset += k;
        return (ssize_t)k;
    }
    size_t k = fread(out, 1, size, in->raw);
    if (!k && ferror(in->raw))
        return stream_fail(in, "cannot read it", strerror(errno ? errno : EIO));
    in->offset += k;
    return (ssize_t)k;
}

static int no_close(void *cookie)
{
    (void)cookie;
    return 0;
}

int prep_input_open(const char *path, prep_input **out)
{
    *out = NULL;
    prep_input *in = calloc(1, sizeof *in);
    if (!in || !(in->path = strdup(path))) {
        free(in);
        return tr_fail(TR_ERR_NOMEM, "out of memory opening %s", path);
    }
    int rc = TR_OK;
    in->raw = fopen(path, "rb");
    if (!in->raw)
        rc = tr_fail(TR_ERR_IO, "cannot open input %s: %s", path, strerror(errno));
    uint8_t magic[4] = {0};
    size_t n = rc ? 0 : fread(magic, 1, 4, in->raw);
    if (!rc && ferror(in->raw))
        rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno ? errno : EIO));
    in->kind = n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b             ? PREP_IN_GZIP
               : n == 4 && !memcmp(magic, "\x28\xb5\x2f\xfd", 4)          ? PREP_IN_ZSTD
               : n == 4 && !memcmp(magic, "PAR1", 4)                      ? PREP_IN_PARQUET
                                                                          : PREP_IN_PLAIN;
    size_t pl = strlen(path);
    if (!rc && in->kind != PREP_IN_PARQUET && pl >= 8 && !strcmp(path + pl - 8, ".parquet"))
        rc = tr_fail(TR_ERR_INVALID, "%s: not a Parquet file (no PAR1 magic at its start)", path);
    in->f = in->raw;
    /* the first bytes are read again from buf: a pipe (--input /dev/stdin) cannot rewind */
    int plain = in->kind == PREP_IN_PLAIN || in->kind == PREP_IN_PARQUET;
    if (!rc && !(plain && fseek(in->raw, 0, SEEK_SET) == 0) && in->kind != PREP_IN_PARQUET) {
        in->buf = malloc(IN_BYTES);
        if (!in->buf)
            rc = tr_fail(TR_ERR_NOMEM, "out of memory opening %s", path);
        else if (in->kind == PREP_IN_GZIP && inflateInit2(&in->z, 15 + 16) != Z_OK)
            rc = tr_fail(TR_ERR_NOMEM, "zlib cannot start for %s", path);
        else if (in->kind == PREP_IN_ZSTD && !(in->zd = ZSTD_createDCtx()))
            rc = tr_fail(TR_ERR_NOMEM, "zstd cannot start for %s", path);
        if (in->buf)
            memcpy(in->buf, magic, n), in->len = n;
        cookie_io_functions_t io = {plain                        ? plain_read
                                    : in->kind == PREP_IN_GZIP ? gzip_read
                                                               : zstd_read,
                                    NULL, NULL, no_close};
        if (!rc && !(in->f = fopencookie(in, "rb", io)))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory opening %s", path);
    }
    if (rc) {
        prep_input_close(in, rc);
        return rc;
    }
    *out = in;
    return TR_OK;
}

prep_input_kind prep_input_kind_of(const prep_input *in) { return in->kind; }

FILE *prep_input_file(prep_input *in) { return in->f; }

int prep_input_close(prep_input *in, int rc)
{
    if (!in)
        return rc;
    if (in->msg) /* the decompression's failure is the cause */
        rc = tr_fail(TR_ERR_INVALID, "%s", in->msg);
    if (in->f && in->f != in->raw)
        fclose(in->f);
    if (in->raw)
        fclose(in->raw);
    if (in->kind == PREP_IN_GZIP)
        inflateEnd(&in->z);
    ZSTD_freeDCtx(in->zd);
    free(in->buf);
    free(in->msg);
    free(in->path);
    free(in);
    return rc;
}

/* s as a JSON string (quoted, escaped) at the end of *buf. */
static int json_string(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (n > (SIZE_MAX - *len) / 6 - 4)
        return tr_fail(TR_ERR_NOMEM, "a Parquet value too long for a JSON line");
    size_t need = *len + 6 * n + 4;
    if (need > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < need)
            c *= 2;
        char *q = realloc(*buf, c);
        if (!q)
            return tr_fail(TR_ERR_NOMEM, "out of memory for a row of %zu bytes", n);
        *buf = q, *cap = c;
    }
    char *o = *buf + *len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\', *o++ = (char)ch;
        } else if (ch < 0x20) {
            o += sprintf(o, "\\u%04x", ch);
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    *len = (size_t)(o - *buf);
    return TR_OK;
}

static int append(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *q = realloc(*buf, c);
        if (!q)
            return tr_fail(TR_ERR_NOMEM, "out of memory for a row");
        *buf = q, *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return TR_OK;
}

int prep_input_rows(prep_input *in, const char *const *keys, int n_keys,
                    int (*add)(void *ctx, const char *line, size_t len, uint64_t row), void *ctx)
{
    pq_reader *r;
    int rc = pq_open(in->path, keys, n_keys, &r);
    if (rc)
        return rc;
    pq_value vals[16];
    char *buf = NULL;
    size_t len, cap = 0;
    for (;;) {
        uint64_t row;
        if ((rc = pq_next_row(r, vals, &row)) || !row)
            break;
        len = 0;
        for (int k = 0; k < n_keys && !rc; k++) {
            rc = append(&buf, &len, &cap, k ? ", " : "{");
            if (!rc)
                rc = json_string(&buf, &len, &cap, keys[k], strlen(keys[k]));
            if (!rc)
                rc = append(&buf, &len, &cap, ": ");
            if (!rc)
                rc = vals[k].s ? json_string(&buf, &len, &cap, vals[k].s, vals[k].len)
                               : append(&buf, &len, &cap, "null");
        }
        if (!rc)
            rc = append(&buf, &len, &cap, "}");
        if (!rc)
            rc = add(ctx, buf, len, row);
        if (rc)
            break;
    }
    free(buf);
    pq_close(r);
    return rc;
}
