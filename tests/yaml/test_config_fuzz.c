/* yaml/: hostile inputs — garbage bytes, deep nesting, huge documents, billion laughs,
 * aliases — and a deterministic mutation fuzz loop. Loading must return TR_OK or
 * TR_ERR_CONFIG (never crash, hang or leak: run under ASan), and whatever loads must write
 * and load back to an equal struct. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "yaml_test.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_random(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static void *xmalloc(size_t n) __attribute__((returns_nonnull, malloc));
static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        print_error("out of memory\n");
        exit(1);
    }
    return p;
}

/* strcpy that returns the length (sprintf(dst, "...") upsets GCC 12 under UBSan) */
static size_t put(char *dst, const char *s)
{
    size_t n = strlen(s);
    memcpy(dst, s, n + 1);
    return n;
}

/* Appends printf-style output at buf + *o (no bounds: callers size their buffers). */
static void add(char *buf, size_t *o, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    *o += (size_t)vsprintf(buf + *o, fmt, ap);
    va_end(ap);
}

static size_t below(size_t n) { return n ? (size_t)(next_random() % n) : 0; }

/* The validator's rules (yaml/validate.c, docs of yaml/config.h), restated: a config that
 * loads must satisfy them all, so a validator that lets a broken layout through fails here
 * whatever the number of mutants that load. */
static void expect_valid(const tr_config *c)
{
    const tr_model_config *m = &c->model;
    const tr_parallel_config *p = &c->parallel;
    int tp = p->tensor_model_parallel_size, pp = p->pipeline_model_parallel_size;
    int vpp = p->virtual_pipeline_model_parallel_size;
    int interleaved = !strcmp(p->pipeline_schedule, "interleaved");
    long sum = 0;
    for (int i = 0; i < p->num_pipeline_layers; i++) {
        sum += p->pipeline_layers[i];
        if (interleaved && p->pipeline_layers[i] % vpp)
            sum = -1000000000L; /* a stage's layers must split into vpp chunks */
    }
    int ok = m->num_layers >= 1 && m->num_attention_heads >= 1 && tp >= 1 && pp >= 1 &&
             vpp >= 1 && m->hidden_size % m->num_attention_heads == 0 &&
             m->hidden_size % tp == 0 && m->num_attention_heads % tp == 0 &&
             m->max_position_embeddings >= m->seq_length && pp <= m->num_layers &&
             (p->num_pipeline_layers == 0 || (p->num_pipeline_layers == pp && sum == m->num_layers)) &&
             (vpp == 1 || interleaved) && (!interleaved || (vpp >= 2 && pp >= 2)) &&
             (!interleaved || p->num_pipeline_layers > 0 || m->num_layers % (pp * vpp) == 0) &&
             c->training.micro_batch_size >= 1 && c->training.lr > 0 &&
             c->training.min_lr <= c->training.lr &&
             (c->training.eval_interval <= 0 || c->training.eval_iters >= 1);
    if (!ok)
        print_error("a config that breaks the layout rules loaded: layers %d hidden %d heads %d "
                    "seq %d max_pos %d tp %d pp %d vpp %d schedule %s stages %d (sum %ld) lr %g "
                    "min_lr %g\n",
                    m->num_layers, m->hidden_size, m->num_attention_heads, m->seq_length,
                    m->max_position_embeddings, tp, pp, vpp, p->pipeline_schedule,
                    p->num_pipeline_layers, sum, c->training.lr, c->training.min_lr);
    assert_true(ok);
}

/* Loads `len` bytes; the result must be OK (then valid and round-trips) or a config error
 * with a message. Returns the code. */
