/* Each family's config.json keys for trident's two dropout rates, both ways: model.hidden_dropout
 * (after the embeddings and on the attention's and MLP's outputs before each residual add) and
 * model.attention_dropout (on the attention probabilities). Names and defaults are transformers
 * 4.38.2's configuration_*.py (Phi-3's: 4.44's). */
#include "hf/hf_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* resid: the residual sites' key; embed: the embeddings' where the family has its own (else
 * resid's rate is trident's one hidden rate); attn: the probabilities' ("attn_config." MPT's
 * nested key). NULL: no key. note: where transformers' sites of resid differ from trident's
 * (said at export when the hidden rate is > 0). */
typedef struct {
    int family;
    const char *resid, *embed, *attn;
    double resid_default, attn_default;
    const char *note;
} family_keys;

static const char no_embedding[] = "it applies hidden_dropout after the attention and the MLP, "
                                   "not after the embeddings";

static const family_keys families[] = {
    {TR_HF_GPT2, "resid_pdrop", "embd_pdrop", "attn_pdrop", 0.1, 0.1, NULL},
    {TR_HF_BIGCODE, "resid_pdrop", "embd_pdrop", "attn_pdrop", 0.1, 0.1, NULL},
    {TR_HF_GPTJ, "resid_pdrop", "embd_pdrop", "attn_pdrop", 0.0, 0.0, NULL},
    {TR_HF_PHI, "resid_pdrop", "embd_pdrop", "attention_dropout", 0.0, 0.0, NULL},
    {TR_HF_PHI3, "resid_pdrop", "embd_pdrop", "attention_dropout", 0.0, 0.0, NULL},
    {TR_HF_MPT, "resid_pdrop", "emb_pdrop", "attn_config.attn_pdrop", 0.0, 0.0,
     "transformers' MPT reads attn_config.attn_pdrop alone, for the attention probabilities "
     "and both residual sites (resid_pdrop and emb_pdrop are MosaicML llm-foundry's)"},
    {TR_HF_OPT, "dropout", NULL, "attention_dropout", 0.1, 0.0,
     "it applies dropout after the attention and the MLP, not after the embeddings"},
    {TR_HF_BLOOM, "hidden_dropout", NULL, "attention_dropout", 0.0, 0.0, no_embedding},
    {TR_HF_NEOX, "hidden_dropout", NULL, "attention_dropout", 0.0, 0.0, NULL},
    {TR_HF_FALCON, "hidden_dropout", NULL, "attention_dropout", 0.0, 0.0,
     "it applies hidden_dropout after the MLP (and, with parallel_attn, the attention: "
     "without, attention_dropout there), not after the embeddings"},
    {TR_HF_STABLELM, "hidden_dropout", NULL, "attention_dropout", 0.0, 0.0,
     "it applies hidden_dropout after the MLP alone"},
    {TR_HF_LLAMA, NULL, NULL, "attention_dropout", 0.0, 0.0, NULL},
    {TR_HF_QWEN2, NULL, NULL, "attention_dropout", 0.0, 0.0, NULL},
    {TR_HF_MISTRAL, NULL, NULL, "attention_dropout", 0.0, 0.0, NULL},
    {TR_HF_GEMMA, NULL, NULL, "attention_dropout", 0.0, 0.0, NULL},
    {TR_HF_MIXTRAL, NULL, NULL, "attention_dropout", 0.0, 0.0, NULL},
};

static const family_keys *keys_of(int family)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i].family == family)
            return &families[i];
    return &families[0];
}

/* key's object and own name: root, or root's "attn_config" for "attn_config.NAME" */
static json_t *holder(json_t *root, const char **key)
{
    const char *dot = strchr(*key, '.');
    if (!dot)
        return root;
    json_t *sub = json_object_get(root, "attn_config");
    *key = dot + 1;
    return json_is_object(sub) ? sub : NULL;
}

/* a rate: absent (or its holder absent or null) dflt; else a number 0 <= p < 1 */
static int read_rate(json_t *root, const char *path, const char *key, double dflt, double *out)
{
    const char *name = key;
    json_t *h = holder(root, &name), *v = h ? json_object_get(h, name) : NULL;
    *out = dflt;
    if (!v)
        return TR_OK;
    double p = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(p >= 0 && p < 1))
        return tr_fail(TR_ERR_INVALID, "%s: %s must be a dropout probability, a number from 0 "
                       "to below 1", path, key);
    *out = p;
    return TR_OK;
}

int hf_read_dropout(const char *dir, int family, tr_model_config *m)
{
    char path[4200];
    json_t *root = NULL;
    int rc = hf_load_config(dir, path, sizeof path, &root);
    if (rc)
        return rc;
    const family_keys *k = keys_of(family);
    double resid = 0, embed = 0, attn = 0;
    if (k->resid)
        rc = read_rate(root, path, k->resid, k->resid_default, &resid);
    if (!rc && k->embed)
        rc = read_rate(root, path, k->embed, k->resid_default, &embed);
    if (!rc && k->attn)
        rc = read_rate(root, path, k->attn, k->attn_default, &attn);
    json_decref(root);
    if (rc)
        return rc;
    /* trident has one rate for the residual and embedding sites: the residuals' (2 per layer
     * against 1 site) is taken, and the other named */
    if (k->embed && embed != resid)
        tr_warn("%s: %s %g and %s %g differ; trident has one rate for both sites "
                "(model.hidden_dropout): %g (%s) is recorded, which a run's config may override",
                path, k->resid, resid, k->embed, embed, resid, k->resid);
    m->hidden_dropout = resid;
    m->attention_dropout = attn;
    return TR_OK;
}

/* key := p (the manifest's rates are already float32's shortest decimal: 0.1) */
static int set_rate(json_t *root, const char *key, double p)
{
    json_t *h = holder(root, &key);
    return h ? json_object_set_new(h, key, json_real(p)) : -1;
}

int hf_write_dropout(json_t *root, int family, const tr_model_config *m)
{
    const family_keys *k = keys_of(family);
    double hidden = m->hidden_dropout, attn = m->attention_dropout;
    const char *name = tr_hf_family_name(family);
    if (!k->resid && hidden > 0)
        tr_warn("convert: transformers' %s has no hidden dropout (no config.json key for "
                "model.hidden_dropout %g): written without it, attention_dropout %g alone", name,
                hidden, attn);
    else if (k->note && hidden > 0)
        tr_warn("convert: model.hidden_dropout %g written as %s's %s, but %s", hidden, name,
                k->resid, k->note);
    int bad = (k->resid && set_rate(root, k->resid, hidden)) ||
              (k->embed && set_rate(root, k->embed, hidden)) ||
              (k->attn && set_rate(root, k->attn, attn));
    return bad ? tr_fail(TR_ERR_NOMEM, "out of memory writing config.json's dropout keys")
               : TR_OK;
}
