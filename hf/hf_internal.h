/* hf/ internal: what the safetensors reader and writer, the GPT-2 mapping and the conversion
 * share. Not part of the contract (hf/hf.h). */
#ifndef TR_HF_INTERNAL_H
#define TR_HF_INTERNAL_H

#include <jansson.h>

#include "hf/hf.h"

/* convert.c: an output folder written whole or not at all. hf_out_begin: OUTPUT must not exist,
 * or be an empty folder; makes its parents and OUTPUT.tmp-PID. hf_out_end: rc == 0:
 * OUTPUT.tmp-PID becomes OUTPUT, else it is removed; returns rc or the rename's. */
typedef struct {
    char final[4096], tmp[4200], parent[4096];
} hf_out_dir;
TR_MUST_CHECK int hf_out_begin(const char *output, hf_out_dir *o);
TR_MUST_CHECK int hf_out_end(const hf_out_dir *o, int rc);
/* hf_out_end after copying o->files into o->tmp (TR_ERR_IO naming one that cannot be read) */
TR_MUST_CHECK int hf_out_end_export(const hf_out_dir *od, int rc, const tr_hf_export_options *o);
/* convert.c: the config's model mc has the sizes of checkpoint ckpt_dir's m (num_layers,
 * hidden_size, heads, vocab_size, max_position_embeddings), else TR_ERR_INVALID naming them. */
TR_MUST_CHECK int hf_config_sizes_match(const char *ckpt_dir, const tr_model_config *m,
                                        const tr_model_config *mc);
/* convert.c: a model of m holding every layer (one stage, TP 1; family TR_HF_GPT2: GPT-2's
 * shape of m's sizes, else m's switches) bound to host memory *params (free()). */
TR_MUST_CHECK int hf_whole_model(const tr_model_config *m, int family, tr_gpt **g,
                                 float **params);

/* The dtype named `name` ("F32"): 1, or 0 for no dtype of that name. */
int st_dtype_from_name(const char *name, tr_st_dtype *out);
/* Offset of the first byte that is not valid UTF-8, or n. */
size_t st_utf8_invalid_at(const unsigned char *s, size_t n);

/* "[768, 2304]" */
typedef struct {
    char text[200];
} st_text;
st_text st_shape_text(const tr_st_tensor *t);

/* Before anything is allocated for the model of c: the set of dir holds only tensors of a
 * GPT-2 of c's size and not far fewer elements than it has (a config.json that claims a
 * much larger model than the files hold is refused here, not by an allocation). */
TR_MUST_CHECK int hf_gpt2_check_files(const char *dir, const tr_hf_gpt2_config *c);
/* The same for a Llama / Bloom model m (tr_hf_read_family_config) before anything is
 * allocated for it: the parameters config.json implies, at 2 bytes each, must not exceed the
 * data of the safetensors file(s) of dir (their headers' sizes). */
TR_MUST_CHECK int hf_family_check_files(const char *dir, const tr_model_config *m, int family);
/* tr_hf_family_of of a model's shape (its family fields): the TR_HF_* it exports as, or -1 */
int hf_shape_family(const tr_gpt_shape *s);
/* A Falcon model m (TR_HF_FALCON) that transformers' FalconConfig can express: with one norm
 * (parallel_shared_norm) or the sequential residual its key/value heads are 1 or all
 * (TR_ERR_INVALID naming the switches otherwise). */
TR_MUST_CHECK int hf_falcon_check(const tr_model_config *m);
/* Phi (family_phi.c): config.json's keys into m (the whole model section but seq_length);
 * the parameters of m; its config.json; TR_HF_PHI for a shape of Phi's switches, else -1;
 * the HF name(s) of trident tensor t (*qkv 1: q_proj, k_proj, v_proj of rows[0..2] rows) */
TR_MUST_CHECK int hf_read_phi(json_t *root, const char *path, tr_model_config *m);
/* The keys Phi and StableLM share (PhiConfig's and StableLmConfig's names) into m: the sizes
 * (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size:
 * required), num_key_value_heads (absent or null: kv; 0: as many as the heads),
 * max_position_embeddings (absent: positions), layer_norm_eps (1e-5), rope_theta (10000),
 * partial_rotary_factor (absent: factor) as rotary_percent (hf_rotary_share); rope_scaling
 * other than null and qk_layernorm true refused by name */
