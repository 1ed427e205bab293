/* The engine: one rank's world built from the config alone — groups, data, its pipeline
 * stage of the model (its tensor-parallel shard), flat buffers, activation slots. */
#include "train/checkpoint_internal.h" /* includes engine_internal.h */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#ifdef TR_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

static int add_range(tr_dp_range **list, int *n, size_t offset, size_t count)
{
    tr_dp_range *r = realloc(*list, (size_t)(*n + 1) * sizeof **list);
    if (!r)
        return tr_fail(TR_ERR_NOMEM, "out of memory for gradient ranges");
    r[*n] = (tr_dp_range){offset, count};
    *list = r;
    (*n)++;
    return TR_OK;
}

/* Which gradient ranges are all-reduced over TP (sequence parallel), over the embedding
 * group (tied embedding copies) and counted in the global norm; offsets in the flat buffers. */
static int collect_ranges(tr_engine *e)
{
    int rc = TR_OK;
    for (int c = 0; c < e->v; c++)
        for (int i = 0; i < tr_gpt_num_tensors(e->chunks[c].model) && !rc; i++) {
            tr_param_tensor *t = tr_gpt_tensor(e->chunks[c].model, i);
            size_t off = e->chunks[c].offset + t->offset;
            if (t->tp_grad_allreduce && e->world.tp && tr_comm_size(e->world.tp) > 1)
                rc = add_range(&e->tp_ranges, &e->n_tp_ranges, off, t->numel);
            if (!rc && t->word_embedding && e->world.embed)
                rc = add_range(&e->embed_ranges, &e->n_embed_ranges, off, t->numel);
            if (!rc && t->count_in_norm)
                rc = add_range(&e->norm_ranges, &e->n_norm_ranges, off, t->numel);
            tr_dp_range *x = e->n_expert_ranges ? &e->expert_ranges[e->n_expert_ranges - 1]
                                                : NULL;
            if (!rc && t->expert && e->EP > 1) { /* a layer's experts: one range */
                if (x && off + t->numel == x->offset)
                    x->offset = off, x->count += t->numel;
                else
                    rc = add_range(&e->expert_ranges, &e->n_expert_ranges, off, t->numel);
            }
        }
    return rc;
}

/* The model's grad hook reports chunk-local offsets; dp/ sees the flat buffer (each instance
 * takes its own ranges' part). */
static void chunk_grad_ready(void *ctx, size_t offset, size_t count)
{
    engine_chunk *ch = ctx;
    tr_dp_grad_ready(ch->e->dp, ch->offset + offset, count);
    if (ch->e->xdp)
        tr_dp_grad_ready(ch->e->xdp, ch->offset + offset, count);
}

tr_dp *engine_dp_of(const tr_engine *e, const tr_param_tensor *t)
{
    return t->expert && e->xdp ? e->xdp : e->dp;
}

size_t engine_moments_numel(const tr_engine *e)
{
    return tr_dp_shard_numel(e->dp) + (e->xdp ? tr_dp_shard_numel(e->xdp) : 0);
}

size_t engine_moments_base(const tr_engine *e, const tr_dp *dp)
{
    return dp == e->xdp ? tr_dp_shard_numel(e->dp) : 0;
}

int engine_first_replica(const tr_engine *e, const tr_param_tensor *t)
{
    return e->cp_rank == 0 && (t->expert && e->xdp ? e->dp_rank / e->EP : e->dp_rank) == 0;
}

