/* `trident convert`: a GPT-2 folder of transformers into a trident release checkpoint, and a
 * trident checkpoint into a GPT-2 folder. Both write into OUTPUT.tmp-PID and rename it into
 * place at the end, so OUTPUT appears complete or not at all. */
#include "hf/hf_internal.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "train/train.h"

/* ------------------------------------------------------------------ the output folder */

int hf_out_begin(const char *output, hf_out_dir *o)
{
    size_t n = strlen(output);
    while (n > 1 && output[n - 1] == '/')
        n--;
    if (n == 0 || n >= sizeof o->final)
        return tr_fail(TR_ERR_INVALID, "output folder '%s': empty or too long a path", output);
    memcpy(o->final, output, n);
    o->final[n] = '\0';
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp-%ld", o->final, (long)getpid());
    snprintf(o->parent, sizeof o->parent, "%s", o->final);
    char *slash = strrchr(o->parent, '/');
    if (slash)
        *(slash == o->parent ? slash + 1 : slash) = '\0';
    else
        snprintf(o->parent, sizeof o->parent, ".");
    struct stat st;
    if (!stat(o->final, &st)) {
        DIR *d = S_ISDIR(st.st_mode) ? opendir(o->final) : NULL;
        int empty = d != NULL;
        for (struct dirent *de; d && empty && (de = readdir(d));)
            empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
        if (d)
            closedir(d);
        if (!empty)
            return tr_fail(TR_ERR_INVALID, "output %s exists and is not an empty folder (nothing "
                           "is overwritten: remove it or choose another)", o->final);
    }
    int rc = tr_make_dirs(o->parent);
    if (!rc)
        rc = hf_remove_tree(o->tmp);
    if (!rc && mkdir(o->tmp, 0755))
        rc = tr_fail(TR_ERR_IO, "cannot create %s: %s", o->tmp, strerror(errno));
    return rc;
}

int hf_out_end(const hf_out_dir *o, int rc)
{
    if (!rc)
        rc = hf_sync_dir(o->tmp);
    if (!rc && rename(o->tmp, o->final))
        rc = tr_fail(TR_ERR_IO, "cannot rename %s to %s: %s", o->tmp, o->final, strerror(errno));
    if (!rc)
        return hf_sync_dir(o->parent);
    if (hf_remove_tree(o->tmp))
        tr_warn("convert: could not remove %s", o->tmp);
    return rc;
}

/* An export's out_end: first o->files copied in (hf_internal.h). */
int hf_out_end_export(const hf_out_dir *od, int rc, const tr_hf_export_options *o)
{
    char buf[1 << 16], path[4400];
    for (const char *const *f = o->files; !rc && f && f[0]; f += 2) {
        snprintf(path, sizeof path, "%s/%s", od->tmp, f[1]);
        errno = 0;
        FILE *in = fopen(f[0], "rb"), *out = in ? fopen(path, "wb") : NULL;
        size_t got = 0;
        int bad = !out;
        while (!bad && (got = fread(buf, 1, sizeof buf, in)) > 0)
            bad = fwrite(buf, 1, got, out) != got;
        bad |= in && ferror(in);
        if (out && fclose(out))
            bad = 1;
        if (bad)
            rc = tr_fail(TR_ERR_IO, "cannot copy %s into %s: %s", f[0], path,
                         errno ? strerror(errno) : "read or write failed");
        if (in)
            fclose(in);
    }
    return hf_out_end(od, rc);
}

/* ------------------------------------------------------------------ the whole model */

/* The shape of one model holding every layer, no TP. family: m's Llama / Bloom switches apply
 * (else GPT-2). It only maps parameters (it never runs a forward): T is 1, so nothing is sized
 * by the sequence (rope tables: T positions); max_T stays the config's, which wpe's rows
 * (GPT-2) and the saved model section need. */
