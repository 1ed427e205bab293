/* hf/megatron — Megatron-LM checkpoints (`--ckpt-format torch`, the legacy format) into trident
 * release checkpoints: `trident convert --from megatron --input SAVE --output CKPT`.
 *
 * Contract:
 *  - SAVE is Megatron-LM's --save folder: latest_checkpointed_iteration.txt (an iteration or
 *    "release"; --iteration N instead reads iter_000000N), the iteration's folder
 *    SAVE/iter_NNNNNNN or SAVE/release, and in it one mp_rank_TT/model_optim_rng.pt per
 *    tensor-parallel rank (pipeline_model_parallel_size 1) or mp_rank_TT_PPP/model_optim_rng.pt
 *    per (tensor, pipeline) rank, as megatron/training/checkpointing.py's get_checkpoint_name
 *    names them. Each file is a torch.save ZIP archive of a dict: args (an argparse.Namespace),
 *    checkpoint_version (2.0 or later: the query_key_value rows per group), iteration, and the
 *    rank's state dict as `model`, or `model0` .. `modelV-1` with V virtual pipeline chunks;
 *    the rest (optimizer, opt_param_scheduler, rng_state, ...) is read by the restricted
 *    unpickler (pt_internal.h, PT_OBJECTS) and never interpreted.
 *  - Every file's args must agree on the model's keys (the message names the key and both
 *    files). args -> the model section: num_layers, hidden_size, ffn_hidden_size,
 *    num_attention_heads, group_query_attention + num_query_groups, kv_channels, seq_length,
 *    max_position_embeddings (rope: at least seq_length), padded_vocab_size (the embedding's
 *    rows; vocab_size, when recorded, the real vocabulary kept), make_vocab_size_divisible_by,
 *    normalization, norm_epsilon (else layernorm_epsilon), apply_layernorm_1p, swiglu, the GELU
 *    (tanh for openai_gelu or bias_gelu_fusion with linear biases, Megatron's fused bias-GELU;
 *    else the exact one), position_embedding_type (or use_rotary_position_embeddings),
 *    rotary_base, rotary_percent, rotary_seq_len_interpolation_factor, use_rope_scaling +
 *    rope_scaling_factor, untie_embeddings_and_output_weights, add_bias_linear, add_qkv_bias,
 *    init_method_std; a mixture of experts (megatron-core's MoE layer with SequentialMLP):
 *    num_experts, moe_router_topk (1 only with moe_router_pre_softmax),
 *    moe_router_pre_softmax, moe_router_load_balancing_type (aux_loss | none),
 *    moe_aux_loss_coeff, moe_z_loss_coeff. Refused naming the key: expert_model_parallel_size
 *    above 1 (expert-parallel files not merged), moe_layer_freq above 1, moe_grouped_gemm
 *    (GroupedMLP's layout), moe_expert_capacity_factor / moe_pad_expert_input_to_capacity
 *    (token dropping), moe_shared_expert_intermediate_size, moe_input_jitter_eps, squared_relu,
 *    apply_residual_connection_post_layernorm, qk_layernorm,
 *    multi_latent_attention, rotary_interleaved, window_size, mtp_num_layers,
 *    fp8_param_gather (FP8 weights), pipeline_model_parallel_split_rank (encoder-decoder),
 *    heterogeneous_layers_config_path, another normalization or position embedding, sizes
 *    that do not divide by the tensor-parallel size. context_parallel_size and
 *    sequence_parallel store nothing differently.
 *  - State dicts: megatron-core's names (embedding.word_embeddings, position_embeddings,
 *    decoder.layers.N.{input_layernorm | self_attention.linear_qkv.layer_norm_*,
 *    self_attention.linear_qkv, linear_proj, pre_mlp_layernorm | mlp.linear_fc1.layer_norm_*,
 *    mlp.linear_fc1, linear_fc2; with experts mlp.router (E, C, on every TP rank) and
 *    mlp.experts.local_experts.E.linear_fc1 / linear_fc2, split as the dense MLP's},
 *    decoder.final_layernorm, output_layer) or the legacy model's
 *    (language_model.embedding..., language_model.encoder (or .transformer).layers.N.
 *    {input_norm | input_layernorm, self_attention.query_key_value, self_attention.dense,
 *    post_attention_norm | post_attention_layernorm, mlp.dense_h_to_4h, mlp.dense_4h_to_h},
 *    final_norm | final_layernorm, language_model.output_layer, word_embeddings_for_head);
 *    nested dicts are joined with '.'; *_extra_state entries are skipped. Layer numbers are
 *    local to each (pipeline stage, chunk): global ones follow chunk by chunk, stage by stage
 *    (chunk v of stage p after every stage's chunks before v), as Megatron's layer offsets do.
 *  - Merging: column-parallel tensors (linear_qkv / query_key_value, linear_fc1 /
 *    dense_h_to_4h, their biases) by rows, row-parallel ones (linear_proj / dense, linear_fc2 /
 *    dense_4h_to_h) by columns, the vocabulary-parallel embedding and output layer by rows (the
 *    first vocab_size rows kept), the rest taken from TP rank 0 (each rank's shape checked).
 *    QKV rows are (group, {q_0 .. q_R-1, k, v}, d) in both, trident's; SwiGLU's fc1 holds per
 *    TP rank [gate_r; up_r], de-interleaved into trident's (feature, {gate, up}) rows. A
 *    missing tensor, one of another shape or dtype, one that is not part of the model (a
 *    tied model's head copy on the last stage excepted), a missing or extra mp_rank_* folder:
 *    TR_ERR_INVALID naming the file and the tensor.
 *  - --ckpt-format torch_dist (megatron_dist.c; info->dist 1): the iteration's folder holds
 *    metadata.json (sharded_backend "torch_dist"; zarr and others refused), common.pt (a
 *    torch.save dict: args as above, iteration, checkpoint_version), .metadata
 *    (torch.distributed.checkpoint's pickled Metadata, read under PT_DCP's allowlist) and
 *    __R_T.distcp files holding each chunk as its own torch.save archive at an offset. The
 *    tensors are global whatever the TP / PP / VP layout: megatron-core's sharded keys, layers
 *    stacked on a leading axis (decoder.layers.self_attention.linear_qkv.weight of
 *    [num_layers, rows, cols]), SwiGLU's linear_fc1 rows [gate; up]. Each model key's chunks
 *    must tile its global shape (no overlap, no gap, none outside), each be stored (a file of
 *    the folder, inside it, at least 2 bytes an element) and hold a floating-point tensor of
 *    its size; keys other than embedding.*, decoder.*, output_layer.* (optimizer.*, rng_state,
 *    _extra_state objects) are ignored; none of those (an optimizer-only save), a missing, extra
 *    or misshapen model tensor, a mixture of experts: TR_ERR_INVALID naming the file and key.
 *  - Output: a release checkpoint at ckpt_dir (written whole or not at all, as tr_hf_import's);
 *    *model gets the model section. */
