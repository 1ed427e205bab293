#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of GPT-BigCode (GPTBigCodeForCausalLM: StarCoder,
StarCoderBase, SantaCoder). Two tiny GPTBigCodeForCausalLM made here from configs with random
weights (nothing downloaded): multi_query true (4 query heads, one shared key/value head: trident's
num_query_groups 1), gelu_pytorch_tanh, n_inner null, tied; and multi_query false (a key/value head
per head), the exact GELU, n_inner 3 x n_embd, untied. Each is saved with save_pretrained and
imported with `trident convert --from hf` (its switches printed); trident's logits match
transformers' (1e-4 relative to the largest); greedy `trident generate` of the folder gives
transformers' generate's tokens; `trident convert --to hf --config` of the import is bit-exact to
transformers' files and loads as GPTBigCodeForCausalLM with no missing or unexpected keys, to the
same logits; trident's loss of iteration 1 and every gradient, in one process and in D2xP2
(pipeline and data parallel; tensor parallelism stays 1 with one key/value group), match
transformers' on the same batch (loss 1e-5 relative, gradients relative L2 1e-4).
usage: test_hf_bigcode_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM  # noqa: E402

L, V, T, C, NH = 2, 300, 32, 64, 4  # V: byte tokens fit


def bigcode_grad(G, name, tied):
    """transformers' gradient of trident tensor `name`: every tensor is in trident's layout (c_attn's
    rows [Q | K | V] with one key/value head, else (head, {q, k, v}, d))."""
    top = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight", "output_layer": "lm_head.weight",
           "lnf.weight": "transformer.ln_f.weight", "lnf.bias": "transformer.ln_f.bias"}
    if name in top:
        g = G[top[name]]
    else:
        layer, rest = name.split(".", 2)[1:]
        part, kind = rest.rsplit(".", 1)
        hf = {"ln1": "ln_1", "ln2": "ln_2", "qkv": "attn.c_attn", "attn_proj": "attn.c_proj", "fc": "mlp.c_fc",
              "fc_proj": "mlp.c_proj"}[part]
        g = G[f"transformer.h.{layer}.{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


prefix = tt.make_corpus(trident, work, 19, ["star", "code", "query", "shared", "head", "learned"], 300, 5, 50)

models = []
torch.manual_seed(5)
# (name, multi_query, activation, n_inner, tied)
for name, mq, act, inner, tied in (("bigcode-multi-query-tanh", True, "gelu_pytorch_tanh", None, True),
                                   ("bigcode-heads-gelu-3h-untied", False, "gelu", 3 * C, False)):
    model = GPTBigCodeForCausalLM(GPTBigCodeConfig(
        vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=NH, n_inner=inner, activation_function=act,
        multi_query=mq, layer_norm_epsilon=1e-5, tie_word_embeddings=tied, bos_token_id=V - 1,
        eos_token_id=V - 1)).eval()
    hff.randomize(model, lambda pname: ".ln_" in pname)
    keys = dict(normalization="LayerNorm", position_embedding_type="learned_absolute",
                ffn_hidden_size=inner or 4 * C, num_query_groups=1 if mq else NH,
                untie_embeddings_and_output_weights=not tied, add_bias_linear=True, layernorm_epsilon=1e-5,
                num_attention_heads=NH, hidden_size=C, gelu_approximate="none" if act == "gelu" else "tanh")
    models.append((name, model, tied, keys, 4 + 12 * L + (not tied)))

for name, model, tied, keys, n_tensors in models:
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want_lines = ["normalization: LayerNorm", "position_embedding_type: learned_absolute",
                  f"num_query_groups: {keys['num_query_groups']}", f"ffn_hidden_size: {keys['ffn_hidden_size']}",
                  "add_bias_linear: true"]
    tt.check(f"{name}: trident convert prints GPT-BigCode's model section",
             all(w in out for w in want_lines) and
             ("gelu_approximate: none" in out) == (keys["gelu_approximate"] == "none") and
             ("untie_embeddings_and_output_weights: true" in out) == (not tied), out)
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    hff.generate_check(trident, name, model, (("the HF folder", src, []),))
    # (n_inner null is exported as 4 x n_embd, the width it means)
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("multi_query", "activation_function", "n_positions", "layer_norm_epsilon",
                         "tie_word_embeddings", "scale_attn_weights") + (("n_inner",) if model.config.n_inner else ()))
    back_cfg = json.load(open(os.path.join(work, name + "-back", "config.json")))
    tt.check(f"{name}: the export's config.json says model_type gpt_bigcode, n_inner {keys['ffn_hidden_size']}",
             back_cfg.get("model_type") == "gpt_bigcode" and back_cfg.get("n_inner") == keys["ffn_hidden_size"],
             str(back_cfg))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    layouts = [("1", 1, 1, 1, ())] + ([] if quick else [("D2xP2", 4, 1, 2, ())])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t, tied=tied: bigcode_grad(G, t, tied),
                    n_tensors, ", wpe among them", must=("wpe",))
tt.finish("PASSED")