TR_MUST_CHECK int hf_read_phi_keys(json_t *root, const char *path, int kv, int positions,
                                   double factor, tr_model_config *m);
double hf_phi_numel(const tr_model_config *m);
TR_MUST_CHECK int hf_write_phi_config(const char *dir, const tr_model_config *m,
                                      const tr_hf_export_options *o);
int hf_phi_shape(const tr_gpt_shape *s);
TR_MUST_CHECK int hf_phi_map(const tr_param_tensor *t, const tr_gpt_shape *s, char name[3][112],
                             uint64_t rows[3], int *qkv);
/* StableLM (family_stablelm.c): config.json's keys into m (the whole model section but
 * seq_length); the parameters of m; its config.json; TR_HF_STABLELM for a shape of its switches,
 * else -1 (the names: family.c, the Llama's and the LayerNorm biases) */
TR_MUST_CHECK int hf_read_stablelm(json_t *root, const char *path, tr_model_config *m);
double hf_stablelm_numel(const tr_model_config *m);
TR_MUST_CHECK int hf_write_stablelm_config(const char *dir, const tr_model_config *m,
                                           const tr_hf_export_options *o);
int hf_stablelm_shape(const tr_gpt_shape *s);
/* Gemma (family_gemma.c): called by the Llama reader (family_config.c) after the keys it shares,
 * Gemma's own into m (head_dim, the activation, tying, the switches); its config.json;
 * TR_HF_GEMMA for a shape of its switches, else -1 (the names: family.c, the Llama's) */
/* config.json's head_dim (absent or null: dflt; dflt 0: hidden_size / num_attention_heads), an
 * integer >= 1 and even (rotate_half turns pairs; else refused naming family) -> m->kv_channels,
 * 0 where it is hidden_size / num_attention_heads (Gemma's, Mistral's: family_gemma.c) */
TR_MUST_CHECK int hf_read_head_dim(json_t *root, const char *path, int dflt, const char *family,
                                   tr_model_config *m);
TR_MUST_CHECK int hf_read_gemma(json_t *root, const char *path, tr_model_config *m);
TR_MUST_CHECK int hf_write_gemma_config(const char *dir, const tr_model_config *m,
                                        const tr_hf_export_options *o);
int hf_gemma_shape(const tr_gpt_shape *s);
/* family.c: the trident qkv row (rows (group, {q_0 .. q_R-1, k, v}, d), R query heads a
 * group, heads of HS) of row r of HF tensor k (0: q_proj (head, d), 1: k_proj, 2: v_proj
 * (group, d)) */
uint64_t hf_qkv_row(uint64_t r, int k, int HS, int R);
/* GPT-BigCode (family_bigcode.c): config.json's keys into m (the whole model section but
 * seq_length); the parameters of m; its config.json; TR_HF_BIGCODE for a shape of its switches
 * (GPT-2's among them: test tr_gpt_is_gpt2 first), else -1; the HF name of trident tensor t
 * (every one in trident's layout) */
TR_MUST_CHECK int hf_read_bigcode(json_t *root, const char *path, tr_model_config *m);
double hf_bigcode_numel(const tr_model_config *m);
TR_MUST_CHECK int hf_write_bigcode_config(const char *dir, const tr_model_config *m,
                                          const tr_hf_export_options *o);
int hf_bigcode_shape(const tr_gpt_shape *s);
TR_MUST_CHECK int hf_bigcode_map(const tr_param_tensor *t, char name[112]);
/* GPT-J (family_gptj.c): config.json's keys into m (the whole model section but seq_length);
 * the parameters of m; its config.json; TR_HF_GPTJ for a shape of its switches, else -1; the
 * HF name(s) of trident tensor t (*qkv 1: q_proj, k_proj, v_proj of C rows each); the trident
 * row (of a head's) of HF row d of GPT-J's q_proj or k_proj head (rotate_every_two's pairs
 * into rotate_half's: 2i -> i, 2i + 1 -> rotary_dims / 2 + i; d >= rotary_dims unchanged) */
TR_MUST_CHECK int hf_read_gptj(json_t *root, const char *path, tr_model_config *m);
double hf_gptj_numel(const tr_model_config *m);
TR_MUST_CHECK int hf_write_gptj_config(const char *dir, const tr_model_config *m,
                                       const tr_hf_export_options *o);
