/* tr_data_open_config: the run's dataset from the config's data section, and the tokenizer
 * check (model.vocab_size must hold the tokenizer's ids). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"

/* model.vocab_size against data.tokenizer's vocabulary, when one is named. */
static int check_tokenizer(const tr_config *cfg)
{
    const tr_data_config *dc = &cfg->data;
    if (!strcmp(dc->tokenizer_type, "none"))
        return TR_OK;
    int tik = !strcmp(dc->tokenizer_type, "TikTokenizer");
    tr_tokenizer_files f = {
        .type = dc->tokenizer_type, .vocab_file = dc->vocab_file, .merge_file = dc->merge_file,
        .tokenizer_model = dc->tokenizer_model,
        .tiktoken_pattern = tik ? dc->tiktoken_pattern : NULL,
        .tiktoken_num_special_tokens = tik ? dc->tiktoken_num_special_tokens : 0,
        .tiktoken_special_tokens = tik && dc->n_tiktoken_special_tokens
                                       ? (const char *const *)dc->tiktoken_special_tokens : NULL,
        .n_tiktoken_special_tokens = tik ? dc->n_tiktoken_special_tokens : 0,
        .tiktoken_vocab_size = tik ? dc->tiktoken_vocab_size : 0};
    tr_tokenizer *t;
    int rc = tr_tokenizer_open(&f, &t);
    if (rc)
        return tr_fail_context(rc, "%s: data.tokenizer.type %s", tr_config_where(cfg, "data.tokenizer.type"),
                               dc->tokenizer_type);
    int V = tr_tokenizer_vocab_size(t);
    tr_tokenizer_free(t);
    if (V > cfg->model.vocab_size)
        return tr_fail(TR_ERR_CONFIG, "%s: model.vocab_size %d is smaller than the vocabulary of "
                       "data.tokenizer.type %s (%d ids): set model.vocab_size to %d",
                       tr_config_where(cfg, "model.vocab_size"), cfg->model.vocab_size,
                       dc->tokenizer_type, V, V);
    return TR_OK;
}

int tr_data_open_config(const tr_config *cfg, tr_data **out)
{
    const tr_data_config *dc = &cfg->data;
    *out = NULL;
    int rc = check_tokenizer(cfg);
    if (rc)
        return rc;
    tr_data_spec sp = {.format = dc->data_format, .split = dc->split,
                       .seq_length = cfg->model.seq_length, .vocab_size = cfg->model.vocab_size,
                       .global_batch = cfg->training.global_batch_size, .seed = cfg->training.seed};
    struct { char **list; int n; tr_data_blend *b; } lists[4] = {
        {dc->data_path, dc->n_data_path, &sp.data_path},
        {dc->train_data_path, dc->n_train_data_path, &sp.split_paths[0]},
        {dc->valid_data_path, dc->n_valid_data_path, &sp.split_paths[1]},
        {dc->test_data_path, dc->n_test_data_path, &sp.split_paths[2]}};
    const char **paths[4] = {0};
    double *weights[4] = {0};
    for (int i = 0; i < 4 && !rc; i++) {
        if (!lists[i].n)
            continue;
        rc = tr_config_blend(lists[i].list, lists[i].n, &paths[i], &weights[i], &lists[i].b->n);
        lists[i].b->paths = paths[i];
        lists[i].b->weights = weights[i];
    }
    const char *key = dc->n_data_path ? "data.data_path" : "data.train_data_path";
    if (!rc && !strcmp(dc->dataset_type, "sft"))
        rc = tr_data_open_sft(dc->data_path[0], dc->split, cfg->model.seq_length,
                              cfg->model.vocab_size, cfg->training.seed, dc->sft_packing, out);
    else if (!rc)
        rc = tr_data_open_spec(&sp, out);
    if (rc)
        tr_fail_context(rc, "%s: %s", tr_config_where(cfg, key), key);
    for (int i = 0; i < 4; i++) {
        free(paths[i]);
        free(weights[i]);
    }
    return rc;
}
