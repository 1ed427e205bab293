/* hf/ internal: Meta's Llama checkpoints (meta.c: params.json and the import; meta_write.c: the
 * export). Both directions share the tensor table and the row mapping here. Not part of the
 * contract (hf/meta.h). */
#ifndef TR_HF_META_INTERNAL_H
#define TR_HF_META_INTERNAL_H

#include "hf/hf_internal.h"
#include "hf/meta.h"

/* How Meta's MP ranks split a tensor: replicated, rows (column-parallel), columns
 * (row-parallel, and ParallelEmbedding's embedding dimension). */
enum { META_REP, META_ROWS, META_COLS };
/* How a Meta tensor's rows land in trident's: as they are; q/k/v (k 0, 1, 2) into qkv's rows
 * (group, {q_0 .. q_R-1, k, v}, d), q's and k's rotary pairs made halves; gate / up (k 0, 1)
 * into fc's rows (feature, {gate, up}). */
enum { META_SAME, META_QKV, META_GLU };
/* A size of the model: dim, heads x head size, kv heads x head size, the FFN, the vocabulary,
 * none (a vector). */
enum { META_D_C, META_D_Q, META_D_KV, META_D_F, META_D_V, META_D_NONE };

typedef struct {
    const char *meta;    /* after "layers.N." for a layer's */
    const char *trident; /* after "layers.N." for a layer's */
    int split, kind, k;
    int rows, cols;      /* META_D_* of the whole tensor */
} meta_part;

/* In Meta's order (consolidated.NN.pth's): per layer, and outside the layers. */
#define META_LAYER_PARTS 9
#define META_TOP_PARTS 3
extern const meta_part meta_layer_parts[META_LAYER_PARTS];
extern const meta_part meta_top_parts[META_TOP_PARTS];

typedef struct {
    int L, C, NH, NKV, HS, F, V;
    int mp;
} meta_dims;

static inline size_t meta_dim(const meta_dims *d, int which)
{
    return which == META_D_C    ? (size_t)d->C
           : which == META_D_Q  ? (size_t)d->NH * (size_t)d->HS
           : which == META_D_KV ? (size_t)d->NKV * (size_t)d->HS
           : which == META_D_F  ? (size_t)d->F
           : which == META_D_V  ? (size_t)d->V
                                : 0;
}
/* One MP rank's rows and columns of part p (cols 0: a vector); the whole tensor's row that
 * rank s's row i is, and the column its column 0 is. */
static inline size_t meta_shard_rows(const meta_part *p, const meta_dims *d)
{
    return meta_dim(d, p->rows) / (p->split == META_ROWS ? (size_t)d->mp : 1);
}
static inline size_t meta_shard_cols(const meta_part *p, const meta_dims *d)
{
    return meta_dim(d, p->cols) / (p->split == META_COLS ? (size_t)d->mp : 1);
}
static inline size_t meta_whole_row(const meta_part *p, const meta_dims *d, int s, size_t i)
{
    return p->split == META_ROWS ? (size_t)s * meta_shard_rows(p, d) + i : i;
}
static inline size_t meta_whole_col(const meta_part *p, const meta_dims *d, int s)
{
    return p->split == META_COLS ? (size_t)s * meta_shard_cols(p, d) : 0;
}
/* The row of trident's tensor that row r of the whole Meta tensor p is. */
uint64_t meta_trident_row(const meta_part *p, const meta_dims *d, uint64_t r);
/* The positions an import takes without max_seq_len: Llama 3.1's 131072 with use_scaled_rope,
 * Llama 3's 8192 with rope_theta 500000, Code Llama's 16384 with 1e6, else Llama 2's 4096. */
int meta_default_positions(int scaled_rope, double rope_theta);
/* The rope scaling factor of a use_scaled_rope params.json without rope_scaling_factor: 32 for
 * Llama 3.2 1B and 3B (dim 2048 with 16 layers, 3072 with 28: their Hugging Face config.json,
 * transformers' convert_llama_weights_to_hf.py --llama_version 3.2, llama-models issue 241),
 * else 8 (Llama 3.1, 3.3, 3.2's vision models; llama-models' reference code has 8 for all). */
double meta_default_rope_factor(int dim, int n_layers);
/* DIR/params.json -> m (vocab_size 0: from the tensors; the head untied until the files say);
 * TR_ERR_INVALID naming the file and key for a bad one. */
TR_MUST_CHECK int meta_read_params(const char *dir, tr_model_config *m);
/* The trident model's sizes as meta_dims for mp ranks. */
void meta_dims_of(const tr_model_config *m, int mp, meta_dims *d);

#endif
