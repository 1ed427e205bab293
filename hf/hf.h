/* hf/ — Hugging Face interoperability: safetensors files, and GPT-2 checkpoints converted to and
 * from trident's (`trident convert`).
 *
 * Contract:
 *  - safetensors: an 8-byte little-endian header length N, N bytes of JSON
 *    {NAME: {"dtype": D, "shape": [...], "data_offsets": [BEGIN, END]}, ...,
 *     "__metadata__": {KEY: VALUE, ...} (optional, strings only)}, padded with spaces, then the
 *    data; offsets count from the start of the data. JSON is parsed by jansson.
 *  - tr_st_open() validates the whole header before anything is read and refuses, with
 *    TR_ERR_INVALID and the message "FILE: CAUSE", every malformed file: shorter than 8 bytes,
 *    a header length past the end of the file or above 100,000,000 bytes (safetensors' own
 *    limit), a header that is not UTF-8, not JSON, not an object or repeats a name, an entry
 *    without exactly dtype / shape / data_offsets, an unknown dtype, a negative or fractional
 *    number, more than TR_ST_MAX_DIMS dimensions, a byte count other than the shape times the
 *    dtype's size, offsets out of order, past the data, overlapping or leaving bytes of the data
 *    to no tensor (the data must be exactly the tensors' bytes, as safetensors requires).
 *  - A folder's weights are, the first present of: model.safetensors.index.json
 *    ({"metadata": {...}, "weight_map": {NAME: FILE}}) and the shards it names (plain file
 *    names in the folder), model.safetensors, pytorch_model.bin.index.json (the same format,
 *    shards read by tr_pt_open), pytorch_model.bin; every tensor of a shard must be in the map,
 *    for that shard.
 *  - tr_pt_open() reads a torch.save'd state dict (pytorch_model.bin) as a tr_st_file: a ZIP
 *    archive (PyTorch >= 1.6; ZIP64 too) whose entries are STORED, ARCHIVE/data.pkl, the
 *    storages ARCHIVE/data/KEY, ARCHIVE/byteorder (when present) "little"; or a legacy file
 *    (magic, protocol 1001, sys_info little_endian True, the pickle, the storage keys, per key
 *    an 8-byte count and the bytes; pickle protocol 2). The pickle runs under an allowlist (as
 *    torch.load(weights_only=True)): the opcodes Python writes for such a dict, the globals
 *    collections.OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter and the
 *    storages torch.{Float,Half,BFloat16,Double,Long,Int,Short,Char,Byte,Bool}Storage (F32, F16,
 *    BF16, F64, I64, I32, I16, I8, U8, BOOL); any other opcode or global is refused naming it
 *    and its byte, before anything runs. The top object must be a dict of string keys to
 *    tensors (a non-tensor value is refused naming its key; an OrderedDict's _metadata is
 *    ignored); each tensor row-major contiguous (strides of dimensions of 1 free), inside its
 *    storage, and the storage's bytes inside the file. Tensors may share a storage (tied
 *    weights). Limits, each an error: a pickle of 256 MiB, 2^17 stack values, 64 open marks,
 *    2^24 objects, strings of 1 MiB, 2^20 ZIP entries. Its tensors' begin / end are file
 *    offsets (tr_st_at: in file order; tr_st_meta: NULL). CRCs are not checked.
 *  - Writing: tensors are written in the order given, after a header padded with spaces to a
 *    multiple of 8 bytes; tr_st_put_f32() converts floats to the tensor's dtype (F32, F16, BF16:
 *    round to nearest even). A folder writer splits the tensors into shards of at most
 *    max_shard_bytes (HF's rule: a new shard when the next tensor would not fit; one file,
 *    model.safetensors, when all fit) and writes the index.
 *  - GPT-2 (GPT2LMHeadModel / GPT2Model of transformers): trident's tensors map one to one;
 *    Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out] (trident's are [out, in]);
 *    c_attn's 3C outputs are [Q | K | V], each (head, d), trident's qkv rows (head, {q,k,v}, d);
 *    lm_head is tied to wte (refused if a file holds a different one); wte holds the real
 *    vocabulary (trident's padding rows are dropped on export, zero on import); attn.bias and
 *    attn.masked_bias buffers are ignored. Names with or without "transformer." are read;
 *    export writes GPT2LMHeadModel's ("transformer.h.0.attn.c_attn.weight").
 *  - config.json: what trident's GPT-2 cannot represent is refused naming the key (activation
 *    other than gelu_new / gelu_pytorch_tanh, n_inner != 4 n_embd, layer_norm_epsilon != 1e-5,
 *    scale_attn_by_inverse_layer_idx, untied embeddings, cross-attention, ...).
 *  - tr_hf_import() / tr_hf_export() write into OUTPUT.tmp-PID beside OUTPUT and rename it
 *    into place at the end, so OUTPUT appears complete or not at all; OUTPUT must not exist (or
 *    be an empty folder). An import is a release checkpoint (train.h): training from it starts
 *    at iteration 1 in any layout. Export reads the latest checkpoint of CKPT_DIR.
 *  - Errors: TR_ERR_INVALID (bad input: exit 2 at the CLI), TR_ERR_IO, TR_ERR_NOMEM. */
