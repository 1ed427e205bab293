/* ZeRO-2/3 on the engine's side: the flat buffers the stages do not keep whole (a virtual
 * window whose pages are given back: the gradients at stage >= 2, the parameters at stage
 * 3), the compact shard buffers, the gather units of stage 3 (a layer, or one other tensor
 * of a chunk), unit-by-unit initialisation, the model's parameter-use hook, and the whole
 * parameters put in place around a checkpoint save or load. */
#include "train/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"

/* ---- windows: anonymous mappings whose pages are given back with MADV_DONTNEED ---- */

float *zero_window_alloc(size_t n)
{
    void *p = mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    (void)madvise(p, n * sizeof(float), MADV_NOHUGEPAGE); /* pages of 4 KiB given back */
    return p;
}

void zero_window_free(float *p, size_t n)
{
    if (p)
        munmap(p, n * sizeof(float));
}

/* [p, p + count) reads as zeros afterwards: the whole pages inside it are given back to the
 * system, the pieces of pages it shares with neighbours are zeroed in place. */
void zero_window_release(void *ctx, float *p, size_t count)
{
    (void)ctx;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)(p + count);
    uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;
    if (lo >= hi) {
        memset(p, 0, count * sizeof(float));
        return;
    }
    memset(p, 0, lo - a);
    memset((void *)hi, 0, b - hi);
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED))
        memset((void *)lo, 0, hi - lo); /* cannot fail on a private mapping; keep the meaning */
}

/* Bytes of [p, p + count) in resident pages (mincore): what the window holds now. */
size_t zero_window_resident(void *ctx, const float *p, size_t count)
{
    (void)ctx;
    static __thread unsigned char *vec;
    static __thread size_t cap;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p / page * page, b = (uintptr_t)(p + count);
    size_t pages = (b - a + page - 1) / page;
    if (pages > cap) {
        unsigned char *v = realloc(vec, pages);
        if (!v)
            return 0;
        vec = v;
        cap = pages;
    }
    if (mincore((void *)a, b - a, vec))
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    return n * page;
}

/* ---- stage 3's gather units ---- */

/* Layer number of a "layers.N.*" tensor, else -1. */
static int layer_of(const char *name)
{
    int l;
    return sscanf(name, "layers.%d.", &l) == 1 ? l : -1;
}

int zero_units(tr_engine *e, tr_dp_range **out, int *n_out)
{
    tr_dp_range *u = NULL;
    int n = 0, cap = 0;
    for (int c = 0; c < e->v; c++) {
        tr_gpt *g = e->chunks[c].model;
        int prev_layer = -2;
        for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
            const tr_param_tensor *t = tr_gpt_tensor(g, i);
            size_t off = e->chunks[c].offset + t->offset;
            int l = layer_of(t->name);
            if (l >= 0 && l == prev_layer) { /* a layer is contiguous (reverse order) */
                tr_dp_range *r = &u[n - 1];
                size_t end = r->offset + r->count;
                r->offset = off < r->offset ? off : r->offset;
                r->count = (off + t->numel > end ? off + t->numel : end) - r->offset;
                continue;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                tr_dp_range *x = realloc(u, (size_t)cap * sizeof *u);
                if (!x) {
                    free(u);
                    return tr_fail(TR_ERR_NOMEM, "out of memory for ZeRO-3 gather units");
                }
                u = x;
            }
            u[n++] = (tr_dp_range){off, t->numel};
            prev_layer = l;
        }
    }
    *out = u;
    *n_out = n;
    return TR_OK;
}

/* The model's parameter-use hook: chunk-local offsets -> dp/'s stage-3 gathers (expert
 * parallelism: the experts' instance's too, each taking its own buckets of the range). */
static int param_use(const tr_engine *e, tr_dp *dp, int what, size_t offset, size_t count)
{
    if (what == TR_GPT_PARAMS_PREFETCH) /* parallel.zero_prefetch false: gathers exposed */
        return e->cfg->parallel.zero_prefetch ? tr_dp_params_prefetch(dp, offset, count) : TR_OK;
    return what == TR_GPT_PARAMS_NEED ? tr_dp_params_need(dp, offset, count)
                                      : tr_dp_params_done(dp, offset, count);
}

static int chunk_param_hook(void *ctx, int what, size_t offset, size_t count)
{
    engine_chunk *ch = ctx;
    int rc = param_use(ch->e, ch->e->dp, what, ch->offset + offset, count);
    return rc || !ch->e->xdp ? rc : param_use(ch->e, ch->e->xdp, what, ch->offset + offset, count);
}

