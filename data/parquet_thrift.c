/* Parquet's two bit-level formats, read with every length checked against the buffer: the
 * Thrift compact protocol (the footer's FileMetaData, each page's PageHeader) and the RLE /
 * bit-packing hybrid (definition levels, dictionary indices). */
#include <string.h>

#include "data/parquet_internal.h"

#define MAX_DEPTH 32

static void fail(pq_thrift *t, const char *why)
{
    if (!t->err)
        t->err = why;
    t->p = t->end; /* nothing more is read */
}

static uint64_t varint(pq_thrift *t)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (t->p >= t->end) {
            fail(t, "a Thrift value runs past its bytes");
            return 0;
        }
        uint8_t b = *t->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    fail(t, "a Thrift varint longer than 10 bytes");
    return 0;
}

static int64_t zigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

int pq_field(pq_thrift *t, int *last, int *id, int *type)
{
    if (t->err)
        return 0;
    if (t->p >= t->end) {
        fail(t, "a Thrift struct runs past its bytes");
        return 0;
    }
    uint8_t b = *t->p++;
    *type = b & 0x0f;
    if (*type == PQ_T_STOP)
        return 0;
    if (*type > PQ_T_STRUCT) {
        fail(t, "a Thrift field of an unknown type");
        return 0;
    }
    int64_t v = b >> 4 ? *last + (b >> 4) : zigzag(varint(t));
    if (v < -32768 || v > 32767) {
        fail(t, "a Thrift field id out of range");
        return 0;
    }
    *id = *last = (int)v;
    return !t->err;
}

int64_t pq_int(pq_thrift *t, int type)
{
    if (type == PQ_T_I8) {
        if (t->p >= t->end) {
            fail(t, "a Thrift value runs past its bytes");
            return 0;
        }
        return (int8_t)*t->p++;
    }
    if (type != PQ_T_I16 && type != PQ_T_I32 && type != PQ_T_I64) {
        fail(t, "a Thrift field of a wrong type (an integer expected)");
        return 0;
    }
    int64_t v = zigzag(varint(t));
    if ((type == PQ_T_I16 && (v < INT16_MIN || v > INT16_MAX)) ||
        (type == PQ_T_I32 && (v < INT32_MIN || v > INT32_MAX)))
        fail(t, "a Thrift integer out of its type's range");
    return v;
}

int pq_bool(pq_thrift *t, int type)
{
    if (type != PQ_T_TRUE && type != PQ_T_FALSE)
        fail(t, "a Thrift field of a wrong type (a boolean expected)");
    return type == PQ_T_TRUE;
}

const uint8_t *pq_binary(pq_thrift *t, int type, size_t *len)
{
    *len = 0;
    if (type != PQ_T_BINARY) {
        fail(t, "a Thrift field of a wrong type (a string expected)");
        return NULL;
    }
    uint64_t n = varint(t);
    if (t->err)
        return NULL;
    if (n > (uint64_t)(t->end - t->p)) {
        fail(t, "a Thrift string runs past its bytes");
        return NULL;
    }
    const uint8_t *s = t->p;
    t->p += n;
    *len = (size_t)n;
    return s;
}

int pq_list(pq_thrift *t, int type, int *elem_type, size_t *count)
{
    *count = 0;
    *elem_type = PQ_T_STOP;
    if (type != PQ_T_LIST && type != PQ_T_SET) {
        fail(t, "a Thrift field of a wrong type (a list expected)");
        return 0;
    }
    if (t->p >= t->end) {
        fail(t, "a Thrift list runs past its bytes");
        return 0;
    }
    uint8_t b = *t->p++;
    uint64_t n = b >> 4;
    if (n == 15)
        n = varint(t);
    *elem_type = b & 0x0f;
    if (!t->err && (*elem_type == PQ_T_STOP || *elem_type > PQ_T_STRUCT))
        fail(t, "a Thrift list of an unknown element type");
    if (!t->err && n > (uint64_t)(t->end - t->p)) /* every element takes a byte at least */
        fail(t, "a Thrift list longer than its bytes");
    if (t->err)
        return 0;
    *count = (size_t)n;
    return 1;
}

