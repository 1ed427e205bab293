/* eval/ — how well a model predicts text: the log-likelihood of tokens, for the perplexity
 * of text streams and datasets and for lm-evaluation-harness's loglikelihood requests
 * (LAMBADA-style continuations, multiple choice), and its generate_until requests (greedy
 * generation until stop strings, scored by exact_match after its task's filters: filter.c,
 * with Python re patterns of regex.h). `trident eval` is its command line.
 *
 * Contract:
 *  - A token's score is its log-probability under the model, log softmax (computed in double)
 *    of the logits row of the position before it (tr_gpt_decode: the real vocabulary columns;
 *    with tensor parallelism every rank gets the same rows). It is "greedy" when it is the
 *    first maximum of that row (torch's argmax).
 *  - An evaluator reads up to `context` tokens at once (its key/value cache) and scores them
 *    in chunks of TR_EVAL_CHUNK positions, so no (context, V) logits exist at once.
 *  - A stream (one text's ids) is scored in windows, Hugging Face's recipe for the
 *    perplexity of fixed-length models: window k reads ids[begin, end), begin = k * stride,
 *    end = min(begin + context, n), from position 0, and scores ids[j] for
 *    j in [max(begin + 1, end of window k - 1), end); the last window is the first with
 *    end = n. So every token but the first is scored once, with between context - stride and
 *    context - 1 tokens before it (fewer near the stream's start).
 *  - A request (tr_eval_request) is a context and one or more continuations; each
 *    continuation's score is the sum of its tokens' scores after the context, the model
 *    reading (context ids + continuation ids)[-(context + 1):][:-1] (left truncation, as
 *    lm-evaluation-harness does). Continuations after the same context share its keys and
 *    values (decoded once) when they fit whole: a reused prefix gives the logits a fresh
 *    decode gives, up to rounding. */
#ifndef TR_EVAL_H
#define TR_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "eval/regex.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"

#define TR_EVAL_CHUNK 128

typedef struct tr_evaluator tr_evaluator;
/* An evaluator of model g (whole on one pipeline stage) reading up to `context` tokens
 * (<= the model's positions; the sliding window, if any, bounds it too). */
TR_MUST_CHECK int tr_evaluator_create(tr_gpt *g, int context, tr_evaluator **out);
void tr_evaluator_free(tr_evaluator *ev);
int tr_evaluator_context(const tr_evaluator *ev);

/* Scores of ids[first, n) given the tokens before them: logp[j - first] (and greedy[j - first]
 * when greedy is not NULL) for ids[j], the model reading ids[0, n - 1) from position 0.
 * Needs 1 <= first <= n and n - 1 <= context; ids < the model's vocabulary. The keys and
 * values of the longest prefix shared with the previous call's ids (up to first - 1) are
 * reused, not decoded again. */
TR_MUST_CHECK int tr_eval_score(tr_evaluator *ev, const int32_t *ids, int n, int first,
                                double *logp, unsigned char *greedy);
/* Forget the cached keys and values (the next call decodes every position). */
void tr_evaluator_reset(tr_evaluator *ev);

/* Sums of a perplexity measurement. */
typedef struct {
    double nll;              /* sum of -logp over the scored tokens */
    uint64_t tokens, windows, streams;
} tr_eval_sums;
/* One stream of n ids in windows of the evaluator's context, `stride` apart (1 <= stride <=
 * context), added to *sums (windows: those that scored a token). Part `part` of `parts`
 * (data-parallel replicas; 0 of 1: all): only windows k with k % parts == part, and
 * streams += 1 on part 0 alone, so the parts' sums add up to the whole's. */
TR_MUST_CHECK int tr_eval_stream(tr_evaluator *ev, const int32_t *ids, size_t n, int stride,
                                 int part, int parts, tr_eval_sums *sums);

/* Ids of text[0, len) into *ids, which holds *cap and is grown with realloc; *n of them
 * (reset first): encoder e's (`special`: with its tokenizer's template), or without one
 * (e NULL) one id per byte, NUL bytes included. */
TR_MUST_CHECK int tr_eval_encode(tr_encoder *e, int special, const char *text, size_t len,
                                 int32_t **ids, size_t *n, size_t *cap);

/* A loglikelihood request: a continuation line (n_choices 1, label -1) or a multiple-choice
 * line (label in [0, n_choices)); or a generation request (generate 1, n_choices 0): greedy
 * tokens after the context until a stop string, the end-of-document token or max_gen_toks
 * (lm-evaluation-harness's generate_until). */
