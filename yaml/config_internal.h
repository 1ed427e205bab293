/* yaml/ internals: the parsed YAML tree (tree.c), the key schema (schema.c), scalar
 * conversion and message helpers (convert.c), cross-key checks (validate.c).
 *
 * Flow of tr_config_load(): text -> ydoc (bounded tree of nodes with 1-based marks) ->
 * each table key gets the node holding its value (file or --set) -> converted into the
 * struct -> defaults -> config_validate(). */
#ifndef TR_CONFIG_INTERNAL_H
#define TR_CONFIG_INTERNAL_H

#include <stddef.h>

#include "yaml/config.h"

/* Limits that make any input cheap: a config nests 3 deep and has a few hundred nodes. */
#define YAML_MAX_BYTES (16u << 20) /* whole document */
#define YAML_MAX_DEPTH 32          /* nested collections */
#define YAML_MAX_NODES 100000      /* scalars + collections, aliases included */
#define YAML_MAX_ANCHORS 1000
#define YAML_MAX_STRING 4096 /* a string value (paths included) */

/* ---- tree.c: YAML text -> tree ---- */
typedef enum { YSCALAR, YSEQUENCE, YMAPPING } ykind;

typedef struct {
    ykind kind;
    int line, col;  /* 1-based start of the node */
    int is_null;    /* plain scalar "", "~", "null", "Null", "NULL" */
    char *text;     /* scalar text, NUL-terminated (shared by aliases of it) */
    size_t len;     /* bytes in text (may hold NUL bytes from escapes) */
    int owns_text;  /* 0 for an alias node */
    int first;      /* first child (index), -1 if none; a mapping alternates key, value */
    int next;       /* next sibling, -1 if none */
    int n_children;
} ynode;

typedef struct {
    ynode *nodes;
    int n, cap;
    int root; /* -1: the stream held no document */
} ydoc;

/* Where messages about a document point: "NAME:LINE:COL" for a file, or the fixed
 * `set_label` ("--set section.key") for an override value. */
typedef struct {
    const char *name;
    const char *set_label; /* non-NULL for a --set value */
} ysource;

/* Parse one YAML document. Errors (TR_ERR_CONFIG) name src. Free with ydoc_free() in
 * every case. */
TR_MUST_CHECK int ydoc_parse(const char *text, size_t len, const ysource *src, ydoc *doc);
void ydoc_free(ydoc *doc);
/* Read a whole file (at most YAML_MAX_BYTES); *text is malloc'ed. */
TR_MUST_CHECK int yaml_read_file(const char *path, char **text, size_t *len);
/* "NAME:LINE:COL" or the --set label, into buf. */
const char *yloc(const ysource *src, int line, int col, char *buf, size_t cap);

/* ---- schema.c: the key table ---- */
typedef enum {
    KEY_INT,      /* int */
    KEY_UINT64,   /* uint64_t */
    KEY_DOUBLE,   /* double, finite */
    KEY_BOOL,     /* int 0/1; true/false/yes/no/on/off */
    KEY_STRING,   /* char *, owned; `choices` makes it an enum */
    KEY_INT_LIST, /* int array at `offset`, its length (int) at `count_offset` */
    KEY_STRING_LIST, /* char ** at `offset` (owned), its length (int) at `count_offset`; a
                        scalar is a list of one; at most max_count items */
} config_key_type;

typedef struct {
    const char *section, *key;
    config_key_type type;
    size_t offset;       /* of the field in tr_config */
    size_t count_offset; /* KEY_INT_LIST, KEY_STRING_LIST: the length field */
    int max_count;       /* KEY_INT_LIST: capacity of the array; KEY_STRING_LIST: most items */
    int required;
    /* Default as YAML text ("0.02", "1f1b"), "=section.key" to copy another key's value,
     * or NULL for a zero value (required keys have none). */
    const char *def;
    /* Allowed range for numbers (list elements too); *_open excludes the bound. */
    double lo, hi;
    int lo_open, hi_open;
    const char *const *choices; /* NULL-terminated, for enum strings */
    /* Extra check on a string value: returns NULL if fine, else what is allowed. */
    const char *(*check_string)(const char *value);
    int allow_empty; /* strings: "" is a value (an unset path), not an error */
    int negate;      /* KEY_BOOL: the field holds the key's negation (a zeroed config is the
                      * default true: model.layernorm_bias in no_layernorm_bias) */
} config_key_spec;

extern const config_key_spec config_keys[];
extern const int config_n_keys;
/* Section names in order, NULL-terminated. */
extern const char *const config_sections[];

const config_key_spec *config_find_key(const char *section, const char *key);
int config_key_index(const char *dotted); /* "model.hidden_size" -> index, or -1 */
int config_section_index(const char *name);

/* ---- convert.c: node -> field, and message helpers ---- */
/* Convert `node` (of `doc`, from `src`) into the field of `spec` in `cfg`. */
TR_MUST_CHECK int config_set_field(tr_config *cfg, const config_key_spec *spec, const ydoc *doc,
                        const ynode *node, const ysource *src);
/* How a node reads in a message: 'abc' (escaped, shortened), "an empty value", "a list". */
const char *ydescribe(const ynode *node, char *buf, size_t cap);
/* Escaped, shortened, single-quoted text for messages. */
const char *yquote(const char *s, size_t len, char *buf, size_t cap);
/* The allowed range of a numeric key in words (">= 1", "> 0 and < 1"). */
const char *yrange_text(const config_key_spec *spec, char *buf, size_t cap);
/* The closest of `n` candidates to `word` if it is close enough, else NULL. */
const char *config_closest(const char *word, const char *const *candidates, int n);
/* split: "a,b,c" with 1 to 3 non-negative weights, sum > 0 (also '/' as separator). */
const char *config_check_split(const char *value);

/* ---- load.c ---- */
/* The mark of a key (or section) if it was set in the file or by --set, else NULL. */
const tr_config_mark *config_find_mark(const tr_config *c, const char *dotted_key);

/* ---- validate.c: checks that involve several keys ---- */
TR_MUST_CHECK int config_validate(const tr_config *cfg);
/* TR_ERR_CONFIG with "WHERE: message", WHERE the first of k1, k2 that was written in the file
 * or by --set (else k1). */
int config_bad(const tr_config *c, const char *k1, const char *k2, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* " (set at FILE:L:C)" for a key that was written, " (default)" for one that was not. */
const char *config_set_at(const tr_config *c, const char *key, char *buf, size_t cap);
/* validate_moe.c: the mixture-of-experts keys against each other and what is not built */
TR_MUST_CHECK int config_check_moe(const tr_config *cfg);
/* parallel.context_parallel_size against what context parallelism supports (validate_cp.c). */
TR_MUST_CHECK int config_check_cp(const tr_config *cfg);

#endif
