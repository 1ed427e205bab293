/* eval/regex.c's and regex_compile.c's shared parts (internal to eval/): a compiled pattern is
 * a program of a backtracking machine over code points. Slots: 2 (groups + 1) capture
 * positions (-1: unset), then one mark per repetition loop (where its last iteration began). */
#ifndef TR_EVAL_REGEX_INTERNAL_H
#define TR_EVAL_REGEX_INTERNAL_H

#include <stdint.h>

#include "eval/regex.h"
#include "eval/text.h"

/* flags: (?s) (?m) (?a) (?i) (?x) (?u) */
enum { F_DOTALL = 1, F_MULTILINE = 2, F_ASCII = 4, F_IGNORE = 8, F_VERBOSE = 16, F_UNICODE = 32 };
/* class escapes as bits: \d \D \w \W \s \S */
enum { C_D = 1, C_ND = 2, C_W = 4, C_NW = 8, C_S = 16, C_NS = 32 };
/* assertions: ^ $ (and their (?m) forms) \A \Z \b \B */
enum { A_BOL, A_EOL, A_MBOL, A_MEOL, A_START, A_END, A_BOUND, A_NBOUND };
/* lookarounds' kinds: bits */
enum { L_NEG = 1, L_BEHIND = 2 };

typedef struct {
    int first, count;    /* its ranges: ranges[first, first + count) */
    int cats, negate;
    int folded;          /* (?i): ranges hold the lowered code points; the text's is lowered */
} cls;

/* I_LOOK: a lookaround whose body runs from pc + 1 to its I_LOOK_END, then pc = y; I_BACKREF:
 * the text of group c again. */
typedef enum { I_CHAR, I_ANY, I_ANYNL, I_CLASS, I_SPLIT, I_JMP, I_SAVE, I_UNMARK, I_CHECK,
               I_ASSERT, I_LOOK, I_LOOK_END, I_BACKREF, I_MATCH } iop;
typedef struct {
    iop op;
    uint32_t c; /* I_CHAR: code point (lowered under F_IGNORE); I_CLASS: class; I_ASSERT: A_*;
                 * I_LOOK: L_* bits; I_BACKREF: group; I_SAVE etc.: slot */
    int x, y;   /* I_SPLIT: first x, then y; I_JMP, I_CHECK: x; I_LOOK: y */
    int w;      /* I_LOOK with L_BEHIND: the body's width in code points */
    int fl;     /* F_ASCII, F_IGNORE where they apply */
} inst;

/* c lowered as (?i) compares it (Python's IGNORECASE): ASCII letters alone under (?a) */
static inline uint32_t regex_fold(int fl, uint32_t c)
{
    if (fl & F_ASCII)
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
    return tr_text_lower1(c);
}

struct tr_regex {
    char *pattern;
    int groups, n_slots; /* slots: 2 (groups + 1) captures, then the loops' marks */
    inst *prog;
    int n_prog;
    cls *classes;
    int n_classes;
    uint32_t (*ranges)[2];
    int n_ranges;
    long steps;
};

#endif