#ifndef TR_HF_H
#define TR_HF_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "model/gpt.h"
#include "yaml/config.h"

/* ------------------------------------------------------------------ safetensors */

typedef enum {
    TR_ST_BOOL, TR_ST_U8, TR_ST_I8, TR_ST_F8_E4M3, TR_ST_F8_E5M2, TR_ST_I16, TR_ST_U16,
    TR_ST_F16, TR_ST_BF16, TR_ST_I32, TR_ST_U32, TR_ST_F32, TR_ST_I64, TR_ST_U64, TR_ST_F64,
    TR_ST_N_DTYPES
} tr_st_dtype;

#define TR_ST_MAX_DIMS 8
#define TR_ST_MAX_HEADER 100000000 /* bytes */

const char *tr_st_dtype_name(tr_st_dtype d); /* "F32" */
size_t tr_st_dtype_size(tr_st_dtype d);      /* bytes per element */

typedef struct {
    const char *name;
    tr_st_dtype dtype;
    int ndim;
    uint64_t shape[TR_ST_MAX_DIMS];
    uint64_t numel;      /* product of the shape (1 for a scalar) */
    uint64_t begin, end; /* bytes of the data section (set by the reader / the writer) */
} tr_st_tensor;

typedef struct tr_st_file tr_st_file;
/* Open and validate a safetensors file (nothing of the data is read). */
TR_MUST_CHECK int tr_st_open(const char *path, tr_st_file **out);
void tr_st_close(tr_st_file *f);
const char *tr_st_path(const tr_st_file *f);
size_t tr_st_count(const tr_st_file *f);
const tr_st_tensor *tr_st_at(const tr_st_file *f, size_t i); /* in data order */
const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name); /* NULL if absent */
const char *tr_st_meta(const tr_st_file *f, const char *key);         /* NULL if absent */
/* The tensor's bytes as stored (little-endian), end - begin of them. */
TR_MUST_CHECK int tr_st_read(tr_st_file *f, const tr_st_tensor *t, void *out);
/* The tensor as numel floats: F32, F16, BF16 and F64 (rounded); other dtypes TR_ERR_INVALID. */
TR_MUST_CHECK int tr_st_read_f32(tr_st_file *f, const tr_st_tensor *t, float *out);

/* A pytorch_model.bin (torch.save of a state dict), read as described above. */
TR_MUST_CHECK int tr_pt_open(const char *path, tr_st_file **out);

/* A folder's weights: model.safetensors, or the index and its shards, or the same of
 * pytorch_model.bin. */
typedef struct tr_st_set tr_st_set;
TR_MUST_CHECK int tr_st_set_open(const char *dir, tr_st_set **out);
void tr_st_set_close(tr_st_set *s);
size_t tr_st_set_count(const tr_st_set *s);
/* Tensor i (by name) of the set, and the file holding it. */
const tr_st_tensor *tr_st_set_at(const tr_st_set *s, size_t i, tr_st_file **file);
const tr_st_tensor *tr_st_set_find(const tr_st_set *s, const char *name, tr_st_file **file);

typedef struct tr_st_writer tr_st_writer;
/* One file at path holding tensors[0..n) (name, dtype, ndim, shape) in that order; meta: KEY,
 * VALUE, ..., NULL (or NULL for none). The data follows with one put per tensor, in order. */
TR_MUST_CHECK int tr_st_create(const char *path, const tr_st_tensor *tensors, size_t n,
                               const char *const *meta, tr_st_writer **out);
/* The same into folder dir, split as described above (max_shard_bytes 0: one file). */
TR_MUST_CHECK int tr_st_create_sharded(const char *dir, const tr_st_tensor *tensors, size_t n,
                                       const char *const *meta, uint64_t max_shard_bytes,
                                       tr_st_writer **out);
/* The next tensor's bytes as stored, or from numel floats (F32, F16, BF16 tensors). */
TR_MUST_CHECK int tr_st_put(tr_st_writer *w, const void *data);
TR_MUST_CHECK int tr_st_put_f32(tr_st_writer *w, const float *v);
/* After the last put: the index (sharded), fsync, close; frees w (also on failure). */
TR_MUST_CHECK int tr_st_finish(tr_st_writer *w);
/* Close and remove what w wrote; frees w. */
void tr_st_abort(tr_st_writer *w);

/* Float conversions of the formats (round to nearest even). */
uint16_t tr_f32_to_bf16(float x);
float tr_bf16_to_f32(uint16_t h);
uint16_t tr_f32_to_f16(float x);
float tr_f16_to_f32(uint16_t h);

