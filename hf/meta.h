/* hf/meta — Meta's own Llama checkpoints (Llama 1, 2, 3, 3.1, 3.2, Code Llama as Meta ships
 * them) into trident release checkpoints and back: `trident convert --from meta` / `--to meta`.
 *
 * Contract:
 *  - META_DIR holds params.json, consolidated.00.pth .. consolidated.NN.pth (one torch.save'd
 *    state dict per model-parallel rank, MP = the number of files, numbered from 00 without a
 *    gap) and optionally tokenizer.model (sentencepiece's or, Llama 3's, tiktoken's: copied as
 *    it is into CKPT_DIR/tokenizer.model).
 *  - params.json: dim, n_layers, n_heads, norm_eps (required); n_kv_heads (absent or null:
 *    n_heads); vocab_size (absent or -1: tok_embeddings' rows); multiple_of (256),
 *    ffn_dim_multiplier (null); rope_theta (10000); use_scaled_rope (false; true: Llama 3.1's
 *    scaling, factor rope_scaling_factor (8), low 1, high rope_high_freq_factor (4), original
 *    8192); max_seq_len -> max_position_embeddings (absent: 131072 with use_scaled_rope, 8192
 *    with rope_theta 500000, 16384 with rope_theta 1e6 (Code Llama), else 4096); max_batch_size
 *    ignored. The FFN width is Meta's: h = int(2 * 4 * dim / 3), with ffn_dim_multiplier
 *    h = int(ffn_dim_multiplier * h), then multiple_of * ceil(h / multiple_of); checked against
 *    w1's rows. Any other key (MoE's, vision's, quantization's, ...) refused by name.
 *  - Tensors (Meta's fairscale split over MP): tok_embeddings.weight (ParallelEmbedding: the
 *    columns, dim / MP each), layers.N.attention.{wq, wk, wv} (column-parallel: rows, whole
 *    heads), .wo (row-parallel: columns), .feed_forward.w1 (gate), w3 (up) (rows), w2 (down,
 *    columns), .attention_norm, .ffn_norm, norm (replicated: rank 0's, each rank's shape
 *    checked), output.weight (rows; absent: a tied head), rope.freqs ignored. Meta's rotary
 *    turns interleaved pairs (2i, 2i + 1) of a head; trident's (transformers') turns halves
 *    (i, i + d/2): wq's and wk's rows are permuted as convert_llama_weights_to_hf.py permutes
 *    them, the inverse on export. F32, F16, BF16 tensors read. n_heads, n_kv_heads, the FFN,
 *    dim and the vocabulary must divide by MP (n_kv_heads < MP: Meta's code has no local kv
 *    head; refused by name). A missing, misshapen, non-float, non-finite or extra tensor, a
 *    gap in the files: TR_ERR_INVALID naming the file and the tensor.
 *  - Import: the whole model held once (plus one tensor), written as tr_hf_import writes a
 *    release checkpoint (CKPT_DIR whole or not at all); *model the Llama model section.
 *  - Export: the latest checkpoint of CKPT_DIR (a Llama: RMSNorm, rope over whole heads,
 *    SwiGLU, no biases, no window; untied or tied (output.weight then the embedding's copy))
 *    -> OUT_DIR: params.json in Meta's keys (n_kv_heads only where it is not n_heads;
 *    multiple_of 256 without ffn_dim_multiplier where that gives the FFN, else multiple_of =
 *    the FFN, with the ffn_dim_multiplier a narrower one needs; use_scaled_rope, with
 *    rope_scaling_factor / rope_high_freq_factor where not 8 / 4; no max_seq_len: Meta's
 *    reference code passes its own, so an import takes the default above: *info says both),
 *    consolidated.NN.pth for NN < mp (F32 or BF16 rounded to nearest even), CKPT_DIR's
 *    tokenizer.model when it has one. Another model, linear rope scaling, llama3 scaling of
 *    another low factor or original length, a size mp does not divide: TR_ERR_INVALID naming
 *    it. */
#ifndef TR_HF_META_H
#define TR_HF_META_H

#include "core/core.h"
#include "yaml/config.h"

typedef struct {
    int mp;        /* model-parallel files */
    int tokenizer; /* 1: tokenizer.model copied */
    int tied;      /* 1: no output.weight (the embedding is the head) */
    const char *dtype; /* of tok_embeddings.weight in the first file ("BF16") */
    /* export: the checkpoint's max_position_embeddings, and the one an import of the export
     * takes (params.json has no max_seq_len) */
    int positions, import_positions;
} tr_meta_info;

/* META_DIR -> release checkpoint ckpt_dir. */
TR_MUST_CHECK int tr_meta_import(const char *meta_dir, const char *ckpt_dir,
                                 tr_model_config *model, tr_meta_info *info);
/* The latest checkpoint of ckpt_dir -> out_dir (written whole or not at all) in mp files;
 * *iteration: the checkpoint's. */
TR_MUST_CHECK int tr_meta_export(const char *ckpt_dir, const char *out_dir, int mp, int bf16,
                                 int *iteration, tr_meta_info *info);

#endif