static int whole_shape(const tr_model_config *m, int family, tr_gpt_shape *s)
{
    /* the model keeps the epsilon as a float32 and config.json says the double: one float32
     * makes 0 (1e-50) would be exported as it is and then refused by the import (and be 0 in
     * transformers' fp32 norms); a config's is refused here, a manifest's when it is read */
    if (!((float)m->layernorm_epsilon > 0.0f) || !(m->layernorm_epsilon <= FLT_MAX))
        return tr_fail(TR_ERR_CONFIG, "model.layernorm_epsilon is %g: not a positive float32 "
                       "(%g to %g), which the model keeps it as; the exported config.json would "
                       "say a value that is 0 or infinite to a float32 model", m->layernorm_epsilon,
                       (double)FLT_TRUE_MIN, (double)FLT_MAX);
    *s = (tr_gpt_shape){
        .num_layers = m->num_layers, .C = m->hidden_size, .NH = m->num_attention_heads,
        .T = 1, .max_T = m->max_position_embeddings,
        .V = m->vocab_size, .Vp = m->vocab_size, .init_std = 0.02f,
        .eps = (float)m->layernorm_epsilon,
        .layer_first = 0, .layer_count = m->num_layers, .is_first = 1, .is_last = 1,
        .tp_size = 1, .tp_rank = 0,
        /* (kept for the manifest's dropout line: nothing here runs a forward) */
        .hidden_dropout = (float)m->hidden_dropout,
        .attention_dropout = (float)m->attention_dropout};
    if (family != TR_HF_GPT2)
        tr_gpt_shape_family(m, s);
    return TR_OK;
}

int hf_config_sizes_match(const char *ckpt_dir, const tr_model_config *m,
                          const tr_model_config *mc)
{
    if (mc->num_layers != m->num_layers || mc->hidden_size != m->hidden_size ||
        mc->num_attention_heads != m->num_attention_heads || mc->vocab_size != m->vocab_size ||
        mc->max_position_embeddings != m->max_position_embeddings)
        return tr_fail(TR_ERR_INVALID, "%s holds a model of num_layers %d, hidden_size %d, "
                       "num_attention_heads %d, vocab_size %d, max_position_embeddings %d; the "
                       "config's model differs", ckpt_dir, m->num_layers, m->hidden_size,
                       m->num_attention_heads, m->vocab_size, m->max_position_embeddings);
    return TR_OK;
}

int hf_whole_model(const tr_model_config *m, int family, tr_gpt **g, float **params)
{
    *g = NULL;
    *params = NULL;
    if (m->num_experts && family != TR_HF_MIXTRAL) /* (every export and import builds here) */
        return tr_fail(TR_ERR_INVALID, "a mixture of experts (model.num_experts %d) has no "
                       "Megatron-LM torch_dist, Meta or llm.c mapping yet; Hugging Face's Mixtral "
                       "and Megatron-LM's --ckpt-format torch convert; it trains, evaluates and "
                       "generates in trident",
                       m->num_experts);
    tr_gpt_shape s;
    int rc = whole_shape(m, family, &s);
    if (!rc)
        rc = tr_gpt_create(&s, tr_kernels_cpu(), NULL, g);
    if (rc)
        return rc;
    size_t n = tr_gpt_num_params(*g);
    if (!(*params = malloc(n * sizeof(float) + 1))) {
        tr_gpt_free(*g);
        *g = NULL;
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters", n);
    }
    tr_gpt_bind(*g, *params, NULL);
    return TR_OK;
}

int tr_hf_import(const char *hf_dir, const char *ckpt_dir, tr_model_config *model)
{
    tr_hf_gpt2_config c;
    tr_model_config m = {0};
    tr_gpt *g = NULL;
    float *params = NULL;
    hf_out_dir o;
    int family = TR_HF_GPT2;
    int rc = tr_hf_read_family_config(hf_dir, &m, &family);
    if (!rc) /* the rates a fine-tuning from it would use in transformers, for the manifest */
        rc = hf_read_dropout(hf_dir, family, &m);
    if (!rc && family != TR_HF_GPT2) { /* Llama, Bloom */
        if (!(rc = hf_family_check_files(hf_dir, &m, family)) &&
            !(rc = hf_whole_model(&m, family, &g, &params)))
            rc = tr_hf_load_family(hf_dir, family, g, params);
        if (!rc && !(rc = hf_out_begin(ckpt_dir, &o)))
            rc = hf_out_end(&o, tr_checkpoint_save_model(o.tmp, g, params));
        tr_gpt_free(g);
        free(params);
        if (!rc && model)
            *model = m;
        return rc;
    }
    if (!rc)
        rc = tr_hf_read_gpt2_config(hf_dir, &c);
    if (!rc)
        rc = hf_gpt2_check_files(hf_dir, &c);
    if (!rc) {
        tr_hf_gpt2_model_config(&c, &m);
        rc = hf_whole_model(&m, TR_HF_GPT2, &g, &params);
    }
    if (!rc)
        rc = tr_hf_load_gpt2(hf_dir, g, params);
    if (!rc && !(rc = hf_out_begin(ckpt_dir, &o)))
        rc = hf_out_end(&o, tr_checkpoint_save_model(o.tmp, g, params));
    tr_gpt_free(g);
    free(params);
    if (!rc && model) {
        tr_hf_gpt2_model_config(&c, model);
        model->hidden_dropout = m.hidden_dropout; /* (the printed model section's) */
        model->attention_dropout = m.attention_dropout;
    }
    return rc;
}