typedef struct {
    uint64_t line;     /* in its JSON Lines file, 1-based */
    int32_t *ctx;      /* the context's ids (n_ctx >= 1) */
    int n_ctx;
    int n_choices, label;
    int32_t **cont;    /* each continuation's ids (n_cont[i] >= 1) */
    int *n_cont;
    int64_t *chars;    /* each continuation's length in code points as the line gives it
                        * (acc_norm's divisor; >= 1) */
    int generate;      /* 1: a generation request (the fields below) */
    char **until;      /* its stop strings (n_until >= 0, each non-empty), NUL-terminated */
    int n_until;
    int max_gen_toks;  /* at most this many generated tokens (>= 1) */
    char *target;      /* the expected text (exact_match), or NULL */
    char **doc_choices; /* its "choices" (multi_choice_regex's), NUL-terminated */
    int n_doc_choices;
} tr_eval_request;
/* lm-evaluation-harness's filters, a pipeline of steps applied to a generated text in turn:
 *   regex            re.findall(regex_pattern, text); none: `fallback`; else the match
 *                    [group_select] (Python's index: negative from the end; out of range:
 *                    the fallback, where the harness raises IndexError), of a pattern with
 *                    groups its group (several: the first non-empty one, none: the fallback),
 *                    stripped (str.strip())
 *   take_first       the text (one generation a request: the harness's first of one)
 *   take_first_k     (k <= the settings' repeats) the text: the harness's first k of the
 *                    request's `repeats` generations, which are all this one text here
 *                    (trident generates greedily: the harness's repeats of a greedy request
 *                    are equal)
 *   majority_vote    the text (the most common of equal generations)
 *   lowercase, uppercase   str.lower(), str.upper()
 *   remove_whitespace      the text without its first character if that is a space (the
 *                          harness's WhitespaceFilter)
 *   map              mapping_dict.get(text, default_value) (strings; default_value needed)
 *   multi_choice_regex     the harness's MultiChoiceRegexFilter on the request's "choices"
 *                    (its doc's choices, labelled (A), (B), ...): the regex step's match
 *                    (regex_pattern, group_select) if not empty; else the first match of
 *                    the choices themselves (re.escape'd, after regexes_to_ignore,
 *                    ignore_case (str.lower()) and ignore_punctuation (categories P*) on
 *                    both) as its "(X)"; else ":\s*(A|B|...)"'s letter as "(X)"; else the
 *                    fallback (a group_select out of range, or a match whose groups are all
 *                    empty, is no match, where the harness raises) */
enum { TR_FILTER_TAKE_FIRST, TR_FILTER_REGEX, TR_FILTER_LOWERCASE, TR_FILTER_UPPERCASE,
       TR_FILTER_REMOVE_WHITESPACE, TR_FILTER_TAKE_FIRST_K, TR_FILTER_MAJORITY_VOTE,
       TR_FILTER_MAP, TR_FILTER_MULTI_CHOICE };
typedef struct {
    int function;        /* TR_FILTER_* */
    tr_regex *regex;     /* regex, multi_choice_regex: the pattern, group_select, fallback */
    long group_select;
    char *fallback;
    int k;               /* take_first_k */
    char **keys, **values; /* map: mapping_dict's n_map pairs, and default_value */
    int n_map;
    char *default_value;
    int ignore_case, ignore_punctuation; /* multi_choice_regex's options */
    tr_regex **ignore;
    int n_ignore;
} tr_eval_filter_step;
typedef struct {
    char *name;          /* as the task names it ("strict-match"), unique in the task */
    tr_eval_filter_step *steps;
    int n_steps;
} tr_eval_filter;
/* A task file's settings: its filter pipelines (each scored alone) and exact_match's options
 * (the harness's exact_match_hf_evaluate: regexes_to_ignore removed (re.sub(r, "", s)) from
 * both texts in turn, then lower case, then ASCII punctuation (string.punctuation) and ASCII
 * digits removed). */
typedef struct {
    tr_eval_filter *filters;
    int n_filters;
    int ignore_case, ignore_punctuation, ignore_numbers;
    tr_regex **ignore;
    int n_ignore;
    int repeats;         /* the harness's generations per request (>= 1) */
    int needs_choices;   /* a filter has a multi_choice_regex step */
} tr_eval_settings;
/* The settings of a JSON object text[0, len) written as the harness's task YAML:
 *   {"filter_list": [{"name": STR, "filter": [{"function": "regex", "regex_pattern": STR
 *    (default GSM8K's #### (\-?[0-9\.\,]+)), "group_select": INT (default 0),
 *    "fallback": STR (default "[invalid]")}, {"function": "take_first"}, {"function":
 *    "take_first_k", "k": INT}, {"function": "majority_vote"}, {"function": "map",
 *    "mapping_dict": {STR: STR...}, "default_value": STR}, {"function": "multi_choice_regex",
 *    the regex's keys, "ignore_case": BOOL, "ignore_punctuation": BOOL, "regexes_to_ignore":
 *    [STR...]}, ...]}, ...],
 *    "metric_list": [{"metric": "exact_match", "ignore_case": BOOL, "ignore_punctuation": BOOL,
 *    "ignore_numbers": BOOL, "regexes_to_ignore": [STR...], "aggregation": "mean",
 *    "higher_is_better": true}], "repeats": INT (default 1), "generation_kwargs": {...}}
 *    (other keys of the object ignored; generation_kwargs' do_sample must not be true:
 *    trident generates greedily).
 * A bad key, value, function, metric or pattern is TR_ERR_INVALID "WHERE: why" naming it. */