int pq_struct_begin(pq_thrift *t, int type)
{
    if (type != PQ_T_STRUCT)
        fail(t, "a Thrift field of a wrong type (a struct expected)");
    else if (++t->depth > MAX_DEPTH)
        fail(t, "Thrift structs nested too deep");
    return !t->err;
}

void pq_struct_end(pq_thrift *t) { t->depth--; }

void pq_skip(pq_thrift *t, int type)
{
    size_t n, len;
    int et, last = 0, id, ft;
    switch (type) {
    case PQ_T_TRUE: case PQ_T_FALSE:
        return;
    case PQ_T_I8:
    case PQ_T_I16: case PQ_T_I32: case PQ_T_I64:
        (void)pq_int(t, type);
        return;
    case PQ_T_DOUBLE:
        if (t->end - t->p < 8)
            fail(t, "a Thrift value runs past its bytes");
        else
            t->p += 8;
        return;
    case PQ_T_BINARY:
        (void)pq_binary(t, type, &len);
        return;
    case PQ_T_LIST: case PQ_T_SET:
        if (!pq_list(t, type, &et, &n))
            return;
        if (++t->depth > MAX_DEPTH)
            fail(t, "Thrift structs nested too deep");
        for (size_t i = 0; i < n && !t->err; i++) {
            if (et == PQ_T_TRUE || et == PQ_T_FALSE) /* a bool element is a byte */
                t->p < t->end ? (void)t->p++ : fail(t, "a Thrift list runs past its bytes");
            else
                pq_skip(t, et);
        }
        t->depth--;
        return;
    case PQ_T_MAP: {
        uint64_t m = varint(t);
        if (t->err || m == 0)
            return;
        if (t->p >= t->end || m > (uint64_t)(t->end - t->p) / 2) {
            fail(t, "a Thrift map longer than its bytes");
            return;
        }
        int kt = *t->p >> 4, vt = *t->p & 0x0f;
        t->p++;
        if (kt == PQ_T_STOP || kt > PQ_T_STRUCT || vt == PQ_T_STOP || vt > PQ_T_STRUCT) {
            fail(t, "a Thrift map of an unknown type");
            return;
        }
        if (++t->depth > MAX_DEPTH)
            fail(t, "Thrift structs nested too deep");
        for (uint64_t i = 0; i < m && !t->err; i++) {
            pq_skip(t, kt);
            pq_skip(t, vt);
        }
        t->depth--;
        return;
    }
    case PQ_T_STRUCT:
        if (!pq_struct_begin(t, type))
            return;
        while (pq_field(t, &last, &id, &ft))
            pq_skip(t, ft);
        pq_struct_end(t);
        return;
    default:
        fail(t, "a Thrift field of an unknown type");
    }
}

/* ---- RLE / bit-packing hybrid */

static int rle_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *at < len; shift += 7) {
        uint8_t b = p[(*at)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 1;
    }
    return 0;
}

