#!/usr/bin/python3
"""Hugging Face transformers 4.44.2 as the oracle of Phi-3 (Phi3ForCausalLM, added in 4.40: this
oracle's own environment, tt.HF_NEW_PACKAGES). Tiny Phi3ForCausalLM made here from configs with random
weights (nothing downloaded), 4 heads of 12 in hidden 48: 2 key/value heads (GQA), untied, and a
sliding_window of T / 2 below max_position_embeddings T (Phi-3-mini-4k's 2047 of 4096), which
transformers' eager attention (Debian's torch 1.13 has no sdpa) does not read: its logits over all T
positions are trident's full causal attention's; and one key/value head per head, tied. Each is saved with
save_pretrained and imported with `trident convert --from hf` (hf_family: phi3 printed, ' hf_family
phi3' in the manifest's family line); trident's logits match transformers' (1e-4 relative to the
largest); greedy `trident generate` of the folder gives transformers' tokens; `trident convert --to hf
--config` of the import is bit-exact to transformers' files (qkv_proj, gate_up_proj fused) and loads
as Phi3ForCausalLM with no missing or unexpected keys, to the same logits; trident's loss of
iteration 1 and every gradient, in one process and in a 2-rank layout (T2 / P2), match transformers'
on the same batch (loss 1e-5 relative, gradients relative L2 1e-4). The GQA model's LoRA run (rank 2,
alpha 4, every target): --adapters-only writes PEFT's names (qkv_proj, o_proj, gate_up_proj,
down_proj) whose W + (4 / 2) B A is the --merge-lora export's tensor (1e-6), so lora_B's rows are the
fused weights'.
usage: test_hf_phi3_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process runs only."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv, tt.HF_NEW_PACKAGES)
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Phi3Config, Phi3ForCausalLM  # noqa: E402

L, V, T, F, C, NH = 2, 300, 32, 80, 48, 4  # V: byte tokens fit
HS = C // NH
tt.check(f"the oracle is transformers {transformers.__version__} (4.40 or later has Phi-3)",
         tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 40))


def phi3_grad(G, name, NG):
    """transformers' gradient of trident tensor `name` in trident's layout: qkv_proj's rows [q; k; v]
    and gate_up_proj's [gate; up] cut into a Llama's q/k/v_proj and gate/up_proj for hff.llama_grad."""
    split = dict(G)
    for layer in range(L):
        h = f"model.layers.{layer}."
        q, k, v = G[h + "self_attn.qkv_proj.weight"].split([NH * HS, NG * HS, NG * HS])
        split.update({h + "self_attn.q_proj.weight": q, h + "self_attn.k_proj.weight": k,
                      h + "self_attn.v_proj.weight": v})
        gate, up = G[h + "mlp.gate_up_proj.weight"].chunk(2)
        split.update({h + "mlp.gate_proj.weight": gate, h + "mlp.up_proj.weight": up})
    return hff.llama_grad(split, name, NH, NG, HS, C)


prefix = tt.make_corpus(trident, work, 31, ["fused", "qkv", "gate", "up", "phi", "mini"], 300, 5, 50)
torch.manual_seed(13)
# (name, key/value heads, tied, sliding_window, 2-rank layout, LoRA)
for name, NG, tied, window, two, lora in (
        ("phi3-gqa-untied-window", 2, False, T // 2, ("T2", 2, 2, 1, ()), True),
        ("phi3-mha-tied", NH, True, None, ("P2", 2, 1, 2, ()), False)):
    hf_cfg = dict(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
                  num_key_value_heads=NG, max_position_embeddings=T, original_max_position_embeddings=T,
                  rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=window, tie_word_embeddings=tied,
                  pad_token_id=None, bos_token_id=V - 1, eos_token_id=V - 1)
    model = Phi3ForCausalLM(Phi3Config(**hf_cfg)).eval()
    hff.randomize(model, lambda n: "norm" in n)
    tt.check(f"{name}: transformers' qkv_proj is {(NH + 2 * NG) * HS} x {C}, gate_up_proj {2 * F} x {C}",
             tuple(model.model.layers[0].self_attn.qkv_proj.weight.shape) == ((NH + 2 * NG) * HS, C)
             and tuple(model.model.layers[0].mlp.gate_up_proj.weight.shape) == (2 * F, C))
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want_lines = ["normalization: RMSNorm", "swiglu: true", f"ffn_hidden_size: {F}", f"num_query_groups: {NG}",
                  "hf_family: phi3", "untie_embeddings_and_output_weights: " + ("false" if tied else "true"),
                  f"seq_length: {T}"]
    tt.check(f"{name}: trident convert prints Phi-3's model section (no sliding_window, seq_length {T})",
             all(w in out for w in want_lines) and "sliding_window" not in out, out)
    fam = hff.family_lines(ck)
    tt.check(f"{name}: the manifest's family line ends with hf_family phi3",
             len(fam) == 1 and fam[0].endswith(" hf_family phi3") and "sliding_window" not in fam[0], str(fam))
    keys = dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=F,
                num_query_groups=NG, untie_embeddings_and_output_weights=not tied, add_bias_linear=False,
                layernorm_epsilon=1e-5, num_attention_heads=NH, hidden_size=C, hf_family="phi3")
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    hff.generate_check(trident, name, model, (("the HF folder", src, []),))
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("num_key_value_heads", "intermediate_size", "rope_theta", "rms_norm_eps",
                         "tie_word_embeddings", "max_position_embeddings", "hidden_act"),
                        must=("model.layers.0.self_attn.qkv_proj.weight", "model.layers.1.mlp.gate_up_proj.weight"))
    back_cfg = json.load(open(os.path.join(work, name + "-back", "config.json")))
    tt.check(f"{name}: the export's config.json says Phi3ForCausalLM, model_type phi3, sliding_window null",
             back_cfg.get("model_type") == "phi3" and back_cfg.get("architectures") == ["Phi3ForCausalLM"]
             and "sliding_window" in back_cfg and back_cfg["sliding_window"] is None, str(back_cfg))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    n_tensors = 2 + (0 if tied else 1) + 6 * L
    layouts = [("1", 1, 1, 1, ())] + ([] if quick else [two])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t: phi3_grad(G, t, NG), n_tensors)
    if lora:
        hff.lora_merge_check(trident, work, name, cfg, ck, src, L,
                             ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"),
                             "Phi-3")
tt.finish("PASSED")
