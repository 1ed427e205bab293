/* What `trident generate` and `trident eval` share: the model of a checkpoint or of a Hugging
 * Face folder, loaded for inference with tensor parallelism over every rank of the job, and
 * the tokenizer an HF folder brings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "comm/comm.h"
#include "core/core.h"
#include "hf/hf.h"
#include "launch/args.h"
#include "train/train.h"
#include "yaml/config.h"

/* The model config of the checkpoint (or HF folder): its sizes (and, from --config or a
 * Llama / Bloom folder, its family), every other key at the schema's default, tensor
 * parallelism over the whole world. */
static int model_config(infer_model *im, int world)
{
    tr_model_config m = {0};
    tr_config run;
    int rc;
    im->family = TR_HF_GPT2;
    if (tr_hf_is_model_folder(im->dir)) {
        tr_hf_gpt2_config hc;
        im->iteration = 0;
        rc = tr_hf_read_family_config(im->dir, &m, &im->family);
        if (!rc && im->family == TR_HF_GPT2 && !(rc = tr_hf_read_gpt2_config(im->dir, &hc)))
            tr_hf_gpt2_model_config(&hc, &m);
        if (!rc && im->family != TR_HF_GPT2 && world > 1)
            rc = tr_fail(TR_ERR_INVALID, "%s: Llama, Qwen2 and Bloom folders load into one rank "
                         "(no --nproc); convert it first for tensor parallelism", im->dir);
    } else {
        rc = tr_checkpoint_read_model(im->dir, &m, &im->iteration);
    }
    if (rc)
        return rc;
    char fam[600];
    tr_model_family_flow(&m, fam, sizeof fam);
    if (im->config) { /* the run's model section: its family, the checkpoint's sizes */
        if ((rc = tr_config_load(im->config, NULL, 0, &run)))
            return rc;
        const tr_model_config *r = &run.model;
        if (r->num_layers != m.num_layers || r->hidden_size != m.hidden_size ||
            r->num_attention_heads != m.num_attention_heads || r->vocab_size != m.vocab_size ||
            r->max_position_embeddings != m.max_position_embeddings)
            rc = tr_fail(TR_ERR_INVALID, "%s: its model (num_layers %d, hidden_size %d, heads %d, "
                         "vocab_size %d, max_position_embeddings %d) is not %s's", im->config,
                         r->num_layers, r->hidden_size, r->num_attention_heads, r->vocab_size,
                         r->max_position_embeddings, im->dir);
        tr_model_family_flow(r, fam, sizeof fam);
        tr_config_free(&run);
        if (rc)
            return rc;
    }
    char text[2048];
    snprintf(text, sizeof text,
             "model: {num_layers: %d, hidden_size: %d, num_attention_heads: %d, vocab_size: %d,\n"
             "        max_position_embeddings: %d, seq_length: %d%s}\n"
             "parallel: {tensor_model_parallel_size: %d}\n"
             "training: {micro_batch_size: 1, train_iters: 1, lr: 1, device: %s}\n"
             "data: {data_path: none}\n",
             m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size,
             m.max_position_embeddings, tr_model_longest_seq(&m), fam, world, im->device);
    rc = tr_config_load_string(text, strlen(text), im->dir, NULL, 0, &im->cfg);
    if (rc)
        return tr_fail_context(rc, "the model of checkpoint %s on %d tensor-parallel ranks",
                               im->dir, world);
    im->have_cfg = 1;
    return TR_OK;
}

/* The weights: the checkpoint's, or the HF folder's through host memory (the parameters may
 * be on a GPU). */
static int load_weights(infer_model *im)
{
    const tr_kernels *k = im->k;
    if (!tr_hf_is_model_folder(im->dir))
        return tr_checkpoint_load_model(im->dir, im->g, k, im->params, &im->iteration);
    size_t bytes = tr_gpt_num_params(im->g) * sizeof(float);
    float *host = strcmp(k->name, "cpu") ? malloc(bytes) : im->params;
    if (!host)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters", tr_gpt_num_params(im->g));
    if (host != im->params)
        tr_gpt_bind(im->g, host, NULL);
    int rc = im->family == TR_HF_GPT2 ? tr_hf_load_gpt2(im->dir, im->g, host)
                                      : tr_hf_load_family(im->dir, im->family, im->g, host);
    if (host != im->params) {
        tr_gpt_bind(im->g, im->params, NULL);
        if (!rc)
            k->to_device(NULL, im->params, host, bytes);
        free(host);
    }
    return rc;
}

int infer_model_open(infer_model *im)
{
    tr_comm_config cc = tr_comm_config_default();
    cc.backend = strncmp(im->device, "cuda", 4) ? TR_COMM_BACKEND_UCX : TR_COMM_BACKEND_NCCL;
    int rc = tr_comm_init_world(&cc, &im->world);
    if (rc)
        return rc;
    im->rank = tr_comm_rank(im->world);
    im->size = tr_comm_size(im->world);
    tr_log_set_rank(im->size > 1 ? im->rank : -1);
    rc = model_config(im, im->size);
    if (!rc && !(im->k = tr_kernels_get(im->device)))
        rc = tr_fail_context(TR_ERR_CONFIG, "--device %s", im->device);
    if (!rc)
        rc = tr_gpt_shape_from_config(&im->cfg, 0, im->cfg.model.num_layers, im->rank,
                                      &im->shape);
    if (!rc)
        rc = tr_gpt_create(&im->shape, im->k, im->size > 1 ? im->world : NULL, &im->g);
    if (!rc && !(im->params = im->k->alloc(tr_gpt_num_params(im->g) * sizeof(float))))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters", tr_gpt_num_params(im->g));
    if (!rc) {
        tr_gpt_bind(im->g, im->params, NULL);
        rc = load_weights(im);
    }
    return rc;
}

void infer_model_close(infer_model *im)
{
    tr_gpt_free(im->g);
    if (im->k)
        im->k->free(im->params);
    if (im->have_cfg)
        tr_config_free(&im->cfg);
    tr_comm_destroy(im->world);
    im->g = NULL;
    im->params = NULL;
    im->have_cfg = 0;
    im->world = NULL;
}

int infer_tokenizer_open(const char *who, const char *dir, tr_tokenizer_files *tok,
                         char *path, size_t cap, tr_tokenizer **out)
{
    *out = NULL;
    /* a Hugging Face folder's own tokenizer.json, as from_pretrained takes it */
    snprintf(path, cap, "%s/tokenizer.json", dir);
    if (!tok->type && !tok->vocab_file && !tok->merge_file && !tok->tokenizer_model &&
        tr_hf_is_model_folder(dir) && !access(path, F_OK)) {
        tok->type = "HFTokenizer";
        tok->tokenizer_model = path;
        fprintf(stderr, "%s: the tokenizer of %s (--tokenizer-type ByteLevel for bytes)\n", who,
                path);
    }
    int rc = TR_OK;
    if ((tok->type || tok->vocab_file || tok->merge_file || tok->tokenizer_model) &&
        (rc = tr_tokenizer_open(tok, out))) {
        fprintf(stderr, "%s: %s\n", who, tr_errmsg());
        return rc == TR_ERR_IO ? 1 : 2;
    }
    return 0;
}
