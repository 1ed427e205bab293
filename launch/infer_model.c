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

int infer_lora_base(const char *dir, char *base, size_t cap)
{
    char tracker[4400];
    snprintf(tracker, sizeof tracker, "%s/base/latest_checkpointed_iteration.txt", dir);
    if (snprintf(base, cap, "%s/base", dir) >= (int)cap || access(tracker, F_OK))
        return 0;
    int rank = 0;
    double alpha, dropout;
    char targets[64];
    return !tr_checkpoint_read_lora(dir, &rank, &alpha, &dropout, targets, sizeof targets) &&
           rank > 0;
}

int infer_lora_run_config(const char *dir, const char *base, tr_config *cfg)
{
    tr_model_config m = {0};
    int rank = 0, it = 0;
    double alpha = 0, dropout = 0;
    char targets[32], fam[600], load[4400] = "", text[6000];
    int rc = tr_checkpoint_read_model(dir, &m, &it);
    if (!rc)
        rc = tr_checkpoint_read_lora(dir, &rank, &alpha, &dropout, targets, sizeof targets);
    if (!rc && !rank)
        rc = tr_fail(TR_ERR_INVALID, "%s: the latest checkpoint's manifest has no lora line (not "
                     "a LoRA run's, or saved before 2026-11-28): give the run's config "
                     "(--config)", dir);
    if (rc)
        return rc;
    if (base) { /* a YAML double-quoted string */
        size_t n = snprintf(load, sizeof load, "load: \"");
        for (const char *p = base; *p && n + 4 < sizeof load; p++) {
            if (*p == '"' || *p == '\\')
                load[n++] = '\\';
            load[n++] = *p;
        }
        snprintf(load + n, sizeof load - n, "\", ");
    }
    tr_model_family_flow(&m, fam, sizeof fam);
    snprintf(text, sizeof text,
             "model: {num_layers: %d, hidden_size: %d, num_attention_heads: %d, vocab_size: %d,\n"
             "        max_position_embeddings: %d, seq_length: %d%s}\n"
             "training: {micro_batch_size: 1, train_iters: 1, lr: 1}\n"
             "data: {data_path: none}\n"
             "finetune: {%slora: {rank: %d, alpha: %.9g, dropout: %.9g, target_modules: %s}}\n",
             m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size,
             m.max_position_embeddings, tr_model_longest_seq(&m), fam, load, rank, alpha, dropout,
             targets);
    rc = tr_config_load_string(text, strlen(text), dir, NULL, 0, cfg);
    return rc ? tr_fail_context(rc, "the LoRA run of checkpoint %s", dir) : TR_OK;
}

/* The model config of the checkpoint (or HF folder): its sizes (and, from --config or a
 * family folder, its family), every other key at the schema's default, tensor parallelism
 * over the model replica's ranks. */