int hf_gptj_shape(const tr_gpt_shape *s);
TR_MUST_CHECK int hf_gptj_map(const tr_param_tensor *t, char name[3][112], int *qkv);
uint64_t hf_gptj_rotary_row(uint64_t d, int rotary_dims);
/* MPT (family_mpt.c): config.json's keys into m (the whole model section but seq_length); the
 * parameters of m; its config.json; TR_HF_MPT for a shape of its switches, else -1; the HF name
 * of trident tensor t (*qkv 1: Wqkv, [Q | K | V] rows) */
TR_MUST_CHECK int hf_read_mpt(json_t *root, const char *path, tr_model_config *m);
double hf_mpt_numel(const tr_model_config *m);
TR_MUST_CHECK int hf_write_mpt_config(const char *dir, const tr_model_config *m,
                                      const tr_hf_export_options *o);
int hf_mpt_shape(const tr_gpt_shape *s);
TR_MUST_CHECK int hf_mpt_map(const tr_param_tensor *t, char name[112], int *qkv);
/* OPT (family_opt.c): config.json's keys into m (the whole model section but seq_length); the
 * parameters of m (embed_positions' 2 extra rows among them); its config.json; TR_HF_OPT for a
 * shape of its switches, else -1 (GPT-2's and GPT-BigCode's: test those first); the HF name(s)
 * of trident tensor t (*qkv 1: q_proj, k_proj, v_proj of C rows each) */
TR_MUST_CHECK int hf_read_opt(json_t *root, const char *path, tr_model_config *m);
double hf_opt_numel(const tr_model_config *m);
TR_MUST_CHECK int hf_write_opt_config(const char *dir, const tr_model_config *m,
                                      const tr_hf_export_options *o);
int hf_opt_shape(const tr_gpt_shape *s);
TR_MUST_CHECK int hf_opt_map(const tr_param_tensor *t, char name[3][112], int *qkv);
/* Phi-3 (family_phi3.c): config.json's keys into m (the whole model section but seq_length;
 * model.hf_family "phi3"); its config.json; TR_HF_PHI3 for a shape of a Llama's switches with
 * hf_phi3, else -1; the HF name of trident tensor t where it is fused (1: qkv_proj, rows
 * [Q | K | V], hf_fused_qkv_row; 2: gate_up_proj, rows [gate | up], hf_fused_swiglu_row), else
 * 0 (a Llama's name) */
TR_MUST_CHECK int hf_read_phi3(json_t *root, const char *path, tr_model_config *m);
TR_MUST_CHECK int hf_write_phi3_config(const char *dir, const tr_model_config *m,
                                       const tr_hf_export_options *o);
int hf_phi3_shape(const tr_gpt_shape *s);
int hf_phi3_map(const tr_param_tensor *t, char name[112]);
/* Mixtral (family_mixtral.c): called by the Llama reader (family_config.c, which reads the
 * rest as a Mistral's) for the expert keys into m (num_experts, moe_router_topk,
 * moe_aux_loss_coeff; top-1, top-k > experts and router_jitter_noise refused by name); its
 * config.json; the HF name(s) of trident tensor t where it is the router or an expert's (1: one
 * name, gate or w2; 2: w1 and w3, fc's (feature, {gate, up}) rows), else 0 (a Llama's name) */
TR_MUST_CHECK int hf_read_mixtral(json_t *root, const char *path, tr_model_config *m);
TR_MUST_CHECK int hf_write_mixtral_config(const char *dir, const tr_model_config *m,
                                          const tr_hf_export_options *o);
int hf_mixtral_map(const tr_param_tensor *t, char name[2][112]);
/* family.c: the trident qkv row of row r of a fused [Q (NH heads) | K | V (NG heads each)]
 * tensor (MPT's Wqkv, Phi-3's qkv_proj, PEFT's lora_B of them); the trident fc row of row r
 * of a fused [gate (F rows) | up (F rows)] tensor of s (Phi-3's gate_up_proj) */
uint64_t hf_fused_qkv_row(uint64_t r, const tr_gpt_shape *s);
uint64_t hf_fused_swiglu_row(uint64_t r, const tr_gpt_shape *s);
/* LoRA adapters under PEFT's names (lora.c), for both directions (tr_hf_write_lora_adapter,
 * lora_read.c). The naming family of a shape (HF_LORA_*, or -1: no PEFT names for it): */
