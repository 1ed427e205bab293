/* What the transformers oracle (test_hf_oracle.py) needs from trident, through the public API:
 *   hf_probe logits CKPT_DIR TOKENS B T OUT
 *       the logits (B, T, V) float32 of the latest checkpoint of CKPT_DIR for the int32 tokens
 *       (B, T) in TOKENS: the model's forward pass over each whole sequence (one stage, no TP;
 *       the vocabulary padded as a training run would pad it, the padding dropped)
 *   hf_probe logits-config CONFIG TOKENS B OUT
 *       the same for the model of CONFIG (any family: its model section, one stage, no TP)
 *       from the latest checkpoint of its checkpoint.load, B sequences of seq_length, through
 *       the training forward (tr_gpt_forward_logits)
 *       (LoRA: the base from finetune.load, the adapters from checkpoint.load or initial)
 *   hf_probe lora-init CONFIG OUTDIR
 *       the initial adapters of CONFIG's LoRA model in PEFT's format (adapter_config.json,
 *       adapter_model.safetensors), for the peft oracle
 *   hf_probe batch CONFIG OUT [KEY=VALUE]...
 *       the tokens of iteration 1 (int32; per micro-batch its inputs then its targets, each
 *       (micro_batch_size, seq_length)) as a single-process engine of CONFIG reads them
 *   hf_probe load-check HF_DIR   (alone, or as each rank of `trident launch --nproc N`)
 *       tr_hf_load_gpt2 into the whole model, into this rank's tensor-parallel shards of it
 *       (TP over the N ranks; the vocabulary padded for N) and into a last pipeline stage
 *       (layers 1..L-1 and the head's copy of wte): every shard must be its slice of the
 *       whole model (padding rows 0), and the TP model's logits the whole model's (1e-5)
 * Exit 0, or 1 with the message on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/core.h"
#include "hf/hf.h"
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
                      .V = m.vocab_size, .Vp = tr_gpt_padded_vocab(&m, 1),
                      .eps = (float)m.layernorm_epsilon,
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

static int logits_config(const char *config, const char *tokens_path, int B, const char *out)
{
    tr_config cfg;
    if (tr_config_load(config, NULL, 0, &cfg))
        return fail(config);
    cfg.parallel.tensor_model_parallel_size = 1;
    cfg.parallel.sequence_parallel = 0;
    tr_gpt_shape s;
    const tr_kernels *k = tr_kernels_cpu();
    tr_gpt *g = NULL;
    tr_gpt_acts *a = NULL;
    if (tr_gpt_shape_from_config(&cfg, 0, cfg.model.num_layers, 0, &s) ||
        tr_gpt_create(&s, k, NULL, &g))
        return fail("the model");
    size_t n_tok = (size_t)B * s.T, n_out = n_tok * (size_t)s.V;
    int32_t *tok = malloc(n_tok * sizeof *tok);
    float *lg = malloc(n_out * sizeof *lg), *params = k->alloc(tr_gpt_num_params(g) * sizeof(float));
    if (!tok || !lg || !params)
        return fail("out of memory");
    tr_gpt_bind(g, params, NULL);
    if (tr_gpt_init_params(g)) /* LoRA without checkpoint.load: the initial adapters */
        return fail("init");
    if (*cfg.checkpoint.load && tr_checkpoint_load_model(cfg.checkpoint.load, g, k, params, NULL))
        return fail(cfg.checkpoint.load);
    if (*cfg.finetune.load && tr_hf_load_base(cfg.finetune.load, g, k))
        return fail(cfg.finetune.load);
    if (read_all(tokens_path, tok, n_tok * sizeof *tok) || tr_gpt_acts_create(g, B, &a) ||
        tr_gpt_forward_logits(g, a, tok, lg) || write_all(out, lg, n_out * sizeof *lg))
        return fail("logits");
    tr_gpt_acts_free(a);
    tr_gpt_free(g);
    k->free(params);
    free(tok);
    free(lg);
    tr_config_free(&cfg);
    return 0;
}

/* The initial adapters of CONFIG's LoRA model (whole, TP 1) in PEFT's format into OUTDIR. */
static int lora_init(const char *config, const char *outdir)
{
    tr_config cfg;
    if (tr_config_load(config, NULL, 0, &cfg))
        return fail(config);
    cfg.parallel.tensor_model_parallel_size = 1;
    cfg.parallel.sequence_parallel = 0;
    tr_gpt_shape s;
    tr_gpt *g = NULL;
    if (tr_gpt_shape_from_config(&cfg, 0, cfg.model.num_layers, 0, &s) ||
        tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g))
        return fail("the model");
    float *params = malloc(tr_gpt_num_params(g) * sizeof(float) + 1);
    if (!params)
        return fail("out of memory");
    tr_gpt_bind(g, params, NULL);
    if (tr_gpt_init_params(g) || tr_make_dirs(outdir) ||
        tr_hf_write_lora_adapter(outdir, g, params))
        return fail(outdir);
    tr_gpt_free(g);
    free(params);
    tr_config_free(&cfg);
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

/* A model of the sizes of m on TP rank r of W, layers [first, first + count), bound to
 * fresh host memory filled from HF_DIR. Only its weights are compared, so it is sized for one
 * position (the position table still holds max_position_embeddings rows). */