static int cmp_range(const void *a, const void *b)
{
    const tr_dp_range *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* ZeRO-3 with expert parallelism: dp's gather units are the units' pieces outside the
 * (sorted) expert ranges; *out malloc'ed. */
static int units_without_experts(const tr_engine *e, tr_dp_range **out, size_t *n_out)
{
    size_t n = 0;
    tr_dp_range *u = calloc((size_t)(e->n_units + e->n_expert_ranges) + 1, sizeof *u);
    if (!u)
        return tr_fail(TR_ERR_NOMEM, "out of memory for ZeRO-3 gather units");
    for (int i = 0; i < e->n_units; i++) {
        size_t pos = e->units[i].offset, end = pos + e->units[i].count;
        for (int j = 0; j < e->n_expert_ranges && pos < end; j++) {
            const tr_dp_range *x = &e->expert_ranges[j];
            if (x->offset + x->count <= pos || x->offset >= end)
                continue;
            if (x->offset > pos)
                u[n++] = (tr_dp_range){pos, x->offset - pos};
            pos = x->offset + x->count;
        }
        if (pos < end)
            u[n++] = (tr_dp_range){pos, end - pos};
    }
    *out = u;
    *n_out = n;
    return TR_OK;
}

/* Expert parallelism: the experts' dp/ instance over the EDP group, every other range
 * excluded; their average divides by D as the dense gradients' (each owner holds its EP
 * peers' tokens' share: the sum over EDP is the sum over D). */
static int create_expert_dp(tr_engine *e, const tr_dp_config *dense)
{
    tr_dp_range *x = e->expert_ranges, *other = NULL;
    size_t n = 0, pos = 0;
    other = calloc((size_t)e->n_expert_ranges + 1, sizeof *other);
    if (!other)
        return tr_fail(TR_ERR_NOMEM, "out of memory for gradient ranges");
    for (int i = 0; i <= e->n_expert_ranges; i++) {
        size_t end = i < e->n_expert_ranges ? x[i].offset : e->n_params;
        if (end > pos)
            other[n++] = (tr_dp_range){pos, end - pos};
        if (i < e->n_expert_ranges)
            pos = x[i].offset + x[i].count;
    }
    tr_dp_config xc = *dense;
    xc.aligned = e->zero == 3 ? x : NULL; /* stage 3: a layer's experts are a gather unit */
    xc.n_aligned = e->zero == 3 ? (size_t)e->n_expert_ranges : 0;
    xc.excluded = other;
    xc.n_excluded = n;
    xc.average_over = e->D;
    int edp = tr_comm_size(e->world.edp);
    if (edp == 1 && xc.zero_stage + xc.distributed_optimizer > 0) {
        /* (stage 0 in effect either way; dp/'s note would say the whole buffer is unsharded) */
        xc.zero_stage = xc.distributed_optimizer = 0;
        if (e->world.rank == 0)
            tr_info("expert parallelism: the experts' state is not sharded (their "
                    "expert-data-parallel group is one rank: expert_model_parallel_size %d = "
                    "the data-parallel size); the dense parameters' is", e->EP);
    }
    int rc = tr_dp_create(&xc, edp > 1 ? e->world.edp : NULL, e->grads, e->params, e->n_params,
                          &e->xdp);
    free(other);
    return rc;
}

void engine_set_grad_hooks(tr_engine *e, int on)
{
    for (int c = 0; c < e->v; c++)
        tr_gpt_set_grad_hook(e->chunks[c].model, on ? chunk_grad_ready : NULL, on ? &e->chunks[c] : NULL);
}

/* The v model chunks of this stage, their place in the flat buffers and their slots. */
static int create_chunks(tr_engine *e)
{
    const tr_config *cfg = e->cfg;
    e->chunks = tr_alloc((size_t)e->v * sizeof *e->chunks, "model chunks");
    if (!e->chunks)
        return TR_ERR_NOMEM;
    for (int c = 0; c < e->v; c++) {
        tr_gpt_shape shape;
        int rc = tr_gpt_shape_from_config(cfg, tr_pp_layer_first(&e->partition, e->stage, c),
                                          tr_pp_layer_count(&e->partition, e->stage, c),
                                          e->world.groups.coords.tp, &shape);
        tr_gpt_shape_set_cp(&shape, e->CP, e->cp_rank); /* (CP 1: unchanged) */
        if (e->EP > 1) /* only this EP rank's experts */
            tr_gpt_shape_set_ep(&shape, e->EP, tr_comm_rank(e->world.ep));
        if (!rc)
            rc = tr_gpt_create(&shape, e->k, e->world.topo.tp > 1 ? e->world.tp : NULL,
                               &e->chunks[c].model);
        if (!rc)
            rc = tr_gpt_set_cp(e->chunks[c].model, e->world.cp);
        if (!rc)
            rc = tr_gpt_set_ep(e->chunks[c].model, e->world.ep);
        if (rc)
            return rc;
        e->chunks[c].e = e;
    }
    e->n_params = 0;
    for (int c = e->v - 1; c >= 0; c--) { /* the last chunk's backward runs first */
        e->chunks[c].offset = e->n_params;
        e->n_params += tr_gpt_num_params(e->chunks[c].model);
    }
    return TR_OK;
}

static int create_slots(tr_engine *e)
{
    for (int c = 0; c < e->v; c++) {
        engine_chunk *ch = &e->chunks[c];
        ch->slots = tr_alloc((size_t)e->n_slots * sizeof *ch->slots, "activation slots");
        ch->slot_busy = tr_alloc((size_t)e->n_slots * sizeof(int), "activation slots");
        ch->slot_of_mb = tr_alloc((size_t)e->M_max * sizeof(int), "activation slots");
        if (!ch->slots || !ch->slot_busy || !ch->slot_of_mb)
            return TR_ERR_NOMEM;
        for (int s = 0; s < e->n_slots; s++) {
            int rc = tr_gpt_acts_create(ch->model, e->mb, &ch->slots[s]);
            if (rc)
                return rc;
        }
    }
    return TR_OK;
}

/* The kernel backend from training.device and training.precision (the communicator's
 * backend follows training.device too: see world_create). */
static int pick_backend(const tr_config *cfg, const tr_kernels **out)
{
    const tr_training_config *t = &cfg->training;
    int cuda = !strcmp(t->device, "cuda"), bf16 = !strcmp(t->precision, "bf16");
    int fp16 = !strcmp(t->precision, "fp16");
    if (fp16 && cuda)
        return tr_fail(TR_ERR_CONFIG, "%s: training.precision = fp16 runs on the CPU backend "
                       "only (16-bit storage emulated); on CUDA use bf16 or fp32",
                       tr_config_where(cfg, "training.precision"));
    /* on the CPU, bf16 / fp16 emulate 16-bit storage (kernels.h: tr_kernels_cpu_rounded) */
    *out = tr_kernels_get(cuda ? (bf16 ? "cuda" : "cuda-fp32")
                               : bf16 ? "cpu-bf16" : fp16 ? "cpu-fp16" : "cpu");
    if (!*out)
        return tr_fail_context(TR_ERR_CONFIG, "%s: training.device = %s",
                               tr_config_where(cfg, "training.device"), t->device);
    return TR_OK;
}

/* On a GPU, everything the run keeps comes from one arena sized up front; a GPU too small
 * is an error naming the shortfall before anything is allocated. */
/* What this rank will allocate, from the model's own sizes (its tensor tables and activation
 * layout, which tests/plan ties to the planner's counts): parameters, gradients, Adam's two
 * moments (this rank's ZeRO-1 shard), activation slots. */
typedef struct {
    size_t params, grads, optimizer, activations;
} memory_need;

static memory_need memory_needed(const tr_engine *e)
{
    memory_need m = {.params = e->n_params * sizeof(float), .activations = 1 << 20};
    int zero = e->D * e->CP > 1 ? tr_zero_stage(&e->cfg->parallel) : 0;
    size_t shard = m.params / ((size_t)e->D * e->CP) + 4096;
    m.optimizer = 2 * (zero >= 1 ? shard : m.params);
    m.grads = zero >= 2 ? shard : m.params; /* ZeRO-2/3: the reduced shard (+ buckets) */
    if (zero == 3)
        m.params = shard; /* + the layers being gathered, counted below as activations */
    if (zero == 3)
        for (int c = 0; c < e->v; c++)
            m.activations += 2 * tr_gpt_num_params(e->chunks[c].model) * sizeof(float) /
                             (size_t)tr_pp_layer_count(&e->partition, e->stage, c);
    for (int c = 0; c < e->v; c++)
        m.activations += tr_gpt_activation_bytes(e->chunks[c].model, e->mb, e->n_slots);
    return m;
}

/* Host memory this rank may use: MemAvailable (and the cgroup's limit, when lower) shared by
 * the node's LOCAL_WORLD_SIZE ranks. 0 when unknown. */
static double host_memory_available(int *local_ranks)
{
    double avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &avail) == 1) {
            avail *= 1024;
            break;
        }
    if (f)
        fclose(f);
    double limit = 0, used = 0;
    if ((f = fopen("/sys/fs/cgroup/memory.max", "r"))) {
        if (fscanf(f, "%lf", &limit) != 1)
            limit = 0; /* "max": no limit */
        fclose(f);
    }
    if (limit > 0 && (f = fopen("/sys/fs/cgroup/memory.current", "r"))) {
        if (fscanf(f, "%lf", &used) == 1 && limit - used < avail)
            avail = limit - used > 0 ? limit - used : 0;
        fclose(f);
    }
    const char *lw = getenv("LOCAL_WORLD_SIZE");
    *local_ranks = lw && atoi(lw) > 0 ? atoi(lw) : 1;
    return avail / *local_ranks;
}

