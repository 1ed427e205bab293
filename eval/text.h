/* eval/text.c — Python's str operations on UTF-8 text, as lm-evaluation-harness's filters and
 * metrics apply them (internal to eval/). Text is bytes s[0, n); a byte that does not start a
 * well-formed UTF-8 sequence reads as the code point U+FFFD, one byte long, and the functions
 * that return text keep such bytes as they are. */
#ifndef TR_EVAL_TEXT_H
#define TR_EVAL_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* The code point at s[*i] (*i < n); *i moves past it. */
uint32_t tr_text_next(const char *s, size_t n, size_t *i);
/* Code point c's class: str.isspace() (re's \s), str.isalnum() or "_" (re's \w),
 * str.isdecimal() (re's \d). */
int tr_text_isspace(uint32_t c);
int tr_text_isword(uint32_t c);
int tr_text_isdecimal(uint32_t c);
/* Unicode category P* (the harness's punctuation table for multi_choice_regex). */
int tr_text_ispunct(uint32_t c);
/* The re module's IGNORECASE on str: c's simple lowercase (its one-code-point mapping), and the
 * code points it also takes for a lowered c (re._casefix's, up to 2 in out): the count. */
uint32_t tr_text_lower1(uint32_t c);
int tr_text_case_extra(uint32_t lowered, uint32_t out[2]);
/* s[0, n) as s.strip() (left 1, right 1), s.lstrip() (1, 0) or s.rstrip() (0, 1) leaves it:
 * [*begin, *end). */
void tr_text_strip(const char *s, size_t n, int left, int right, size_t *begin, size_t *end);
/* s.lower() (upper 0) or s.upper() (upper 1) of s[0, n), NUL-terminated, malloc'ed in *out,
 * *out_len bytes. Python's final-sigma rule is taken as: U+03A3 lowers to U+03C2 after a
 * code point with a case mapping and not before one. */
int tr_text_case(const char *s, size_t n, int upper, char **out, size_t *out_len);

#endif
