#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of StableLM (StableLmForCausalLM: StableLM-3B-4E1T,
StableLM-2). Two tiny StableLmForCausalLM made here from configs with random weights (nothing
downloaded): 4 query heads in 2 key/value groups (GQA), use_qkv_bias true, partial_rotary_factor 0.5,
untied; and a key/value head per head, no q/k/v biases, partial_rotary_factor 0.25 (4 of 16
dimensions rotated), the head tied. Each is saved with save_pretrained and imported with `trident
convert --from hf` (its switches printed); trident's logits match transformers' (1e-4 relative to the
largest); greedy `trident generate` of the folder and of the import gives transformers' generate's
tokens (the folder's stop token, eos_token_id of generation_config.json, as transformers takes it:
also one the tokens reach); `trident eval --input` of the folder (windows of T, stride T/2) gives
transformers' nll; `trident convert --to hf --config` of the import is bit-exact to transformers'
files and loads as
StableLmForCausalLM with no missing or unexpected keys, to the same logits; trident's loss of
iteration 1 and every gradient (the LayerNorm biases' too), in one process and in D2xT2xP2 with
sequence parallelism, match transformers' on the same batch (loss 1e-5 relative, gradients relative
L2 1e-4).
usage: test_hf_stablelm_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import StableLmConfig, StableLmForCausalLM  # noqa: E402

L, V, T = 2, 300, 32  # V: byte tokens fit, and TP pads it


def stablelm_grad(G, name, NH, NG, HS, C):
    """transformers' gradient of trident tensor `name` of the StableLM, in trident's layout: a
    Llama's (hf_files.llama_grad; a tied model's wte: embed_tokens', the head's part included)
    and the LayerNorm biases."""
    parts = name.split(".", 2)  # (layers, L, rest) or the top tensor's name
    norms = {"ln1.bias": "input_layernorm.bias", "ln2.bias": "post_attention_layernorm.bias"}
    if name == "lnf.bias":
        return G["model.norm.bias"].view(-1, 1)
    if len(parts) == 3 and parts[2] in norms:
        return G[f"model.layers.{parts[1]}.{norms[parts[2]]}"].view(-1, 1)
    return hff.llama_grad(G, name, NH, NG, HS, C)


prefix = tt.make_corpus(trident, work, 17, ["stable", "rotary", "partial", "group", "query", "head", "bias"],
                        300, 5, 50)

models = []
torch.manual_seed(17)
# (name, C, NH, NG, partial_rotary_factor, use_qkv_bias, tie_word_embeddings, intermediate_size)
for name, C, NH, NG, factor, qkv_bias, tie, ffn in (
        ("stablelm-gqa-qkv-bias-rotary-0.5", 64, 4, 2, 0.5, True, False, 160),
        ("stablelm-rotary-0.25-tied", 64, 4, 4, 0.25, False, True, 96)):
    model = StableLmForCausalLM(StableLmConfig(vocab_size=V, hidden_size=C, intermediate_size=ffn,
                                               num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NG,
                                               max_position_embeddings=T, partial_rotary_factor=factor,
                                               use_qkv_bias=qkv_bias, tie_word_embeddings=tie, layer_norm_eps=1e-5,
                                               rope_theta=10000.0)).eval()
    hff.randomize(model, lambda pname: "norm.weight" in pname)
    HS = C // NH
    keys = dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=factor, swiglu=True,
                ffn_hidden_size=ffn, num_query_groups=NG, untie_embeddings_and_output_weights=not tie,
                add_bias_linear=False, add_qkv_bias=qkv_bias, layernorm_epsilon=1e-5, num_attention_heads=NH,
                hidden_size=C)
    n_tensors = 3 + (0 if tie else 1) + L * (8 + (1 if qkv_bias else 0))
    models.append((name, model, lambda G, n, a=(NH, NG, HS, C): stablelm_grad(G, n, *a), keys, n_tensors,
                   int(HS * factor)))