/* ------------------------------------------------------------------ GPT-2 */

typedef struct {
    int n_layer, n_embd, n_head, n_positions, vocab_size;
    int bos_token_id, eos_token_id; /* -1: none */
} tr_hf_gpt2_config;

/* DIR/config.json of a GPT-2 model, refused (naming the key) where trident cannot represent it. */
TR_MUST_CHECK int tr_hf_read_gpt2_config(const char *dir, tr_hf_gpt2_config *out);
/* trident's model section for it (sizes; other fields untouched). */
void tr_hf_gpt2_model_config(const tr_hf_gpt2_config *c, tr_model_config *m);

/* Where trident tensor t (its full shape; V real vocabulary rows) is in a GPT-2 checkpoint. */
typedef enum {
    TR_HF_SAME,      /* same layout (embeddings: the first V rows; LayerNorm) */
    TR_HF_TRANSPOSE, /* Conv1D weight [in, out] = trident's [out, in] transposed */
    TR_HF_QKV_W,     /* c_attn.weight [C, 3C]: transposed, columns [Q|K|V] -> rows (h, qkv, d) */
    TR_HF_QKV_B,     /* c_attn.bias [3C]: [Q|K|V] -> (h, qkv, d) */
} tr_hf_layout;

typedef struct {
    char name[96];     /* "transformer.h.3.attn.c_attn.weight" */
    tr_hf_layout layout;
    int ndim;
    uint64_t shape[2]; /* the HF tensor's */
} tr_hf_tensor_map;

TR_MUST_CHECK int tr_hf_gpt2_map(const tr_param_tensor *t, int V, tr_hf_tensor_map *out);
/* hf (the HF tensor, floats) -> dst (trident's full tensor, the HF tensor's rows of it), and
 * back; n_head: heads (for the qkv layouts). TR_ERR_NOMEM only. */
TR_MUST_CHECK int tr_hf_to_trident(const tr_hf_tensor_map *m, const tr_param_tensor *t,
                                   int n_head, const float *hf, float *dst);
TR_MUST_CHECK int tr_hf_from_trident(const tr_hf_tensor_map *m, const tr_param_tensor *t,
                                     int n_head, const float *src, float *hf);

/* The GPT-2 weights of HF folder dir into g (this TP rank's shards; any stage), bound to host
 * memory `params`; padding rows 0. Refuses a tensor of the wrong shape or dtype, a missing
 * one, and one that is not part of a GPT-2 of this size (naming it). */
TR_MUST_CHECK int tr_hf_load_gpt2(const char *dir, tr_gpt *g, float *params);

/* ------------------------------------------------------------------ Llama and Bloom
 * LlamaForCausalLM: q_proj, k_proj, v_proj (NH, NG, NG heads of HS rows) -> qkv rows
 * (group, {q_0 .. q_R-1, k, v}, d); gate_proj, up_proj -> fc rows (feature, {gate, up});
 * o_proj, down_proj, the norms, embed_tokens, lm_head (output_layer; tied when
 * tie_word_embeddings) the same layout. BloomForCausalLM: every tensor the same layout
 * (query_key_value is already (head, {q, k, v}, d)); word_embeddings_layernorm -> emb_ln;
 * lm_head tied. GPTNeoXForCausalLM (Pythia): every tensor the same layout as well
 * (query_key_value viewed as (heads, 3 * head_size) is (head, {q, k, v}, d)): embed_in -> wte,
 * embed_out -> output_layer (tied: trident untie 0), attention.dense -> attn_proj,
 * dense_h_to_4h / dense_4h_to_h -> fc / fc_proj, final_layer_norm -> lnf; the buffers older
 * checkpoints carry (attention.bias, attention.masked_bias, rotary_emb.inv_freq) ignored;
 * config.json's rotary_pct, rotary_emb_base, use_parallel_residual and hidden_act (gelu,
 * gelu_python: gelu_approximate none; gelu_new, gelu_pytorch_tanh, gelu_fast, gelu_accurate:
 * tanh) read into the switches. FalconForCausalLM (Falcon-7B, -40B, -180B): every tensor the
 * same layout too (query_key_value is trident's qkv rows (group, {q_0 .. q_R-1, k, v}, d) as
 * transformers' _split_heads views it: (group, R + 2, d) in the new decoder architecture,
 * (NH + 2, d) with multi_query, (NH, 3, d) otherwise): word_embeddings -> wte, lm_head ->
 * output_layer (tied unless tie_word_embeddings is false), ln_f -> lnf,
 * self_attention.query_key_value / .dense -> qkv / attn_proj, mlp.dense_h_to_4h /
 * .dense_4h_to_h -> fc / fc_proj, and the norms by config.json's architecture:
 * new_decoder_architecture true (Falcon-40B, -180B): ln_attn -> ln1, ln_mlp -> ln2,
 * model.parallel_residual, num_kv_heads groups; else parallel_attn true (Falcon-7B): one
 * input_layernorm -> ln1 with model.parallel_shared_norm (no ln2); else input_layernorm,
 * post_attention_layernorm -> ln1, ln2 in turn; those two have 1 key/value group
 * (multi_query) or one per head. bias -> add_bias_linear (every linear layer or none),
 * rope_theta -> rotary_base over whole heads, layer_norm_epsilon, the exact GELU
 * (gelu_approximate none) in a 4h MLP; FalconConfig's defaults for absent keys (multi_query,
 * parallel_attn and tie_word_embeddings true, bias false). A tied model's head
 * (lm_head.weight; GPT-NeoX's embed_out.weight), when a file holds it, must be the embedding
 * (shape and float32 values, as GPT-2's), else it is refused. Unsupported settings
 * (rope_scaling, attention_bias (a Llama's true, a GPT-NeoX's false), pretraining_tp > 1,
 * apply_residual_connection_post_layernorm, a Llama's hidden_act other than silu, a GPT-NeoX's
 * other than a GELU, a rotary_pct of an odd or fractional share, a Falcon's alibi true,
 * num_kv_heads other than the heads without the new architecture or multi_query, later
 * transformers' ffn_hidden_size / activation / num_ln_in_parallel_attn; model_type
 * RefinedWebModel / RefinedWeb: trust_remote_code's Falcon) are refused by name. */
