/* hf/llmc — llm.c's GPT-2 model checkpoint (gpt2_124M.bin, gpt2_124M_bf16.bin, train_gpt2.cu's
 * model_NNNNNNNN.bin) into a trident release checkpoint and back: `trident convert --from llmc`
 * / `--to llmc`.
 *
 * Contract:
 *  - The file: a header of 256 little-endian int32 (magic 20240326; version 3: fp32 weights,
 *    5: bf16; maxT, V, L, NH, C, Vp; the rest unread, zero when written), then the 16
 *    parameter tensors, each every layer's stacked (L, ...): wte (Vp, C), wpe (maxT, C), ln1w,
 *    ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w,
 *    ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw, lnfb
 *    (C); weights (out, in) as trident's; qkvw's rows [Q | K | V] (each (head, d)) are
 *    trident's qkv rows (head, {q, k, v}, d). wte's rows V..Vp (llm.c's padding, zeros, never
 *    read by llm.c's loss or sampling) are dropped on import and written as zeros on export
 *    (Vp = V rounded up to a multiple of 128, as train_gpt2.py's write_model pads).
 *  - Import refuses, with TR_ERR_INVALID naming the file and the cause: a file shorter than the
 *    header, another magic (llm.c's token shard, tokenizer or debug state named as such), a
 *    version other than 3 or 5, a size that is not positive or above its limit, C not a
 *    multiple of NH, V above Vp, a file size other than the header's sizes give, a weight that
 *    is not finite (named with its layer and element). GPT-2's LayerNorm epsilon 1e-5.
 *  - Export (fp32: version 3, which train_gpt2.c and train_gpt2.cu of PRECISION=FP32 load;
 *    bf16: version 5, train_gpt2.cu's bf16 build's): the latest checkpoint of CKPT_DIR, a
 *    GPT-2 (any other family refused naming it; a layernorm_epsilon other than 1e-5 refused:
 *    llm.c has no other), written to FILE.tmp-PID and renamed to FILE, which must not exist;
 *    bf16 rounds to nearest even (as torch's .to(torch.bfloat16)), a finite weight beyond
 *    BF16's range refused. A missing input file is TR_ERR_INVALID too. */
#ifndef TR_HF_LLMC_H
#define TR_HF_LLMC_H

#include "core/core.h"
#include "yaml/config.h"

typedef struct {
    int version; /* 3: fp32, 5: bf16 */
    int padded_vocab; /* Vp */
} tr_llmc_info;

/* llm.c model file -> release checkpoint ckpt_dir (whole or not at all); *model (may be NULL)
 * the GPT-2 model section. */
TR_MUST_CHECK int tr_llmc_import(const char *file, const char *ckpt_dir, tr_model_config *model,
                                 tr_llmc_info *info);
/* The latest checkpoint of ckpt_dir -> llm.c model file `file` (bf16: version 5);
 * *iteration: the checkpoint's. */
TR_MUST_CHECK int tr_llmc_export(const char *ckpt_dir, const char *file, int bf16,
                                 int *iteration, tr_llmc_info *info);

#endif