/* Stage 3: gives back the window's pages of [offset, offset + count), but for the expert
 * ranges when the experts' instance keeps its parameters whole (EDP of one rank: stage 0). */
static void release_unit(tr_engine *e, size_t offset, size_t count)
{
    size_t pos = offset, end = offset + count;
    for (int j = 0; e->xdp && tr_dp_zero_stage(e->xdp) < 3 && j < e->n_expert_ranges; j++) {
        const tr_dp_range *x = &e->expert_ranges[j];
        if (x->offset + x->count <= pos || x->offset >= end)
            continue;
        if (x->offset > pos)
            zero_window_release(NULL, e->params + pos, x->offset - pos);
        pos = x->offset + x->count;
    }
    if (pos < end)
        zero_window_release(NULL, e->params + pos, end - pos);
}

/* After tr_dp_create: the compact shards (counted as parameters / gradients), and at stage 3
 * the initial values unit by unit (each unit's window filled, this rank's blocks kept, the
 * window given back), then the parameter-use hooks. */
int zero_setup(tr_engine *e)
{
    if (e->zero < 2)
        return TR_OK;
    size_t shard = engine_moments_numel(e); /* (expert parallelism: dp's, then xdp's) */
    size_t before = e->k->bytes_in_use ? e->k->bytes_in_use(NULL) : 0;
    e->shard_grads = e->k->alloc(shard * sizeof(float) + sizeof(float));
    size_t mid = e->k->bytes_in_use ? e->k->bytes_in_use(NULL) : 0;
    if (e->zero == 3)
        e->shard_params = e->k->alloc(shard * sizeof(float) + sizeof(float));
    size_t after = e->k->bytes_in_use ? e->k->bytes_in_use(NULL) : 0;
    if (!e->shard_grads || (e->zero == 3 && !e->shard_params))
        return tr_fail(TR_ERR_NOMEM, "out of memory for the ZeRO-%d shards of %zu elements",
                       e->zero, shard);
    e->mem_grads += mid - before;
    e->mem_params += after - mid;
    int rc = tr_dp_set_shards(e->dp, e->shard_grads, e->shard_params);
    if (!rc && e->xdp) { /* the experts' shards after dp's, as the Adam moments */
        size_t base = engine_moments_base(e, e->xdp);
        rc = tr_dp_set_shards(e->xdp, e->shard_grads + base,
                              e->shard_params ? e->shard_params + base : NULL);
    }
    for (int i = 0; i < e->n_units && !rc && e->zero == 3; i++) {
        const tr_dp_range *u = &e->units[i];
        for (int c = 0; c < e->v && !rc; c++) {
            size_t lo = e->chunks[c].offset, n = tr_gpt_num_params(e->chunks[c].model);
            if (u->offset >= lo && u->offset < lo + n)
                rc = tr_gpt_init_params_range(e->chunks[c].model, u->offset - lo, u->count);
        }
        if (!rc)
            rc = tr_dp_params_keep_own(e->dp, u->offset, u->count);
        if (!rc && e->xdp)
            rc = tr_dp_params_keep_own(e->xdp, u->offset, u->count);
        if (!rc)
            release_unit(e, u->offset, u->count);
    }
    for (int c = 0; c < e->v && !rc && e->zero == 3; c++)
        tr_gpt_set_param_hook(e->chunks[c].model, chunk_param_hook, &e->chunks[c]);
    return rc;
}

/* Stage 3: the whole parameters in the window (a checkpoint reads or writes them there). */
int zero_params_materialize(tr_engine *e)
{
    int rc = e->zero == 3 ? tr_dp_params_need(e->dp, 0, e->n_params) : TR_OK;
    return rc || e->zero != 3 || !e->xdp ? rc : tr_dp_params_need(e->xdp, 0, e->n_params);
}

/* Stage 3: keep = 1 copies this rank's blocks of the window into the shard first (after a
 * load); then the window is given back. */
int zero_params_release(tr_engine *e, int keep)
{
    if (e->zero != 3)
        return TR_OK;
    int rc = keep ? tr_dp_params_keep_own(e->dp, 0, e->n_params) : TR_OK;
    if (!rc && keep && e->xdp)
        rc = tr_dp_params_keep_own(e->xdp, 0, e->n_params);
    int rc2 = zero_release_all(e);
    return rc ? rc : rc2;
}

int zero_release_all(tr_engine *e)
{
    int rc = tr_dp_params_release_all(e->dp), rc2 = e->xdp ? tr_dp_params_release_all(e->xdp) : 0;
    return rc ? rc : rc2;
}
