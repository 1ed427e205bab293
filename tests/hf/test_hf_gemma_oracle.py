#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of Gemma (GemmaForCausalLM: Gemma-2B, -7B). Two tiny
GemmaForCausalLM made here from configs with random weights (nothing downloaded): (a) hidden 64, 4
heads of head_dim 32 (trident's kv_channels 32, not 64 / 4), 2 key/value heads, hidden_act gelu
(the exact GELU); (b) hidden 48, 4 heads of head_dim 12 (= 48 / 4: no kv_channels), one key/value
head (MQA), gelu_pytorch_tanh. Both tied, their norms' weights (GemmaRMSNorm's offsets from 1) and
every other tensor random (the embedding small: greedy generate varies). Each is saved with
save_pretrained and imported with `trident convert --from hf` (its switches printed:
apply_layernorm_1p, embedding_multiplier (float)sqrt(hidden), geglu, kv_channels); trident's logits
match transformers' (1e-4 relative to the largest); greedy `trident generate` of the folder and of
the import gives transformers' generate's tokens (both stopping at GemmaConfig's eos 1); `trident
eval --input` of the folder (windows of T, stride T/2) gives transformers' nll; `trident convert
--to hf --config` of the import is bit-exact to transformers' files and loads as GemmaForCausalLM
with no missing or unexpected keys, to the same logits; trident's loss of iteration 1 and every
gradient, in one process and (model a) in D2xT2xP2 with sequence parallelism, match transformers'
on the same batch (loss 1e-5 relative, gradients relative L2 1e-4).
usage: test_hf_gemma_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick]
--quick: the one-process run only."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import GemmaConfig, GemmaForCausalLM  # noqa: E402

L, V, T, F = 2, 300, 32, 96  # V: byte tokens fit, and TP pads it


def f32(x):
    """x rounded to float32, as a Python float (Gemma's embedding scale in the model's dtype)"""
    return struct.unpack("<f", struct.pack("<f", x))[0]


prefix = tt.make_corpus(trident, work, 17, ["gemma", "geglu", "rotary", "group", "query", "head", "norm"],
                        300, 5, 50)
torch.manual_seed(17)
# (name, C, NH, NG, head_dim, hidden_act, layouts beyond one process)
for name, C, NH, NG, HS, act, wide in (("gemma-head-32-of-64-gqa-gelu", 64, 4, 2, 32, "gelu", True),
                                       ("gemma-mqa-gelu-pytorch-tanh", 48, 4, 1, 12, "gelu_pytorch_tanh", False)):
    model = GemmaForCausalLM(GemmaConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                                         num_attention_heads=NH, num_key_value_heads=NG, head_dim=HS,
                                         hidden_act=act, max_position_embeddings=T, rms_norm_eps=1e-6,
                                         rope_theta=10000.0)).eval()
    with torch.no_grad():  # every tensor away from its initial value (the norms' offsets 0); a small
        for pname, p in model.named_parameters():  # embedding: scaled by sqrt(C), the tied head
            p.copy_((0.02 if "embed" in pname else 0.2) * torch.randn_like(p))  # repeats its input else
    kv = HS if HS * NH != C else 0
    mult = f32(C ** 0.5)
    keys = dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=False, geglu=True,
                ffn_hidden_size=F, num_query_groups=NG, untie_embeddings_and_output_weights=False,
                add_bias_linear=False, layernorm_epsilon=1e-6, num_attention_heads=NH, hidden_size=C,
                apply_layernorm_1p=True, embedding_multiplier=mult, **({"kv_channels": kv} if kv else {}),
                gelu_approximate="none" if act == "gelu" else "tanh")
    src, ck, out = hff.oracle_import(trident, work, name, model)
    want_lines = ["normalization: RMSNorm", "position_embedding_type: rope", "swiglu: false", "geglu: true",
                  "apply_layernorm_1p: true", f"embedding_multiplier: {mult:.9g}", f"num_query_groups: {NG}",
                  f"ffn_hidden_size: {F}", "untie_embeddings_and_output_weights: false", "add_bias_linear: false"]
    tt.check(f"{name}: trident convert prints Gemma's model section (kv_channels {kv or 'absent'})",
             all(w in out for w in want_lines) and (f"kv_channels: {kv}" in out if kv else "kv_channels" not in out)
             and ("gelu_approximate: none" in out) == (act == "gelu"), out)
    fam = hff.family_lines(ck)
    ending = (f" kv_channels {kv}" if kv else "") + " layernorm_1p 1 embedding_multiplier "
    tt.check(f"{name}: the manifest's family line: rotary_dims {HS}, query_groups {NG}, untie 0, ends with"
             f"{ending}X geglu 1", len(fam) == 1 and f" rotary_dims {HS} " in fam[0] and " untie 0 " in fam[0]
             and f" query_groups {NG} " in fam[0] and ending in fam[0] and fam[0].endswith(" geglu 1")
             and (" gelu_exact 1 " in fam[0]) == (act == "gelu"), str(fam))
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    # transformers stops at GemmaConfig's eos 1, trident generate of the folder too (its
    # generation_config.json's eos_token_id), of the import with --eos-id 1
    hff.generate_check(trident, name, model, (("the HF folder", src, []),
                                              ("the import with --config", ck, ["--config", cfg, "--eos-id", "1"])))
    hff.eval_check(trident, src, work, name, model, "the geglu heads scale the embedding by its root; " * 3, T)
    hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                        ("hidden_act", "head_dim", "num_key_value_heads", "intermediate_size", "rope_theta",
                         "rms_norm_eps", "tie_word_embeddings", "attention_bias"))
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    layouts = [("1", 1, 1, 1, ())] + ([("D2xT2xP2-sp", 8, 2, 2, ("parallel.sequence_parallel=true",))]
                                      if wide and not quick else [])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t: hff.llama_grad(G, t, NH, NG, HS, C),
                    2 + 6 * L, "; wte's with the tied head's part")
tt.finish("PASSED")