#ifndef TR_HF_MEGATRON_H
#define TR_HF_MEGATRON_H

#include "core/core.h"
#include "yaml/config.h"

typedef struct {
    int iteration;        /* the checkpoint's (0 for release) */
    int release;          /* read SAVE/release */
    int tp, pp, vp;       /* tensor, pipeline parallel sizes, virtual chunks per stage */
    int mcore;            /* 1: megatron-core names, 0: the legacy model's */
    int padded_vocab;     /* the embedding's rows in the files */
    double version;       /* checkpoint_version */
    int dist;             /* 1: a --ckpt-format torch_dist save */
} tr_megatron_info;

/* SAVE (iteration < 0: its tracker's) -> release checkpoint ckpt_dir. */
TR_MUST_CHECK int tr_megatron_import(const char *save_dir, int iteration, const char *ckpt_dir,
                                     tr_model_config *model, tr_megatron_info *info);

/* The other way, `trident convert --to megatron`: the latest checkpoint of ckpt_dir (its model,
 * or config_model's switches when given: its sizes must be the checkpoint's) -> save_dir (written
 * whole or not at all) as Megatron-LM's --ckpt-format torch folder: the tracker "release",
 * release/mp_rank_TT[_PPP]/model_optim_rng.pt per (tensor, pipeline) rank, each a torch.save
 * ZIP (hf/torch_write.h) of {args (Namespace: the model's keys mlm_read_args reads, the sizes
 * tp, pp, padded_vocab_size of tp, params_dtype torch.float32, transformer_impl local; bf16:
 * args.bf16 True, params_dtype torch.bfloat16), checkpoint_version 3.0, iteration, model
 * (megatron-core's names, local spec: F32 shards (bf16: BF16, rounded to nearest even) as
 * the import merges them, stage p holding layers [p L/pp, (p+1) L/pp) numbered from 0, a tied
 * model's last stage its own output_layer.weight when pp > 1)}; no optimizer or RNG state.
 * TR_ERR_INVALID: a model GPTModel cannot be (alibi, parallel_residual, embedding_layernorm,
 * geglu, relu, output_layer_bias, add_mlp_bias alone, LayerNorm without bias,
 * embedding_multiplier, sliding_window) named; heads, groups, ffn not divisible by tp, layers
 * by pp. *iteration: the checkpoint's. */
TR_MUST_CHECK int tr_megatron_export(const char *ckpt_dir, const char *save_dir, int tp, int pp,
                                     int bf16, const tr_model_config *config_model,
                                     int *iteration);

#endif
