#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of Phi (PhiForCausalLM: Phi-1, Phi-1.5, Phi-2).
Two tiny PhiForCausalLM made here from configs with random weights (nothing downloaded): 4 query
heads in 2 key/value groups (GQA), partial_rotary_factor 0.5, gelu_new; and Phi-2's head size 10
with partial_rotary_factor 0.4 (4 rotated dimensions), a key/value head per head, the exact GELU.
Each is saved with save_pretrained and imported with `trident convert --from hf` (its switches
printed); trident's logits match transformers' (1e-4 relative to the largest); greedy `trident
generate` of the folder and of the import gives transformers' generate's tokens; `trident eval
--input` of the folder (windows of T, stride T/2) gives transformers' nll; `trident convert --to hf
--config` of the import is bit-exact to transformers' files and loads as PhiForCausalLM with no
missing or unexpected keys, to the same logits; trident's loss of iteration 1 and every gradient
(lm_head.bias's too), in one process and in D2xT2xP2 with sequence parallelism, match
transformers' on the same batch (loss 1e-5 relative, gradients relative L2 1e-4).
usage: test_hf_phi_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import PhiConfig, PhiForCausalLM  # noqa: E402

L, V, T = 2, 300, 32  # V: byte tokens fit, and TP pads it


def phi_grad(G, name, NH, NG, HS, C):
    """transformers' gradient of trident tensor `name` of the Phi, in trident's layout."""
    top = {"wte": "model.embed_tokens.weight", "output_layer": "lm_head.weight", "output_layer.bias": "lm_head.bias",
           "lnf.weight": "model.final_layernorm.weight", "lnf.bias": "model.final_layernorm.bias"}
    if name in top:
        g = G[top[name]]
        return g.view(-1, 1) if g.dim() == 1 else g
    layer, rest = name.split(".", 2)[1:]
    h = f"model.layers.{layer}."
    if rest in ("qkv.weight", "qkv.bias"):  # rows (group, {q_0 .. q_R-1, k, v}, d)
        R, kind, cols = NH // NG, rest[4:], C if rest == "qkv.weight" else 1
        q = G[h + "self_attn.q_proj." + kind].view(NG, R, HS, cols)
        k = G[h + "self_attn.k_proj." + kind].view(NG, 1, HS, cols)
        v = G[h + "self_attn.v_proj." + kind].view(NG, 1, HS, cols)
        return torch.cat([q, k, v], 1).reshape(-1, cols)
    part, kind = rest.rsplit(".", 1)
    hf = {"ln1": "input_layernorm", "attn_proj": "self_attn.dense", "fc": "mlp.fc1", "fc_proj": "mlp.fc2"}[part]
    g = G[f"{h}{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


prefix = tt.make_corpus(trident, work, 17, ["phi", "rotary", "partial", "group", "query", "head", "bias"],
                        300, 5, 50)

models = []
torch.manual_seed(17)
# (name, C, NH, NG, partial_rotary_factor, hidden_act, intermediate_size)
for name, C, NH, NG, factor, act, ffn in (("phi-gqa-rotary-0.5-gelu-new", 64, 4, 2, 0.5, "gelu_new", 160),
                                          ("phi-2-head-10-rotary-0.4-gelu", 40, 4, 4, 0.4, "gelu", 4 * 40)):
    model = PhiForCausalLM(PhiConfig(vocab_size=V, hidden_size=C, intermediate_size=ffn, num_hidden_layers=L,
                                     num_attention_heads=NH, num_key_value_heads=NG, max_position_embeddings=T,
                                     partial_rotary_factor=factor, hidden_act=act, layer_norm_eps=1e-5,
                                     rope_theta=10000.0)).eval()
    hff.randomize(model, lambda pname: "layernorm.weight" in pname)
    HS = C // NH
    keys = dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=factor,
                ffn_hidden_size=ffn, num_query_groups=NG, untie_embeddings_and_output_weights=True,
                output_layer_bias=True, parallel_residual=True, parallel_shared_norm=True,
                layernorm_epsilon=1e-5, num_attention_heads=NH, hidden_size=C,
                gelu_approximate="none" if act == "gelu" else "tanh")
    models.append((name, model, lambda G, n, a=(NH, NG, HS, C): phi_grad(G, n, *a), keys, 5 + 10 * L,
                   int(HS * factor)))

for name, model, hf_grad, keys, n_tensors, rot in models:
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want_lines = ["normalization: LayerNorm", "position_embedding_type: rope", f"rotary_percent: {keys['rotary_percent']}",
                  "parallel_residual: true", "parallel_shared_norm: true", "output_layer_bias: true",
                  "untie_embeddings_and_output_weights: true", "add_bias_linear: true",
                  f"num_query_groups: {keys['num_query_groups']}", f"ffn_hidden_size: {keys['ffn_hidden_size']}"]
    tt.check(f"{name}: trident convert prints Phi's model section",
             all(w in out for w in want_lines) and
             ("gelu_approximate: none" in out) == (keys["gelu_approximate"] == "none"), out)
    fam = hff.family_lines(ck)
    tt.check(f"{name}: the manifest's family line: rotary_dims {rot}, ends with parallel_shared_norm 1 output_bias 1",
             len(fam) == 1 and f" rotary_dims {rot} " in fam[0] and fam[0].endswith(" parallel_shared_norm 1 output_bias 1"),
             str(fam))
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    # transformers stops at PhiConfig's eos 2, trident generate of the folder too (its
    # generation_config.json's eos_token_id), of the import with --eos-id 2
    hff.generate_check(trident, name, model, (("the HF folder", src, []),
                                              ("the import with --config", ck, ["--config", cfg, "--eos-id", "2"])))
    # trident eval of the folder: perplexity windows of T, stride T/2, byte tokens
    hff.eval_check(trident, src, work, name, model, "the partial rotary query heads of one shared norm; " * 3, T)
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("hidden_act", "partial_rotary_factor", "num_key_value_heads", "intermediate_size",
                         "rope_theta", "layer_norm_eps", "tie_word_embeddings", "qk_layernorm"), must=("lm_head.bias",))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    layouts = [("1", 1, 1, 1, ())] + ([] if quick else
                                      [("D2xT2xP2-sp", 8, 2, 2, ("parallel.sequence_parallel=true",))])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t: hf_grad(G, t), n_tensors,
                    ", output_layer.bias among them", must=("output_layer.bias",))
tt.finish("PASSED")