TR_MUST_CHECK int tr_eval_settings_parse(const char *text, size_t len, const char *where,
                                         tr_eval_settings *out);
void tr_eval_settings_free(tr_eval_settings *s);
/* Filter pipeline f applied to text, generated for request r (its doc_choices, for
 * multi_choice_regex; r NULL: none): *out malloc'ed, NUL-terminated. Errors: a regex past its
 * step budget, multi_choice_regex without r's choices. */
TR_MUST_CHECK int tr_eval_filter_apply(const tr_eval_filter *f, const tr_eval_request *r,
                                       const char *text, char **out);
/* *equal: whether text equals target once both get exact_match's options of s (NULL: none)
 * and lose leading and trailing whitespace (Python's str.strip()). */
TR_MUST_CHECK int tr_eval_exact_match(const tr_eval_settings *s, const char *text,
                                      const char *target, int *equal);

typedef struct {
    tr_eval_request *r;
    size_t n;
    tr_eval_settings settings; /* the file's first line when it holds filter_list or
                                * metric_list */
} tr_eval_tasks;
/* The requests of a JSON Lines file (blank lines skipped; the first `limit`, 0 = all):
 *   {"context": STR, "continuation": STR}  or  {"context": STR, "choices": [STR...],
 *   "label": INT}  or  {"context": STR, "until": [STR...], "max_gen_toks": INT (default 256,
 *   or half the context where that is less), "target": STR (optional), "choices": [STR...]
 *   (0 to 26: multi_choice_regex's; only and always where the settings have that filter)}
 *   (other keys ignored); the first line may instead be the task's settings
 *   (tr_eval_settings_parse: an object with "filter_list" or "metric_list" and no
 *   "context"), into out->settings.
 * A generation request's context is encoded as it is (no whitespace moved) and keeps its last
 * context - max_gen_toks ids (the harness's left truncation); max_gen_toks must be below the
 * context, the stop strings non-empty.
 * Ids as lm-evaluation-harness's _encode_pair makes them: the context's trailing whitespace
 * (Python's str.isspace) moves to the front of the continuation, then ctx = encode(context),
 * cont = encode(context + continuation)[len(ctx):]; with the tokenizer's template (special
 * tokens) when `special`, else without; t NULL: one id per byte. Every id must be < vocab.
 * A bad line is TR_ERR_INVALID "PATH:LINE: why" (not a JSON object, a missing or mistyped
 * key, an empty context, both or neither of continuation and choices, a label out of range,
 * an empty continuation or one of no tokens or of more than `context`); no request at all
 * is too. */
TR_MUST_CHECK int tr_eval_tasks_load(const char *path, const tr_tokenizer *t, int special,
                                     int vocab, int context, size_t limit, tr_eval_tasks *out);
void tr_eval_tasks_free(tr_eval_tasks *tasks);

/* The scores of request r's continuations: ll[i] their log-likelihoods and greedy[i] 1 when
 * every token of continuation i is greedy. */
TR_MUST_CHECK int tr_eval_request_score(tr_evaluator *ev, const tr_eval_request *r, double *ll,
                                        unsigned char *greedy);
/* The first maximum of the logits after ids[0, n) (1 <= n <= context): the greedy next
 * token. The keys and values of the prefix shared with the previous call are reused. */
TR_MUST_CHECK int tr_eval_greedy_next(tr_evaluator *ev, const int32_t *ids, int n,
                                      int32_t *next);
/* Generation request r (r->generate), greedy: tokens are appended after the context until the
 * decoded text holds one of r->until, or the token is `eod` (>= 0; not kept), or
 * r->max_gen_toks tokens, or the context is full. *text (malloc'ed, NUL-terminated) is the
 * generated ids' text (t's decoding; t NULL: their bytes) cut before the first occurrence of
 * each stop string in turn (the harness's s.split(term)[0] for term in until); an id without
 * a token in t adds nothing (Hugging Face's decode skips it), invalid UTF-8 becomes U+FFFD,
 * and a NUL character ends the text; *n_tokens the ids generated. */
TR_MUST_CHECK int tr_eval_generate(tr_evaluator *ev, const tr_tokenizer *t, int32_t eod,
                                   const tr_eval_request *r, char **text, int *n_tokens);

/* The first index of the largest of ll[i] (norm: ll[i] / chars[i]). */
int tr_eval_argmax(const double *ll, const int64_t *chars, int n, int norm);

#endif