enum { HF_LORA_GPT2, HF_LORA_LLAMA, HF_LORA_BLOOM, HF_LORA_NEOX, HF_LORA_FALCON, HF_LORA_PHI,
       HF_LORA_BIGCODE, HF_LORA_GPTJ, HF_LORA_MPT, HF_LORA_OPT, HF_LORA_PHI3 };
int hf_lora_family(const tr_gpt_shape *s);
/* "layers.L.MODULE.lora_X" -> layer L, X ('A' or 'B') and the module's index m (0 qkv,
 * 1 attn_proj, 2 fc, 3 fc_proj); -1 when not one. */
int hf_lora_parse(const char *name, int *layer, char *ab);
/* One PEFT tensor of a trident adapter: its name ("base_model.model.PATH.lora_X.weight"), its
 * rows (A: the rank; B: its projection's) and how they map (hf_lora_row; kind 0 as they are,
 * 1 [Q | K | V] (GPT-2's c_attn, MPT's Wqkv, Phi-3's qkv_proj), 2 a Llama's q/k/v part,
 * 3 gate/up part, 4 GPT-J's q/k/v part, 5 [gate | up] (Phi-3's); part: q 0, k 1, v 2, gate 0,
 * up 1). */
typedef struct {
    char name[128];
    int rows, kind, part;
} hf_lora_part;
/* The PEFT tensors of trident adapter layers.L.<m>.lora_<ab> of `rows` rows, in a model of shape
 * s of naming family fam: 3 (q/k/v_proj of a fused qkv), 2 (gate/up_proj of a fused fc) or 1. */
int hf_lora_parts(const tr_gpt_shape *s, int fam, int layer, int m, char ab, int rows,
                  hf_lora_part out[3]);
/* The trident row of row h of PEFT tensor p (every row of B; A's rows are its own). */
size_t hf_lora_row(const tr_gpt_shape *s, const hf_lora_part *p, size_t h);
/* lora_read.c: PEFT_DIR's adapters onto a whole model of shape base (no LoRA; one stage, TP 1):
 * *g (a LoRA model of the adapters' rank, alpha and targets) bound to host *params (free()) */
TR_MUST_CHECK int hf_lora_read(const char *peft_dir, const tr_gpt_shape *base, tr_gpt **g,
                               float **params, tr_hf_lora_import *info);
/* config.json readers (config_keys.c), shared by every family: root's key into *out, or
 * TR_ERR_INVALID naming path and key. hf_get_int: absent or null takes dflt (dflt < 0: the key
 * is required), else an integer in [1, 2^26]. hf_get_num: absent takes dflt, else a positive
 * number that float32 holds (trident keeps it as one). hf_get_bool: absent takes dflt, else
 * true or false. */
TR_MUST_CHECK int hf_get_int(json_t *root, const char *path, const char *key, int dflt, int *out);
TR_MUST_CHECK int hf_get_num(json_t *root, const char *path, const char *key, double dflt,
                             double *out);
TR_MUST_CHECK int hf_get_bool(json_t *root, const char *path, const char *key, int dflt,
                              int *out);
/* TR_ERR_INVALID "PATH: KEY is not supported: WHY" (a config.json value a family refuses) */
TR_MUST_CHECK int hf_refuse(const char *path, const char *key, const char *why);
/* rope_scaling.c: a Llama config.json's rope_scaling (null or absent: none; "linear": its
 * factor into m->rotary_seq_len_interpolation_factor; "llama3": m->use_rope_scaling and its
 * four numbers; any other kind refused, naming it) into m; and m's as config.json's value
 * (null where none; NULL when out of memory). */
TR_MUST_CHECK int hf_read_rope_scaling(json_t *root, const char *path, tr_model_config *m);
json_t *hf_rope_scaling_json(const tr_model_config *m);
/* The share of a head of m (hs = hidden_size / num_attention_heads dimensions) that rotary
 * positions cover, for transformers' factor (config.json's key; it rotates int(formula) =
 * int(factor * hs) dimensions): into m->rotary_percent that count / hs as the %.9g a config's
 * text holds, or TR_ERR_INVALID naming path, key, formula and dim (the head size's name) when
 * factor > 1 (rotary_percent untouched) or the count is not an even number >= 2 that
 * hs * rotary_percent gives back exactly. Heads that do not divide the hidden size: TR_OK,
 * nothing set (the caller refuses them). */
TR_MUST_CHECK int hf_rotary_share(const char *path, const char *key, const char *formula,
                                  const char *dim, double factor, tr_model_config *m);