/* PhiForCausalLM (Phi-1, Phi-1.5, Phi-2; model_type phi; hf/family_phi.c): q_proj, k_proj,
 * v_proj (weights and biases) -> qkv rows as a Llama's; embed_tokens -> wte, input_layernorm
 * -> ln1 (one norm: parallel_residual + parallel_shared_norm), self_attn.dense -> attn_proj,
 * mlp.fc1 / fc2 -> fc / fc_proj, final_layernorm -> lnf, lm_head.weight / .bias ->
 * output_layer / output_layer.bias (untied, output_layer_bias); partial_rotary_factor ->
 * rotary_percent (int(head_dim * f) even >= 2), rope_theta, layer_norm_eps, hidden_act (gelu,
 * gelu_python: none; gelu_new, gelu_pytorch_tanh, gelu_fast, gelu_accurate: tanh);
 * tie_word_embeddings true, qk_layernorm true and rope_scaling refused by name. */
/* StableLmForCausalLM (StableLM-3B-4E1T, StableLM-2; model_type stablelm;
 * hf/family_stablelm.c): a Llama's names and layouts with LayerNorm: input_layernorm,
 * post_attention_layernorm and model.norm .bias -> ln1, ln2, lnf .bias; partial_rotary_factor ->
 * rotary_percent (int(head_dim * f) even >= 2), use_qkv_bias -> add_qkv_bias (q/k/v_proj.bias),
 * layer_norm_eps, rope_theta, tie_word_embeddings; rope_scaling, hidden_act other than silu and
 * later transformers' qk_layernorm true and use_parallel_residual true refused by name. */
/* GemmaForCausalLM (Gemma-2B, -7B; model_type gemma; hf/family_gemma.c): a Llama's names and
 * layouts (q/k/v_proj of head_dim rows a head, gate_proj / up_proj -> fc rows (feature, {gate,
 * up}), o_proj NH x head_dim columns), tied (lm_head, when a file holds it, the embedding), no
 * biases; config.json: the Llama's keys (8192 positions, 16 key/value heads by default), head_dim
 * -> kv_channels (0 when it is hidden_size / num_attention_heads), the norms' weights copied as
 * they are under apply_layernorm_1p (GemmaRMSNorm's x (1 + weight)), embedding_multiplier
 * (float)sqrt(hidden_size), geglu with the GELU of hidden_activation when present and not null,
 * else of hidden_act (absent: gelu): gelu, gelu_python -> gelu_approximate none;
 * gelu_pytorch_tanh, gelu_new, gelu_fast, gelu_accurate -> tanh; others refused naming the key
 * read; exported with both keys the same ("gelu" or "gelu_pytorch_tanh"). attention_bias true,
 * tie_word_embeddings false and rope_scaling refused by name. */
/* GPTBigCodeForCausalLM (StarCoder, StarCoderBase, SantaCoder; model_type gpt_bigcode;
 * hf/family_bigcode.c): GPT-2's names under transformer. with nn.Linear weights [out, in], every
 * tensor in trident's layout: c_attn's rows are [Q | K | V] of one key/value head with
 * multi_query (model.num_query_groups 1), else (head, {q, k, v}, d) (groups = heads); wte, wpe,
 * ln_1, ln_2, attn.c_attn / c_proj, mlp.c_fc / c_proj, ln_f -> wte, wpe, ln1, ln2, qkv /
 * attn_proj, fc / fc_proj, lnf; lm_head tied unless tie_word_embeddings is false
 * (output_layer); n_inner (null: 4 n_embd) -> ffn_hidden_size, n_positions, layer_norm_epsilon,
 * activation_function (gelu, gelu_python: gelu_approximate none; gelu_pytorch_tanh, gelu_new,
 * gelu_fast, gelu_accurate: tanh). scale_attn_weights false, add_cross_attention true, another
 * activation and n_embd not divisible by n_head refused by name (attention_softmax_in_fp32 and
 * scale_attention_softmax_in_fp32 change nothing in float32). */