int tr_hf_import_lora(const char *hf_dir, const char *peft_dir, const char *ckpt_dir,
                      tr_model_config *model, tr_hf_lora_import *info)
{
    tr_hf_gpt2_config c;
    tr_model_config m = {0};
    tr_gpt_shape s;
    tr_gpt *g = NULL;
    float *params = NULL;
    hf_out_dir o;
    int family = TR_HF_GPT2;
    int rc = tr_hf_read_family_config(hf_dir, &m, &family);
    if (!rc && family == TR_HF_GPT2 && !(rc = tr_hf_read_gpt2_config(hf_dir, &c)))
        tr_hf_gpt2_model_config(&c, &m);
    if (!rc) /* (the adapters' manifest records the base's rates too: one run's) */
        rc = hf_read_dropout(hf_dir, family, &m);
    if (!rc)
        rc = whole_shape(&m, family, &s);
    if (!rc) /* the adapters first: refused before the base is read */
        rc = hf_lora_read(peft_dir, &s, &g, &params, info);
    if (!rc && !(rc = hf_out_begin(ckpt_dir, &o))) {
        char base[4300];
        rc = tr_checkpoint_save_model(o.tmp, g, params);
        tr_gpt_free(g), g = NULL;
        free(params), params = NULL;
        if (!rc && !(rc = hf_join(base, sizeof base, o.tmp, "base")))
            rc = tr_hf_import(hf_dir, base, model);
        rc = hf_out_end(&o, rc);
    }
    tr_gpt_free(g);
    free(params);
    return rc;
}

static int exists(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    return !hf_join(path, sizeof path, dir, name) && !stat(path, &st);
}

int tr_hf_is_model_folder(const char *dir)
{
    return exists(dir, "config.json") && !exists(dir, "latest_checkpointed_iteration.txt");
}

void tr_hf_temp_import_dir(char *buf, size_t cap)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/trident-hf-base-%ld", t && *t ? t : "/tmp", (long)getpid());
}

int tr_hf_import_replacing(const char *hf_dir, const char *ckpt_dir)
{
    int rc = hf_remove_tree(ckpt_dir);
    if (!rc)
        rc = tr_hf_import(hf_dir, ckpt_dir, NULL);
    return rc ? tr_fail_context(rc, "importing the Hugging Face folder %s", hf_dir) : TR_OK;
}

int tr_hf_remove_import(const char *ckpt_dir) { return hf_remove_tree(ckpt_dir); }

int tr_hf_load_base(const char *dir, tr_gpt *g, const tr_kernels *k)
{
    if (!tr_hf_is_model_folder(dir))
        return tr_checkpoint_load_base(dir, g, k);
    char tmp[4200];
    tr_hf_temp_import_dir(tmp, sizeof tmp);
    int rc = tr_hf_import_replacing(dir, tmp);
    if (!rc)
        rc = tr_checkpoint_load_base(tmp, g, k);
    if (hf_remove_tree(tmp))
        tr_warn("could not remove the imported base %s", tmp);
    return rc;
}

/* ------------------------------------------------------------------ export */

static int write_json(const char *dir, const char *name, json_t *root)
{
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(12))
                      : NULL;
    json_decref(root);
    if (!text)
        return tr_fail(TR_ERR_NOMEM, "out of memory writing %s", name);
    size_t n = strlen(text);
    char *t = realloc(text, n + 2);
    if (t)
        text = t, text[n] = '\n', text[n + 1] = '\0';
    int rc = hf_write_text(dir, name, text);
    free(text);
    return rc;
}

/* token id or null */
static json_t *token(int id) { return id >= 0 ? json_integer(id) : json_null(); }