static int model_config(infer_model *im, int world)
{
    tr_model_config m = {0};
    int rc;
    im->family = TR_HF_GPT2;
    if (tr_hf_is_model_folder(im->dir)) {
        tr_hf_gpt2_config hc;
        im->iteration = 0;
        rc = tr_hf_read_family_config(im->dir, &m, &im->family);
        if (!rc && im->family == TR_HF_GPT2 && !(rc = tr_hf_read_gpt2_config(im->dir, &hc)))
            tr_hf_gpt2_model_config(&hc, &m);
    } else {
        rc = tr_checkpoint_read_model(im->dir, &m, &im->iteration);
    }
    char base[4200];
    if (!rc && !im->config && infer_lora_base(im->dir, base, sizeof base)) {
        /* imported PEFT adapters (convert --adapters): the run from the manifest, DIR/base */
        if ((rc = infer_lora_run_config(im->dir, base, &im->run)))
            return rc;
        im->have_run = 1;
    }
    if (rc)
        return rc;
    char fam[600];
    tr_model_family_flow(&m, fam, sizeof fam);
    if (im->config) { /* the run's model section: its family, the checkpoint's sizes */
        if ((rc = tr_config_load(im->config, NULL, 0, &im->run)))
            return rc;
        im->have_run = 1;
        const tr_model_config *r = &im->run.model;
        if (r->num_layers != m.num_layers || r->hidden_size != m.hidden_size ||
            r->num_attention_heads != m.num_attention_heads || r->vocab_size != m.vocab_size ||
            r->max_position_embeddings != m.max_position_embeddings)
            rc = tr_fail(TR_ERR_INVALID, "%s: its model (num_layers %d, hidden_size %d, heads %d, "
                         "vocab_size %d, max_position_embeddings %d) is not %s's", im->config,
                         r->num_layers, r->hidden_size, r->num_attention_heads, r->vocab_size,
                         r->max_position_embeddings, im->dir);
        tr_model_family_flow(r, fam, sizeof fam);
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
             m.max_position_embeddings, tr_model_longest_seq(&m), fam, world,
             strncmp(im->device, "cuda", 4) ? "cpu" : "cuda"); /* (the kernels: im->device's) */
    rc = tr_config_load_string(text, strlen(text), im->dir, NULL, 0, &im->cfg);
    if (rc)
        return tr_fail_context(rc, "the model of checkpoint %s on %d tensor-parallel ranks",
                               im->dir, world);
    im->have_cfg = 1;
    return TR_OK;
}

/* A LoRA run's checkpoint (its adapters alone): the base of --config's finetune.load with
 * W += (alpha / r) B A, as `convert --merge-lora` makes it, built whole on the host, then this
 * rank's shards into host (im->g's layout). */
