/* The backtracking machine of eval/regex.h: its stack holds alternatives (pc, position) and
 * undo records of the slots; findall and sub iterate it over a text. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "eval/regex_internal.h"
#include "eval/text.h"

enum { MAX_STACK = 1 << 22 };

/* The text as code points, and each one's byte offset (n + 1 of them). */
typedef struct {
    const uint32_t *t;
    const size_t *off;
    int n;
} subject;

/* \w's code points (ASCII ones under (?a)) */
static int is_word(int fl, uint32_t c)
{
    if (fl & F_ASCII)
        return c < 128 && (c == '_' || (c >= '0' && c <= '9') ||
                           ((c | 32) >= 'a' && (c | 32) <= 'z'));
    return tr_text_isword(c);
}

static int word_at(int fl, const subject *s, int i)
{
    return i >= 0 && i < s->n && is_word(fl, s->t[i]);
}

static int cats_hold(int fl, int cats, uint32_t c)
{
    int ascii = fl & F_ASCII;
    int d = ascii ? c >= '0' && c <= '9' : tr_text_isdecimal(c);
    int w = is_word(fl, c);
    int sp = ascii ? c == ' ' || (c >= 9 && c <= 13) : tr_text_isspace(c);
    return ((cats & C_D) && d) || ((cats & C_ND) && !d) || ((cats & C_W) && w) ||
           ((cats & C_NW) && !w) || ((cats & C_S) && sp) || ((cats & C_NS) && !sp);
}

/* (a folded class is matched by the lowered code point, as Python's IN_UNI_IGNORE) */
static int class_has(const tr_regex *re, const cls *k, int fl, uint32_t c)
{
    int in = 0;
    uint32_t f = k->folded ? regex_fold(fl, c) : c;
    for (int r = k->first; r < k->first + k->count && !in; r++)
        in = re->ranges[r][0] <= f && f <= re->ranges[r][1];
    if (!in && k->cats)
        in = cats_hold(fl, k->cats, f);
    return in != k->negate;
}

/* Text code point c against pattern code point p (lowered under (?i)). */
static int char_is(int fl, uint32_t p, uint32_t c)
{
    if (!(fl & F_IGNORE))
        return c == p;
    uint32_t f = regex_fold(fl, c), extra[2];
    if (f == p)
        return 1;
    int n = fl & F_ASCII ? 0 : tr_text_case_extra(p, extra);
    return (n > 0 && extra[0] == f) || (n > 1 && extra[1] == f);
}

static int assert_holds(const subject *s, int kind, int fl, int sp)
{
    switch (kind) {
    case A_BOL:
        return sp == 0;
    case A_MBOL:
        return sp == 0 || s->t[sp - 1] == '\n';
    case A_EOL:
        return sp == s->n || (sp == s->n - 1 && s->t[sp] == '\n');
    case A_MEOL:
        return sp == s->n || s->t[sp] == '\n';
    case A_START:
        return sp == 0;
    case A_END:
        return sp == s->n;
    case A_BOUND:
        return s->n > 0 && word_at(fl, s, sp - 1) != word_at(fl, s, sp);
    default: /* A_NBOUND: never in an empty text, as Python's */
        return s->n > 0 && word_at(fl, s, sp - 1) == word_at(fl, s, sp);
    }
}

typedef struct {
    int alt;    /* 1: resume at pc = a with sp = b; 0: slot a was b */
    int a, b;
} frame;

typedef struct {
    frame *st;
    int n, cap;
    int *slots;
    long steps, budget;
} machine;

static int push(machine *m, const tr_regex *re, int alt, int a, int b)
{
    if (m->n == m->cap) {
        if (m->cap >= MAX_STACK)
            return tr_fail(TR_ERR_INVALID, "regex '%.300s': more than %d backtracking points "
                           "on one text", re->pattern, MAX_STACK);
        int cap = m->cap ? 2 * m->cap : 256;
        frame *p = realloc(m->st, (size_t)cap * sizeof *p);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory for a regex match");
        m->st = p;
        m->cap = cap;
    }
    m->st[m->n++] = (frame){alt, a, b};
    return TR_OK;
}