/* config.json of GPT2LMHeadModel for a model of m's sizes and dropout rates. */
static int write_config(const char *dir, const tr_model_config *m, const tr_hf_export_options *o)
{
    json_t *root = json_pack(
        "{s:s, s:[s], s:f, s:f, s:f, s:f, s:f, s:s, s:i, s:i, s:n, s:i, s:i, s:b, s:b, s:b,"
        " s:b, s:s, s:b, s:i}",
        "activation_function", "gelu_new", "architectures", "GPT2LMHeadModel", "attn_pdrop", 0.0,
        "embd_pdrop", 0.0, "resid_pdrop", 0.0, "initializer_range", 0.02, "layer_norm_epsilon",
        1e-5, "model_type", "gpt2", "n_embd", m->hidden_size, "n_head", m->num_attention_heads,
        "n_inner", "n_layer", m->num_layers, "n_positions", m->max_position_embeddings,
        "reorder_and_upcast_attn", 0, "scale_attn_by_inverse_layer_idx", 0, "scale_attn_weights",
        1, "tie_word_embeddings", 1, "torch_dtype", o->bf16 ? "bfloat16" : "float32",
        "use_cache", 1, "vocab_size", m->vocab_size);
    if (root && (json_object_set_new(root, "bos_token_id", token(o->eos_token_id)) ||
                 json_object_set_new(root, "eos_token_id", token(o->eos_token_id)) ||
                 hf_write_dropout(root, TR_HF_GPT2, m)))
        root = (json_decref(root), NULL);
    return write_json(dir, "config.json", root);
}

static int write_generation_config(const char *dir, const tr_hf_export_options *o)
{
    json_t *root = json_pack("{s:b}", "_from_model_config", 1);
    if (root && o->eos_token_id >= 0 &&
        (json_object_set_new(root, "bos_token_id", json_integer(o->eos_token_id)) ||
         json_object_set_new(root, "eos_token_id", json_integer(o->eos_token_id))))
        root = (json_decref(root), NULL);
    return write_json(dir, "generation_config.json", root);
}

/* model.safetensors (or shards) of g's tensors, in forward order under HF's names. */
static int write_weights(const char *dir, tr_gpt *g, const float *params,
                         const tr_hf_export_options *o)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    int n = tr_gpt_num_tensors(g);
    tr_hf_tensor_map *maps = calloc((size_t)n + 1, sizeof *maps);
    tr_st_tensor *list = calloc((size_t)n + 1, sizeof *list);
    size_t most = 0;
    int rc = maps && list ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        if ((rc = tr_hf_gpt2_map(t, s->V, &maps[i])))
            break;
        list[i] = (tr_st_tensor){.name = maps[i].name, .dtype = o->bf16 ? TR_ST_BF16 : TR_ST_F32,
                                 .ndim = maps[i].ndim, .shape = {maps[i].shape[0], maps[i].shape[1]}};
        most = t->numel > most ? t->numel : most;
    }
    static const char *const meta[] = {"format", "pt", NULL};
    tr_st_writer *w = NULL;
    float *hf = rc ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && !hf)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    if (!rc)
        rc = tr_st_create_sharded(dir, list, (size_t)n, meta, o->max_shard_bytes, &w);
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        if (maps[i].layout == TR_HF_SAME) /* the first rows as they are */
            rc = tr_st_put_f32(w, params + t->offset);
        else if (!(rc = tr_hf_from_trident(&maps[i], t, s->NH, params + t->offset, hf)))
            rc = tr_st_put_f32(w, hf);
    }
    if (w)
        rc = rc ? (tr_st_abort(w), rc) : tr_st_finish(w);
    free(hf);
    free(list);
    free(maps);
    return rc;
}

int tr_hf_export(const char *ckpt_dir, const char *hf_dir, const tr_hf_export_options *o,
                 int *iteration)
{
    tr_model_config m = {0};
    tr_gpt *g = NULL;
    float *params = NULL;
    int it = 0;
    hf_out_dir od;
    int rc = tr_checkpoint_read_model(ckpt_dir, &m, &it);
    /* the config's family, else the checkpoint's (its manifest's family line; GPT-2 for a
     * checkpoint written before that line) */
    int family = o->model ? tr_hf_family_of(o->model)
                 : m.normalization ? tr_hf_family_of(&m) : TR_HF_GPT2;
    if (!rc && family < 0)
        rc = tr_fail(TR_ERR_INVALID, "the config's model (its normalization, position embedding, "
                     "MLP, bias and residual switches) is neither GPT-2, Llama, Qwen2, Bloom, "
                     "GPT-NeoX, Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT nor OPT: "
                     "transformers has no such model to export to (with experts: Mixtral, a "
                     "Llama's or Mistral's layer, top-k 2 or more, moe_router_pre_softmax "
                     "false)");
    if (!rc && family == TR_HF_FALCON) /* (before anything is read) */
        rc = hf_falcon_check(o->model ? o->model : &m);
    const tr_model_config *mc = o->model;
    if (!rc && mc)
        rc = hf_config_sizes_match(ckpt_dir, &m, mc);
    if (!rc && family != TR_HF_GPT2 && mc)
        m = *mc;
    if (!rc) /* the rates it was trained with (its manifest's), not a config's */
        rc = tr_checkpoint_read_dropout(ckpt_dir, &m.hidden_dropout, &m.attention_dropout);
    if (!rc)
        rc = hf_whole_model(&m, family, &g, &params);
    if (!rc)
        rc = tr_checkpoint_load_model(ckpt_dir, g, tr_kernels_cpu(), params, &it);
    if (!rc && family != TR_HF_GPT2 && !(rc = hf_out_begin(hf_dir, &od))) {
        rc = tr_hf_write_family(od.tmp, family, g, params, &m, o);
        if (!rc)
            rc = write_generation_config(od.tmp, o);
        rc = hf_out_end_export(&od, rc, o);
    } else if (!rc && !(rc = hf_out_begin(hf_dir, &od))) {
        rc = write_weights(od.tmp, g, params, o);
        if (!rc)
            rc = write_config(od.tmp, &m, o);
        if (!rc)
            rc = write_generation_config(od.tmp, o);
        rc = hf_out_end_export(&od, rc, o);
    }
    tr_gpt_free(g);
    free(params);
    if (!rc && iteration)
        *iteration = it;
    return rc;
}

