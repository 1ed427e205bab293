#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of MPT (MptForCausalLM). First MPT's ALiBi slopes
(build_mpt_alibi_tensor, alibi_bias_max 8) against trident's (Bloom's formula, exact in double, then
float32) for 4, 6, 32 and 56 heads (MPT-7B's 32, MPT-30B's 56): within one float32 ulp. Two tiny
MptForCausalLM made here from configs with random weights (nothing downloaded), no_bias true (4.38's
MPT has no biases whatever no_bias says; false is refused by the import): 4 heads of 8 in d_model
32, and 6 heads of 8 in d_model 48 (non-power-of-two ALiBi). Each is saved with save_pretrained and
imported with `trident convert --from hf` (its switches printed: alibi, add_bias_linear false,
layernorm_bias false, gelu_approximate none); trident's logits match transformers' (1e-4 relative to
the largest); greedy `trident generate` of the folder gives transformers' generate's tokens; `trident
convert --to hf --config` of the import is bit-exact to transformers' files (Wqkv's [Q | K | V]
rows permuted into trident's (head, {q, k, v}, d) and back) and loads as MptForCausalLM with no
missing or unexpected keys, to the same logits; trident's loss of iteration 1 and every gradient, in
one process (and for 6 heads in T2xP2, tensor and pipeline parallel) match transformers' on the same
batch (loss 1e-5 relative, gradients relative L2 1e-4).
usage: test_hf_mpt_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import MptConfig, MptForCausalLM  # noqa: E402
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor  # noqa: E402

L, V, T, HS = 2, 300, 32, 8  # V: byte tokens fit


def trident_slopes(n):
    """trident's ALiBi slopes (model/gpt.c alibi_slope: Bloom's, in double) as float32"""
    p = 2 ** int(np.floor(np.log2(n)))
    s = [2.0 ** (-8.0 * (i + 1) / p) for i in range(p)]
    s += [2.0 ** (-8.0 * (2 * i + 1) / (2 * p)) for i in range(n - p)]
    return np.array(s, dtype=np.float32)


worst = 0.0
for n in (4, 6, 32, 56):
    mpt = (-build_mpt_alibi_tensor(n, 2)[:, 0, 0]).numpy().astype(np.float32)  # position -1 times the slope
    ulps = np.abs(mpt.view(np.int32) - trident_slopes(n).view(np.int32)).max()
    worst = max(worst, ulps)
tt.check("MPT's ALiBi slopes (alibi_bias_max 8) are trident's (Bloom's) for 4, 6, 32 and 56 heads",
         worst <= 1, f"worst {worst} float32 ulps", show=True)


def mpt_grad(G, name, NH, C):
    """transformers' gradient of trident tensor `name` in trident's layout: qkv's rows (head, {q, k,
    v}, d) from Wqkv's [Q | K | V]."""
    top = {"wte": "transformer.wte.weight", "lnf.weight": "transformer.norm_f.weight"}
    if name in top:
        g = G[top[name]]
        return g.view(-1, 1) if g.dim() == 1 else g
    layer, rest = name.split(".", 2)[1:]
    b = f"transformer.blocks.{layer}."
    if rest == "qkv.weight":
        return G[b + "attn.Wqkv.weight"].view(3, NH, HS, C).transpose(0, 1).reshape(-1, C)
    part, kind = rest.rsplit(".", 1)
    hf = {"ln1": "norm_1", "ln2": "norm_2", "attn_proj": "attn.out_proj", "fc": "ffn.up_proj",
          "fc_proj": "ffn.down_proj"}[part]
    g = G[b + f"{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


prefix = tt.make_corpus(trident, work, 23, ["alibi", "slopes", "no", "bias", "fused", "wqkv"], 300, 5, 50)

models = []
torch.manual_seed(11)
for name, NH in (("mpt-4h", 4), ("mpt-6h", 6)):
    C = NH * HS
    model = MptForCausalLM(MptConfig(
        d_model=C, n_heads=NH, n_layers=L, expansion_ratio=4, max_seq_len=T, vocab_size=V, no_bias=True,
        layer_norm_epsilon=1e-5, bos_token_id=V - 1, eos_token_id=V - 1)).eval()
    hff.randomize(model, lambda pname: ".norm_" in pname)
    keys = dict(normalization="LayerNorm", position_embedding_type="alibi", ffn_hidden_size=4 * C,
                num_query_groups=NH, add_bias_linear=False, layernorm_bias=False, layernorm_epsilon=1e-5,
                num_attention_heads=NH, hidden_size=C, gelu_approximate="none")
    models.append((name, model, NH, C, keys, 2 + 6 * L))

for name, model, NH, C, keys, n_tensors in models:
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want_lines = ["normalization: LayerNorm", "position_embedding_type: alibi", f"num_query_groups: {NH}",
                  f"ffn_hidden_size: {4 * C}", "add_bias_linear: false", "layernorm_bias: false",
                  "gelu_approximate: none", "untie_embeddings_and_output_weights: false"]
    tt.check(f"{name}: trident convert prints MPT's model section", all(w in out for w in want_lines), out)
    fam = hff.family_lines(ck)
    tt.check(f"{name}: the manifest's family line: position 2, linear_bias 0, ends with gelu_exact 1 "
             "layernorm_bias 0", len(fam) == 1 and " position 2 " in fam[0] and " linear_bias 0 " in fam[0]
             and fam[0].endswith(" gelu_exact 1 layernorm_bias 0"), str(fam))
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    hff.generate_check(trident, name, model, (("the HF folder", src, []),))
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("d_model", "n_heads", "max_seq_len", "layer_norm_epsilon", "no_bias",
                         "expansion_ratio", "tie_word_embeddings"), must=("transformer.blocks.1.attn.Wqkv.weight",))
    back_cfg = json.load(open(os.path.join(work, name + "-back", "config.json")))
    attn = back_cfg.get("attn_config", {})
    tt.check(f"{name}: the export's config.json says model_type mpt, no_bias, alibi with alibi_bias_max 8",
             back_cfg.get("model_type") == "mpt" and back_cfg.get("architectures") == ["MptForCausalLM"] and
             back_cfg.get("no_bias") is True and attn.get("alibi") is True and attn.get("alibi_bias_max") == 8
             and attn.get("attn_type") == "multihead_attention", str(back_cfg))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    # (T2xP2 once: of the 6 heads, 3 a rank)
    layouts = [("1", 1, 1, 1, ())] + ([] if quick or NH == 4 else [("T2xP2", 4, 2, 2, ())])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t, NH=NH, C=C: mpt_grad(G, t, NH, C),
                    n_tensors, ", the norms' weights alone", must=("layers.0.ln1.weight", "lnf.weight"))
tt.finish("PASSED")
