/* core/ — errors, logging, memory, Philox RNG, timers, JSON writing.
 *
 * Contract:
 *  - Every fallible function returns a tr_status (0 = TR_OK) and, on failure, sets a
 *    thread-local message with tr_fail(); callers read it with tr_errmsg(). Library code
 *    never calls abort() or exit().
 *  - tr_philox4x32_10() is the counter-based RNG behind layout-free initialisation: the value
 *    of parameter element i of tensor "name" is tr_init_normal(seed, name, i), independent of
 *    how the tensor is sharded.
 *  - tr_make_dirs() is mkdir -p.
 *  - Usable from every other folder; depends on nothing of trident's. */
#ifndef TR_CORE_H
#define TR_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" { /* (the CUDA files are C++) */
#endif

/* Marks a function whose int result is a tr_status: ignoring it is a compile error. */
#define TR_MUST_CHECK __attribute__((warn_unused_result))

typedef enum {
    TR_OK = 0,
    TR_ERR_INVALID = 1,  /* bad argument or bad input data */
    TR_ERR_CONFIG = 2,   /* bad configuration (exit code 2 at the CLI) */
    TR_ERR_IO = 3,       /* file system */
    TR_ERR_NOMEM = 4,    /* allocation failed */
    TR_ERR_COMM = 5,     /* communication failure */
    TR_ERR_TIMEOUT = 6,  /* a wait ran past its deadline */
    TR_ERR_INTERNAL = 7, /* broken invariant inside trident */
} tr_status;

/* Set the thread's error message (printf-style) and return `code`. */
int tr_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepend context to the current message: "context: old message". Returns `code`. */
int tr_fail_context(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *tr_errmsg(void);
void tr_clear_error(void);

/* Logging to stderr, prefixed with the level; tr_log_set_rank() adds "[rank N]". Messages
 * below the level (default info) are dropped; `trident` takes it from TRIDENT_LOG_LEVEL. */
typedef enum { TR_LOG_DEBUG, TR_LOG_INFO, TR_LOG_WARN, TR_LOG_ERROR } tr_log_level;
/* The level named "debug", "info", "warning" or "error"; TR_ERR_INVALID for another name. */
TR_MUST_CHECK int tr_log_set_level_name(const char *name);
void tr_log_set_rank(int rank);
void tr_log(tr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define tr_info(...) tr_log(TR_LOG_INFO, __VA_ARGS__)
#define tr_warn(...) tr_log(TR_LOG_WARN, __VA_ARGS__)
#define tr_debug(...) tr_log(TR_LOG_DEBUG, __VA_ARGS__)

/* Memory: 64-byte aligned, zero-filled; returns NULL and sets the error on failure. */
void *tr_alloc(size_t bytes, const char *what);
void tr_free(void *p);
/* mkdir -p: create `path` and its missing parents (TR_ERR_IO naming the one that failed). */
TR_MUST_CHECK int tr_make_dirs(const char *path);
/* Whole reads and writes at an offset (EINTR and short transfers retried): 0, or -1 with errno
 * set (errno 0: the file ended first). The caller names the file in its message. */
TR_MUST_CHECK int tr_pread_all(int fd, void *buf, size_t bytes, uint64_t off);
TR_MUST_CHECK int tr_pwrite_all(int fd, const void *buf, size_t bytes, uint64_t off);
/* The same at the file position (write(2)): 0, or -1 with errno. */
TR_MUST_CHECK int tr_write_all(int fd, const void *buf, size_t bytes);
/* A whole regular file of at most max_bytes into *text (malloc'd, NUL after its *n bytes; the
 * caller frees it): TR_OK, or the error naming the file (TR_ERR_INVALID when it is missing,
 * not a regular file or larger than `what`, e.g. "a JSON file of a model", may be). */
TR_MUST_CHECK int tr_read_file(const char *path, size_t max_bytes, const char *what, char **text,
                               size_t *n);
/* Checked size arithmetic: return TR_ERR_INVALID on overflow. */
TR_MUST_CHECK int tr_mul_size(size_t a, size_t b, size_t *out);

/* Philox 4x32-10 (Salmon et al. 2011): one block of 4 random words from a 128-bit counter
 * and a 64-bit key. */
void tr_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
/* 64-bit FNV-1a of a string, used to key the RNG by parameter name. */
uint64_t tr_hash_name(const char *name);
/* Standard normal for element `index` of the tensor named by `name_hash` (Box–Muller on one
 * Philox block). Pure function of its arguments. */
float tr_init_normal(uint64_t seed, uint64_t name_hash, uint64_t index);
/* Uniform in [0,1) from (seed, stream, index); used for data shuffling. */
double tr_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/* Monotonic wall clock in seconds. */
double tr_now(void);

/* UTF-8 (utf8.c), Unicode's well-formed sequences (no overlong forms, surrogates or code
 * points past U+10FFFF):
 *  tr_utf8_invalid_len: 0 when s[0, len) (len >= 1) starts with a well-formed sequence, else
 *      the length of its maximal subpart (the bytes one U+FFFD replaces, as Python's and
 *      tokenizers' lossy decoding do; at least 1);
 *  tr_utf8_valid_prefix: the length of the longest well-formed prefix of s[0, len);
 *  tr_utf8_lossy: s[0, len) into out with each maximal ill-formed subpart replaced by one U+FFFD
 *      (EF BF BD): Python's bytes.decode("utf-8", "replace"), Rust's from_utf8_lossy,
 *      Unicode's recommended practice; with per_byte, one U+FFFD for each of its bytes
 *      (sentencepiece's normalizer). Returns the bytes written (at most 3 len); out NULL:
 *      the bytes it would write. */
size_t tr_utf8_invalid_len(const unsigned char *s, size_t len);
size_t tr_utf8_valid_prefix(const unsigned char *s, size_t len);
size_t tr_utf8_lossy(const unsigned char *s, size_t len, int per_byte, char *out);

/* JSON writing: a tiny streaming writer (objects/arrays nest up to 32 deep). Strings are
 * written as valid JSON whatever their bytes: each ill-formed UTF-8 subpart as one \ufffd. */
typedef struct {
    FILE *f;
    int depth;
    int need_comma[32];
} tr_json;
void tr_json_begin(tr_json *j, FILE *f);
void tr_json_object_begin(tr_json *j, const char *key); /* key NULL inside arrays / at top */
void tr_json_object_end(tr_json *j);
void tr_json_array_begin(tr_json *j, const char *key);
void tr_json_array_end(tr_json *j);
void tr_json_int(tr_json *j, const char *key, long long v);
void tr_json_double(tr_json *j, const char *key, double v); /* NaN/Inf written as null */
void tr_json_string(tr_json *j, const char *key, const char *v);
void tr_json_bool(tr_json *j, const char *key, int v);
void tr_json_null(tr_json *j, const char *key);

#ifdef __cplusplus
}
#endif

#endif
