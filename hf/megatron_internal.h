/* hf/ internal: Megatron-LM checkpoints (megatron_args.c: the args; megatron.c: the files and
 * their tensors). Not part of the contract (hf/megatron.h). */
#ifndef TR_HF_MEGATRON_INTERNAL_H
#define TR_HF_MEGATRON_INTERNAL_H

#include "hf/megatron.h"
#include "hf/pt_internal.h"

#define MLM_MAX_VP 64 /* virtual pipeline chunks per stage */

/* How the TP shards of a tensor make the whole one: replicated (rank 0's), rows (column- and
 * vocabulary-parallel), columns (row-parallel), SwiGLU's per-rank [gate_r; up_r] rows. */
enum { MLM_REP, MLM_ROWS, MLM_COLS, MLM_GLU };

/* Rank r's shard (of tp) of a whole tensor of R rows and C columns split as split: its rows,
 * its columns, and the whole tensor's row that its row i holds (MLM_GLU: trident's rows
 * (f, {gate, up}) <-> the shard's [gate_r; up_r]). Both directions use them: megatron.c's
 * merge and megatron_write.c's cut. */
static inline size_t mlm_shard_rows(int split, size_t R, int tp)
{
    return split == MLM_COLS || split == MLM_REP ? R : R / (size_t)tp;
}
static inline size_t mlm_shard_cols(int split, size_t C, int tp)
{
    return split == MLM_COLS ? C / (size_t)tp : C;
}
static inline size_t mlm_whole_row(int split, int r, size_t sr, size_t i)
{
    size_t half = sr / 2;
    return split == MLM_ROWS  ? (size_t)r * sr + i
           : split == MLM_GLU ? 2 * ((size_t)r * half + i % half) + i / half
                              : i;
}

typedef struct {
    const char *trident;
    const char *names[2]; /* alternatives: megatron-core's or the legacy model's */
    int split;
} mlm_name;

/* megatron.c: trident's names -> Megatron-LM's ([0] megatron-core's, [1] the legacy model's),
 * per layer (after "layers.N.") and outside the layers */
#define MLM_LAYER_NAMES 12
#define MLM_TOP_NAMES 5
extern const mlm_name mlm_layer_names[2][MLM_LAYER_NAMES];
extern const mlm_name mlm_top_names[2][MLM_TOP_NAMES];
/* megatron.c: a mixture-of-experts tensor of a layer (rest: trident's name after "layers.N.")
 * under megatron-core's SequentialMLP names (after "decoder.layers.N."): router.weight ->
 * mlp.router.weight (replicated), experts.e.fc.weight ->
 * mlp.experts.local_experts.e.linear_fc1.weight (rows; MLM_GLU with swiglu),
 * experts.e.fc_proj.weight -> ...linear_fc2.weight (columns). 1 with name and *split set; 0 for
 * any other tensor. */
int mlm_moe_name(const char *rest, int swiglu, char *name, size_t cap, int *split);

/* What a file's args say. */
typedef struct {
    tr_model_config m; /* the model section (strings are literals) */
    int tp, pp, vp;
    int padded_vocab;
} mlm_args;

/* args (a Namespace) of the file at path into *a; TR_ERR_INVALID "PATH: args.KEY ..." for a
 * key of the wrong type or one trident cannot represent. */
TR_MUST_CHECK int mlm_read_args(pt_pickle *p, uint32_t args, const char *path, mlm_args *a);
/* The model's keys of args b (file path_b) equal to a's (file path_a): else TR_ERR_INVALID
 * naming the key and both files. */
TR_MUST_CHECK int mlm_same_args(pt_pickle *pa, uint32_t a, const char *path_a, pt_pickle *pb,
                                uint32_t b, const char *path_b);

/* megatron_dist.c: the --ckpt-format torch_dist save in folder dir (the iteration's: it holds
 * metadata.json) -> release checkpoint ckpt_dir (megatron.h); *info's tp, pp, vp, padded_vocab,
 * iteration, version, mcore and dist set, *model (when not NULL) the model section. */
TR_MUST_CHECK int mlm_dist_import(const char *dir, const char *ckpt_dir, tr_model_config *model,
                                  tr_megatron_info *info);

#endif