static int load_any(const char *text, size_t len)
{
    tr_config c;
    int rc = tr_config_load_string(text, len, "fuzz.yaml", NULL, 0, &c);
    if (rc != TR_OK && rc != TR_ERR_CONFIG) {
        print_error("rc %d: %s\n", rc, tr_errmsg());
        fail();
    }
    if (rc) {
        assert_true(tr_t_is_zero(&c));
        assert_true(strncmp(tr_errmsg(), "fuzz.yaml", 9) == 0);
        return rc;
    }
    expect_valid(&c);
    size_t out_len;
    char *out = tr_t_write(&c, &out_len);
    tr_config back;
    int rc2 = tr_config_load_string(out, out_len, "written", NULL, 0, &back);
    if (rc2)
        print_error("written config does not load: %s\n%s\n", tr_errmsg(), out);
    assert_int_equal(rc2, TR_OK);
    assert_true(tr_config_equal(&c, &back));
    tr_config_free(&back);
    tr_config_free(&c);
    free(out);
    return rc;
}

static void expect_fast_error(const char *text, size_t len, const char *where, const char *what)
{
    clock_t t0 = clock();
    tr_t_expect_n(text, len, NULL, 0, where, what);
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    if (s > 5.0) {
        print_error("took %.1f s\n", s);
        fail();
    }
}

static void test_garbage_bytes(void **state)
{
    (void)state;
    static const char yamlish[] = "[]{}:,-?&*!|>'\"%@`#\t\n\r \\0123456789abcxyz.~=+";
    char buf[600];
    for (int i = 0; i < 3000; i++) {
        size_t len = below(sizeof buf);
        int mode = i % 3;
        for (size_t k = 0; k < len; k++)
            buf[k] = mode == 0 ? (char)below(256) : yamlish[below(sizeof yamlish - 1)];
        load_any(buf, len);
    }
    load_any("", 0);
    load_any("\0", 1);
    load_any("\xef\xbb\xbf", 3);        /* a UTF-8 BOM alone */
    load_any("\xff\xfe" "a\0:\0", 6);   /* UTF-16LE */
    load_any("\xfe\xff\0a\0:", 6);      /* UTF-16BE */
}

static void test_deep_nesting(void **state)
{
    (void)state;
    const size_t n = 100000;
    char *text = xmalloc(3 * n + 16);
    const char *deep = "collections nested more than 32 deep; a config nests 3 deep";
    memset(text, '[', n);
    expect_fast_error(text, n, "t.yaml", deep);
    memset(text, '{', n);
    expect_fast_error(text, n, "t.yaml", deep);
    for (size_t i = 0; i < n; i++)
        memcpy(text + 2 * i, "- ", 2);
    expect_fast_error(text, 2 * n, "t.yaml", deep);
    for (size_t i = 0; i < n; i++)
        memcpy(text + 2 * i, i % 2 ? "{a" : "[:", 2);
    expect_fast_error(text, 2 * n, "t.yaml", "YAML syntax error"); /* whichever comes first */
    for (size_t i = 0; i < n; i++)
        memcpy(text + 2 * i, "? ", 2);
    expect_fast_error(text, 2 * n, "t.yaml", deep);
    for (size_t i = 0; i < n; i++)
        memcpy(text + 3 * i, "a: ", 3);
    expect_fast_error(text, 3 * n, "t.yaml:1:5: ", "YAML syntax error: mapping values are not "
                                                      "allowed in this context");
    free(text);
    /* block mappings, one level per line */
    size_t levels = 2000, o = 0;
    text = xmalloc(levels * (levels + 4));
    for (size_t i = 0; i < levels; i++) {
        memset(text + o, ' ', i);
        o += i;
        memcpy(text + o, "a:\n", 3);
        o += 3;
    }
    expect_fast_error(text, o, "t.yaml:33:33: ", deep);
    free(text);
}

