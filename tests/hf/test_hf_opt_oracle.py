#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of OPT (OPTForCausalLM). Tiny OPTForCausalLM made
here from configs with random weights (nothing downloaded), 4 heads of 8 in hidden 32, learned
positions (embed_positions: T + 2 rows, position t at row t + 2; its first 2 rows, which no position
reads, zeroed here as the export writes them): every released OPT's shape (ReLU, model.relu, in
ffn_dim 4 x hidden, biases, tied); and without linear biases (enable_bias false), untied, the exact
GELU in ffn_dim 3 x hidden. Each is saved with save_pretrained and imported with `trident convert
--from hf` (the first's OPTModel too, whose names, decoder.* without lm_head, the released
facebook/opt-* files have: the same checkpoint); trident's logits match transformers' (1e-4 relative to the largest); greedy `trident
generate` of the folder gives transformers' generate's tokens; `trident convert --to hf --config`
of the import is bit-exact to transformers' files and loads as OPTForCausalLM with no missing or
unexpected keys, to the same logits; trident's loss of iteration 1 and every gradient, in one
process and in a 2-rank layout (T2 / P2), match transformers' on the same batch (loss 1e-5
relative, gradients relative L2 1e-4; embed_positions' from row 2).
usage: test_hf_opt_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import OPTConfig, OPTForCausalLM  # noqa: E402

L, V, T, C, NH = 2, 300, 32, 32, 4  # V: byte tokens fit
HS = C // NH


def opt_grad(G, name):
    """transformers' gradient of trident tensor `name` in trident's layout: qkv's rows (head, {q, k,
    v}, d) from q/k/v_proj; wpe from embed_positions' row 2 on."""
    d = "model.decoder."
    top = {"wte": d + "embed_tokens.weight", "output_layer": "lm_head.weight",
           "lnf.weight": d + "final_layer_norm.weight", "lnf.bias": d + "final_layer_norm.bias"}
    if name == "wpe":
        return G[d + "embed_positions.weight"][2:]
    if name in top:
        g = G[top[name]]
        return g.view(-1, 1) if g.dim() == 1 else g
    layer, rest = name.split(".", 2)[1:]
    h = f"{d}layers.{layer}."
    if rest in ("qkv.weight", "qkv.bias"):
        kind, cols = rest[4:], C if rest == "qkv.weight" else 1
        parts = [G[h + f"self_attn.{p}_proj.{kind}"].view(NH, 1, HS, cols) for p in "qkv"]
        return torch.cat(parts, 1).reshape(-1, cols)
    part, kind = rest.rsplit(".", 1)
    hf = {"ln1": "self_attn_layer_norm", "attn_proj": "self_attn.out_proj", "ln2": "final_layer_norm",
          "fc": "fc1", "fc_proj": "fc2"}[part]
    g = G[h + f"{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


prefix = tt.make_corpus(trident, work, 29, ["learned", "offset", "positions", "decoder", "pre", "norm"],
                        300, 5, 50)

torch.manual_seed(11)
# (name, activation, enable_bias, tied, ffn_dim, 2-rank layout)
for name, act, bias, tied, ffn, two in (
        ("opt-relu-bias-tied", "relu", True, True, 4 * C, ("T2", 2, 2, 1, ())),
        ("opt-nobias-untied-gelu", "gelu", False, False, 3 * C, ("P2", 2, 1, 2, ()))):
    model = OPTForCausalLM(OPTConfig(
        vocab_size=V, max_position_embeddings=T, hidden_size=C, num_hidden_layers=L, num_attention_heads=NH,
        ffn_dim=ffn, activation_function=act, enable_bias=bias, tie_word_embeddings=tied,
        bos_token_id=V - 1, eos_token_id=V - 1)).eval()
    hff.randomize(model, lambda pname: "layer_norm" in pname and pname.endswith(".weight"))
    with torch.no_grad():  # (rows no position reads: the export's zeros)
        model.model.decoder.embed_positions.weight[:2] = 0
    keys = dict(normalization="LayerNorm", position_embedding_type="learned_absolute", ffn_hidden_size=ffn,
                num_query_groups=NH, untie_embeddings_and_output_weights=not tied, add_bias_linear=bias,
                layernorm_epsilon=1e-5, num_attention_heads=NH, hidden_size=C, relu=act == "relu",
                gelu_approximate="none" if act == "gelu" else "tanh")
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want_lines = ["normalization: LayerNorm", "position_embedding_type: learned_absolute",
                  f"ffn_hidden_size: {ffn}"] + ([] if bias else ["add_bias_linear: false"]) + \
                 ([] if tied else ["untie_embeddings_and_output_weights: true"])
    tt.check(f"{name}: trident convert prints OPT's model section",
             all(w in out for w in want_lines) and ("gelu_approximate: none" in out) == (act == "gelu") and
             ("relu: true" in out) == (act == "relu"), out)
    if act == "relu":  # the released facebook/opt-* files are OPTModel's (decoder.*, no lm_head)
        base, ck_base = os.path.join(work, name + "-base-hf"), ck + "-base"
        model.model.save_pretrained(base)
        rc, _, err = tt.outputs([trident, "convert", "--from", "hf", "--input", base, "--output", ck_base],
                                timeout=300)
        tt.check(f"{name}: OPTModel's save_pretrained folder (decoder.*) imports to the same checkpoint",
                 rc == 0 and hff.same_checkpoint(ck, ck_base), err)
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    hff.generate_check(trident, name, model, (("the HF folder", src, []),))
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("activation_function", "ffn_dim", "max_position_embeddings", "enable_bias",
                         "tie_word_embeddings", "do_layer_norm_before", "word_embed_proj_dim"),
                        must=("model.decoder.embed_positions.weight",))
    back_cfg = json.load(open(os.path.join(work, name + "-back", "config.json")))
    tt.check(f"{name}: the export's config.json says model_type opt, OPTForCausalLM, {act}",
             back_cfg.get("model_type") == "opt" and back_cfg.get("architectures") == ["OPTForCausalLM"] and
             back_cfg.get("activation_function") == act, str(back_cfg))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    n_tensors = 4 + (0 if tied else 1) + L * (8 + (4 if bias else 0))
    layouts = [("1", 1, 1, 1, ())] + ([] if quick else [two])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t: opt_grad(G, t), n_tensors,
                    ", wpe among them", must=("wpe",))
tt.finish("PASSED")
