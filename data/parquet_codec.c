/* A Parquet page's bytes decompressed: UNCOMPRESSED, SNAPPY (raw format, decoded here),
 * GZIP (zlib), ZSTD (libzstd); the result must be exactly the size the page header says. */
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "data/parquet_internal.h"

const char *pq_snappy_decode(const uint8_t *in, size_t n, uint8_t *out, size_t want)
{
    size_t at = 0, o = 0;
    uint64_t total = 0;
    for (int shift = 0;; shift += 7) { /* the preamble: the uncompressed length, a varint */
        if (at >= n || shift > 28)
            return "a bad Snappy length preamble";
        total |= (uint64_t)(in[at] & 0x7f) << shift;
        if (!(in[at++] & 0x80))
            break;
    }
    if (total != want)
        return "a Snappy length that disagrees with the page header";
    while (at < n) {
        uint8_t tag = in[at++];
        size_t len, off = 0;
        if ((tag & 3) == 0) { /* a literal: length - 1 in the tag, or in 1-4 bytes after it */
            len = tag >> 2;
            if (len >= 60) {
                size_t k = len - 59;
                if (k > n - at)
                    return "a Snappy literal past its bytes";
                len = 0;
                for (size_t j = 0; j < k; j++)
                    len |= (size_t)in[at + j] << (8 * j);
                at += k;
            }
            len++;
            if (len > n - at || len > want - o)
                return "a Snappy literal past its bytes";
            memcpy(out + o, in + at, len);
            at += len, o += len;
            continue;
        }
        if ((tag & 3) == 1) { /* copy: length 4-11, an 11-bit offset */
            if (at >= n)
                return "a Snappy copy past its bytes";
            len = 4 + ((tag >> 2) & 7);
            off = (size_t)(tag >> 5) << 8 | in[at++];
        } else { /* copy: length 1-64, a 2- or 4-byte offset */
            size_t k = (tag & 3) == 2 ? 2 : 4;
            if (k > n - at)
                return "a Snappy copy past its bytes";
            len = (size_t)(tag >> 2) + 1;
            for (size_t j = 0; j < k; j++)
                off |= (size_t)in[at + j] << (8 * j);
            at += k;
        }
        if (off == 0 || off > o)
            return "a Snappy copy from before the start";
        if (len > want - o)
            return "a Snappy copy past the uncompressed length";
        for (size_t j = 0; j < len; j++, o++) /* (overlapping copies repeat a pattern) */
            out[o] = out[o - off];
    }
    return o == want ? NULL : "a Snappy stream shorter than its length";
}

static const char *gzip_decode(const uint8_t *in, size_t n, uint8_t *out, size_t want)
{
    z_stream z = {0};
    if (inflateInit2(&z, 15 + 32) != Z_OK) /* gzip or zlib header */
        return "zlib cannot start";
    const char *why = NULL;
    size_t o = 0, at = 0;
    while (!why) {
        z.next_in = (Bytef *)(uintptr_t)(in + at);
        z.avail_in = (uInt)(n - at > (1u << 30) ? 1u << 30 : n - at);
        z.next_out = out + o;
        z.avail_out = (uInt)(want - o > (1u << 30) ? 1u << 30 : want - o);
        size_t in0 = z.avail_in, out0 = z.avail_out;
        int zr = inflate(&z, Z_NO_FLUSH);
        at += in0 - z.avail_in, o += out0 - z.avail_out;
        if (zr == Z_STREAM_END) {
            if (at == n) /* (gzip members one after another: the next) */
                break;
            if (inflateReset(&z) != Z_OK)
                why = "zlib cannot restart";
        } else if (zr == Z_BUF_ERROR && at == n) {
            why = "GZIP data truncated";
        } else if (zr == Z_BUF_ERROR && o == want) {
            why = "GZIP data longer than the page header says";
        } else if (zr != Z_OK) {
            why = "corrupt GZIP data";
        }
    }
    inflateEnd(&z);
    return why ? why : o == want ? NULL : "GZIP data shorter than the page header says";
}

const char *pq_decompress(int codec, const uint8_t *in, size_t n, uint8_t *out, size_t want)
{
    switch (codec) {
    case PQ_CODEC_UNCOMPRESSED:
        if (n != want)
            return "an uncompressed page whose two sizes differ";
        memcpy(out, in, n);
        return NULL;
    case PQ_CODEC_SNAPPY:
        return pq_snappy_decode(in, n, out, want);
    case PQ_CODEC_GZIP:
        return gzip_decode(in, n, out, want);
    case PQ_CODEC_ZSTD: {
        size_t got = ZSTD_decompress(out, want, in, n);
        if (ZSTD_isError(got))
            return ZSTD_getErrorCode(got) == ZSTD_error_dstSize_tooSmall
                       ? "ZSTD data longer than the page header says" : "corrupt ZSTD data";
        return got == want ? NULL : "ZSTD data shorter than the page header says";
    }
    default:
        return "an unsupported codec";
    }
}

const char *pq_codec_name(int codec)
{
    static const char *const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4",
                                        "ZSTD", "LZ4_RAW"};
    return codec >= 0 && codec < 8 ? names[codec] : "an unknown codec";
}
