/* Writes what the PyTorch oracle needs to check trident's numerics:
 *   DIR/manifest.json  config, tensor table (name, shape, offset), per-iteration lr/loss/norm
 *   DIR/params.bin     initial parameters (float32, the flat buffer)
 *   DIR/grads.bin      gradients after iteration 1's forward+backward (same offsets)
 *   DIR/params_final.bin  parameters after ITERATIONS optimizer steps (same offsets)
 *   DIR/tokens.bin     inputs and targets of every micro-batch of iterations 1..N (int32)
 * usage: oracle_dump CONFIG.yaml DIR ITERATIONS [--set k=v]... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"
#include "train/train.h"

static int write_file(const char *dir, const char *name, const void *data, size_t bytes, const char *mode)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "oracle_dump: cannot write %s\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: oracle_dump CONFIG.yaml DIR ITERATIONS [--set k=v]...\n");
        return 2;
    }
    const char *dir = argv[2];
    int iters = atoi(argv[3]);
    const char *overrides[64];
    int n_overrides = 0;
    for (int i = 4; i + 1 < argc && n_overrides < 64; i += 2)
        overrides[n_overrides++] = argv[i + 1];
    tr_config cfg;
    if (tr_config_load(argv[1], overrides, n_overrides, &cfg)) {
        fprintf(stderr, "oracle_dump: %s\n", tr_errmsg());
        return 2;
    }
    tr_engine *e;
    if (tr_engine_create(&cfg, &e)) {
        fprintf(stderr, "oracle_dump: %s\n", tr_errmsg());
        return 1;
    }
    tr_gpt *g = tr_engine_model(e);
    size_t n = tr_gpt_num_params(g);
    if (write_file(dir, "params.bin", tr_engine_params(e), n * sizeof(float), "wb"))
        return 1;
    /* the token batches of every iteration, in micro-batch order */
    const tr_training_config *t = &cfg.training;
    int T = cfg.model.seq_length, mb = t->micro_batch_size, M = t->global_batch_size / mb;
    size_t per_mb = (size_t)mb * T;
    int32_t *inputs = malloc(per_mb * sizeof(int32_t)), *targets = malloc(per_mb * sizeof(int32_t));
    char name[64];
    snprintf(name, sizeof name, "tokens.bin");
    write_file(dir, name, "", 0, "wb");
    for (int it = 1; it <= iters; it++)
        for (int m = 0; m < M; m++) {
            uint64_t first = (uint64_t)(it - 1) * t->global_batch_size + (uint64_t)m * mb;
            if (tr_engine_batch(e, TR_SPLIT_TRAIN, first, inputs, targets)) {
                fprintf(stderr, "oracle_dump: %s\n", tr_errmsg());
                return 1;
            }
            write_file(dir, name, inputs, per_mb * sizeof(int32_t), "ab");
            write_file(dir, name, targets, per_mb * sizeof(int32_t), "ab");
        }
    double *losses = calloc((size_t)iters, sizeof(double));
    tr_step_stats *stats = calloc((size_t)iters, sizeof *stats);
    for (int it = 1; it <= iters; it++) {
        if (tr_engine_forward_backward(e, it, &losses[it - 1])) {
            fprintf(stderr, "oracle_dump: %s\n", tr_errmsg());
            return 1;
        }
        if (it == 1 && write_file(dir, "grads.bin", tr_engine_grads(e), n * sizeof(float), "wb"))
            return 1;
        if (tr_engine_optimizer_step(e, it, &stats[it - 1])) {
            fprintf(stderr, "oracle_dump: %s\n", tr_errmsg());
            return 1;
        }
    }
    if (write_file(dir, "params_final.bin", tr_engine_params(e), n * sizeof(float), "wb"))
        return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    tr_json_int(&j, "num_layers", s->num_layers);
    tr_json_int(&j, "hidden_size", s->C);
    tr_json_int(&j, "num_heads", s->NH);
    tr_json_int(&j, "seq_length", s->T);
    tr_json_int(&j, "max_positions", s->max_T);
    tr_json_int(&j, "vocab_size", s->V);
    tr_json_int(&j, "padded_vocab_size", s->Vp);
    tr_json_double(&j, "layernorm_epsilon", s->eps);
    tr_json_int(&j, "micro_batch_size", mb);
    tr_json_int(&j, "micro_batches", M);
    tr_json_int(&j, "iterations", iters);
    tr_json_double(&j, "weight_decay", t->weight_decay);
    tr_json_double(&j, "beta1", t->adam_beta1);
    tr_json_double(&j, "beta2", t->adam_beta2);
    tr_json_double(&j, "eps", t->adam_eps);
    tr_json_double(&j, "clip_grad", t->clip_grad);
    tr_json_array_begin(&j, "tensors");
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        tr_param_tensor *p = tr_gpt_tensor(g, i);
        tr_json_object_begin(&j, NULL);
        tr_json_string(&j, "name", p->name);
        tr_json_int(&j, "rows", p->rows);
        tr_json_int(&j, "cols", p->cols);
        tr_json_int(&j, "offset", (long long)p->offset);
        tr_json_bool(&j, "weight_decay", p->weight_decay);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_array_begin(&j, "steps");
    for (int it = 0; it < iters; it++) {
        tr_json_object_begin(&j, NULL);
        tr_json_double(&j, "loss", losses[it]);
        tr_json_double(&j, "lr", stats[it].lr);
        tr_json_double(&j, "grad_norm", stats[it].grad_norm);
        tr_json_double(&j, "loss_scale", stats[it].loss_scale);
        tr_json_int(&j, "skipped_iterations", stats[it].skipped_iterations);
        if (stats[it].has_balancing)
            tr_json_double(&j, "load_balancing_loss", stats[it].load_balancing_loss);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_object_end(&j);
    fclose(f);
    free(inputs);
    free(targets);
    free(losses);
    free(stats);
    tr_engine_free(e);
    tr_config_free(&cfg);
    return 0;
}
