/* eval/regex.h — Python `re` patterns, the subset lm-evaluation-harness's task files use
 * (filters' regex_pattern, exact_match's regexes_to_ignore), matched as Python's re module
 * matches them on str: by a backtracking machine over code points.
 *
 * Contract:
 *  - Syntax: literals; escapes \d \D \w \W \s \S (Unicode classes of Python's str: isdecimal,
 *    isalnum or "_", isspace; ASCII ones under (?a)), \b \B \A \Z, \a \f \n \r \t \v, \xHH
 *    \uHHHH \UHHHHHHHH, octal \0.. and \ooo, and any other escaped non-letter as itself;
 *    . (not "\n" unless (?s)); classes [...] with ranges, ^ negation and the class escapes; ( ),
 *    (?: ), (?P<name> ), (?#comment); alternation |; quantifiers * + ? {m} {m,} {,n} {m,n} and
 *    their lazy forms (a "{" that does not start one is a literal, as in Python); anchors ^ $
 *    (multi-line under (?m)); lookarounds (?= ) (?! ) (?<= ) (?<! ) (atomic, as Python's; a
 *    positive one keeps its captures; a lookbehind's width must be fixed, Python's getwidth);
 *    backreferences \1..\99 and (?P=name) (to a closed group, not one defined in the same
 *    lookbehind); flags (?aimsux) at the start (after comments only) and scoped
 *    (?aimsux-imsx: ); (?x) skips whitespace and #-comments outside classes.
 *  - (?i) is Python's IGNORECASE on str: a text code point matches pattern code point p when
 *    their simple lowercases are equal or re's extra cases pair them (re._casefix: long s,
 *    dotless i, Kelvin sign, micro sign, the Greek symbol forms, ...); a class matches by the
 *    text's lowercase against its members' lowercases and their extra cases; a backreference
 *    compares lowercases; under (?a) ASCII letters alone fold.
 *  - Refused, TR_ERR_INVALID "regex 'PATTERN': why at position K" (the code point index):
 *    conditionals, atomic groups, possessive quantifiers, \N{...}, (?L) and (?t), a
 *    case-insensitive class holding a code point past U+FFFF (Python's own rules differ
 *    there), and Python's own syntax errors (nothing to repeat, multiple repeat, bad escape,
 *    bad range, unbalanced parentheses, unterminated set, a variable-width lookbehind, a bad
 *    group reference, global flags not at the start, bad inline flags). Also a pattern that
 *    grows past 65536 instructions once {m,n} copies are made.
 *  - Matching is Python's: leftmost, then the first alternative and the greedy (or lazy)
 *    choice first; a repetition past its minimum does not start another iteration where the
 *    last one matched the empty string. Iterating (findall, sub) continues at each match's
 *    end; an empty match is not taken where the previous match ended empty (Python >= 3.7).
 *  - Every call has a budget of machine steps over the whole text, TR_REGEX_STEPS (or
 *    tr_regex_set_steps) + 8 n^2 for n code points (a pattern such as .*X is quadratic in
 *    Python too; a backreference costs a step per code point compared): past it,
 *    TR_ERR_INVALID naming the pattern (catastrophic backtracking ends in an error, never a
 *    hang).
 *  - Text is UTF-8; a byte that is not reads as U+FFFD (eval/text.h). Offsets are bytes. */
#ifndef TR_EVAL_REGEX_H
#define TR_EVAL_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#define TR_REGEX_STEPS (1L << 25)

typedef struct tr_regex tr_regex;

/* A span of text in bytes; an unmatched group's is {SIZE_MAX, SIZE_MAX}. */
typedef struct {
    size_t begin, end;
} tr_regex_span;

TR_MUST_CHECK int tr_regex_compile(const char *pattern, size_t len, tr_regex **out);
void tr_regex_free(tr_regex *re);
/* The number of capturing groups. */
int tr_regex_groups(const tr_regex *re);
/* The pattern as given (NUL-terminated). */
const char *tr_regex_pattern(const tr_regex *re);
/* The budget of machine steps of each later findall or sub call (>= 1). */
void tr_regex_set_steps(tr_regex *re, long steps);

/* Every match of re.finditer(pattern, text): *spans (malloc'ed; NULL when none) holds
 * *n_matches rows of groups + 1 spans, the whole match first. */
TR_MUST_CHECK int tr_regex_findall(const tr_regex *re, const char *text, size_t len,
                                   tr_regex_span **spans, size_t *n_matches);
/* re.sub(pattern, repl, text) with repl taken literally: *out malloc'ed, NUL-terminated. */
TR_MUST_CHECK int tr_regex_sub(const tr_regex *re, const char *text, size_t len,
                               const char *repl, char **out);

#endif