/* GPTJForCausalLM (GPT-J-6B; model_type gptj; hf/family_gptj.c): transformer.wte -> wte,
 * h.L.ln_1 -> ln1 (one norm: parallel_residual + parallel_shared_norm), attn.q_proj / k_proj /
 * v_proj (no biases) -> qkv rows (head, {q, k, v}, d) with each head's first rotary_dim rows of
 * q and k from GPT-J's interleaved pairs (rotate_every_two: row 2i -> i, 2i + 1 -> rotary_dim/2
 * + i) into trident's halves (rotate_half), attn.out_proj (no bias) -> attn_proj, mlp.fc_in /
 * fc_out with biases -> fc / fc_proj (add_bias_linear false, add_mlp_bias), ln_f -> lnf,
 * lm_head.weight / .bias -> output_layer / output_layer.bias (untied, output_layer_bias);
 * rotary_dim -> rotary_percent (even, at most the head size; base 10000), n_inner (null:
 * 4 n_embd), n_positions, layer_norm_epsilon, activation_function (gelu, gelu_python: none;
 * gelu_new, gelu_pytorch_tanh, gelu_fast, gelu_accurate: tanh); rotary_dim null, an odd one or
 * one past the head, another activation and tie_word_embeddings true refused by name. */
/* MptForCausalLM (MPT-7B, MPT-30B; model_type mpt; hf/family_mpt.c): transformer.wte -> wte
 * (lm_head tied), blocks.L.norm_1 / norm_2 (weights alone) -> ln1 / ln2 (layernorm_bias
 * false), attn.Wqkv ([Q | K | V] rows, each (head, d)) -> qkv rows (head, {q, k, v}, d),
 * attn.out_proj -> attn_proj, ffn.up_proj / down_proj -> fc / fc_proj (no linear biases, the
 * exact GELU in 4 d_model), norm_f -> lnf; ALiBi (alibi_bias_max 8: Bloom's slopes); d_model,
 * n_heads, n_layers, vocab_size, max_seq_len, layer_norm_epsilon. transformers 4.38 reads
 * neither no_bias, expansion_ratio nor most of attn_config: no_bias false, expansion_ratio
 * other than 4, tie_word_embeddings false, logit_scale, norm_type other than a LayerNorm,
 * ffn_config of another ffn_type, attn_config's attn_type other than multihead_attention,
 * alibi false, alibi_bias_max other than 8, qk_ln, clip_qkv, prefix_lm, kv_n_heads other than
 * n_heads and softmax_scale other than 1/sqrt(head_dim) refused by name. */
/* OPTForCausalLM (OPT-125m .. OPT-66b; model_type opt; hf/family_opt.c):
 * model.decoder.embed_tokens -> wte, embed_positions (max_position_embeddings + 2 rows, position t
 * at row t + 2) -> wpe without its first 2 rows (exported as zeros), layers.L.self_attn_layer_norm
 * -> ln1, self_attn.q_proj / k_proj / v_proj (+ biases) -> qkv rows (head, {q, k, v}, d),
 * self_attn.out_proj -> attn_proj, final_layer_norm -> ln2, fc1 / fc2 -> fc / fc_proj,
 * model.decoder.final_layer_norm -> lnf, lm_head.weight tied unless tie_word_embeddings is false
 * (output_layer, no bias); hidden_size, num_attention_heads, num_hidden_layers, ffn_dim,
 * vocab_size, max_position_embeddings (OPTConfig's defaults when absent), activation_function
 * (relu, the default: model.relu; gelu, gelu_python: gelu_approximate none; gelu_new,
 * gelu_pytorch_tanh, gelu_fast, gelu_accurate: tanh), enable_bias false -> add_bias_linear false (the norms keep theirs);
 * do_layer_norm_before false and word_embed_proj_dim other than hidden_size (OPT-350m's),
 * _remove_final_layer_norm true, layer_norm_elementwise_affine false, another activation and
 * hidden_size not divisible by the heads refused by name. */
/* Phi3ForCausalLM (Phi-3-mini-4k, Phi-3-medium-4k; model_type phi3; hf/family_phi3.c): a
 * Llama's names and layouts but self_attn.qkv_proj (rows [q; k; v]: heads x d, kv_heads x d,
 * kv_heads x d) -> qkv rows and mlp.gate_up_proj (rows [gate; up]) -> fc rows (feature, {gate,
 * up}); config.json as a Llama's with Phi3Config's defaults, model.hf_family phi3 (a Llama's
 * switches export as Phi-3 only with it); sliding_window checked and not kept (transformers
 * 4.44's eager and sdpa attention ignore it), exported null; tie_word_embeddings either way;
 * rope_scaling (Phi-3-128k's, Phi-3.5's longrope), partial_rotary_factor other than 1,
 * hidden_act other than silu, attention_bias / mlp_bias true and head_dim other than hidden /
 * heads refused by name. */
