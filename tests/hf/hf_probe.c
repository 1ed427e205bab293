/* What the transformers oracle (test_hf_oracle.py) needs from trident, through the public API:
 *   hf_probe logits CKPT_DIR TOKENS B T OUT
 *       the logits (B, T, V) float32 of the latest checkpoint of CKPT_DIR for the int32 tokens
 *       (B, T) in TOKENS: the model's forward pass over each whole sequence (one stage, no TP;
 *       the vocabulary padded as a training run would pad it, the padding dropped)
 *   hf_probe batch CONFIG OUT [KEY=VALUE]...
 *       the tokens of iteration 1 (int32; per micro-batch its inputs then its targets, each
 *       (micro_batch_size, seq_length)) as a single-process engine of CONFIG reads them
 * Exit 0, or 1 with the message on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"
#include "kernels/kernels.h"
#include "model/gpt.h"
#include "train/train.h"

static int fail(const char *what)
{
    fprintf(stderr, "hf_probe: %s: %s\n", what, tr_errmsg());
    return 1;
}

static int read_all(const char *path, void *buf, size_t bytes)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, bytes, f) : 0;
    if (f)
        fclose(f);
    return n == bytes ? TR_OK : tr_fail(TR_ERR_IO, "cannot read %zu bytes of %s", bytes, path);
}

static int write_all(const char *path, const void *buf, size_t bytes)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, bytes, f) == bytes;
    ok &= f && !fclose(f);
    return ok ? TR_OK : tr_fail(TR_ERR_IO, "cannot write %s", path);
}

static int logits(const char *dir, const char *tokens_path, int B, int T, const char *out)
{
    tr_model_config m = {.make_vocab_size_divisible_by = 64};
    int rc = tr_checkpoint_read_model(dir, &m, NULL);
    if (rc)
        return fail(dir);
    tr_gpt_shape s = {.num_layers = m.num_layers, .C = m.hidden_size,
                      .NH = m.num_attention_heads, .T = T, .max_T = m.max_position_embeddings,
                      .V = m.vocab_size, .Vp = tr_gpt_padded_vocab(&m, 1), .eps = 1e-5f,
                      .layer_count = m.num_layers, .is_first = 1, .is_last = 1, .tp_size = 1};
    const tr_kernels *k = tr_kernels_cpu();
    tr_gpt *g = NULL;
    tr_gpt_cache *c = NULL;
    size_t n_tok = (size_t)B * T, n_out = n_tok * (size_t)s.V;
    int32_t *tok = malloc(n_tok * sizeof *tok);
    float *lg = malloc(n_out * sizeof *lg), *params = NULL;
    if (!tok || !lg)
        return fail("out of memory");
    if ((rc = tr_gpt_create(&s, k, NULL, &g)))
        return fail("tr_gpt_create");
    params = k->alloc(tr_gpt_num_params(g) * sizeof(float));
    tr_gpt_bind(g, params, NULL);
    if ((rc = tr_checkpoint_load_model(dir, g, k, params, NULL)))
        return fail(dir);
    if ((rc = read_all(tokens_path, tok, n_tok * sizeof *tok)))
        return fail(tokens_path);
    if ((rc = tr_gpt_cache_create(g, B, T, &c)) || (rc = tr_gpt_decode(c, tok, T, 1, lg)))
        return fail("forward");
    if ((rc = write_all(out, lg, n_out * sizeof *lg)))
        return fail(out);
    tr_gpt_cache_free(c);
    tr_gpt_free(g);
    k->free(params);
    free(tok);
    free(lg);
    return 0;
}

static int batch(const char *config, const char *out, int n_sets, char **sets)
{
    tr_config cfg;
    tr_engine *e = NULL;
    if (tr_config_load(config, (const char *const *)sets, n_sets, &cfg))
        return fail(config);
    if (tr_engine_create(&cfg, &e))
        return fail("tr_engine_create");
    const tr_training_config *t = &cfg.training;
    int mb = t->micro_batch_size, M = t->global_batch_size / mb;
    size_t per = (size_t)mb * (size_t)cfg.model.seq_length;
    int32_t *all = malloc(2 * per * (size_t)M * sizeof *all);
    if (!all)
        return fail("out of memory");
    for (int i = 0; i < M; i++)
        if (tr_engine_batch(e, TR_SPLIT_TRAIN, (uint64_t)i * (uint64_t)mb, all + 2 * per * i,
                            all + 2 * per * i + per))
            return fail("tr_engine_batch");
    if (write_all(out, all, 2 * per * (size_t)M * sizeof *all))
        return fail(out);
    free(all);
    tr_engine_free(e);
    tr_config_free(&cfg);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "logits"))
        return logits(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argv[6]);
    if (argc >= 4 && !strcmp(argv[1], "batch"))
        return batch(argv[2], argv[3], argc - 4, argv + 4);
    fprintf(stderr, "usage: hf_probe logits CKPT_DIR TOKENS B T OUT\n"
                    "       hf_probe batch CONFIG OUT [KEY=VALUE]...\n");
    return 2;
}
