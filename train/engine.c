/* The engine: one rank's world built from the config, and the training iteration.
 * Single process for now (parallel layouts arrive with the TP/PP/DP issues). */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"

struct tr_engine {
    const tr_config *cfg;
    const tr_kernels *k;
    tr_data *data;
    tr_gpt *model;
    tr_gpt_acts *acts;
    size_t n_params;
    float *params, *grads, *adam_m, *adam_v; /* flat, n_params each */
    int micro_batches;                       /* per iteration */
    int32_t *sample, *inputs, *targets;      /* host staging */
};

int tr_engine_create(const tr_config *cfg, tr_engine **out)
{
    const char *world = getenv("WORLD_SIZE");
    if (world && atoi(world) > 1)
        return tr_fail(TR_ERR_CONFIG,
                       "WORLD_SIZE=%s: multi-rank layouts are not built yet; run one process",
                       world);
    if (cfg->parallel.tensor_model_parallel_size != 1 ||
        cfg->parallel.pipeline_model_parallel_size != 1)
        return tr_fail(TR_ERR_CONFIG, "%s: tensor/pipeline parallel sizes > 1 are not built yet",
                       tr_config_where(cfg, "parallel.tensor_model_parallel_size"));
    tr_engine *e = tr_alloc(sizeof *e, "engine");
    if (!e)
        return TR_ERR_NOMEM;
    e->cfg = cfg;
    int rc = TR_OK;
    e->k = tr_kernels_get(strcmp(cfg->training.precision, "fp32") ? "cuda" : "cpu");
    if (!e->k) {
        rc = tr_fail_context(TR_ERR_CONFIG, "%s", tr_config_where(cfg, "training.precision"));
        goto fail;
    }
    const tr_training_config *t = &cfg->training;
    int T = cfg->model.seq_length;
    rc = tr_data_open(cfg->data.data_path, cfg->data.data_format, cfg->data.split, T,
                      cfg->model.vocab_size, t->seed, &e->data);
    if (rc) {
        tr_fail_context(rc, "%s: data.data_path", tr_config_where(cfg, "data.data_path"));
        goto fail;
    }
    if (tr_data_num_samples(e->data, TR_SPLIT_TRAIN) == 0) {
        rc = tr_fail(TR_ERR_INVALID, "%s: the training split of %s has no sample of %d tokens",
                     tr_config_where(cfg, "data.data_path"), cfg->data.data_path, T + 1);
        goto fail;
    }
    tr_gpt_shape shape;
    rc = tr_gpt_shape_from_config(cfg, 0, cfg->model.num_layers, &shape);
    if (rc)
        goto fail;
    rc = tr_gpt_create(&shape, e->k, &e->model);
    if (rc)
        goto fail;
    e->n_params = tr_gpt_num_params(e->model);
    size_t bytes = e->n_params * sizeof(float);
    e->params = e->k->alloc(bytes);
    e->grads = e->k->alloc(bytes);
    e->adam_m = e->k->alloc(bytes);
    e->adam_v = e->k->alloc(bytes);
    if (!e->params || !e->grads || !e->adam_m || !e->adam_v) {
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters (%zu MiB x 4)",
                     e->n_params, bytes >> 20);
        goto fail;
    }
    tr_gpt_bind(e->model, e->params, e->grads);
    rc = tr_gpt_init_params(e->model);
    if (rc)
        goto fail;
    int mb = t->micro_batch_size;
    e->micro_batches = t->global_batch_size / mb;
    rc = tr_gpt_acts_create(e->model, mb, &e->acts);
    if (rc)
        goto fail;
    e->sample = tr_alloc((size_t)(T + 1) * sizeof(int32_t), "sample");
    e->inputs = tr_alloc((size_t)mb * T * sizeof(int32_t), "inputs");
    e->targets = tr_alloc((size_t)mb * T * sizeof(int32_t), "targets");
    if (!e->sample || !e->inputs || !e->targets) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
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
    tr_gpt_acts_free(e->acts);
    tr_gpt_free(e->model);
    if (e->k) {
        e->k->free(e->params);
        e->k->free(e->grads);
        e->k->free(e->adam_m);
        e->k->free(e->adam_v);
    }
    tr_data_close(e->data);
    tr_free(e->sample);
    tr_free(e->inputs);
    tr_free(e->targets);
    tr_free(e);
}