/* Group g's text again at *sp (under (?i): each code point lowered): 1 and *sp past it. */
static int backref(const subject *s, const machine *m, const inst *in, int *sp)
{
    int a = m->slots[2 * in->c], b = m->slots[2 * in->c + 1];
    if (a < 0 || b < a || *sp + (b - a) > s->n)
        return 0;
    for (int k = 0; k < b - a; k++) {
        uint32_t x = s->t[a + k], y = s->t[*sp + k];
        if (x != y && (!(in->fl & F_IGNORE) || regex_fold(in->fl, x) != regex_fold(in->fl, y)))
            return 0;
    }
    *sp += b - a;
    return 1;
}

/* A call of the machine: from pc at sp until I_MATCH (an empty match at `start` refused when
 * must_advance) or, in a lookaround's body, its I_LOOK_END (at end_at when >= 0). Frames below
 * `base` are the caller's. 1 matched, 0 not (frames back to base, slots restored); errors
 * negative (tr_fail's code, negated). */
typedef struct {
    int start, must_advance, base, end_at;
} call;

static int exec(const tr_regex *re, const subject *s, int pc, int sp, call k, machine *m);

/* Lookaround I_LOOK at sp: whether it holds. A body that matches keeps its captures (a positive
 * one) and loses its alternatives (Python's lookarounds are atomic). */
static int look(const tr_regex *re, const subject *s, const inst *in, int pc, int sp, machine *m)
{
    int behind = in->c & L_BEHIND, neg = in->c & L_NEG, at = behind ? sp - in->w : sp;
    int base = m->n, got = 0;
    if (at >= 0 && (got = exec(re, s, pc + 1, at, (call){at, 0, base, behind ? sp : -1}, m)) < 0)
        return got;
    if (got && !neg) { /* keep the undo records of the captures, drop the alternatives */
        int w = base;
        for (int f = base; f < m->n; f++)
            if (!m->st[f].alt)
                m->st[w++] = m->st[f];
        m->n = w;
    } else if (got) { /* a negative one's captures are undone */
        while (m->n > base) {
            frame f = m->st[--m->n];
            if (!f.alt)
                m->slots[f.a] = f.b;
        }
    }
    return got != (neg != 0);
}

static int exec(const tr_regex *re, const subject *s, int pc, int sp, call k, machine *m)
{
    int rc;
    for (;;) {
        if (++m->steps > m->budget) {
            tr_fail(TR_ERR_INVALID, "regex '%.300s': more than %ld steps on a text of %d "
                    "characters (catastrophic backtracking?)", re->pattern, m->budget, s->n);
            return -TR_ERR_INVALID;
        }
        const inst *in = &re->prog[pc];
        int ok = 1;
        switch (in->op) {
        case I_CHAR:
            ok = sp < s->n && char_is(in->fl, in->c, s->t[sp]);
            sp += ok;
            pc++;
            break;
        case I_ANY:
        case I_ANYNL:
            ok = sp < s->n && (in->op == I_ANYNL || s->t[sp] != '\n');
            sp += ok;
            pc++;
            break;
        case I_CLASS:
            ok = sp < s->n && class_has(re, &re->classes[in->c], in->fl, s->t[sp]);
            sp += ok;
            pc++;
            break;
        case I_SPLIT:
            if ((rc = push(m, re, 1, in->y, sp)))
                return -rc;
            pc = in->x;
            break;
        case I_JMP:
            pc = in->x;
            break;
        case I_SAVE:
        case I_UNMARK:
            if ((rc = push(m, re, 0, (int)in->c, m->slots[in->c])))
                return -rc;
            m->slots[in->c] = in->op == I_SAVE ? sp : -1;
            pc++;
            break;
        case I_CHECK: /* no iteration after an empty one */
            pc = m->slots[in->c] == sp ? in->x : pc + 1;
            break;
        case I_ASSERT:
            ok = assert_holds(s, (int)in->c, in->fl, sp);
            pc++;
            break;
        case I_LOOK:
            if ((ok = look(re, s, in, pc, sp, m)) < 0)
                return ok;
            pc = in->y;
            break;
        case I_BACKREF: {
            int from = sp;
            ok = backref(s, m, in, &sp);
            m->steps += sp - from;
            pc++;
            break;
        }
        case I_LOOK_END:
            if (k.end_at < 0 || sp == k.end_at)
                return 1;
            ok = 0;
            break;
        case I_MATCH:
            if (!(k.must_advance && sp == k.start))
                return 1;
            ok = 0;
            break;
        }
        while (!ok) { /* back to the latest alternative, undoing the slots set since */
            if (m->n == k.base)
                return 0;
            frame f = m->st[--m->n];
            if (f.alt) {
                pc = f.a;
                sp = f.b;
                ok = 1;
            } else
                m->slots[f.a] = f.b;
        }
    }
}