enum { TR_HF_GPT2, TR_HF_LLAMA, TR_HF_BLOOM, TR_HF_QWEN2, TR_HF_MISTRAL, TR_HF_NEOX, TR_HF_FALCON,
       TR_HF_PHI, TR_HF_STABLELM, TR_HF_GEMMA, TR_HF_BIGCODE, TR_HF_GPTJ, TR_HF_MPT,
       TR_HF_OPT, TR_HF_PHI3, TR_HF_MIXTRAL };
/* MixtralForCausalLM (Mixtral-8x7B, -8x22B; model_type mixtral; hf/family_mixtral.c): a
 * Mistral's attention and norms, every layer's MLP block_sparse_moe: gate.weight (E, C) ->
 * layers.L.router.weight, experts.e.w1 (gate) / w3 (up) -> layers.L.experts.e.fc rows (feature,
 * {gate, up}), experts.e.w2 -> experts.e.fc_proj; num_local_experts -> model.num_experts,
 * num_experts_per_tok -> moe_router_topk (2 .. E), router_aux_loss_coef -> moe_aux_loss_coeff
 * (recorded: transformers adds it only with output_router_logits), moe_router_pre_softmax false
 * (Mixtral's softmax over all, top-k, renormalised is the softmax of the k logits);
 * router_jitter_noise other than 0, rope_scaling and top-1 refused by name. */
/* "GPT-2", "Llama", "Bloom", "Qwen2", "Mistral", "GPT-NeoX", "Falcon", "Phi", "StableLM",
 * "Gemma", "GPTBigCode", "GPT-J", "MPT", "OPT", "Phi3", "Mixtral" */
const char *tr_hf_family_name(int family);
/* DIR/config.json: *family from model_type ("llama", "qwen2", "bloom", "gpt_neox", "falcon",
 * "phi", "stablelm", "gemma", "gpt_bigcode", "gptj", "mpt", "opt", "phi3", "mixtral"; "mistral" is
 * TR_HF_LLAMA: the same model when its sliding_window is null or spans
 * max_position_embeddings, exported as a Llama; a shorter window is kept as
 * model.sliding_window, seq_length within it, and exported as a Mistral; Mistral's head_dim
 * (transformers 4.43's; Mistral-Nemo's 128 in hidden 5120 of 32 heads), even, is
 * model.kv_channels where it is not hidden_size / num_attention_heads, exported as a Mistral
 * with head_dim (a Llama's or Qwen2's head_dim other than that is refused); a Qwen2 is a Llama
 * with add_qkv_bias (Qwen2ForCausalLM: q/k/v_proj.bias -> qkv.bias rows as the weights'),
 * its window used only with use_sliding_window true, refused then unless it spans every
 * position; anything else TR_HF_GPT2 with
 * *m untouched beyond zeroing: read it with tr_hf_read_gpt2_config); for Llama / Bloom /
 * GPT-NeoX *m is the whole model section (seq_length = max_position_embeddings; Bloom's 2048
 * unless config.json has seq_length; GPT-NeoX's, Falcon's, Phi's and Gemma's absent keys
 * transformers 4.38's defaults, the sizes required; embedding_multiplier 1 but Gemma's). */
TR_MUST_CHECK int tr_hf_read_family_config(const char *dir, tr_model_config *m, int *family);
/* The weights of a Llama / Qwen2 / Bloom / GPT-NeoX / Falcon / Phi folder into a whole model g (one
 * stage, TP 1) bound to host memory params; a missing, misshapen or foreign tensor refused
 * by name. */