tr_gpt *tr_engine_model(tr_engine *e) { return e->model; }
float *tr_engine_params(tr_engine *e) { return e->params; }
float *tr_engine_grads(tr_engine *e) { return e->grads; }

int tr_engine_batch(tr_engine *e, int split, uint64_t first_sample, int32_t *inputs,
                    int32_t *targets)
{
    int T = e->cfg->model.seq_length, mb = e->cfg->training.micro_batch_size;
    for (int b = 0; b < mb; b++) {
        int rc = tr_data_sample(e->data, split, first_sample + (uint64_t)b, e->sample);
        if (rc)
            return rc;
        memcpy(inputs + (size_t)b * T, e->sample, (size_t)T * sizeof(int32_t));
        memcpy(targets + (size_t)b * T, e->sample + 1, (size_t)T * sizeof(int32_t));
    }
    return TR_OK;
}

int tr_engine_forward_backward(tr_engine *e, int iteration, double *loss_out)
{
    const tr_training_config *t = &e->cfg->training;
    int T = e->cfg->model.seq_length, mb = t->micro_batch_size;
    e->k->zero(NULL, e->grads, e->n_params * sizeof(float));
    /* d(mean loss over the global batch)/d(token loss) = 1 / (GB * T) */
    float scale = 1.0f / ((float)t->global_batch_size * (float)T);
    double loss_sum = 0;
    uint64_t first = (uint64_t)(iteration - 1) * (uint64_t)t->global_batch_size;
    for (int m = 0; m < e->micro_batches; m++) {
        int rc = tr_engine_batch(e, TR_SPLIT_TRAIN, first + (uint64_t)m * mb, e->inputs, e->targets);
        if (rc)
            return rc;
        float loss = 0;
        rc = tr_gpt_forward(e->model, e->acts, e->inputs, NULL, e->targets, scale, &loss);
        if (!rc)
            rc = tr_gpt_backward(e->model, e->acts, NULL);
        if (rc)
            return rc;
        loss_sum += loss;
    }
    *loss_out = loss_sum / e->micro_batches;
    return TR_OK;
}

int tr_engine_optimizer_step(tr_engine *e, int iteration, tr_step_stats *stats)
{
    const tr_training_config *t = &e->cfg->training;
    double norm = sqrt(e->k->sumsq(NULL, e->grads, e->n_params));
    if (!isfinite(norm))
        return tr_fail(TR_ERR_INVALID, "iteration %d: the gradient norm is %g (training diverged)",
                       iteration, norm);
    float grad_scale = 1.0f;
    if (t->clip_grad > 0 && norm > t->clip_grad)
        grad_scale = (float)(t->clip_grad / (norm + 1e-6));
    double lr = tr_lr_at(t, iteration);
    int n = tr_gpt_num_tensors(e->model);
    for (int i = 0; i < n; i++) {
        tr_param_tensor *p = tr_gpt_tensor(e->model, i);
        size_t off = p->offset;
        e->k->adamw(NULL, p->param, p->grad, e->adam_m + off, e->adam_v + off, p->numel, (float)lr,
                    (float)t->adam_beta1, (float)t->adam_beta2, (float)t->adam_eps,
                    p->weight_decay ? (float)t->weight_decay : 0.0f, grad_scale, iteration);
    }
    stats->iteration = iteration;
    stats->lr = lr;
    stats->grad_norm = norm;
    return TR_OK;
}

int tr_engine_evaluate(tr_engine *e, double *val_loss)
{
    const tr_training_config *t = &e->cfg->training;
    int mb = t->micro_batch_size;
    if (tr_data_num_samples(e->data, TR_SPLIT_VALID) == 0)
        return tr_fail(TR_ERR_INVALID, "the validation split is empty");
    double sum = 0;
    int count = 0;
    for (int it = 0; it < t->eval_iters; it++) {
        for (int m = 0; m < e->micro_batches; m++) {
            uint64_t first = (uint64_t)it * t->global_batch_size + (uint64_t)m * mb;
            int rc = tr_engine_batch(e, TR_SPLIT_VALID, first, e->inputs, e->targets);
            float loss = 0;
            if (!rc)
                rc = tr_gpt_forward(e->model, e->acts, e->inputs, NULL, e->targets, 0.0f, &loss);
            if (rc)
                return rc;
            sum += loss;
            count++;
        }
    }
    *val_loss = count ? sum / count : NAN;
    return TR_OK;
}