/* Refuse, before allocating, a rank whose memory would not fit: on CUDA the device budget
 * (kernels/cuda), on the CPU the host's available memory. */
static int reserve_memory(tr_engine *e)
{
    memory_need m = memory_needed(e);
#ifdef TR_HAVE_CUDA
    if (!strcmp(e->cfg->training.device, "cuda")) {
        tr_cuda_budget b = {.params = m.params, .grads = m.grads, .optimizer = m.optimizer,
                            .activations = m.activations, .workspace = tr_cuda_workspace_bytes(),
                            .reserved = (size_t)512 << 20};
        return tr_cuda_reserve(&b);
    }
#endif
    int local = 1;
    double avail = host_memory_available(&local), GiB = 1024.0 * 1024 * 1024;
    double need = (double)m.params + (double)m.grads + (double)m.optimizer + (double)m.activations;
    tr_debug("memory: rank %d needs about %.3f GiB (parameters %.3f, gradients %.3f, optimizer "
             "%.3f, activations %.3f = %zu bytes); %.3f GiB available to it", e->world.rank,
             need / GiB, m.params / GiB, m.grads / GiB, m.optimizer / GiB, m.activations / GiB,
             m.activations, avail / GiB);
    /* the process itself (libraries, communication buffers, data mappings) needs some too */
    if (avail <= 0 || need + (double)(256 << 20) <= avail)
        return TR_OK;
    return tr_fail(TR_ERR_CONFIG,
                   "rank %d needs about %.2f GiB (parameters %.2f, gradients %.2f, optimizer %.2f, "
                   "activations %.2f) but %.2f GiB is available to it (the host's available memory "
                   "shared by %d local rank%s): a smaller model, more ranks (tensor or pipeline "
                   "parallelism), ZeRO-1, a smaller micro-batch or recompute",
                   e->world.rank, need / GiB, m.params / GiB, m.grads / GiB, m.optimizer / GiB,
                   m.activations / GiB, avail / GiB, local, local > 1 ? "s" : "");
}

