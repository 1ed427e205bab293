/* One rank's world: the rank grid from the config and one communicator per group; first of
 * all, every rank's resolved config and trident build checked against rank 0's. */
#include "train/world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/version.h"

#define DIFF_MSG 2048 /* the first differing rank's list of differences, as broadcast */

static int split_group(train_world *w, tr_group_kind kind, const char *name, tr_comm **out)
{
    int index = w->groups.index[kind];
    int color = index < 0 ? TR_COMM_COLOR_NONE : index;
    int rc = tr_comm_split(w->world, color, w->groups.pos[kind] < 0 ? 0 : w->groups.pos[kind],
                           name, out);
    if (rc)
        return tr_fail_context(rc, "creating the %s groups", name);
    return TR_OK;
}

/* The resolved config as "section.key: value" lines (tr_config_write's YAML without its
 * comments: the source file's name and the "# default" marks say how a value was set, not
 * what it is), after a "build: TR_VERSION" line. Malloc'ed; NULL on failure. */
static char *config_lines(const tr_config *cfg, size_t *len)
{
    char *yaml = NULL, *out = NULL, section[64] = "";
    size_t ylen = 0, olen = 0;
    FILE *f = open_memstream(&yaml, &ylen);
    if (!f)
        return NULL;
    int rc = tr_config_write(cfg, f);
    if (fclose(f) || rc) {
        free(yaml);
        return NULL;
    }
    FILE *o = open_memstream(&out, &olen);
    if (!o) {
        free(yaml);
        return NULL;
    }
    fprintf(o, "build: \"%s\"\n", TR_VERSION);
    for (char *line = yaml, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        size_t n = next ? (size_t)(next - line) : strlen(line);
        next = next ? next + 1 : NULL;
        if (!n || line[0] == '#')
            continue;
        if (line[0] != ' ') { /* "section:" */
            snprintf(section, sizeof section, "%.*s", (int)(n && line[n - 1] == ':' ? n - 1 : n),
                     line);
            continue;
        }
        static const char mark[] = "  # default";
        size_t m = sizeof mark - 1;
        if (n > m && !memcmp(line + n - m, mark, m)) /* a value never ends so: strings end in '"' */
            n -= m;
        while (n && line[0] == ' ')
            line++, n--;
        fprintf(o, "%s.%.*s\n", section, (int)n, line);
    }
    free(yaml);
    if (fclose(o)) {
        free(out);
        return NULL;
    }
    *len = olen;
    return out;
}

/* The value of "key: value" line `key` in lines, or NULL; *n its length. */
static const char *line_value(const char *lines, const char *key, size_t klen, size_t *n)
{
    for (const char *l = lines; l && *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        if (len > klen + 1 && !memcmp(l, key, klen) && l[klen] == ':' && l[klen + 1] == ' ') {
            *n = len - klen - 2;
            return l + klen + 2;
        }
        l = end ? end + 1 : NULL;
    }
    return NULL;
}

/* "key: mine (rank 0: theirs); ..." for every key whose line differs, into msg. */
static void diff_lines(const char *mine, const char *rank0, char *msg, size_t cap)
{
    size_t used = 0;
    int n = 0;
    msg[0] = 0;
    for (int pass = 0; pass < 2; pass++) { /* keys of this rank, then keys only rank 0 has */
        const char *a = pass ? rank0 : mine, *b = pass ? mine : rank0;
        for (const char *l = a; *l;) {
            const char *end = strchr(l, '\n'), *line = l;
            size_t len = end ? (size_t)(end - l) : strlen(l);
            l += len + (end != NULL);
            const char *colon = memmem(line, len, ": ", 2);
            if (!colon)
                continue;
            size_t klen = (size_t)(colon - line), vlen = len - klen - 2, olen = 0;
            const char *val = colon + 2, *other = line_value(b, line, klen, &olen);
            if (pass ? other != NULL : (other && olen == vlen && !memcmp(other, val, vlen)))
                continue;
            const char *sep = n++ ? "; " : "";
            int w = pass ? snprintf(msg + used, cap - used, "%s%.*s: none here (rank 0: %.*s)",
                                    sep, (int)klen, line, (int)vlen, val)
                  : other ? snprintf(msg + used, cap - used, "%s%.*s: %.*s (rank 0: %.*s)", sep,
                                     (int)klen, line, (int)vlen, val, (int)olen, other)
                          : snprintf(msg + used, cap - used, "%s%.*s: %.*s (rank 0: none)", sep,
                                     (int)klen, line, (int)vlen, val);
            if (w < 0 || (size_t)w >= cap - used) {
                if (cap >= 4)
                    memcpy(msg + cap - 4, "...", 4);
                return;
            }
            used += (size_t)w;
        }
    }
}

