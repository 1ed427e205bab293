/* eval/filter.c's and filter_choice.c's shared parts (internal to eval/): the harness's
 * filter steps that need more than the text (map's dictionary, multi_choice_regex's choices). */
#ifndef TR_EVAL_FILTER_INTERNAL_H
#define TR_EVAL_FILTER_INTERNAL_H

#include <jansson.h>

#include "eval/eval.h"

/* TR_ERR_INVALID "WHERE: why". */
int filter_bad(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *filter_dup(const char *s, size_t n);
/* Pattern string v compiled into *out; an error says "WHERE: WHAT". */
int filter_compile(const char *where, const char *what, const json_t *v, tr_regex **out);
/* The regex step's choice in text: *found 1 with [*a, *b) the bytes of the match
 * [group_select] (its group; several: the first non-empty one) stripped, empty for a group
 * that did not take part; 0 for none (no match, an index out of range, only empty groups). */
int filter_pick(const tr_regex *re, long group_select, const char *text, int *found, size_t *a,
                size_t *b);
/* Step arguments: map's (mapping_dict, default_value) and multi_choice_regex's own
 * (ignore_case, ignore_punctuation, regexes_to_ignore) from step object o. */
int filter_map_parse(const char *where, const char *name, json_t *o, tr_eval_filter_step *st);
int filter_choice_parse(const char *where, const char *name, json_t *o,
                        tr_eval_filter_step *st);
int filter_map_apply(const tr_eval_filter_step *st, const char *text, char **out);
int filter_choice_apply(const tr_eval_filter_step *st, const tr_eval_request *r,
                        const char *text, char **out);
void filter_step_free(tr_eval_filter_step *st);

#endif