static void test_huge_documents(void **state)
{
    (void)state;
    size_t cap = 20u << 20;
    char *text = xmalloc(cap);
    /* over the size limit */
    memset(text, ' ', cap);
    expect_fast_error(text, (17u << 20), "t.yaml:1:1: ",
                      "17825792 bytes of YAML; a config may be at most 16777216 bytes");
    /* many keys: the node limit ends it */
    size_t o = put(text, "model:\n");
    for (int i = 0; o + 32 < (8u << 20); i++)
        add(text, &o, "  k%d: %d\n", i, i);
    expect_fast_error(text, o, "t.yaml:", "more than 100000 YAML nodes; a config has a few "
                                             "hundred");
    /* a long list */
    o = put(text, TR_T_REQUIRED "parallel:\n  pipeline_layers: [1");
    while (o + 8 < (4u << 20))
        add(text, &o, ", 1");
    text[o++] = ']';
    expect_fast_error(text, o, "t.yaml:", "more than 100000 YAML nodes");
    /* a long scalar */
    o = put(text, TR_T_MODEL TR_T_TRAINING "data:\n  data_path: ");
    memset(text + o, 'x', 10u << 20);
    o += 10u << 20;
    expect_fast_error(text, o, "t.yaml:11:14: ",
                      "data.data_path: found a string of 10485760 bytes; allowed: at most 4096 "
                      "bytes");
    /* a long key (libyaml limits simple keys to 1024 characters) */
    o = put(text, "model:\n  ");
    memset(text + o, 'k', 5000);
    o += 5000;
    add(text, &o, ": 1\n");
    expect_fast_error(text, o, "t.yaml:", "YAML syntax error");
    free(text);
}

static void test_aliases_and_billion_laughs(void **state)
{
    (void)state;
    /* the classic: each level aliases the previous list ten times */
    char *text = xmalloc(1 << 16);
    size_t o = put(text, "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\","
                                     "\"lol\",\"lol\"]\n");
    for (char c = 'b'; c <= 'i'; c++) {
        add(text, &o, "%c: &%c [", c, c);
        for (int k = 0; k < 9; k++)
            add(text, &o, "%s*%c", k ? "," : "", c - 1);
        add(text, &o, "]\n");
    }
    expect_fast_error(text, o, "t.yaml:2:8: ",
                      "alias *a refers to a list; aliases are allowed only for scalar values");
    /* the same with mappings */
    o = put(text, "a: &a {x: 1, y: 2}\nb: &b {p: *a, q: *a}\n");
    expect_fast_error(text, o, "t.yaml:2:11: ", "alias *a refers to a mapping");
    /* many aliases of one scalar: linear, bounded by the node limit */
    o = put(text, "a: &a lol\nb: [");
    char *big = xmalloc(2u << 20);
    memcpy(big, text, o);
    while (o + 8 < (2u << 20))
        add(big, &o, "*a, ");
    big[o++] = ']';
    expect_fast_error(big, o, "t.yaml:", "more than 100000 YAML nodes");
    /* an aliased scalar repeated as a key is still a duplicate */
    const char *dup = "model:\n  &k num_layers: 4\n  *k : 5\n";
    expect_fast_error(dup, strlen(dup), "t.yaml:3:3: ",
                      "duplicate key 'num_layers' in section 'model'");
    /* an anchor on a big scalar aliased many times shares the text (no blow-up) */
    o = put(big, TR_T_MODEL TR_T_TRAINING "data:\n  data_path: &p ");
    memset(big + o, 'x', 1u << 20);
    o += 1u << 20;
    add(big, &o, "\nlogging:\n  level: [");
    for (int k = 0; k < 20000; k++)
        add(big, &o, "*p, ");
    big[o++] = ']';
    expect_fast_error(big, o, "t.yaml:11:14: ", "found a string of 1048576 bytes");
    /* too many anchors */
    o = put(big, "x: [");
    for (int k = 0; k < 1500; k++)
        add(big, &o, "&a%d 1, ", k);
    big[o++] = ']';
    expect_fast_error(big, o, "t.yaml:1:", "more than 1000 anchors");
    free(big);
    free(text);
}

static const char seed_config[] =
    "model:\n"
    "  num_layers: 8\n"
    "  hidden_size: 96\n"
    "  num_attention_heads: 6\n"
    "  seq_length: 48\n"
    "  max_position_embeddings: 64\n"
    "  vocab_size: 50257\n"
    "  init_method_std: 0.006\n"
    "parallel:\n"
    "  tensor_model_parallel_size: 2\n"
    "  pipeline_model_parallel_size: 2\n"
    "  pipeline_layers: [4, 4]\n"
    "  pipeline_schedule: interleaved\n"
    "  virtual_pipeline_model_parallel_size: 2\n"
    "  sequence_parallel: yes\n"
    "  order: tp-pp-dp\n"
    "training: {micro_batch_size: 3, global_batch_size: 12, train_iters: 1000, lr: 6e-4,\n"
    "  min_lr: 0.00006, seed: 7, recompute: full, adam_beta2: 0.95}\n"
    "data:\n"
    "  data_path: &p \"/data/x y\"\n"
    "  split: '90,10,0'\n"
    "logging:\n"
    "  level: debug\n"
    "  trace: on\n";