static int load_lora_merged(infer_model *im, float *host)
{
    const tr_config *run = &im->run; /* (model_config loaded it) */
    const char *config = im->config ? im->config : "its manifest";
    tr_config one = *run; /* the whole model on one rank (shallow: nothing freed here) */
    one.parallel.tensor_model_parallel_size = 1;
    one.parallel.sequence_parallel = 0;
    const tr_kernels *cpu = tr_kernels_cpu();
    tr_gpt_shape s, ps;
    tr_gpt *lora = NULL, *plain = NULL;
    float *adapters = NULL, *merged = NULL;
    int it = 0;
    int rc = tr_gpt_shape_from_config(&one, 0, run->model.num_layers, 0, &s);
    if (!rc && !s.lora_rank)
        rc = tr_fail(TR_ERR_INVALID, "%s holds a LoRA run's adapters; %s has no "
                     "finetune.lora.rank: give the run's config", im->dir, config);
    if (!rc && !*run->finetune.load)
        rc = tr_fail(TR_ERR_INVALID, "%s: no finetune.load, the base model the adapters of %s "
                     "were trained on", config, im->dir);
    s.recompute = s.recompute_attention = 0;
    ps = s;
    ps.lora_rank = 0;
    if (!rc)
        rc = tr_gpt_create(&s, cpu, NULL, &lora);
    if (!rc && !(adapters = malloc(tr_gpt_num_params(lora) * sizeof(float) + 1)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for the adapters");
    if (!rc) {
        tr_gpt_bind(lora, adapters, NULL);
        rc = tr_checkpoint_load_model(im->dir, lora, cpu, adapters, &it);
    }
    if (!rc)
        rc = tr_hf_load_base(run->finetune.load, lora, cpu);
    if (!rc)
        rc = tr_gpt_create(&ps, cpu, NULL, &plain);
    if (!rc && !(merged = malloc(tr_gpt_num_params(plain) * sizeof(float) + 1)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters", tr_gpt_num_params(plain));
    if (!rc) {
        tr_gpt_bind(plain, merged, NULL);
        rc = tr_hf_merge_lora(lora, plain, merged);
    }
    if (!rc && tr_gpt_num_tensors(plain) != tr_gpt_num_tensors(im->g))
        rc = tr_fail(TR_ERR_INVALID, "the merged model of %s has %d tensors, the model %d",
                     config, tr_gpt_num_tensors(plain), tr_gpt_num_tensors(im->g));
    for (int i = 0; !rc && i < tr_gpt_num_tensors(im->g); i++) {
        const tr_param_tensor *t = tr_gpt_tensor(im->g, i), *w = tr_gpt_tensor(plain, i);
        if (strcmp(t->name, w->name) || t->full_cols < w->cols)
            rc = tr_fail(TR_ERR_INVALID, "the merged model's tensor %s is not the model's %s",
                         w->name, t->name);
        else
            tr_param_copy_shard(t, im->shape.tp_rank, merged + w->offset, (size_t)w->rows,
                                (size_t)w->cols, host + t->offset);
    }
    if (!rc) {
        im->iteration = it;
        tr_info("%s: a LoRA run's adapters (rank %d, alpha %g) merged into the base %s",
                im->dir, s.lora_rank, (double)s.lora_alpha, run->finetune.load);
    }
    tr_gpt_free(plain);
    tr_gpt_free(lora);
    free(merged);
    free(adapters);
    return rc;
}

/* A family folder (Llama, Qwen2, Bloom, GPT-NeoX, Falcon, Phi) into this rank's shards (host
 * memory bound to im->g): the whole model read into a one-rank twin on the host, each tensor's
 * shard cut from it (tr_param_copy_shard: rows or columns, the vocabulary padded for this TP
 * size). One rank: read straight in. */
static int load_family_shards(infer_model *im, float *host)
{
    if (im->shape.tp_size == 1)
        return tr_hf_load_family(im->dir, im->family, im->g, host);
    tr_gpt_shape ws = im->shape;
    ws.tp_size = 1, ws.tp_rank = 0, ws.sequence_parallel = 0;
    tr_gpt *whole = NULL;
    float *wp = NULL;
    int rc = tr_gpt_create(&ws, tr_kernels_cpu(), NULL, &whole);
    if (!rc && !(wp = malloc(tr_gpt_num_params(whole) * sizeof(float) + 1)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for the %zu parameters of %s",
                     tr_gpt_num_params(whole), im->dir);
    if (!rc) {
        tr_gpt_bind(whole, wp, NULL);
        rc = tr_hf_load_family(im->dir, im->family, whole, wp);
    }
    for (int i = 0; !rc && i < tr_gpt_num_tensors(im->g); i++) {
        const tr_param_tensor *t = tr_gpt_tensor(im->g, i), *w = tr_gpt_tensor(whole, i);
        if (i >= tr_gpt_num_tensors(whole) || strcmp(t->name, w->name))
            rc = tr_fail(TR_ERR_INTERNAL, "%s: the whole model's tensor %d is not %s", im->dir,
                         i, t->name);
        else
            tr_param_copy_shard(t, im->shape.tp_rank, wp + w->offset, (size_t)w->rows,
                                (size_t)w->cols, host + t->offset);
    }
    tr_gpt_free(whole);
    free(wp);
    return rc;
}

/* The weights: the checkpoint's, a LoRA checkpoint's merged into its base, or the HF folder's,
 * through host memory (the parameters may be on a GPU). */
static int load_weights(infer_model *im)
{
    const tr_kernels *k = im->k;
    int lora_rank = 0, hf = tr_hf_is_model_folder(im->dir);
    double alpha, dropout;
    char targets[64];
    if (!hf) {
        int rc = tr_checkpoint_read_lora(im->dir, &lora_rank, &alpha, &dropout, targets,
                                         sizeof targets);
        if (rc)
            return rc;
        if (!lora_rank)
            return tr_checkpoint_load_model(im->dir, im->g, k, im->params, &im->iteration);
        if (!im->have_run)
            return tr_fail(TR_ERR_INVALID, "%s holds a LoRA run's adapters alone (rank %d): give "
                           "the run's config (--config RUN.yaml), whose finetune.load is the base "
                           "they are merged into (trident convert --to hf --merge-lora writes "
                           "the merged model)", im->dir, lora_rank);
    }
    size_t bytes = tr_gpt_num_params(im->g) * sizeof(float);
    float *host = strcmp(k->name, "cpu") ? malloc(bytes) : im->params;
    if (!host)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters", tr_gpt_num_params(im->g));
    if (host != im->params)
        tr_gpt_bind(im->g, host, NULL);
    int rc = !hf                       ? load_lora_merged(im, host)
             : im->family == TR_HF_GPT2 ? tr_hf_load_gpt2(im->dir, im->g, host)
                                        : load_family_shards(im, host);
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
    if (!tr_kernels_known(im->device)) /* (before the communicator starts) */
        return tr_fail(TR_ERR_CONFIG, "--device %s: no such kernel backend (cpu; cuda: bf16 "
                       "products, cuda-fp32: fp32; cpu-bf16 / cpu-fp16: the CPU rounding to "
                       "16-bit storage)", im->device);
    tr_comm_config cc = tr_comm_config_default();
    cc.backend = strncmp(im->device, "cuda", 4) ? TR_COMM_BACKEND_UCX : TR_COMM_BACKEND_NCCL;
    int rc = tr_comm_init_world(&cc, &im->world);
    if (rc)
        return rc;
    im->rank = tr_comm_rank(im->world);
    im->size = tr_comm_size(im->world);
    tr_log_set_rank(im->size > 1 ? im->rank : -1);
    int dp = im->data_parallel > 0 ? im->data_parallel : 1;
    if (im->size % dp)
        return tr_fail(TR_ERR_CONFIG, "--data-parallel %d does not divide the %d ranks", dp,
                       im->size);
    im->tp_size = im->size / dp;
    im->tp_rank = im->rank % im->tp_size; /* a model replica: tp_size consecutive ranks */
    im->dp_rank = im->rank / im->tp_size;
    if (dp > 1 || im->tp_size > 1) {
        if ((rc = tr_comm_split(im->world, im->rank / im->tp_size, im->rank, "tp", &im->tp)) ||
            (rc = tr_comm_split(im->world, im->tp_rank, im->rank, "dp", &im->dp)))
            return rc;
    }
    rc = model_config(im, im->tp_size);
    if (!rc && !(im->k = tr_kernels_get(im->device)))
        rc = tr_fail_context(TR_ERR_CONFIG, "--device %s", im->device);
    if (!rc)
        rc = tr_gpt_shape_from_config(&im->cfg, 0, im->cfg.model.num_layers, im->tp_rank,
                                      &im->shape);
    if (!rc)
        rc = tr_gpt_create(&im->shape, im->k, im->tp_size > 1 ? im->tp : NULL, &im->g);
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
    if (im->have_run)
        tr_config_free(&im->run);
    tr_comm_destroy(im->dp);
    tr_comm_destroy(im->tp);
    tr_comm_destroy(im->world);
    im->dp = im->tp = NULL;
    im->g = NULL;
    im->params = NULL;
    im->have_cfg = im->have_run = 0;
    im->world = NULL;
}

/* dir/name into buf; 1 when that file exists. */
static int folder_file(const char *dir, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", dir, name);
    return !access(buf, F_OK);
}

int infer_tokenizer_open(const char *who, const char *dir, tr_tokenizer_files *tok,
                         infer_tok_paths *p, tr_tokenizer **out)
{
    *out = NULL;
    const char *type;
    /* --tokenizer-model alone: Meta's Llama 3 tokenizer.model is read as Llama3Tokenizer */
    if (!tok->type && tok->tokenizer_model &&
        (type = tr_tokenizer_model_type(tok->tokenizer_model)) && !strcmp(type, "Llama3Tokenizer"))
        tok->type = type;
    /* a Hugging Face folder's own tokenizer, as from_pretrained takes it: tokenizer.json, else
     * GPT-2's slow files (GPT2Tokenizer; OPT's folders) with tokenizer_config.json's BOS; else,
     * in any folder (a checkpoint `trident convert --from meta` wrote too), a tokenizer.model in
     * tiktoken's format (Meta's Llama 3 download: Llama3Tokenizer) */
    if (dir && !tok->type && !tok->vocab_file && !tok->merge_file && !tok->tokenizer_model) {
        int hf = tr_hf_is_model_folder(dir);
        if (hf && folder_file(dir, "tokenizer.json", p->model, sizeof p->model)) {
            tok->type = "HFTokenizer";
            tok->tokenizer_model = p->model;
        } else if (hf && folder_file(dir, "vocab.json", p->vocab, sizeof p->vocab) &&
                   folder_file(dir, "merges.txt", p->merges, sizeof p->merges)) {
            tok->type = "GPT2BPETokenizer";
            tok->vocab_file = p->vocab;
            tok->merge_file = p->merges;
            if (folder_file(dir, "tokenizer_config.json", p->config, sizeof p->config))
                tok->config_file = p->config;
        } else if (folder_file(dir, "tokenizer.model", p->model, sizeof p->model) &&
                   (type = tr_tokenizer_model_type(p->model)) && !strcmp(type, "Llama3Tokenizer")) {
            tok->type = type;
            tok->tokenizer_model = p->model;
        }
        if (tok->type)
            fprintf(stderr, "%s: the tokenizer of %s%s%s (--tokenizer-type ByteLevel for bytes)\n",
                    who, tok->tokenizer_model ? p->model : p->vocab,
                    tok->tokenizer_model ? "" : " + merges.txt",
                    tok->config_file ? " + tokenizer_config.json" : "");
    }
    int rc = TR_OK;
    if ((tok->type || tok->vocab_file || tok->merge_file || tok->tokenizer_model) &&
        (rc = tr_tokenizer_open(tok, out))) {
        fprintf(stderr, "%s: %s\n", who, tr_errmsg());
        return rc == TR_ERR_IO ? 1 : 2;
    }
    return 0;
}

int infer_shared_option(const arg_parser *a, const char *flag, const char *v, const char **config,
                        const char **device, int *nproc, tr_tokenizer_files *tok, int *rc)
{
    if (!strcmp(flag, "--config"))
        *config = v;
    else if (!strcmp(flag, "--device"))
        *device = v;
    else if (!strcmp(flag, "--nproc"))
        *rc = args_int(a, "--nproc", v, 1, 4096, nproc);
    else if (!strcmp(flag, "--tokenizer-type"))
        tok->type = v;
    else if (!strcmp(flag, "--vocab-file"))
        tok->vocab_file = v;
    else if (!strcmp(flag, "--merge-file"))
        tok->merge_file = v;
    else if (!strcmp(flag, "--tokenizer-model"))
        tok->tokenizer_model = v;
    else if (!strcmp(flag, "--tiktoken-pattern"))
        tok->tiktoken_pattern = v;
    else if (!strcmp(flag, "--tiktoken-num-special-tokens"))
        *rc = args_int(a, flag, v, 3, (1 << 24) - 1, &tok->tiktoken_num_special_tokens);
    else if (!strcmp(flag, "--tiktoken-special-tokens")) {
        /* one value a call, each an argument or part of one: room for argc; the list lives as
         * long as the process, as argv does */
        static const char **list;
        if (!list && !(list = calloc((size_t)a->argc + 1, sizeof *list)))
            *rc = args_error(a, "out of memory");
        else {
            list[tok->n_tiktoken_special_tokens++] = v;
            tok->tiktoken_special_tokens = list;
        }
    } else
        return 0;
    return 1;
}
