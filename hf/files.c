/* hf/'s small pieces: float formats, whole reads and writes, JSON files, folders. */
#include "hf/hf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ float formats */

uint16_t tr_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0; /* NaN, as PyTorch makes it */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float tr_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t tr_f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00; /* NaN */
    if (a >= 0x477ff000u)
        return sign | 0x7c00; /* 65520 and above round to infinity */
    if (a >= 0x38800000u) {   /* normal in half: 2^-14 and above */
        a += 0xfffu + ((a >> 13) & 1u);
        return sign | (uint16_t)((a - 0x38000000u) >> 13);
    }
    if (a < 0x33000000u) /* below 2^-25: zero */
        return sign;
    /* subnormal: the multiple of 2^-24 nearest to m * 2^(e - 150), ties to even */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return sign | (uint16_t)q;
}

float tr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* zero or subnormal: exact */
        memcpy(&u, &v, sizeof u);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);
    } else {
        u = sign | ((e + 112) << 23) | (m << 13);
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

st_text st_shape_text(const tr_st_tensor *t)
{
    st_text s = {"["};
    size_t n = 1;
    for (int d = 0; d < t->ndim && n < sizeof s.text; d++)
        n += (size_t)snprintf(s.text + n, sizeof s.text - n, "%s%llu", d ? ", " : "",
                              (unsigned long long)t->shape[d]);
    if (n < sizeof s.text - 1)
        s.text[n] = ']', s.text[n + 1] = '\0';
    return s;
}

/* ------------------------------------------------------------------ reads and writes */

int hf_join(char *buf, size_t cap, const char *dir, const char *name)
{
    if ((size_t)snprintf(buf, cap, "%s/%s", dir, name) >= cap)
        return tr_fail(TR_ERR_INVALID, "path too long: %s/%s", dir, name);
    return TR_OK;
}

int hf_load_json(const char *path, size_t max_bytes, json_t **out)
{
    *out = NULL;
    char *text;
    size_t n;
    int rc = tr_read_file(path, max_bytes, "a JSON file of a model", &text, &n);
    if (!rc) {
        json_error_t err;
        *out = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
        if (!*out)
            rc = tr_fail(TR_ERR_INVALID, "%s:%d:%d: %s", path, err.line, err.column,
                         json_error_code(&err) == json_error_duplicate_key
                             ? "a key appears twice in one object" : err.text);
    }
    free(text);
    return rc;
}

int hf_write_text(const char *dir, const char *name, const char *text)
{
    char path[4200];
    int rc = hf_join(path, sizeof path, dir, name);
    if (rc)
        return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    if (tr_write_all(fd, text, strlen(text)) || fsync(fd))
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (close(fd) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot close %s: %s", path, strerror(errno));
    return rc;
}

/* ------------------------------------------------------------------ folders */

static int unlink_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int hf_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) && errno == ENOENT)
        return TR_OK;
    if (nftw(path, unlink_entry, 16, FTW_DEPTH | FTW_PHYS))
        return tr_fail(TR_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    return TR_OK;
}

int hf_sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    int rc = fsync(fd) ? tr_fail(TR_ERR_IO, "cannot sync %s: %s", path, strerror(errno)) : TR_OK;
    close(fd);
    return rc;
}

int hf_read_weight(tr_st_file *f, const tr_st_tensor *t, float *out)
{
    int rc = tr_st_read_f32(f, t, out);
    for (size_t i = 0; !rc && i < t->numel; i++)
        if (!isfinite(out[i]))
            return tr_fail(TR_ERR_INVALID, "%s: tensor '%.200s' holds %g at element %zu (as "
                           "float32%s): weights must be finite", tr_st_path(f), t->name,
                           (double)out[i], i, t->dtype == TR_ST_F64 ? ", which its F64 value "
                           "may exceed" : "");
    return rc;
}

int hf_load_config(const char *dir, char *path, size_t cap, json_t **out)
{
    int rc = hf_join(path, cap, dir, "config.json");
    return rc ? rc : hf_load_json(path, 1 << 20, out);
}

int tr_hf_eos_token_ids(const char *dir, int *eos, int *n, char *from, size_t cap)
{
    json_t *root = NULL;
    *n = 0;
    int rc = hf_join(from, cap, dir, "generation_config.json");
    if (!rc && access(from, F_OK)) /* (no such file: config.json's) */
        rc = hf_join(from, cap, dir, "config.json");
    if (!rc)
        rc = hf_load_json(from, 1 << 20, &root);
    if (rc)
        return rc;
    json_t *v = json_object_get(root, "eos_token_id");
    size_t count = !v || json_is_null(v) ? 0 : json_is_array(v) ? json_array_size(v) : 1;
    if (count > TR_HF_MAX_EOS)
        rc = tr_fail(TR_ERR_INVALID, "%s: eos_token_id lists %zu tokens; trident stops at %d at "
                     "most", from, count, TR_HF_MAX_EOS);
    for (size_t i = 0; !rc && i < count; i++) { /* (transformers stops at any of them) */
        json_t *id = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > 0x7fffffff)
            rc = tr_fail(TR_ERR_INVALID, "%s: eos_token_id must be a token id (an integer >= 0), "
                         "a list of them or null", from);
        else
            eos[(*n)++] = (int)json_integer_value(id);
    }
    json_decref(root);
    return rc;
}
