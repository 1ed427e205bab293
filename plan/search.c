/* Layout search: every (TP, CP, PP, DP, EP, micro-batch, recompute, ZeRO-1) of a world size, memory
 * first (cheap), step time for those that fit, ranked by tokens/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"

typedef struct {
    tr_plan_search_result *out;
    int cap_fit, cap_rej;
    tr_plan_ws ws; /* op lists and simulation scratch shared by every layout */
} search_state;

static int add_rejected(search_state *S, const tr_plan_layout *L, const char *reason)
{
    tr_plan_search_result *o = S->out;
    if (o->n_rejected == S->cap_rej) {
        int cap = S->cap_rej ? 2 * S->cap_rej : 256;
        tr_plan_rejected *n = realloc(o->rejected, sizeof *n * (size_t)cap);
        if (!n)
            return tr_fail(TR_ERR_NOMEM, "layout search: out of memory");
        o->rejected = n;
        S->cap_rej = cap;
    }
    tr_plan_rejected *r = &o->rejected[o->n_rejected++];
    r->layout = *L;
    snprintf(r->reason, sizeof r->reason, "%s", reason);
    return TR_OK;
}

static int add_fit(search_state *S, const tr_plan_result *res)
{
    tr_plan_search_result *o = S->out;
    if (o->n_fit == S->cap_fit) {
        int cap = S->cap_fit ? 2 * S->cap_fit : 64;
        tr_plan_result *n = realloc(o->fit, sizeof *n * (size_t)cap);
        if (!n)
            return tr_fail(TR_ERR_NOMEM, "layout search: out of memory");
        o->fit = n;
        S->cap_fit = cap;
    }
    o->fit[o->n_fit++] = *res;
    return TR_OK;
}

static int by_speed(const void *a, const void *b)
{
    const tr_plan_result *x = a, *y = b;
    if (x->tokens_per_s != y->tokens_per_s)
        return x->tokens_per_s > y->tokens_per_s ? -1 : 1;
    if (x->memory.total != y->memory.total)
        return x->memory.total < y->memory.total ? -1 : 1;
    return 0;
}

static int cp_of(const tr_plan_layout *L) { return L->cp > 1 ? L->cp : 1; }

static int same_layout(const tr_plan_layout *a, const tr_plan_layout *b)
{
    int da = a->dp * cp_of(a), db = b->dp * cp_of(b);
    return a->tp == b->tp && cp_of(a) == cp_of(b) && a->pp == b->pp && a->dp == b->dp &&
           plan_ep(a) == plan_ep(b) &&
           a->micro_batch == b->micro_batch && a->recompute == b->recompute &&
           (a->distributed_optimizer && da > 1) == (b->distributed_optimizer && db > 1);
}

/* One (TP, PP, mb): every recompute mode and ZeRO-1 setting. */
static int try_micro_batch(search_state *S, const tr_config *cfg, const tr_plan_cluster *c,
                           tr_plan_layout L, tr_plan_result *res)
{
    for (int rc_mode = 0; rc_mode < 3; rc_mode++) {
        for (int zero = 0; zero < 2; zero++) {
            if (zero && L.dp * cp_of(&L) == 1)
                continue;
            L.recompute = (tr_plan_recompute)rc_mode;
            L.distributed_optimizer = zero;
            L.zero_stage = zero; /* the search tries ZeRO-1 or nothing (stages 2-3: not searched) */
            S->out->n_candidates++;
            int rc = plan_evaluate(cfg, &L, S->out->world, c, 0, 0, &S->ws, res, NULL);
            if (rc == TR_ERR_CONFIG) {
                rc = add_rejected(S, &L, tr_errmsg());
                tr_clear_error();
                if (rc)
                    return rc;
                continue;
            }
            if (rc)
                return rc;
            if (!res->fits) {
                rc = add_rejected(S, &L, res->problem);
                if (rc)
                    return rc;
                continue;
            }
            rc = plan_evaluate(cfg, &L, S->out->world, c, 1, 0, &S->ws, res, NULL);
            if (!rc)
                rc = add_fit(S, res);
            if (rc)
                return rc;
        }
    }
    return TR_OK;
}