TR_MUST_CHECK int tr_hf_load_family(const char *dir, int family, tr_gpt *g, float *params);
/* Which HF family m is: TR_HF_GPT2, TR_HF_LLAMA (RMSNorm, rope over whole heads, SwiGLU, no
 * biases, no embedding norm, the sequential residual; GQA and tying either way), TR_HF_QWEN2
 * (the same with add_qkv_bias), TR_HF_MISTRAL (a Llama with model.sliding_window or
 * kv_channels, no q/k/v biases),
 * TR_HF_BLOOM (LayerNorm, ALiBi, embedding norm, biases, tanh GELU 4h, the sequential
 * residual, tied), TR_HF_NEOX (LayerNorm, rope over any even share of the head, biases, GELU
 * MLP of any width, no GQA, no embedding norm, either residual (the parallel one with two
 * norms: not parallel_shared_norm) and GELU, tied or not), TR_HF_FALCON (LayerNorm, rope over
 * whole heads, the exact GELU in a 4h MLP, no embedding norm, biases on all linear layers or
 * none, tied or not, and what GPT-NeoX cannot be: no biases, GQA or parallel_shared_norm;
 * exported with new_decoder_architecture for the parallel residual with two norms,
 * parallel_attn for one shared norm, neither for the sequential residual, the latter two only
 * with 1 key/value group (multi_query) or one per head: the export refuses others by name),
 * TR_HF_PHI (the output layer's bias with LayerNorm, rope over any even share of the head, a
 * GELU MLP of any width, biases, GQA or not, the parallel residual with one shared norm, no
 * embedding norm: hf_phi_shape; any other model with that bias -1), TR_HF_STABLELM (LayerNorm,
 * rope over any even share of the head, SwiGLU of any width, no linear biases (q, k and v
 * either way), GQA and tying either way, the sequential residual, no embedding norm, no
 * window: hf_stablelm_shape), TR_HF_GEMMA (RMSNorm with layernorm_1p, rope over whole heads of
 * any size (kv_channels), GeGLU of any width, no biases, GQA or not, tied, embedding_multiplier
 * (float)sqrt(C), the sequential residual, no embedding norm, no window: hf_gemma_shape; any
 * other model with kv_channels, layernorm_1p, embedding_multiplier or geglu -1), TR_HF_BIGCODE
 * (learned positions with LayerNorm, biases, a GELU MLP of any width, one key/value group or
 * one per head, tied or not, the sequential residual: hf_bigcode_shape; GPT-2 first: a model
 * that GPT-2 expresses (a group per head, the tanh GELU in 4C, tied) stays GPT-2), TR_HF_GPTJ
 * (add_mlp_bias, no other family's: LayerNorm, rope of base 10000 over any even share of the
 * head, a GELU MLP of any width with biases and an attention without them, a key/value head
 * per head, the parallel residual with one shared norm, untied with the output layer's bias:
 * hf_gptj_shape; any other model with add_mlp_bias -1), TR_HF_MPT (layernorm_bias false, no
 * other family's: LayerNorm, ALiBi, the exact GELU in 4C, no linear biases, a key/value head
 * per head, tied, the sequential residual, no embedding norm: hf_mpt_shape; any other model
 * without norm biases -1), TR_HF_OPT (model.relu, no other family's, and the GELU models with
 * learned positions that neither GPT-2 nor GPT-BigCode takes (no linear biases): LayerNorm, a
 * ReLU or GELU MLP of any width, biases on every linear layer or none, a key/value head per
 * head, tied or untied without a head bias, the sequential residual, no embedding norm:
 * hf_opt_shape; any other model with relu -1), TR_HF_PHI3 (model.hf_family phi3, a Llama's
 * switches without a window, scaling or heads other than C / NH: hf_phi3_shape; any other
 * model with it -1), TR_HF_MIXTRAL (model.num_experts: a Llama's or Mistral's switches without
 * rope scaling, top-k 2 or more, no pre_softmax; any other model with experts -1), or -1 when
 * transformers has no such model. */
int tr_hf_family_of(const tr_model_config *m);

/* ------------------------------------------------------------------ conversion */

typedef struct tr_hf_export_options tr_hf_export_options;
/* Writes a Llama / Qwen2 / Mistral / Bloom / GPT-NeoX / Falcon / Phi model g (whole, TP 1) of m
 * into dir: the safetensors (q/k/v_proj and gate/up_proj cut from trident's rows, the padding
 * removed) and config.json; a Falcon transformers cannot express refused first. */
TR_MUST_CHECK int tr_hf_write_family(const char *dir, int family, tr_gpt *g, const float *params,
                                     const tr_model_config *m, const tr_hf_export_options *o);

struct tr_hf_export_options {
    int bf16;                 /* 1: bf16 weights (torch_dtype bfloat16), 0: fp32 */
    uint64_t max_shard_bytes; /* 0: one model.safetensors */
    int eos_token_id;         /* -1: none (bos_token_id the same) */
    /* the model section of the run (its family switches; sizes must be the checkpoint's);
     * NULL: GPT-2 of the checkpoint's sizes */
    const tr_model_config *model;
    /* NULL, or pairs {source path, name in the folder, ..., NULL}: files copied into the
     * folder before it appears (the run's tokenizer); one that cannot be read fails the export
     * (TR_ERR_IO naming it) */
    const char *const *files;
};

/* LoRA (hf/lora.c). A LoRA run's checkpoint (its adapters) with the run's config cfg
 * (finetune.lora.*, and finetune.load: the base) -> hf_dir: merge 0: PEFT's adapter
 * (adapter_config.json + adapter_model.safetensors; GPT-2, Llama, Bloom, GPT-NeoX, Falcon,
 * Phi, StableLM, Gemma, GPTBigCode, GPT-J);
 * merge 1: the base with W += (alpha/r) B A written as tr_hf_export writes a model (any
 * family). alpha, rank and
 * target modules are the checkpoint's (its manifest's lora line): a cfg whose finetune.lora
 * values differ is TR_ERR_CONFIG naming both; a checkpoint written before that line takes
 * cfg's alpha with a warning. */