/* transformers' GELU named by root's key (absent: dflt) into *exact: 1 for gelu and gelu_python
 * (x Phi(x), erf), 0 for gelu_new, gelu_pytorch_tanh, gelu_fast and gelu_accurate (the tanh
 * formula); any other value TR_ERR_INVALID "PATH: KEY is not supported: trident's WHAT uses
 * GELU, ..." naming them. */
TR_MUST_CHECK int hf_gelu_act(json_t *root, const char *path, const char *key, const char *dflt,
                              const char *what, int *exact);
/* GPT-2's dimension keys of a config.json (GPT-BigCode's, GPT-J's) into m: n_layer, n_embd,
 * n_head, vocab_size (required), n_positions (absent: positions), n_inner (absent or null:
 * 4 n_embd), layer_norm_epsilon (1e-5); n_embd not divisible by n_head refused naming
 * transformers' `attention` class, which refuses it too. */
TR_MUST_CHECK int hf_read_gpt_dims(json_t *root, const char *path, int positions,
                                   const char *attention, tr_model_config *m);
/* DIR/config.json from root (owned: released here; NULL: out of memory) with o's bos and eos
 * token ids (null when o->eos_token_id < 0) and family's dropout keys of m's rates
 * (hf_write_dropout), sorted keys, 2-space indent, a final newline */
TR_MUST_CHECK int hf_write_config_json(const char *dir, json_t *root, int family,
                                       const tr_model_config *m, const tr_hf_export_options *o);
/* dropout_keys.c: DIR/config.json's dropout keys of family (transformers' names; absent: its
 * defaults, GPT-2's 0.1) into m->hidden_dropout and m->attention_dropout; a value that is not
 * a number 0 <= p < 1 is TR_ERR_INVALID naming the key. A family with two keys for trident's
 * one hidden rate (GPT-2's resid_pdrop and embd_pdrop) gives the residual one's, with a
 * warning naming both when they differ. */
TR_MUST_CHECK int hf_read_dropout(const char *dir, int family, tr_model_config *m);
/* m's rates into root's keys of family (both of a split rate); a warning for a hidden rate > 0
 * the family has no key for (Llama's), or whose sites are not trident's (Bloom's: none after
 * the embeddings). */
TR_MUST_CHECK int hf_write_dropout(json_t *root, int family, const tr_model_config *m);
/* DIR/config.json of a Llama / Qwen2 / Bloom / GPT-NeoX / Falcon model m (family_config.c) */
TR_MUST_CHECK int hf_write_family_config(const char *dir, int family, const tr_model_config *m,
                                         const tr_hf_export_options *o);
/* A small JSON file (at most max_bytes) parsed with jansson, duplicates refused; errors name
 * the file, line and column (TR_ERR_INVALID), or TR_ERR_IO. */
TR_MUST_CHECK int hf_load_json(const char *path, size_t max_bytes, json_t **out);
/* DIR/config.json (at most 1 MiB) parsed as hf_load_json does; its path into path (cap). */
TR_MUST_CHECK int hf_load_config(const char *dir, char *path, size_t cap, json_t **out);
/* text written to DIR/NAME (fsync'd) */
TR_MUST_CHECK int hf_write_text(const char *dir, const char *name, const char *text);
/* DIR/NAME into buf (TR_ERR_INVALID when it does not fit) */
TR_MUST_CHECK int hf_join(char *buf, size_t cap, const char *dir, const char *name);
/* rm -r of path (nothing when it does not exist) */
TR_MUST_CHECK int hf_remove_tree(const char *path);
/* fsync of a folder */
TR_MUST_CHECK int hf_sync_dir(const char *path);
/* A weight tensor of f as floats (tr_st_read_f32), refused (TR_ERR_INVALID, naming the file,
 * the tensor and the element) when a value is not finite: NaN or infinity in the file, or an
 * F64 beyond float32's range. A checkpoint holds finite values only, so an import of such a
 * tensor would write one that every reader refuses. */
TR_MUST_CHECK int hf_read_weight(tr_st_file *f, const tr_st_tensor *t, float *out);
/* megatron_write.c: the n floats at buf as bf16 (rounded to nearest even) in buf's first 2 n
 * bytes; a finite value beyond BF16's range refused naming tensor `name` and the element. */
TR_MUST_CHECK int hf_bf16_in_place(float *buf, size_t n, const char *name);

#endif