const char *pq_rle_decode(const uint8_t *p, size_t len, int bit_width, uint32_t *out, size_t n)
{
    if (bit_width < 0 || bit_width > 32)
        return "a bit width past 32";
    size_t bw = (size_t)bit_width, vbytes = (bw + 7) / 8, i = 0, at = 0;
    while (i < n) {
        uint64_t h;
        if (!rle_varint(p, len, &at, &h))
            return "an RLE run header past its bytes";
        size_t left = n - i;
        if (h & 1) { /* bit-packed: (h >> 1) groups of 8 values, bw bits each, LSB first */
            uint64_t groups = h >> 1;
            if (!groups)
                return "an empty bit-packed run";
            size_t take = groups >= left / 8 + 1 ? left : (size_t)groups * 8;
            if (take > left)
                take = left;
            size_t need = (take * bw + 7) / 8;
            if (need > len - at)
                return "a bit-packed run past its bytes";
            const uint8_t *q = p + at;
            for (size_t j = 0; j < take; j++) {
                size_t bit = j * bw;
                uint64_t w = 0;
                size_t b0 = bit / 8, nb = (bit % 8 + bw + 7) / 8;
                for (size_t k = 0; k < nb; k++)
                    w |= (uint64_t)q[b0 + k] << (8 * k);
                out[i + j] = (uint32_t)((w >> (bit % 8)) & (bw == 32 ? 0xffffffffu
                                                                    : ((1u << bw) - 1)));
            }
            /* (the run's last group may lack its padding bytes: tolerated) */
            at += groups > (len - at) / (bw ? bw : 1) ? len - at : (size_t)groups * bw;
            i += take;
        } else { /* a run: (h >> 1) times one value of vbytes bytes, little-endian */
            uint64_t count = h >> 1;
            if (!count)
                return "an empty RLE run";
            if (vbytes > len - at)
                return "an RLE run past its bytes";
            uint32_t v = 0;
            for (size_t k = 0; k < vbytes; k++)
                v |= (uint32_t)p[at + k] << (8 * k);
            at += vbytes;
            if (bw < 32 && v >> bw)
                return "an RLE value wider than its bit width";
            size_t take = count < left ? (size_t)count : left;
            for (size_t j = 0; j < take; j++)
                out[i + j] = v;
            i += take;
        }
    }
    return NULL;
}

/* ---- DELTA_BINARY_PACKED: a header (block size, miniblocks per block, value count, first
 * value), then blocks: a min delta, each miniblock's bit width, the miniblocks' deltas
 * bit-packed (the last block's unused miniblocks have a width byte and no bytes). */

static uint64_t bits_at(const uint8_t *q, size_t bit, int bw)
{
    uint64_t v = 0;
    for (int b = 0; b < bw;) {
        int off = (int)(bit & 7), take = 8 - off < bw - b ? 8 - off : bw - b;
        v |= (uint64_t)((q[bit >> 3] >> off) & ((1u << take) - 1)) << b;
        b += take, bit += (size_t)take;
    }
    return v;
}

const char *pq_delta_decode(const uint8_t *p, size_t len, int64_t *out, size_t n, size_t *used)
{
    size_t at = 0;
    uint64_t block, minis, count, first;
    if (!rle_varint(p, len, &at, &block) || !rle_varint(p, len, &at, &minis) ||
        !rle_varint(p, len, &at, &count) || !rle_varint(p, len, &at, &first))
        return "a DELTA_BINARY_PACKED header past its bytes";
    if (!minis || minis > 1024 || block % minis || block / minis % 8 || !block ||
        block > (1u << 20))
        return "a DELTA_BINARY_PACKED block size that is not a multiple of 8 per miniblock";
    if (count != n)
        return "a DELTA_BINARY_PACKED value count that disagrees with the page";
    size_t per_mini = (size_t)(block / minis), i = 0;
    uint64_t v = (first >> 1) ^ -(first & 1);
    if (n)
        out[i++] = (int64_t)v;
    while (i < n) {
        uint64_t zmin;
        if (!rle_varint(p, len, &at, &zmin))
            return "a DELTA_BINARY_PACKED block past its bytes";
        uint64_t min_delta = (zmin >> 1) ^ -(zmin & 1);
        if (minis > len - at)
            return "a DELTA_BINARY_PACKED block past its bytes";
        const uint8_t *widths = p + at;
        at += (size_t)minis;
        for (size_t m = 0; m < minis && i < n; m++) {
            int bw = widths[m];
            if (bw > 64)
                return "a DELTA_BINARY_PACKED bit width past 64";
            size_t bytes = per_mini * (size_t)bw / 8;
            if (bytes > len - at)
                return "a DELTA_BINARY_PACKED miniblock past its bytes";
            for (size_t j = 0; j < per_mini && i < n; j++) { /* (wrapping, as int64 does) */
                v += min_delta + bits_at(p + at, j * (size_t)bw, bw);
                out[i++] = (int64_t)v;
            }
            at += bytes;
        }
    }
    *used = at;
    return NULL;
}