int tr_plan_search(const tr_config *cfg, int world, const tr_plan_cluster *c,
                   tr_plan_search_result *out)
{
    memset(out, 0, sizeof *out);
    double t0 = tr_now();
    int rc = tr_plan_world(c, world, &world);
    if (rc)
        return rc;
    out->world = world;
    const tr_model_config *m = &cfg->model;
    tr_plan_layout base;
    /* The config's own layout may not divide this world: start from TP = PP = 1. */
    tr_config tmp = *cfg;
    tmp.parallel.tensor_model_parallel_size = 1;
    tmp.parallel.pipeline_model_parallel_size = 1;
    tmp.parallel.context_parallel_size = 1;
    rc = tr_plan_layout_from_config(&tmp, world, &base);
    if (rc)
        return rc;
    search_state S = {.out = out};
    tr_plan_result *res = tr_alloc(sizeof *res, "plan result");
    if (!res)
        return TR_ERR_NOMEM;
    char why[640];
    int GB = base.global_batch;
    for (int tp = 1; tp <= world && !rc; tp++) {
        if (world % tp)
            continue;
        tr_plan_layout L = base;
        L.tp = tp;
        L.pp = 0;
        L.dp = 0;
        L.micro_batch = 0;
        if (m->num_attention_heads % tp || m->hidden_size % tp) {
            snprintf(why, sizeof why,
                     "TP %d does not divide num_attention_heads %d and hidden_size %d", tp,
                     m->num_attention_heads, m->hidden_size);
            rc = add_rejected(&S, &L, why);
            continue;
        }
        int groups = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
        if (groups % tp || tr_model_ffn_hidden(m) % tp) { /* GQA: whole key/value heads */
            snprintf(why, sizeof why, "TP %d does not divide num_query_groups %d and the MLP "
                     "width %d", tp, groups, tr_model_ffn_hidden(m));
            rc = add_rejected(&S, &L, why);
            continue;
        }
        /* context parallelism: powers of two dividing the world left by TP whose 2 x CP
         * chunks divide the sequence, ranked by speed as every other axis, for long sequences
         * (or when the config asks for CP): below, CP trades micro-batch rows for the same
         * tokens a rank and only clutters the ranking */
        int cp_max = cfg->parallel.context_parallel_size > 1 ||
                             m->seq_length >= TR_PLAN_CP_SEARCH_MIN_SEQ ? world / tp : 1;
        for (int cp = 1; cp <= cp_max && !rc; cp *= 2) {
            if ((world / tp) % cp)
                break;
            if (m->seq_length % (2 * cp) && cp > 1)
                break;
            L.cp = cp;
            L.pp = 0;
            if (plan_cp_supported(cfg, c, &L)) { /* once for every layout of this CP */
                rc = add_rejected(&S, &L, tr_errmsg());
                tr_clear_error();
                break;
            }
            for (int pp = 1; pp <= world / (tp * cp) && !rc; pp++) {
                if ((world / (tp * cp)) % pp)
                    continue;
                L.pp = pp;
                L.dp = world / (tp * cp * pp);
                L.micro_batch = 0;
                if (pp * L.v > m->num_layers) {
                    snprintf(why, sizeof why, "PP %d x %d chunks is more than num_layers %d", pp,
                             L.v, m->num_layers);
                    rc = add_rejected(&S, &L, why);
                    continue;
                }
                if (GB % L.dp) {
                    snprintf(why, sizeof why,
                             "global batch %d is not a multiple of DP %d for any micro-batch", GB,
                             L.dp);
                    rc = add_rejected(&S, &L, why);
                    continue;
                }
                /* Micro-batches: powers of two, and the config's own. */
                int mbs[40], n_mb = 0, cfg_mb = cfg->training.micro_batch_size;
                for (int b = 1; (long)b * L.dp <= GB && n_mb < 32; b *= 2)
                    mbs[n_mb++] = b;
                if ((cfg_mb & (cfg_mb - 1)) && (long)cfg_mb * L.dp <= GB)
                    mbs[n_mb++] = cfg_mb;
                /* expert parallelism: every EP dividing DP and the experts, or the config's */
                int eps[32], n_ep = plan_ep_choices(cfg, c, &L, eps);
                for (int i = 0; i < n_mb && !rc; i++) {
                    if (GB % (mbs[i] * L.dp))
                        continue;
                    L.micro_batch = mbs[i];
                    L.num_micro_batches = GB / (mbs[i] * L.dp);
                    L.batch_ok = 1;
                    for (int k = 0; k < n_ep && !rc; k++) {
                        L.ep = eps[k];
                        rc = try_micro_batch(&S, cfg, c, L, res);
                    }
                }
            }
        }
    }
    tr_free(res);
    plan_ws_free(&S.ws);
    if (rc) {
        tr_plan_search_free(out);
        return rc;
    }
    qsort(out->fit, (size_t)out->n_fit, sizeof *out->fit, by_speed);
    /* The config's own layout, evaluated whatever it is. */
    tr_plan_layout own;
    if (!tr_plan_layout_from_config(cfg, world, &own)) {
        if (tr_plan_evaluate(cfg, &own, world, c, 1, 0, &out->config_result)) {
            /* why it is not among them (heads over TP, a bucket size dp/ refuses, ...) */
            snprintf(out->config_result.problem, sizeof out->config_result.problem, "%s",
                     tr_errmsg());
            tr_clear_error();
        }
        for (int i = 0; i < out->n_fit; i++)
            if (same_layout(&out->fit[i].layout, &own)) {
                out->config_rank = i + 1;
                break;
            }
    } else {
        tr_clear_error();
    }
    out->seconds = tr_now() - t0;
    return TR_OK;
}

void tr_plan_search_free(tr_plan_search_result *r)
{
    if (!r)
        return;
    free(r->fit);
    free(r->rejected);
    r->fit = NULL;
    r->rejected = NULL;
    r->n_fit = r->n_rejected = 0;
}
