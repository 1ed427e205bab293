/* llm.c token shards: a 1024-byte header of 256 int32 (header[0] = magic 20240520,
 * header[1] = version 1, header[2] = token count, the rest 0) followed by uint16 tokens.
 * A shard is one token stream with no document boundaries (see data.h). */
#include "data/data_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"

int llmc_open(const char *path, int vocab_size, token_store *s)
{
    memset(s, 0, sizeof *s);
    s->path = malloc(strlen(path) + 1);
    if (!s->path)
        return tr_fail(TR_ERR_NOMEM, "out of memory opening %s", path);
    strcpy(s->path, path);
    int rc = map_file(path, &s->bin);
    if (rc)
        goto fail;
    const unsigned char *p = s->bin.map;
    size_t bytes = s->bin.bytes;
    if (bytes < LLMC_HEADER_BYTES) {
        rc = tr_fail(TR_ERR_INVALID,
                     "%s: file is %zu bytes, shorter than the %d-byte llm.c shard header", path,
                     bytes, LLMC_HEADER_BYTES);
        goto fail;
    }
    int32_t magic = load_i32(p), version = load_i32(p + 4), count = load_i32(p + 8);
    if (magic != LLMC_MAGIC) {
        rc = tr_fail(TR_ERR_INVALID, "%s: header magic is %d, expected %d (llm.c token shard)",
                     path, magic, LLMC_MAGIC);
        goto fail;
    }
    if (version != LLMC_VERSION) {
        rc = tr_fail(TR_ERR_INVALID,
                     "%s: header version is %d, expected %d (uint16 tokens)", path, version,
                     LLMC_VERSION);
        goto fail;
    }
    if (count < 0) {
        rc = tr_fail(TR_ERR_INVALID, "%s: header token count is %d, expected >= 0", path,
                     count);
        goto fail;
    }
    uint64_t expect = LLMC_HEADER_BYTES + 2 * (uint64_t)count;
    if (expect != bytes) {
        rc = tr_fail(TR_ERR_INVALID,
                     "%s: file is %zu bytes, but the header token count %d implies %llu bytes "
                     "(1024 + 2 x %d)",
                     path, bytes, count, (unsigned long long)expect, count);
        goto fail;
    }
    s->dtype = DT_UINT16;
    s->itemsize = 2;
    s->n_tokens = (uint64_t)count;
    s->n_docs = 1;
    s->n_seqs = 1;
    s->base = p + LLMC_HEADER_BYTES;
    rc = token_store_check_vocab(s, path, vocab_size);
    if (rc)
        goto fail;
    return TR_OK;
fail:
    token_store_close(s);
    return rc;
}

int tr_llmc_shard_write(const char *path, const uint16_t *tokens, uint64_t n_tokens)
{
    if (n_tokens > INT32_MAX)
        return tr_fail(TR_ERR_INVALID,
                       "%s: %llu tokens do not fit an llm.c shard (at most 2^31-1)", path,
                       (unsigned long long)n_tokens);
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    if (!tmp)
        return tr_fail(TR_ERR_NOMEM, "out of memory writing %s", path);
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    int32_t header[256] = {0};
    header[0] = LLMC_MAGIC;
    header[1] = LLMC_VERSION;
    header[2] = (int32_t)n_tokens;
    int rc = TR_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = tr_fail(TR_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto done;
    }
    if (fwrite(header, sizeof header, 1, f) != 1 ||
        (n_tokens && fwrite(tokens, 2, (size_t)n_tokens, f) != (size_t)n_tokens) ||
        fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        fclose(f);
        remove(tmp);
        goto done;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        remove(tmp);
    }
done:
    free(tmp);
    return rc;
}