for name, model, hf_grad, keys, n_tensors, rot in models:
    src, ck, out = hff.oracle_import(trident, work, name, model)
    tie, qkv_bias = not keys["untie_embeddings_and_output_weights"], keys["add_qkv_bias"]
    want_lines = ["normalization: LayerNorm", "position_embedding_type: rope", f"rotary_percent: {keys['rotary_percent']}",
                  "swiglu: true", f"untie_embeddings_and_output_weights: {'false' if tie else 'true'}",
                  "add_bias_linear: false", f"num_query_groups: {keys['num_query_groups']}",
                  f"ffn_hidden_size: {keys['ffn_hidden_size']}"]
    tt.check(f"{name}: trident convert prints StableLM's model section",
             all(w in out for w in want_lines) and ("add_qkv_bias: true" in out) == qkv_bias and
             "parallel_residual: true" not in out, out)
    fam = hff.family_lines(ck)
    tt.check(f"{name}: the manifest's family line: rmsnorm 0, rotary_dims {rot}, swiglu 1, linear_bias 0",
             len(fam) == 1 and all(f" {k} " in fam[0] + " " for k in ("rmsnorm 0", f"rotary_dims {rot}", "swiglu 1",
                                                                      "linear_bias 0")) and
             (" qkv_bias 1" in fam[0]) == qkv_bias, str(fam))
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    # transformers stops at StableLmConfig's eos 0, trident generate of the folder too (its
    # generation_config.json's eos_token_id), of the import with --eos-id 0
    hff.generate_check(trident, name, model, (("the HF folder", src, []), ("the import with --config", ck,
                                                                             ["--config", cfg, "--eos-id", "0"])))
    # a stop token the greedy tokens reach (the 4th): transformers' generate stops there, and trident
    # generate of the folder whose generation_config.json names it (a list: its first id)
    prompt = [5, 17, 200, 3, 42]
    with torch.no_grad():
        free = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0,
                              eos_token_id=None)[0, len(prompt):].tolist()
        theirs = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0,
                                eos_token_id=free[3])[0, len(prompt):].tolist()
    stop_dir = os.path.join(work, name + "-stop")
    shutil.rmtree(stop_dir, ignore_errors=True)
    shutil.copytree(src, stop_dir)
    gpath = os.path.join(stop_dir, "generation_config.json")
    tt.write(gpath, json.dumps({**json.load(open(gpath)), "eos_token_id": [free[3], 1]}))
    rc, so, se = tt.outputs([trident, "generate", stop_dir, "--prompt-ids", ",".join(map(str, prompt)),
                             "--max-new-tokens", "12", "--temperature", "0", "--json"], timeout=120)
    ours = json.loads(so)["generated_ids"] if rc == 0 else None
    tt.check(f"{name}: generation_config.json's eos_token_id [{free[3]}, 1]: trident generate of the folder stops "
             f"where transformers' does ({len(theirs)} of 12 tokens)", ours == theirs and len(theirs) < 12,
             f"exit {rc} {se[-300:]}\ntrident      {ours}\ntransformers {theirs}")
    # trident eval of the folder: perplexity windows of T, stride T/2, byte tokens
    hff.eval_check(trident, src, work, name, model, "the partial rotary query heads with their biases; " * 3, T)
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("hidden_act", "partial_rotary_factor", "num_key_value_heads", "intermediate_size",
                         "rope_theta", "layer_norm_eps", "tie_word_embeddings", "use_qkv_bias", "rope_scaling"),
                        ("model.norm.bias", "model.layers.0.input_layernorm.bias"))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    layouts = [("1", 1, 1, 1, ())] + ([] if quick else
                                      [("D2xT2xP2-sp", 8, 2, 2, ("parallel.sequence_parallel=true",))])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t: hf_grad(G, t), n_tensors,
                    ", lnf.bias among them", must=("lnf.bias",))
tt.finish("PASSED")
