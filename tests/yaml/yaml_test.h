/* Shared helpers of the yaml/ tests: a minimal valid config and load-and-expect helpers. */
#ifndef TR_YAML_TEST_H
#define TR_YAML_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "yaml/config.h"

/* The required keys, 11 lines: model on lines 1-5, training on 6-9, data on 10-11. */
#define TR_T_MODEL                                                                             \
    "model:\n"                                                                                 \
    "  num_layers: 4\n"                                                                        \
    "  hidden_size: 64\n"                                                                      \
    "  num_attention_heads: 4\n"                                                               \
    "  seq_length: 32\n"
#define TR_T_TRAINING                                                                          \
    "training:\n"                                                                              \
    "  micro_batch_size: 2\n"                                                                  \
    "  train_iters: 10\n"                                                                      \
    "  lr: 3.0e-4\n"
#define TR_T_DATA                                                                              \
    "data:\n"                                                                                  \
    "  data_path: /tmp/corpus\n"
#define TR_T_REQUIRED TR_T_MODEL TR_T_TRAINING TR_T_DATA

/* malloc or exit: test helpers only. */
static inline void *tr_t_malloc(size_t n) __attribute__((returns_nonnull, malloc));
static inline void *tr_t_malloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        print_error("out of memory\n");
        exit(1);
    }
    return p;
}

static inline int tr_t_load(const char *text, const char *const *ov, int n, tr_config *c)
{
    return tr_config_load_string(text, strlen(text), "t.yaml", ov, n, c);
}

/* c as tr_config_write writes it: the text (the caller frees it), its length in *len when len */
static inline char *tr_t_write(const tr_config *c, size_t *len)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    assert_non_null(f);
    assert_int_equal(tr_config_write(c, f), TR_OK);
    fclose(f);
    if (len)
        *len = n;
    return text;
}

static inline int tr_t_is_zero(const tr_config *c)
{
    static const tr_config zero;
    return !memcmp(c, &zero, sizeof zero);
}

/* Loading `len` bytes of `text` with overrides fails with TR_ERR_CONFIG, the message starts
 * with `where` and contains `what`, and the struct is left zeroed. */
static inline void tr_t_expect_n(const char *text, size_t len, const char *const *ov, int n,
                                 const char *where, const char *what)
{
    tr_config c;
    int rc = tr_config_load_string(text, len, "t.yaml", ov, n, &c);
    const char *m = tr_errmsg();
    if (!m) /* never; tells GCC's UBSan-instrumented flow analysis so */
        m = "";
    if (rc != TR_ERR_CONFIG || strncmp(m, where, strlen(where)) || !strstr(m, what)) {
        print_error("rc %d, message:\n  %s\nexpected it to start with\n  %s\nand contain\n  %s\n",
                    rc, m, where, what);
        if (!rc)
            tr_config_free(&c);
        fail();
    }
    assert_true(tr_t_is_zero(&c));
}

static inline void tr_t_expect(const char *text, const char *const *ov, int n, const char *where,
                               const char *what)
{
    tr_t_expect_n(text, strlen(text), ov, n, where, what);
}

#endif
