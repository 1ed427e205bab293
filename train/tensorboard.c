/* TensorBoard event files (logging.tensorboard_dir), written without TensorFlow.
 *
 * A file is a sequence of TFRecords: uint64 length (little-endian), uint32 masked CRC-32C of
 * those 8 bytes, the data, uint32 masked CRC-32C of the data; mask(c) = rotate-right(c, 15) +
 * 0xa282ead8. Each record's data is an Event protobuf:
 *   Event   { 1: double wall_time; 2: int64 step; 3: string file_version; 5: Summary summary }
 *   Summary { 1: repeated Value value }
 *   Value   { 1: string tag; 2: float simple_value }
 * The first record carries file_version "brain.Event:2". Every record goes out in one
 * write() so a killed run leaves whole records only. */
#include "train/report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

struct train_tb {
    int fd;
    char path[4352];
};

/* CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, bytewise table. */
static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t train_crc32c(const void *data, size_t n)
{
    if (!crc_table[1])
        crc_init();
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t masked_crc(const void *data, size_t n)
{
    uint32_t c = train_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding into a bounded buffer ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} pbuf;

static void put_byte(pbuf *b, uint8_t v)
{
    if (b->n < b->cap)
        b->p[b->n] = v;
    b->n++;
}

static void put_varint(pbuf *b, uint64_t v)
{
    while (v >= 0x80) {
        put_byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_byte(b, (uint8_t)v);
}

static void put_bytes(pbuf *b, const void *data, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_byte(b, ((const uint8_t *)data)[i]);
}

static void put_le(pbuf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(b, (uint8_t)(v >> (8 * i)));
}

/* field `f` with wire type 2 (length-delimited) */
static void put_len_field(pbuf *b, int f, const void *data, size_t n)
{
    put_varint(b, (uint64_t)f << 3 | 2);
    put_varint(b, n);
    put_bytes(b, data, n);
}

/* Event { wall_time, step, (file_version | summary { value { tag, simple_value } }) } into
 * out[cap]; returns the encoded size (larger than cap: did not fit). */
size_t train_tb_encode_event(uint8_t *out, size_t cap, double wall_time, long long step,
                             const char *tag, float value)
{
    pbuf b = {out, 0, cap};
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits);
    put_varint(&b, 1 << 3 | 1); /* wall_time: 64-bit */
    put_le(&b, bits, 8);
    put_varint(&b, 2 << 3 | 0); /* step: varint */
    put_varint(&b, (uint64_t)step);
    if (!tag) {
        put_len_field(&b, 3, "brain.Event:2", 13);
        return b.n;
    }
    size_t tag_len = strlen(tag);
    uint8_t val[512], sum[600];
    pbuf v = {val, 0, sizeof val}, s = {sum, 0, sizeof sum};
    put_len_field(&v, 1, tag, tag_len);
    uint32_t fbits;
    memcpy(&fbits, &value, sizeof fbits);
    put_varint(&v, 2 << 3 | 5); /* simple_value: 32-bit */
    put_le(&v, fbits, 4);
    if (v.n > v.cap)
        return (size_t)-1;
    put_len_field(&s, 1, val, v.n);
    if (s.n > s.cap)
        return (size_t)-1;
    put_len_field(&b, 5, sum, s.n);
    return b.n;
}

/* One TFRecord around `data`, written with one write(). */
static int write_record(train_tb *w, const uint8_t *data, size_t n)
{
    uint8_t rec[1024];
    if (n + 16 > sizeof rec)
        return tr_fail(TR_ERR_INVALID, "tensorboard: an event of %zu bytes is too large", n);
    uint64_t len = n;
    for (int i = 0; i < 8; i++)
        rec[i] = (uint8_t)(len >> (8 * i));
    uint32_t c = masked_crc(rec, 8);
    for (int i = 0; i < 4; i++)
        rec[8 + i] = (uint8_t)(c >> (8 * i));
    memcpy(rec + 12, data, n);
    c = masked_crc(data, n);
    for (int i = 0; i < 4; i++)
        rec[12 + n + i] = (uint8_t)(c >> (8 * i));
    size_t total = n + 16, done = 0;
    while (done < total) {
        ssize_t k = write(w->fd, rec + done, total - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return tr_fail(TR_ERR_IO, "cannot write %s: %s", w->path,
                           k < 0 ? strerror(errno) : "no space written");
        done += (size_t)k;
    }
    return TR_OK;
}

static int write_event(train_tb *w, double wall_time, long long step, const char *tag,
                       float value)
{
    uint8_t ev[1000];
    size_t n = train_tb_encode_event(ev, sizeof ev, wall_time, step, tag, value);
    if (n > sizeof ev)
        return tr_fail(TR_ERR_INVALID, "tensorboard: the tag '%.40s...' is too long",
                       tag ? tag : "");
    return write_record(w, ev, n);
}

int train_tb_open(const char *dir, double wall_time, train_tb **out)
{
    *out = NULL;
    int rc = tr_make_dirs(dir);
    if (rc)
        return tr_fail_context(rc, "logging.tensorboard_dir");
    train_tb *w = calloc(1, sizeof *w);
    if (!w)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    /* TensorFlow's name: events.out.tfevents.<seconds>.<host>.<pid>.<n> */
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d.0", dir,
             (long long)wall_time, host, (int)getpid());
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = tr_fail(TR_ERR_IO, "cannot create %s: %s", w->path, strerror(errno));
        free(w);
        return rc;
    }
    if ((rc = write_event(w, wall_time, 0, NULL, 0.0f))) {
        train_tb_close(w);
        return rc;
    }
    *out = w;
    return TR_OK;
}

int train_tb_scalar(train_tb *w, const char *tag, long long step, double wall_time, float value)
{
    return write_event(w, wall_time, step, tag, value);
}

void train_tb_close(train_tb *w)
{
    if (!w)
        return;
    close(w->fd);
    free(w);
}