static int load_model(const char *dir, const tr_model_config *m, int W, int r, tr_comm *tp,
                      int first, int count, tr_gpt **g, float **params)
{
    tr_gpt_shape s = {.num_layers = m->num_layers, .C = m->hidden_size,
                      .NH = m->num_attention_heads, .T = 1,
                      .max_T = m->max_position_embeddings, .V = m->vocab_size,
                      .Vp = tr_gpt_padded_vocab(m, W), .eps = 1e-5f, .layer_first = first,
                      .layer_count = count, .is_first = first == 0,
                      .is_last = first + count == m->num_layers, .tp_size = W, .tp_rank = r};
    int rc = tr_gpt_create(&s, tr_kernels_cpu(), W > 1 ? tp : NULL, g);
    if (rc)
        return rc;
    *params = calloc(tr_gpt_num_params(*g) + 1, sizeof(float));
    if (!*params)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    memset(*params, 0xff, tr_gpt_num_params(*g) * sizeof(float)); /* NaNs: every element set? */
    tr_gpt_bind(*g, *params, NULL);
    return tr_hf_load_gpt2(dir, *g, *params);
}

/* Every tensor of g (TP rank r) is its slice of the same-named tensor of the whole model w;
 * rows past V (padding) are 0. Returns the number of mismatches. */
static int compare_shards(tr_gpt *g, tr_gpt *w, int r)
{
    int bad = 0;
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i), *whole = NULL;
        for (int j = 0; j < tr_gpt_num_tensors(w) && !whole; j++)
            if (!strcmp(tr_gpt_tensor(w, j)->name, t->name))
                whole = tr_gpt_tensor(w, j);
        for (int a = 0; a < t->rows && whole; a++)
            for (int b = 0; b < t->cols; b++) {
                int R = t->split_dim == 0 ? r * t->rows + a : a;
                int C = t->split_dim == 1 ? r * t->cols + b : b;
                float want = R < whole->rows ? whole->param[(size_t)R * whole->cols + C] : 0.0f;
                if (memcmp(&t->param[(size_t)a * t->cols + b], &want, sizeof want))
                    bad++;
            }
        if (!whole) {
            fprintf(stderr, "hf_probe: no tensor %s in the whole model\n", t->name);
            bad++;
        }
    }
    return bad;
}

static int load_check(const char *dir)
{
    tr_comm_config cc = tr_comm_config_default();
    tr_comm *world = NULL;
    tr_hf_gpt2_config hc;
    tr_model_config m = {.make_vocab_size_divisible_by = 64};
    if (tr_comm_init_world(&cc, &world) || tr_hf_read_gpt2_config(dir, &hc))
        return fail(dir);
    tr_hf_gpt2_model_config(&hc, &m);
    int W = tr_comm_size(world), r = tr_comm_rank(world), L = m.num_layers;
    tr_gpt *whole, *shard, *stage;
    float *pw, *ps, *pst;
    if (load_model(dir, &m, 1, 0, NULL, 0, L, &whole, &pw) ||
        load_model(dir, &m, W, r, world, 0, L, &shard, &ps) ||
        load_model(dir, &m, 1, 0, NULL, 1, L - 1, &stage, &pst))
        return fail("tr_hf_load_gpt2");
    int bad_tp = compare_shards(shard, whole, r);
    int bad_stage = compare_shards(stage, whole, 0);
    /* logits of the TP model against the whole model's, over the first 16 positions */
    enum { N = 16 };
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 7919) % m.vocab_size);
    float *a = malloc(sizeof(float) * N * (size_t)m.vocab_size);
    float *b = malloc(sizeof(float) * N * (size_t)m.vocab_size);
    tr_gpt_cache *ca = NULL, *cb = NULL;
    if (!a || !b || tr_gpt_cache_create(whole, 1, N, &ca) || tr_gpt_cache_create(shard, 1, N, &cb) ||
        tr_gpt_decode(ca, tok, N, 1, a) || tr_gpt_decode(cb, tok, N, 1, b))
        return fail("decode");
    double worst = 0, top = 0;
    for (size_t i = 0; i < (size_t)N * (size_t)m.vocab_size; i++) {
        double d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i], v = a[i] > 0 ? a[i] : -a[i];
        worst = d > worst ? d : worst;
        top = v > top ? v : top;
    }
    printf("rank %d of %d: %d TP-shard and %d stage elements differ from the whole model; "
           "logits relative %.2e\n", r, W, bad_tp, bad_stage, worst / top);
    int ok = !bad_tp && !bad_stage && worst <= 1e-5 * top;
    tr_gpt_cache_free(ca);
    tr_gpt_cache_free(cb);
    free(a);
    free(b);
    tr_gpt_free(whole);
    tr_gpt_free(shard);
    tr_gpt_free(stage);
    free(pw);
    free(ps);
    free(pst);
    tr_comm_destroy(world);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "logits"))
        return logits(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argv[6]);
    if (argc == 6 && !strcmp(argv[1], "logits-config"))
        return logits_config(argv[2], argv[3], atoi(argv[4]), argv[5]);
    if (argc >= 4 && !strcmp(argv[1], "batch"))
        return batch(argv[2], argv[3], argc - 4, argv + 4);
    if (argc == 4 && !strcmp(argv[1], "lora-init"))
        return lora_init(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "load-check"))
        return load_check(argv[2]);
    fprintf(stderr, "usage: hf_probe logits CKPT_DIR TOKENS B T OUT\n"
                    "       hf_probe batch CONFIG OUT [KEY=VALUE]...\n"
                    "       hf_probe load-check HF_DIR\n");
    return 2;
}
