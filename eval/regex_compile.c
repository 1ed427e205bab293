/* Python re patterns into programs (eval/regex_internal.h): eval/regex_parse.c's tree, then
 * a compiler that unrolls each repetition to its minimum, then a loop or a chain of optional
 * copies, each iteration past the minimum guarded by its loop's mark (no iteration after an
 * empty one, as Python's). */
#include <stdlib.h>
#include <string.h>

#include "eval/regex_tree.h"
#include "eval/text.h"

enum { MAX_INST = 1 << 16 };

static int emit(parser *ps, iop op, uint32_t c, int x, int y)
{
    tr_regex *re = ps->re;
    if (re->n_prog >= MAX_INST)
        return tr_fail(TR_ERR_INVALID, "regex '%.300s': more than %d instructions once its "
                       "repetitions are unrolled (smaller {m,n} counts)", re->pattern, MAX_INST);
    int rc = regex_grow((void **)&re->prog, &ps->cap_prog, re->n_prog + 1, sizeof *re->prog);
    if (!rc)
        re->prog[re->n_prog++] = (inst){.op = op, .c = c, .x = x, .y = y};
    return rc;
}

static int gen(parser *ps, int k);

/* One optional iteration of repeat node r with loop slot `slot`: its exits are patched to the
 * end later (listed in exits). */
static int gen_iteration(parser *ps, const node *r, int slot, int *exits, int *n_exits)
{
    tr_regex *re = ps->re;
    int rc;
    exits[(*n_exits)++] = re->n_prog;
    if ((rc = emit(ps, I_CHECK, (uint32_t)slot, -1, 0)))
        return rc;
    int split = re->n_prog;
    exits[(*n_exits)++] = split;
    if ((rc = emit(ps, I_SPLIT, 0, -1, -1)) || (rc = emit(ps, I_SAVE, (uint32_t)slot, 0, 0)))
        return rc;
    /* prefer the iteration (greedy) or the exit (lazy): the exit's target is patched */
    re->prog[split].x = r->lazy ? -1 : split + 1;
    re->prog[split].y = r->lazy ? split + 1 : -1;
    return gen(ps, r->child);
}

static int gen_repeat(parser *ps, const node *r)
{
    tr_regex *re = ps->re;
    int rc = TR_OK;
    for (int k = 0; k < r->min && !rc; k++)
        rc = gen(ps, r->child);
    if (rc || r->max == r->min)
        return rc;
    int slot = re->n_slots++, optional = r->max == INF ? 1 : r->max - r->min;
    int *exits = malloc(2 * (size_t)optional * sizeof *exits), n_exits = 0;
    if (!exits)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a regex");
    rc = emit(ps, I_UNMARK, (uint32_t)slot, 0, 0);
    int top = re->n_prog;
    for (int k = 0; k < optional && !rc; k++)
        rc = gen_iteration(ps, r, slot, exits, &n_exits);
    if (!rc && r->max == INF)
        rc = emit(ps, I_JMP, 0, top, 0);
    for (int k = 0; !rc && k < n_exits; k++) {
        inst *in = &re->prog[exits[k]];
        if (in->op == I_CHECK)
            in->x = re->n_prog;
        else if (in->x < 0)
            in->x = re->n_prog;
        else
            in->y = re->n_prog;
    }
    free(exits);
    return rc;
}

static int gen_alt(parser *ps, const node *nd)
{
    tr_regex *re = ps->re;
    int rc = TR_OK, jumps = -1; /* a chain of the JMPs to the end, through their x */
    for (int c = nd->child; c >= 0 && !rc; c = ps->nodes[c].next) {
        int last = ps->nodes[c].next < 0, split = re->n_prog;
        if (!last && (rc = emit(ps, I_SPLIT, 0, split + 1, -1)))
            break;
        if ((rc = gen(ps, c)))
            break;
        if (!last) {
            if ((rc = emit(ps, I_JMP, 0, jumps, 0)))
                break;
            jumps = re->n_prog - 1;
            re->prog[split].y = re->n_prog;
        }
    }
    while (!rc && jumps >= 0) {
        int next = re->prog[jumps].x;
        re->prog[jumps].x = re->n_prog;
        jumps = next;
    }
    return rc;
}

