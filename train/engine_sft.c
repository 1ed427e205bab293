/* Supervised fine-tuning in the engine (data.dataset_type sft): each micro-batch's packing
 * (segments, position ids, loss weights from data/'s packed samples) handed to the model
 * with the activations, and the loss averaged over the learned tokens of the GLOBAL batch in
 * every layout:
 *  - before the schedule, each last stage sums the loss weights of its M micro-batches and
 *    all-reduces the sum over its data-parallel group (with context parallelism its D x CP
 *    ranks, each holding T / CP tokens of a sample): W, the global batch's learned tokens
 *    (TP ranks hold the same data; other stages need no scale);
 *  - the head differentiates loss_scale * sum_n w_n l_n with loss_scale = D CP / W, which
 *    dp/'s average over the D x CP ranks turns into d(sum w l / W);
 *  - the reported loss is sum w l / W from one world all-reduce of (sum, weight) that the last
 *    stages' TP rank 0 contribute. */
#include "train/engine_internal.h"

#include "core/core.h"

int engine_sft_create(tr_engine *e)
{
    e->sft = tr_data_is_sft(e->data);
    if (!e->sft)
        return TR_OK;
    size_t n = (size_t)e->mb * e->T;
    e->weights = tr_alloc(n * sizeof(float), "loss weights");
    e->segments = tr_alloc(n * sizeof(int32_t), "segment ids");
    e->positions = tr_alloc(n * sizeof(int32_t), "position ids");
    return e->weights && e->segments && e->positions ? TR_OK : TR_ERR_NOMEM;
}

void engine_sft_free(tr_engine *e)
{
    tr_free(e->weights);
    tr_free(e->segments);
    tr_free(e->positions);
}

int engine_sft_sample(tr_engine *e, int split, uint64_t g, int b)
{
    size_t at = (size_t)b * e->T;
    return tr_data_sample_sft(e->data, split, g, e->sample, e->weights + at, e->segments + at,
                              e->positions + at);
}

void engine_sft_keep_chunks(tr_engine *e)
{
    if (!e->sft || e->CP < 2)
        return;
    tr_cp_keep(e->weights, sizeof *e->weights, e->mb, e->T, e->CP, e->cp_rank);
    tr_cp_keep(e->segments, sizeof *e->segments, e->mb, e->T, e->CP, e->cp_rank);
    tr_cp_keep(e->positions, sizeof *e->positions, e->mb, e->T, e->CP, e->cp_rank);
}

/* The loss weights of the micro-batch's tokens on this rank (T / CP a sample). */
static double micro_batch_weight(const tr_engine *e)
{
    double w = 0;
    for (size_t i = 0; i < (size_t)e->mb * (e->T / e->CP); i++)
        w += e->weights[i];
    return w;
}

int engine_sft_begin(tr_engine *e)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(e->chunks[e->v - 1].model);
    if (!s->is_last)
        return TR_OK;
    double w = 0;
    for (int mb = 0; mb < e->M; mb++) {
        int rc = engine_load_micro_batch(e, mb, e->inputs, e->targets);
        if (rc)
            return rc;
        w += micro_batch_weight(e);
    }
    if (e->D * e->CP > 1) {
        int rc = tr_comm_allreduce(world_grad_comm(&e->world), &w, &w, 1, TR_COMM_F64,
                                   TR_COMM_SUM);
        if (rc)
            return rc;
    }
    /* no learned token: no gradient */
    e->loss_scale = w > 0 ? (float)((double)e->D * e->CP / w) : 0.0f;
    return TR_OK;
}

int engine_sft_bind(tr_engine *e, tr_gpt_acts *a, const tr_gpt_shape *s)
{
    /* positions on every stage: the first adds wpe's rows by them, and every stage's rotary
     * layers rotate q and k by them (restarting in each packed example) */
    return tr_gpt_acts_set_packing(a, e->segments, e->positions, s->is_last ? e->weights : NULL);
}

void engine_sft_account(tr_engine *e, float mean_loss)
{
    double w = micro_batch_weight(e);
    e->loss_sum += (double)mean_loss * w;
    e->weight_sum += w;
}

int engine_sft_loss(tr_engine *e, double sum, double weight, double *out)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(e->chunks[e->v - 1].model);
    int mine = s->is_last && e->world.groups.coords.tp == 0;
    double v[2] = {mine ? sum : 0.0, mine ? weight : 0.0};
    int rc = tr_comm_allreduce(e->world.world, v, v, 2, TR_COMM_F64, TR_COMM_SUM);
    *out = v[1] > 0 ? v[0] / v[1] : 0.0;
    return rc;
}