/* The backend allocator's bytes in use (0 where it does not count). */
static size_t allocated(const tr_kernels *k) { return k->bytes_in_use ? k->bytes_in_use(NULL) : 0; }

int tr_engine_create(const tr_config *cfg, tr_engine **out)
{
    tr_engine *e = tr_alloc(sizeof *e, "engine");
    if (!e)
        return TR_ERR_NOMEM;
    e->cfg = cfg;
    int rc = pick_backend(cfg, &e->k);
    if (rc) {
        tr_free(e);
        return rc;
    }
    rc = world_create(cfg, &e->world);
    if (rc) {
        tr_free(e);
        return rc;
    }
    const tr_training_config *t = &cfg->training;
    e->stage = e->world.groups.coords.pp;
    e->dp_rank = e->world.groups.coords.dp;
    e->P = e->world.topo.pp;
    e->D = e->world.topo.dp;
    e->cp_rank = e->world.groups.coords.cp;
    e->CP = e->world.topo.cp;
    e->EP = e->world.ep ? tr_comm_size(e->world.ep) : 1;
    e->mb = t->micro_batch_size;
    e->T = cfg->model.seq_length;
    /* the final global batch's micro-batches: slots and the schedule's checks are made for
     * it (a ramp-up's smaller batches need no more); the first iteration sets its own */
    e->M = e->M_max = t->global_batch_size / (e->mb * e->D);
    e->batch = t->global_batch_size;
    e->loss_scale = 1.0f / ((float)e->M * (float)e->mb * (float)(e->T / e->CP));
    engine_scaler_init(&e->scaler, t);
    if ((rc = tr_data_open_config(cfg, &e->data)))
        goto fail;
    if (tr_data_num_samples(e->data, TR_SPLIT_TRAIN) == 0) {
        rc = tr_fail(TR_ERR_INVALID, "%s: the training split of %s has no sample of %d tokens",
                     tr_config_where(cfg, "data.data_path"), tr_data_name(e->data), e->T + 1);
        goto fail;
    }
    if (t->eval_interval > 0 && t->eval_iters > 0 &&
        tr_data_num_samples(e->data, TR_SPLIT_VALID) == 0) { /* known now, not at the first eval */
        rc = tr_fail(TR_ERR_CONFIG, "%s: training.eval_interval %d, but the validation split of %s "
                     "has no sample of %d tokens (data.split \"%s\"): give it a weight and enough "
                     "documents, or set training.eval_interval 0",
                     tr_config_where(cfg, "data.split"), t->eval_interval, tr_data_name(e->data),
                     e->T + 1, cfg->data.split);
        goto fail;
    }
    if ((rc = tr_pp_partition_from_config(cfg, &e->partition)) ||
        (rc = tr_pp_kind_parse(cfg->parallel.pipeline_schedule, &e->kind)))
        goto fail;
    e->v = e->partition.v;
    rc = tr_pp_schedule_build(e->P, e->stage, e->M, e->kind, e->v, &e->schedule);
    if (rc) {
        tr_fail_context(rc, "%s", tr_config_where(cfg, "parallel.pipeline_schedule"));
        goto fail;
    }
    /* in flight + one being received + one whose input gradient is still being sent */
    e->stored_limit = tr_pp_peak_activations(&e->schedule);
    e->n_slots = e->stored_limit + 2;
    if (e->n_slots > e->M)
        e->n_slots = e->M;
    if ((rc = create_chunks(e)) || (rc = reserve_memory(e)))
        goto fail;
    e->zero = e->D * e->CP > 1 ? tr_zero_stage(&cfg->parallel) : 0;
    if (e->zero >= 2 && strcmp(t->device, "cpu")) {
        rc = tr_fail(TR_ERR_CONFIG, "%s: parallel.zero_stage %d runs on the CPU backend for now "
                     "(its windows are host mappings); use zero_stage 1 on %s",
                     tr_config_where(cfg, "parallel.zero_stage"), e->zero, t->device);
        goto fail;
    }
    /* ZeRO-2/3: the gradients (stage 3: also the parameters) are windows whose pages are
     * given back as soon as a bucket is reduced (a layer is used): train/zero.c */
    size_t bytes = e->n_params * sizeof(float), used = allocated(e->k);
    e->params = e->zero == 3 ? zero_window_alloc(e->n_params) : e->k->alloc(bytes);
    e->mem_params = allocated(e->k) - used;
    e->grads = e->zero >= 2 ? zero_window_alloc(e->n_params) : e->k->alloc(bytes);
    e->mem_grads = allocated(e->k) - used - e->mem_params;
    for (int c = 0; c < e->v; c++) /* LoRA: the frozen base, allocated with the model */
        e->mem_params += tr_gpt_frozen_bytes(e->chunks[c].model);
    if (!e->params || !e->grads) {
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters (%zu MiB x 2)",
                     e->n_params, bytes >> 20);
        goto fail;
    }
    for (int c = 0; c < e->v; c++) {
        tr_gpt_bind(e->chunks[c].model, e->params + e->chunks[c].offset,
                    e->grads + e->chunks[c].offset);
        if (e->zero < 3 && (rc = tr_gpt_init_params(e->chunks[c].model)))
            goto fail; /* stage 3: unit by unit in zero_setup */
    }
    if ((rc = collect_ranges(e)) || (e->zero == 3 && (rc = zero_units(e, &e->units, &e->n_units))))
        goto fail;
    if (e->n_expert_ranges)
        qsort(e->expert_ranges, (size_t)e->n_expert_ranges, sizeof *e->expert_ranges, cmp_range);
    tr_dp_range *dense_units = NULL; /* ZeRO-3 with expert parallelism */
    size_t n_dense_units = 0;
    if (e->zero == 3 && e->n_expert_ranges &&
        (rc = units_without_experts(e, &dense_units, &n_dense_units)))
        goto fail;
    /* data parallelism: buckets filled by the model's grad hook; the tied embedding ranges
     * are aligned so ZeRO-1 shards of both copies hold the same elements */
    tr_dp_config dc = tr_dp_config_from_parallel(&cfg->parallel);
    dc.aligned = e->zero == 3 ? e->units : e->embed_ranges; /* stage 3: buckets in units */
    dc.n_aligned = (size_t)(e->zero == 3 ? e->n_units : e->n_embed_ranges);
    if (dense_units) {
        dc.aligned = dense_units;
        dc.n_aligned = n_dense_units;
    }
    dc.kernels = e->k;
    dc.release = zero_window_release;
    dc.resident = zero_window_resident;
    dc.excluded = e->expert_ranges; /* expert parallelism: xdp's */
    dc.n_excluded = (size_t)e->n_expert_ranges;
    /* the D x CP ranks of this (tp, pp) coordinate hold the same weights: they sum gradients */
    rc = tr_dp_create(&dc, e->D * e->CP > 1 ? world_grad_comm(&e->world) : NULL, e->grads,
                      e->params, e->n_params, &e->dp);
    if (!rc && e->n_expert_ranges)
        rc = create_expert_dp(e, &dc);
    free(dense_units);
    if (rc) {
        tr_fail_context(rc, "%s", tr_config_where(cfg, "parallel.ddp_bucket_size_mb"));
        goto fail;
    }
    engine_set_grad_hooks(e, 1);
    if ((rc = zero_setup(e)))
        goto fail;
    size_t shard = engine_moments_numel(e);
    used = allocated(e->k);
    e->adam_m = e->k->alloc(shard * sizeof(float));
    e->adam_v = e->k->alloc(shard * sizeof(float));
    e->mem_optimizer = allocated(e->k) - used;
    if (!e->adam_m || !e->adam_v) {
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for Adam moments of %zu parameters", shard);
        goto fail;
    }
    used = allocated(e->k);
    if ((rc = create_slots(e)))
        goto fail;
    e->mem_activations = allocated(e->k) - used; /* the slots, the model's scratch */
    e->sample = tr_alloc((size_t)(e->T + 1) * sizeof(int32_t), "sample");
    e->inputs = tr_alloc((size_t)e->mb * e->T * sizeof(int32_t), "inputs");
    e->targets = tr_alloc((size_t)e->mb * e->T * sizeof(int32_t), "targets");
    if (!e->sample || !e->inputs || !e->targets) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    if ((rc = engine_sft_create(e)))
        goto fail;
    e->tracing = cfg->logging.trace;
    *out = e;
    return TR_OK;
