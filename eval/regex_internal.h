/* eval/regex.c's and regex_compile.c's shared parts (internal to eval/): a compiled pattern is
 * a program of a backtracking machine over code points. Slots: 2 (groups + 1) capture
 * positions (-1: unset), then one mark per repetition loop (where its last iteration began). */
#ifndef TR_EVAL_REGEX_INTERNAL_H
#define TR_EVAL_REGEX_INTERNAL_H

#include <stdint.h>

#include "eval/regex.h"

enum { F_DOTALL = 1, F_MULTILINE = 2, F_ASCII = 4 };
/* class escapes as bits: \d \D \w \W \s \S */
enum { C_D = 1, C_ND = 2, C_W = 4, C_NW = 8, C_S = 16, C_NS = 32 };
/* assertions: ^ $ \A \Z \b \B */
enum { A_BOL, A_EOL, A_START, A_END, A_BOUND, A_NBOUND };

typedef struct {
    int first, count;    /* its ranges: ranges[first, first + count) */
    int cats, negate;
} cls;

typedef enum { I_CHAR, I_ANY, I_ANYNL, I_CLASS, I_SPLIT, I_JMP, I_SAVE, I_UNMARK, I_CHECK,
               I_ASSERT, I_MATCH } iop;
typedef struct {
    iop op;
    uint32_t c; /* I_CHAR: code point; I_CLASS: class; I_ASSERT: A_*; I_SAVE etc.: slot */
    int x, y;   /* I_SPLIT: first x, then y; I_JMP, I_CHECK: x */
} inst;

struct tr_regex {
    char *pattern;
    int groups, flags, n_slots; /* slots: 2 (groups + 1) captures, then the loops' marks */
    inst *prog;
    int n_prog;
    cls *classes;
    int n_classes;
    uint32_t (*ranges)[2];
    int n_ranges;
    long steps;
};

#endif
