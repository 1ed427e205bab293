/* Writes what tests/sft/test_sft_oracle.py needs to check the fine-tuning loss in PyTorch:
 *   DIR/tensors.json   the tensor table (name, rows, cols, offset) and iteration 1's loss
 *   DIR/params.bin     initial parameters (float32, the flat buffer)
 *   DIR/grads.bin      gradients after iteration 1's forward + backward
 *   DIR/batch.bin      per sample g of the first global batch, from data/ (not the engine):
 *                      tokens (T+1 int32), segments, positions (T int32), weights (T float32)
 * usage: sft_dump CONFIG.yaml DIR */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "data/data.h"
#include "train/train.h"

static int dump(const char *dir, const char *name, const void *p, size_t bytes, const char *mode)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    int bad = !f || fwrite(p, 1, bytes, f) != bytes;
    if (f)
        fclose(f);
    if (bad)
        fprintf(stderr, "sft_dump: cannot write %s\n", path);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: sft_dump CONFIG.yaml DIR\n");
        return 2;
    }
    const char *dir = argv[2];
    tr_config cfg;
    tr_engine *e;
    tr_data *d;
    if (tr_config_load(argv[1], NULL, 0, &cfg) || tr_engine_create(&cfg, &e) ||
        tr_data_open_config(&cfg, &d)) {
        fprintf(stderr, "sft_dump: %s\n", tr_errmsg());
        return 1;
    }
    tr_gpt *g = tr_engine_model(e);
    size_t n = tr_gpt_num_params(g);
    int T = cfg.model.seq_length, GB = cfg.training.global_batch_size;
    int32_t *tok = malloc((size_t)(T + 1) * 4), *seg = malloc((size_t)T * 4), *pos = malloc((size_t)T * 4);
    float *w = malloc((size_t)T * 4);
    int bad = dump(dir, "params.bin", tr_engine_params(e), n * sizeof(float), "wb") ||
              dump(dir, "batch.bin", "", 0, "wb");
    for (int s = 0; s < GB && !bad; s++) {
        if (tr_data_sample_sft(d, TR_SPLIT_TRAIN, (uint64_t)s, tok, w, seg, pos)) {
            fprintf(stderr, "sft_dump: %s\n", tr_errmsg());
            return 1;
        }
        bad = dump(dir, "batch.bin", tok, (size_t)(T + 1) * 4, "ab") ||
              dump(dir, "batch.bin", seg, (size_t)T * 4, "ab") ||
              dump(dir, "batch.bin", pos, (size_t)T * 4, "ab") ||
              dump(dir, "batch.bin", w, (size_t)T * 4, "ab");
    }
    double loss = 0;
    if (!bad && tr_engine_forward_backward(e, 1, &loss)) {
        fprintf(stderr, "sft_dump: %s\n", tr_errmsg());
        return 1;
    }
    bad = bad || dump(dir, "grads.bin", tr_engine_grads(e), n * sizeof(float), "wb");
    char path[1024];
    snprintf(path, sizeof path, "%s/tensors.json", dir);
    FILE *f = bad ? NULL : fopen(path, "w");
    if (!f)
        return 1;
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_double(&j, "loss", loss);
    tr_json_array_begin(&j, "tensors");
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        tr_param_tensor *p = tr_gpt_tensor(g, i);
        tr_json_object_begin(&j, NULL);
        tr_json_string(&j, "name", p->name);
        tr_json_int(&j, "rows", p->rows);
        tr_json_int(&j, "cols", p->cols);
        tr_json_int(&j, "offset", (long long)p->offset);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_object_end(&j);
    fclose(f);
    free(tok), free(seg), free(pos), free(w);
    tr_data_close(d);
    tr_engine_free(e);
    tr_config_free(&cfg);
    return 0;
}