TR_MUST_CHECK int tr_hf_export_lora(const char *ckpt_dir, const char *hf_dir, const tr_config *cfg,
                                    int merge, const tr_hf_export_options *o, int *iteration);
/* PEFT's adapter files of g's adapters (whole model with LoRA, host params) into dir. */
TR_MUST_CHECK int tr_hf_write_lora_adapter(const char *dir, tr_gpt *g, const float *params);
/* plain (the same shape without LoRA, bound to plain_params) := g's base + its adapters. */
TR_MUST_CHECK int tr_hf_merge_lora(tr_gpt *g, tr_gpt *plain, float *plain_params);

/* PEFT's LoRA adapters of a Hugging Face base (hf/lora_read.c): what was read. trident's
 * adapter has rank = peft_rank x blocks and alpha = peft_alpha x blocks (the same scale):
 * blocks > 1 where a fused layer's PEFT modules (q/k/v_proj, gate/up_proj) have different
 * A matrices, each one a block of A (exactly PEFT's sum). targets: TR_LORA_* bits. */
typedef struct {
    int rank, targets, blocks, peft_rank;
    double alpha, peft_alpha, dropout;
    char base_name[256]; /* base_model_name_or_path (informational) */
} tr_hf_lora_import;
/* `trident convert --from hf --adapters PEFT_DIR`: HF base folder hf_dir + PEFT_DIR
 * (adapter_config.json, adapter_model.safetensors or adapter_model.bin) -> ckpt_dir: a LoRA
 * run's release checkpoint of the adapters (the manifest's lora line: rank, alpha, targets)
 * and ckpt_dir/base, the base's release checkpoint (tr_hf_import). *model gets the model
 * section (as tr_hf_import's), *info the adapters'. A refused adapter_config.json key, a
 * missing, extra or misshapen tensor: TR_ERR_INVALID naming the file and the key or tensor. */
TR_MUST_CHECK int tr_hf_import_lora(const char *hf_dir, const char *peft_dir,
                                    const char *ckpt_dir, tr_model_config *model,
                                    tr_hf_lora_import *info);

/* HF GPT-2 folder -> trident release checkpoint at ckpt_dir; *model (may be NULL) gets the
 * model's sizes for the training config. Before anything is allocated for the model, a
 * config.json claiming far more parameters than the safetensors hold is refused (Llama /
 * Bloom: more than the files' data bytes / 2). */
TR_MUST_CHECK int tr_hf_import(const char *hf_dir, const char *ckpt_dir, tr_model_config *model);
/* Whether dir is a Hugging Face model folder (config.json) rather than a trident checkpoint
 * (latest_checkpointed_iteration.txt). */
int tr_hf_is_model_folder(const char *dir);
/* The tokens transformers' generate stops at for HF folder dir: eos_token_id of its
 * generation_config.json when that file exists, else of its config.json (the file's path into
 * from, cap bytes): an integer, or a list of them (Llama 3's instruct models: end of text, of
 * message and of turn; it stops at any), into eos[0 .. *n) (at most TR_HF_MAX_EOS; *n 0 for
 * null, an empty list or no key). Any other value (a string, a negative number, a list with
 * one, a list longer than TR_HF_MAX_EOS) is TR_ERR_INVALID naming the file; its JSON errors
 * and TR_ERR_IO as hf_load_json's. */
#define TR_HF_MAX_EOS 16
TR_MUST_CHECK int tr_hf_eos_token_ids(const char *dir, int *eos, int *n, char *from,
                                      size_t cap);
/* The folder of this process's under TMPDIR (else /tmp) that a passing import goes to. */
void tr_hf_temp_import_dir(char *buf, size_t cap);
/* tr_hf_import into ckpt_dir after removing what an earlier import left there (a failure
 * names hf_dir). */
TR_MUST_CHECK int tr_hf_import_replacing(const char *hf_dir, const char *ckpt_dir);
/* rm -r of such an import (nothing when it does not exist). */
TR_MUST_CHECK int tr_hf_remove_import(const char *ckpt_dir);
/* tr_checkpoint_load_base of dir, or of a Hugging Face folder imported into a folder of this
 * process's under TMPDIR for the time it is read. */
TR_MUST_CHECK int tr_hf_load_base(const char *dir, tr_gpt *g, const tr_kernels *k);
/* The latest checkpoint of ckpt_dir -> HF folder: config.json, generation_config.json,
 * model.safetensors (or shards and index); *iteration (may be NULL) gets its iteration. */
TR_MUST_CHECK int tr_hf_export(const char *ckpt_dir, const char *hf_dir,
                               const tr_hf_export_options *o, int *iteration);

#endif