/* Every rank's resolved config and build against rank 0's: rank 0's hash broadcast, each rank
 * compares; on any difference rank 0's lines are broadcast, each differing rank names its
 * differences, and the first one's list reaches every rank. Collective over the world;
 * TR_ERR_CONFIG on every rank when any differs (they must not train together). */
static int check_same_config(const tr_config *cfg, tr_comm *world)
{
    int rank = tr_comm_rank(world), size = tr_comm_size(world);
    if (size == 1)
        return TR_OK;
    size_t len = 0;
    char *lines = config_lines(cfg, &len), *lines0 = NULL;
    if (!lines)
        return tr_fail(TR_ERR_NOMEM, "rank %d: cannot write the resolved config", rank);
    int64_t head[2] = {(int64_t)tr_hash_name(lines), (int64_t)len}, mine = head[0];
    int64_t differs = 0, any = 0, first = size, count = 0;
    _Alignas(8) char msg[DIFF_MSG] = "";
    int rc = tr_comm_broadcast(world, head, 2, TR_COMM_I64, 0);
    if (!rc) {
        differs = head[0] != mine;
        rc = tr_comm_allreduce(world, &differs, &any, 1, TR_COMM_I64, TR_COMM_MAX);
    }
    if (!rc && any) {
        size_t words = ((size_t)head[1] + 8) / 8; /* with room for the NUL */
        lines0 = calloc(words, 8);
        if (!lines0) {
            free(lines);
            return tr_fail(TR_ERR_NOMEM, "rank %d: out of memory comparing configs", rank);
        }
        if (rank == 0)
            memcpy(lines0, lines, len);
        rc = tr_comm_broadcast(world, lines0, words, TR_COMM_I64, 0);
        if (!rc && differs) {
            int w = snprintf(msg, sizeof msg, "rank %d's config differs from rank 0's: ", rank);
            diff_lines(lines, lines0, msg + w, sizeof msg - (size_t)w);
            if (!msg[w]) /* only lines without a "key: value" differ */
                snprintf(msg + w, sizeof msg - (size_t)w, "a line of its resolved config "
                                                          "(compare the runs' config.yaml)");
        }
        int64_t me = differs ? rank : size;
        if (!rc)
            rc = tr_comm_allreduce(world, &me, &first, 1, TR_COMM_I64, TR_COMM_MIN);
        if (!rc)
            rc = tr_comm_allreduce(world, &differs, &count, 1, TR_COMM_I64, TR_COMM_SUM);
        if (!rc)
            rc = tr_comm_broadcast(world, msg, sizeof msg / 8, TR_COMM_I64, (int)first);
    }
    free(lines);
    free(lines0);
    if (rc)
        return tr_fail_context(rc, "comparing the ranks' configs");
    if (!any)
        return TR_OK;
    msg[sizeof msg - 1] = 0;
    return tr_fail(TR_ERR_CONFIG,
                   "%s%s; %lld of %d ranks differ from rank 0. Every rank of one job needs the "
                   "same config, --set options and trident build",
                   differs && first != rank ? "this rank's config differs from rank 0's too; " : "",
                   msg, (long long)count, size);
}

