#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of GPT-J (GPTJForCausalLM). Two tiny
GPTJForCausalLM made here from configs with random weights (nothing downloaded), 8 heads of 8 in
n_embd 64: rotary_dim 4 of the head of 8 (GPT-J-6B's share: 64 of 256), gelu_new, n_inner null; and
rotary_dim 8 (whole heads), the exact GELU, n_inner 3 x n_embd. GPT-J rotates interleaved pairs
(rotate_every_two), trident the two halves of the rotated part: the import permutes q_proj's and
k_proj's rotary rows, the export back. Each is saved with save_pretrained and imported with
`trident convert --from hf` (its switches printed: add_bias_linear false with add_mlp_bias,
output_layer_bias, parallel_shared_norm); trident's logits match transformers' (1e-4 relative to
the largest); greedy `trident generate` of the folder gives transformers' generate's tokens;
`trident convert --to hf --config` of the import is bit-exact to transformers' files and loads as
GPTJForCausalLM with no missing or unexpected keys, to the same logits; trident's loss of
iteration 1 and every gradient, in one process and in T2xP2 (tensor and pipeline parallel), match
transformers' on the same batch (loss 1e-5 relative, gradients relative L2 1e-4).
usage: test_hf_gptj_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import GPTJConfig, GPTJForCausalLM  # noqa: E402

L, V, T, C, NH = 2, 300, 32, 64, 8  # V: byte tokens fit
HS = C // NH


def gptj_grad(G, name, rot):
    """transformers' gradient of trident tensor `name` in trident's layout: qkv's rows (head, {q, k,
    v}, d), q's and k's first rot rows of each head from GPT-J's interleaved pairs (row 2i -> i,
    2i + 1 -> rot/2 + i)."""
    top = {"wte": "transformer.wte.weight", "output_layer": "lm_head.weight", "output_layer.bias": "lm_head.bias",
           "lnf.weight": "transformer.ln_f.weight", "lnf.bias": "transformer.ln_f.bias"}
    if name in top:
        g = G[top[name]]
        return g.view(-1, 1) if g.dim() == 1 else g
    layer, rest = name.split(".", 2)[1:]
    h = f"transformer.h.{layer}."
    if rest == "qkv.weight":
        to = [d // 2 + (rot // 2 if d % 2 else 0) if d < rot else d for d in range(HS)]
        parts = []
        for p in ("q", "k", "v"):
            w = G[h + f"attn.{p}_proj.weight"].view(NH, HS, C)
            if p != "v":
                half = torch.empty_like(w)
                half[:, to] = w
                w = half
            parts.append(w.view(NH, 1, HS, C))
        return torch.cat(parts, 1).reshape(-1, C)
    part, kind = rest.rsplit(".", 1)
    hf = {"ln1": "ln_1", "attn_proj": "attn.out_proj", "fc": "mlp.fc_in", "fc_proj": "mlp.fc_out"}[part]
    g = G[h + f"{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


prefix = tt.make_corpus(trident, work, 23, ["rotary", "every", "two", "pairs", "parallel", "shared"], 300, 5, 50)

models = []
torch.manual_seed(7)
# (name, rotary_dim, activation, n_inner)
for name, rot, act, inner in (("gptj-rot4-tanh", 4, "gelu_new", None), ("gptj-rot8-gelu-3h", 8, "gelu", 3 * C)):
    model = GPTJForCausalLM(GPTJConfig(
        vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=NH, rotary_dim=rot, n_inner=inner,
        activation_function=act, layer_norm_epsilon=1e-5, bos_token_id=V - 1, eos_token_id=V - 1)).eval()
    hff.randomize(model, lambda pname: ".ln_" in pname)
    keys = dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=rot / HS,
                ffn_hidden_size=inner or 4 * C, num_query_groups=NH, untie_embeddings_and_output_weights=True,
                output_layer_bias=True, add_bias_linear=False, add_mlp_bias=True, parallel_residual=True,
                parallel_shared_norm=True, layernorm_epsilon=1e-5, num_attention_heads=NH, hidden_size=C,
                gelu_approximate="none" if act == "gelu" else "tanh")
    models.append((name, model, rot, keys, 5 + 8 * L))

for name, model, rot, keys, n_tensors in models:
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want_lines = ["normalization: LayerNorm", "position_embedding_type: rope", f"num_query_groups: {NH}",
                  f"ffn_hidden_size: {keys['ffn_hidden_size']}", "add_bias_linear: false", "add_mlp_bias: true",
                  "parallel_residual: true", "parallel_shared_norm: true", "output_layer_bias: true",
                  "untie_embeddings_and_output_weights: true"]
    tt.check(f"{name}: trident convert prints GPT-J's model section",
             all(w in out for w in want_lines) and
             ("gelu_approximate: none" in out) == (keys["gelu_approximate"] == "none") and
             (f"rotary_percent: {rot / HS:.9g}" in out) == (rot < HS), out)
    fam = hff.family_lines(ck)
    tt.check(f"{name}: the manifest's family line: linear_bias 0, rotary_dims {rot}, ends with mlp_bias 1",
             len(fam) == 1 and " linear_bias 0 " in fam[0] and f" rotary_dims {rot} " in fam[0] and
             fam[0].endswith(" output_bias 1 mlp_bias 1"), str(fam))
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    hff.generate_check(trident, name, model, (("the HF folder", src, []),))
    # (n_inner null is exported as 4 x n_embd, the width it means)
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("rotary_dim", "activation_function", "n_positions", "layer_norm_epsilon",
                         "tie_word_embeddings") + (("n_inner",) if model.config.n_inner else ()))
    back_cfg = json.load(open(os.path.join(work, name + "-back", "config.json")))
    tt.check(f"{name}: the export's config.json says model_type gptj, rotary_dim {rot}",
             back_cfg.get("model_type") == "gptj" and back_cfg.get("rotary_dim") == rot and
             back_cfg.get("architectures") == ["GPTJForCausalLM"], str(back_cfg))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    layouts = [("1", 1, 1, 1, ())] + ([] if quick else [("T2xP2", 4, 2, 2, ())])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t, rot=rot: gptj_grad(G, t, rot),
                    n_tensors, ", fc.bias and output_layer.bias among them",
                    must=("layers.0.fc.bias", "layers.1.fc_proj.bias", "output_layer.bias"))
tt.finish("PASSED")