/* ------------------------------------------------------------------ LoRA (hf/lora.c) */

int tr_hf_export_lora(const char *ckpt_dir, const char *hf_dir, const tr_config *cfg, int merge,
                      const tr_hf_export_options *o, int *iteration)
{
    tr_config one = *cfg; /* the whole model on one rank (shallow: nothing freed here) */
    one.parallel.tensor_model_parallel_size = 1;
    one.parallel.sequence_parallel = 0;
    const tr_model_config *mc = &cfg->model;
    tr_gpt_shape s;
    tr_gpt *g = NULL, *plain = NULL;
    float *params = NULL, *merged = NULL;
    int it = 0, family = tr_hf_family_of(mc);
    hf_out_dir od;
    int rc = tr_gpt_shape_from_config(&one, 0, mc->num_layers, 0, &s);
    if (!rc && !s.lora_rank)
        rc = tr_fail(TR_ERR_INVALID, "--merge-lora and --adapters-only need the run's config "
                     "with finetune.lora.rank >= 1 (--config)");
    if (!rc && merge && !*cfg->finetune.load)
        rc = tr_fail(TR_ERR_INVALID, "--merge-lora needs the base model: finetune.load in the "
                     "config");
    if (!rc && family < 0)
        rc = tr_fail(TR_ERR_INVALID, "the config's model is neither GPT-2, Llama, Qwen2, Bloom, "
                     "GPT-NeoX, Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT nor OPT: "
                     "transformers has no such model to export to");
    if (!rc && merge && family == TR_HF_FALCON)
        rc = hf_falcon_check(mc);
    s.recompute = s.recompute_attention = 0;
    if (!rc)
        rc = tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g);
    size_t n = rc ? 0 : tr_gpt_num_params(g);
    if (!rc && !(params = malloc(n * sizeof(float) + 1)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu adapter parameters", n);
    if (!rc) {
        tr_gpt_bind(g, params, NULL);
        rc = tr_checkpoint_load_model(ckpt_dir, g, tr_kernels_cpu(), params, &it);
    }
    if (!rc && !merge && !(rc = hf_out_begin(hf_dir, &od)))
        rc = hf_out_end_export(&od, tr_hf_write_lora_adapter(od.tmp, g, params), o);
    if (!rc && merge) {
        tr_gpt_shape ps = s;
        ps.lora_rank = 0;
        if (!(rc = tr_hf_load_base(cfg->finetune.load, g, tr_kernels_cpu())) &&
            !(rc = tr_gpt_create(&ps, tr_kernels_cpu(), NULL, &plain))) {
            size_t pn = tr_gpt_num_params(plain);
            if (!(merged = malloc(pn * sizeof(float) + 1)))
                rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters", pn);
            else
                tr_gpt_bind(plain, merged, NULL);
        }
        if (!rc)
            rc = tr_hf_merge_lora(g, plain, merged);
        if (!rc && !(rc = hf_out_begin(hf_dir, &od))) {
            if (family == TR_HF_GPT2) {
                rc = write_weights(od.tmp, plain, merged, o);
                if (!rc)
                    rc = write_config(od.tmp, mc, o);
            } else {
                rc = tr_hf_write_family(od.tmp, family, plain, merged, mc, o);
            }
            if (!rc)
                rc = write_generation_config(od.tmp, o);
            rc = hf_out_end_export(&od, rc, o);
        }
    }
    tr_gpt_free(plain);
    tr_gpt_free(g);
    free(merged);
    free(params);
    if (!rc && iteration)
        *iteration = it;
    return rc;
}