int world_create(const tr_config *cfg, train_world *out)
{
    memset(out, 0, sizeof *out);
    tr_comm_config cc = tr_comm_config_default();
    cc.timeout_s = cfg->parallel.comm_timeout_s;
    cc.progress_thread = 1; /* data-parallel reductions advance while backward computes */
    /* device buffers on CUDA: NCCL (it stages through host memory when ranks share a GPU) */
    cc.backend = strcmp(cfg->training.device, "cuda") ? TR_COMM_BACKEND_UCX
                                                       : TR_COMM_BACKEND_NCCL;
    int rc = tr_comm_init_world(&cc, &out->world);
    if (rc)
        return rc;
    out->rank = tr_comm_rank(out->world);
    out->size = tr_comm_size(out->world);
    tr_log_set_rank(out->size > 1 ? out->rank : -1);
    if ((rc = check_same_config(cfg, out->world)))
        goto fail;
    int tp = cfg->parallel.tensor_model_parallel_size, pp = cfg->parallel.pipeline_model_parallel_size;
    int cp = cfg->parallel.context_parallel_size;
    if (cp == 1 && out->size % (tp * pp)) {
        rc = tr_fail(TR_ERR_CONFIG,
                     "%s: world size %d is not divisible by tensor_model_parallel_size %d x "
                     "pipeline_model_parallel_size %d",
                     tr_config_where(cfg, "parallel.tensor_model_parallel_size"), out->size, tp, pp);
        goto fail;
    }
    if (cp > 1 && out->size % ((long long)tp * pp * cp)) {
        rc = tr_fail(TR_ERR_CONFIG,
                     "%s: world size %d is not divisible by tensor_model_parallel_size %d x "
                     "context_parallel_size %d x pipeline_model_parallel_size %d",
                     tr_config_where(cfg, "parallel.context_parallel_size"), out->size, tp, cp, pp);
        goto fail;
    }
    int ep = cfg->parallel.expert_model_parallel_size;
    if (ep > 1 && (out->size / ((long long)tp * pp * cp)) % ep) {
        rc = tr_fail(TR_ERR_CONFIG,
                     "%s: expert_model_parallel_size %d does not divide the data-parallel size "
                     "%lld (world %d / (tp %d x cp %d x pp %d)); the EP ranks are data-parallel "
                     "ranks",
                     tr_config_where(cfg, "parallel.expert_model_parallel_size"), ep,
                     out->size / ((long long)tp * pp * cp), out->size, tp, cp, pp);
        goto fail;
    }
    rc = tr_topo_init_ep(&out->topo, out->size, tp, cp, pp, ep, cfg->parallel.order);
    if (!rc)
        rc = tr_topo_rank_groups(&out->topo, out->rank, &out->groups);
    if (rc)
        goto fail;
    int dp = out->topo.dp;
    int global = cfg->training.global_batch_size, mb = cfg->training.micro_batch_size;
    if (global % (mb * dp)) {
        rc = tr_fail(TR_ERR_CONFIG,
                     "%s: global_batch_size %d is not divisible by micro_batch_size %d x "
                     "data-parallel size %d (world %d / (tp %d x pp %d%s))",
                     tr_config_where(cfg, "training.global_batch_size"), global, mb, dp,
                     out->size, tp, pp, cp > 1 ? " x cp" : "");
        goto fail;
    }
    /* a ramp-up: every batch of it whole micro-batches on every replica (Megatron's rule:
     * start and increment multiples of micro_batch_size x DP), and with the interleaved
     * schedule every batch's micro-batches a multiple of the pipeline size, as the final
     * one's must be (tr_pp_validate) */
    const tr_training_config *t = &cfg->training;
    int interleaved = !strcmp(cfg->parallel.pipeline_schedule, "interleaved");
    long long unit = (long long)mb * dp * (interleaved ? pp : 1);
    for (int i = 0; i < 2 && t->n_rampup_batch_size == 3 && !rc; i++)
        if (t->rampup_batch_size[i] % unit)
            rc = tr_fail(TR_ERR_CONFIG,
                         "%s: the %s %d of training.rampup_batch_size is not a multiple of "
                         "micro_batch_size %d x data-parallel size %d%s = %lld (world %d / (tp "
                         "%d x pp %d)); every global batch of the ramp must split into whole "
                         "micro-batches on every replica%s",
                         tr_config_where(cfg, "training.rampup_batch_size"),
                         i ? "increment" : "start", t->rampup_batch_size[i], mb, dp,
                         interleaved ? " x pipeline size" : "", unit, out->size, tp, pp,
                         interleaved ? ", a multiple of the pipeline size of them (the "
                                       "interleaved schedule's rule)" : "");
    if (rc)
        goto fail;
    if ((rc = split_group(out, TR_GROUP_TP, "tp", &out->tp)) ||
        (rc = split_group(out, TR_GROUP_DP, "dp", &out->dp)) ||
        (rc = split_group(out, TR_GROUP_PP, "pp", &out->pp)) ||
        (rc = split_group(out, TR_GROUP_MP, "model_parallel", &out->mp)) ||
        (rc = split_group(out, TR_GROUP_EMBED, "embedding", &out->embed)))
        goto fail;
    if (cp > 1 && ((rc = split_group(out, TR_GROUP_CP, "cp", &out->cp)) ||
                   (rc = split_group(out, TR_GROUP_DP_CP, "dp_cp", &out->dp_cp))))
        goto fail;
    if (ep > 1 && ((rc = split_group(out, TR_GROUP_EP, "ep", &out->ep)) ||
                   (rc = split_group(out, TR_GROUP_EDP, "edp", &out->edp))))
        goto fail;
    if (pp == 1 && out->embed) { /* one stage holds both ends: nothing to tie across ranks */
        tr_comm_destroy(out->embed);
        out->embed = NULL;
    }
    return TR_OK;
fail:
    world_destroy(out);
    return rc;
}

void world_destroy(train_world *w)
{
    tr_comm_destroy(w->edp);
    tr_comm_destroy(w->ep);
    tr_comm_destroy(w->dp_cp);
    tr_comm_destroy(w->cp);
    tr_comm_destroy(w->embed);
    tr_comm_destroy(w->mp);
    tr_comm_destroy(w->pp);
    tr_comm_destroy(w->dp);
    tr_comm_destroy(w->tp);
    tr_comm_destroy(w->world);
    tr_rank_groups_free(&w->groups);
    memset(w, 0, sizeof *w);
}