fail:
    tr_engine_free(e);
    return rc;
}

void tr_engine_free(tr_engine *e)
{
    if (!e)
        return;
    ckpt_async_discard(e); /* a save still being written (after an error): not finished */
    for (int c = 0; e->chunks && c < e->v; c++) {
        engine_chunk *ch = &e->chunks[c];
        for (int s = 0; ch->slots && s < e->n_slots; s++)
            tr_gpt_acts_free(ch->slots[s]);
        tr_free(ch->slots);
        tr_free(ch->slot_busy);
        tr_free(ch->slot_of_mb);
        tr_gpt_free(ch->model);
    }
    tr_free(e->chunks);
    tr_dp_free(e->dp);
    tr_dp_free(e->xdp);
    if (e->k) {
        if (e->zero == 3)
            zero_window_free(e->params, e->n_params);
        else
            e->k->free(e->params);
        if (e->zero >= 2)
            zero_window_free(e->grads, e->n_params);
        else
            e->k->free(e->grads);
        e->k->free(e->adam_m);
        e->k->free(e->adam_v);
        e->k->free(e->shard_grads);
        e->k->free(e->shard_params);
    }
    free(e->units);
    tr_pp_schedule_free(&e->schedule);
    tr_pp_trace_free(&e->trace);
    tr_data_close(e->data);
    tr_free(e->sample);
    tr_free(e->inputs);
    tr_free(e->targets);
    engine_sft_free(e);
    free(e->tp_ranges);
    free(e->embed_ranges);
    free(e->norm_ranges);
    free(e->expert_ranges);
    world_destroy(&e->world);
    tr_free(e);
}