/* A match starting at `start`: 1 with the slots set, 0 none; an empty match is refused when
 * must_advance. Errors negative. */
static int run(const tr_regex *re, const subject *s, int start, int must_advance, machine *m)
{
    for (int k = 0; k < re->n_slots; k++)
        m->slots[k] = -1;
    m->n = 0;
    return exec(re, s, 0, start, (call){start, must_advance, 0, -1}, m);
}

/* Calls each(ctx, slots) for every match of re.finditer, in order. */
static int each_match(const tr_regex *re, const char *text, size_t len,
                      int (*each)(void *ctx, const subject *s, const int *slots), void *ctx)
{
    if (len > INT_MAX / 2)
        return tr_fail(TR_ERR_INVALID, "a text of %zu bytes for a regex", len);
    uint32_t *t = malloc((len + 1) * sizeof *t);
    size_t *off = malloc((len + 1) * sizeof *off);
    machine m = {.slots = malloc((size_t)re->n_slots * sizeof(int))};
    int rc = t && off && m.slots ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory for a regex");
    subject s = {t, off, 0};
    for (size_t i = 0; !rc && i < len;) {
        off[s.n] = i;
        t[s.n++] = tr_text_next(text, len, &i);
    }
    if (!rc)
        off[s.n] = len;
    /* (8 n^2 more: a pattern such as .*X is quadratic in Python too) */
    m.budget = re->steps + (long)(8 * (double)s.n * s.n < 1e15 ? 8 * (double)s.n * s.n : 1e15);
    int pos = 0, must_advance = 0;
    while (!rc && pos <= s.n) {
        int found = 0;
        for (int at = pos; at <= s.n && !found; at++) {
            found = run(re, &s, at, must_advance && at == pos, &m);
            if (found < 0)
                rc = -found;
        }
        if (rc || !found)
            break;
        if ((rc = each(ctx, &s, m.slots)))
            break;
        must_advance = m.slots[1] == m.slots[0];
        pos = m.slots[1];
    }
    free(t);
    free(off);
    free(m.st);
    free(m.slots);
    return rc;
}

typedef struct {
    const tr_regex *re;
    tr_regex_span *spans;
    size_t n, cap;
} found_list;

static int add_found(void *ctx, const subject *s, const int *slots)
{
    found_list *f = ctx;
    size_t row = (size_t)f->re->groups + 1;
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        tr_regex_span *p = realloc(f->spans, cap * row * sizeof *p);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory for regex matches");
        f->spans = p;
        f->cap = cap;
    }
    for (size_t g = 0; g < row; g++) {
        int a = slots[2 * g], b = slots[2 * g + 1];
        f->spans[f->n * row + g] = a < 0 || b < 0 ? (tr_regex_span){SIZE_MAX, SIZE_MAX}
                                                 : (tr_regex_span){s->off[a], s->off[b]};
    }
    f->n++;
    return TR_OK;
}

int tr_regex_findall(const tr_regex *re, const char *text, size_t len, tr_regex_span **spans,
                     size_t *n_matches)
{
    found_list f = {.re = re};
    int rc = each_match(re, text, len, add_found, &f);
    if (rc) {
        free(f.spans);
        f.spans = NULL;
        f.n = 0;
    }
    *spans = f.spans;
    *n_matches = f.n;
    return rc;
}

int tr_regex_sub(const tr_regex *re, const char *text, size_t len, const char *repl, char **out)
{
    tr_regex_span *spans;
    size_t n, row = (size_t)re->groups + 1, r_len = strlen(repl);
    *out = NULL;
    int rc = tr_regex_findall(re, text, len, &spans, &n);
    if (rc)
        return rc;
    char *o = malloc(len + n * r_len + 1);
    if (!o) {
        free(spans);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    size_t at = 0, w = 0;
    for (size_t k = 0; k < n; k++) {
        const tr_regex_span *m = &spans[k * row];
        memcpy(o + w, text + at, m->begin - at);
        w += m->begin - at;
        memcpy(o + w, repl, r_len);
        w += r_len;
        at = m->end;
    }
    memcpy(o + w, text + at, len - at);
    w += len - at;
    o[w] = '\0';
    free(spans);
    *out = o;
    return TR_OK;
}