/* The last instruction emitted gets flags fl. */
static int with_flags(parser *ps, int rc, int fl)
{
    if (!rc)
        ps->re->prog[ps->re->n_prog - 1].fl = fl;
    return rc;
}

static int gen(parser *ps, int k)
{
    tr_regex *re = ps->re;
    const node *nd = &ps->nodes[k];
    int rc = TR_OK, fl = nd->flags & (F_ASCII | F_IGNORE);
    switch (nd->kind) {
    case N_EMPTY:
        return TR_OK;
    case N_CHAR: {
        uint32_t c = nd->c;
        if (fl & F_IGNORE)
            c = regex_fold(fl, c);
        return with_flags(ps, emit(ps, I_CHAR, c, 0, 0), fl);
    }
    case N_ANY:
        return emit(ps, nd->flags & F_DOTALL ? I_ANYNL : I_ANY, 0, 0, 0);
    case N_CLASS:
        return with_flags(ps, emit(ps, I_CLASS, nd->c, 0, 0), fl);
    case N_ASSERT: {
        uint32_t a = nd->c;
        if (nd->flags & F_MULTILINE)
            a = a == A_BOL ? A_MBOL : a == A_EOL ? A_MEOL : a;
        return with_flags(ps, emit(ps, I_ASSERT, a, 0, 0), fl);
    }
    case N_BACKREF:
        return with_flags(ps, emit(ps, I_BACKREF, nd->c, 0, 0), fl);
    case N_LOOK: {
        int look = re->n_prog;
        if ((rc = emit(ps, I_LOOK, nd->c, 0, 0)) || (rc = gen(ps, nd->child)) ||
            (rc = emit(ps, I_LOOK_END, 0, 0, 0)))
            return rc;
        re->prog[look].y = re->n_prog;
        re->prog[look].w = nd->width;
        return TR_OK;
    }
    case N_CAT:
        for (int c = nd->child; c >= 0 && !rc; c = ps->nodes[c].next)
            rc = gen(ps, c);
        return rc;
    case N_GROUP:
        if (nd->group && (rc = emit(ps, I_SAVE, (uint32_t)(2 * nd->group), 0, 0)))
            return rc;
        if ((rc = gen(ps, nd->child)) || !nd->group)
            return rc;
        return emit(ps, I_SAVE, (uint32_t)(2 * nd->group + 1), 0, 0);
    case N_REPEAT:
        return gen_repeat(ps, nd);
    case N_ALT:
        return gen_alt(ps, nd);
    }
    return rc;
}

int tr_regex_compile(const char *pattern, size_t len, tr_regex **out)
{
    *out = NULL;
    tr_regex *re = calloc(1, sizeof *re);
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    parser ps = {.p = cps, .re = re};
    if (re)
        re->pattern = malloc(len + 1);
    int rc = re && cps && re->pattern ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory for a regex");
    int root = -1;
    if (!rc) {
        memcpy(re->pattern, pattern, len);
        re->pattern[len] = '\0';
        re->steps = TR_REGEX_STEPS;
        for (size_t i = 0; i < len;)
            cps[ps.n++] = tr_text_next(pattern, len, &i);
        rc = regex_parse(&ps, &root);
    }
    if (!rc) {
        re->n_slots = 2 * (re->groups + 1);
        if (!(rc = emit(&ps, I_SAVE, 0, 0, 0)) && !(rc = gen(&ps, root)) &&
            !(rc = emit(&ps, I_SAVE, 1, 0, 0)))
            rc = emit(&ps, I_MATCH, 0, 0, 0);
    }
    free(cps);
    free(ps.nodes);
    free(ps.names);
    free(ps.group_node);
    if (rc) {
        tr_regex_free(re);
        return rc;
    }
    *out = re;
    return TR_OK;
}

void tr_regex_free(tr_regex *re)
{
    if (!re)
        return;
    free(re->pattern);
    free(re->prog);
    free(re->classes);
    free(re->ranges);
    free(re);
}

int tr_regex_groups(const tr_regex *re) { return re->groups; }

const char *tr_regex_pattern(const tr_regex *re) { return re->pattern; }

void tr_regex_set_steps(tr_regex *re, long steps) { re->steps = steps > 0 ? steps : 1; }