tr_gpt *tr_engine_model(tr_engine *e) { return e->chunks[0].model; }
int tr_engine_rank(const tr_engine *e) { return e->world.rank; }

int tr_engine_any_rank(tr_engine *e, int mine, int *any)
{
    double v = mine ? 1.0 : 0.0;
    int rc = tr_comm_allreduce(e->world.world, &v, &v, 1, TR_COMM_F64, TR_COMM_MAX);
    *any = !rc && v > 0;
    return rc;
}
int tr_engine_agree(tr_engine *e, int rc, const char *what)
{
    if (rc && e->world.size > 1) {
        fprintf(stderr, "trident: rank %d: %s\n", e->world.rank, tr_errmsg());
        fflush(stderr);
        rc = tr_fail(rc, "%s failed on this rank (its message above)", what);
    }
    int any = 0, crc = tr_engine_any_rank(e, rc != TR_OK, &any);
    if (rc)
        return rc;
    if (crc)
        return crc;
    return any ? tr_fail(TR_ERR_INVALID, "%s failed on another rank (see its message)", what)
               : TR_OK;
}

float *tr_engine_params(tr_engine *e) { return e->params; }
float *tr_engine_grads(tr_engine *e) { return e->grads; }

int tr_engine_batch(tr_engine *e, int split, uint64_t first_sample, int32_t *inputs,
                    int32_t *targets)
{
    int T = e->T;
    for (int b = 0; b < e->mb; b++) {
        int rc = e->sft ? engine_sft_sample(e, split, first_sample + (uint64_t)b, b)
                        : tr_data_sample(e->data, split, first_sample + (uint64_t)b, e->sample);
        if (rc)
            return rc;
        memcpy(inputs + (size_t)b * T, e->sample, (size_t)T * sizeof(int32_t));
        memcpy(targets + (size_t)b * T, e->sample + 1, (size_t)T * sizeof(int32_t));
    }
    return TR_OK;
}

int engine_load_micro_batch(tr_engine *e, int micro_batch, int32_t *inputs, int32_t *targets)
{
    int rc = tr_engine_batch(e, e->split, e->first_sample + (uint64_t)micro_batch * e->mb, inputs,
                             targets);
    if (!rc && e->CP > 1) { /* every CP rank read the same samples: keep its two chunks */
        tr_cp_keep_chunks(inputs, e->mb, e->T, e->CP, e->cp_rank);
        tr_cp_keep_chunks(targets, e->mb, e->T, e->CP, e->cp_rank);
        engine_sft_keep_chunks(e); /* (their packing too) */
    }
    return rc;
}