static void test_mutation_fuzz(void **state)
{
    (void)state;
    static const char *const tokens[] = {
        "[", "]", "{", "}", ":", ": ", ",", "-", "- ", "&a ", "*a", "*p", "!!str ", "<<: ", "---\n",
        "...\n", "#", "\"", "'", "|\n", ">\n", "?", "\t", "\n", "\n  ", "  ", "\\", "%YAML 1.1\n",
        "0", "-1", "99999999999999999999", "1e309", "nan", ".inf", "~", "null", "true", "\xff",
        "\xc3", "\0", "\r", "model:", "parallel:", "\xe2\x80\xa8", "\xef\xbb\xbf", "@", "`"};
    const size_t n_tokens = sizeof tokens / sizeof tokens[0];
    const size_t base_len = sizeof seed_config - 1;
    assert_int_equal(load_any(seed_config, base_len), TR_OK);
    char buf[4096];
    int ok = 0;
    for (int iter = 0; iter < 6000; iter++) {
        size_t len = base_len;
        memcpy(buf, seed_config, len);
        int edits = 1 + (int)below(3);
        for (int e = 0; e < edits; e++) {
            size_t pos = below(len + 1);
            switch (below(6)) {
            case 0: /* flip a byte */
                if (pos < len)
                    buf[pos] = (char)(buf[pos] ^ (char)(1u << below(8)));
                break;
            case 1: { /* insert a token */
                const char *t = tokens[below(n_tokens)];
                size_t tl = t[0] ? strlen(t) : 1;
                if (len + tl < sizeof buf) {
                    memmove(buf + pos + tl, buf + pos, len - pos);
                    memcpy(buf + pos, t, tl);
                    len += tl;
                }
                break;
            }
            case 2: { /* delete a range */
                size_t n = below(16);
                if (pos + n > len)
                    n = len - pos;
                memmove(buf + pos, buf + pos + n, len - pos - n);
                len -= n;
                break;
            }
            case 3: { /* duplicate a range elsewhere */
                size_t from = below(len), n = below(64);
                if (from + n > len)
                    n = len - from;
                if (len + n < sizeof buf) {
                    char tmp[64];
                    memcpy(tmp, buf + from, n);
                    memmove(buf + pos + n, buf + pos, len - pos);
                    memcpy(buf + pos, tmp, n);
                    len += n;
                }
                break;
            }
            case 4: /* change a digit: mostly keeps the config valid */
                for (size_t k = 0; k < len; k++) {
                    size_t at = (pos + k) % len;
                    if (buf[at] >= '0' && buf[at] <= '9') {
                        buf[at] = (char)('0' + below(10));
                        break;
                    }
                }
                break;
            default: /* replace a byte with a random one */
                if (pos < len)
                    buf[pos] = (char)below(256);
                break;
            }
        }
        ok += load_any(buf, len) == TR_OK;
    }
    print_message("mutation fuzz: %d of 6000 mutants still load\n", ok);
    /* 247 with this seed and these inputs. Injected in yaml/, each passed the old ok > 0:
     * a validator that accepts only the seed's values of 17 numeric keys (136 load: below
     * the range); config_validate skipped in load.c (471 load: above it, and expect_valid
     * fails first); the max_position_embeddings >= seq_length rule dropped (expect_valid). */
    assert_in_range(ok, 200, 350);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_garbage_bytes),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_huge_documents),
        cmocka_unit_test(test_aliases_and_billion_laughs),
        cmocka_unit_test(test_mutation_fuzz),
    };
    return cmocka_run_group_tests_name("yaml config fuzz", tests, NULL, NULL);
}
