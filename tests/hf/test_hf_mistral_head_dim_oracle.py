#!/usr/bin/python3
"""Hugging Face transformers 4.44.2 as the oracle of a Mistral whose head_dim is not hidden_size /
num_attention_heads (Mistral-Nemo-12B's 128 in hidden 5120 of 32 heads; MistralConfig reads head_dim
from 4.43, 4.38 ignores it: this oracle's own environment, tt.HF_NEW_PACKAGES). A tiny
MistralForCausalLM made here (nothing downloaded): hidden 48, 4 heads of head_dim 16 (the attention
64 wide: trident's kv_channels 16), 2 key/value heads, untied, every tensor random. Saved with
save_pretrained and imported with `trident convert --from hf` (kv_channels printed, in the family
line); trident's logits match transformers' (1e-4 relative to the largest); greedy `trident
generate` of the folder gives transformers' tokens; `trident convert --to hf --config` of the import
is bit-exact to transformers' files, writes head_dim and loads as MistralForCausalLM with no missing
or unexpected keys, to the same logits; trident's loss of iteration 1 and every gradient (one
process) match transformers' on the same batch (loss 1e-5 relative, gradients relative L2 1e-4); a LoRA
run's --adapters-only export has the Llama's PEFT names with q/k/v_proj split by head_dim, and W + (4 /
2) B A of each is the --merge-lora export's tensor (1e-6).
usage: test_hf_mistral_head_dim_oracle.py TRIDENT HF_PROBE WORKDIR VENV"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, _ = hff.oracle_start(sys.argv, tt.HF_NEW_PACKAGES)
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import MistralConfig, MistralForCausalLM  # noqa: E402

L, V, T, F, C, NH, NG, HS = 2, 300, 32, 96, 48, 4, 2, 16  # V: byte tokens fit
name = "mistral-head-16-of-48"
tt.check(f"the oracle is transformers {transformers.__version__} (4.43 or later reads Mistral's head_dim)",
         tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 43))
prefix = tt.make_corpus(trident, work, 19, ["mistral", "nemo", "head", "rotary", "group", "query"], 300, 5, 50)
torch.manual_seed(19)
model = MistralForCausalLM(MistralConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                                         num_attention_heads=NH, num_key_value_heads=NG, head_dim=HS,
                                         max_position_embeddings=T, rms_norm_eps=1e-6, rope_theta=10000.0,
                                         sliding_window=None, tie_word_embeddings=False)).eval()
tt.check(f"transformers' q_proj is {NH * HS} x {C} and o_proj {C} x {NH * HS}",
         tuple(model.model.layers[0].self_attn.q_proj.weight.shape) == (NH * HS, C)
         and tuple(model.model.layers[0].self_attn.o_proj.weight.shape) == (C, NH * HS))
hff.randomize(model, lambda n: "norm" in n)
src, ck, out = hff.oracle_import(trident, work, name, model)
tt.check(f"{name}: trident convert prints kv_channels: {HS}", f"kv_channels: {HS}" in out, out)
fam = hff.family_lines(ck)
tt.check(f"{name}: the manifest's family line: rotary_dims {HS}, query_groups {NG}, kv_channels {HS}",
         len(fam) == 1 and f" rotary_dims {HS} " in fam[0] and f" query_groups {NG} " in fam[0]
         and f" kv_channels {HS}" in fam[0], str(fam))
keys = dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=F,
            num_query_groups=NG, untie_embeddings_and_output_weights=True, add_bias_linear=False,
            layernorm_epsilon=1e-6, num_attention_heads=NH, hidden_size=C, kv_channels=HS)
cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
hff.logits_check(probe, cfg, work, name, model, T, V)
hff.generate_check(trident, name, model, (("the HF folder", src, []),))
hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                    ("head_dim", "num_key_value_heads", "intermediate_size", "rope_theta", "rms_norm_eps",
                     "tie_word_embeddings"))
hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
hff.grads_check(trident, cfg, work, name, [("1", 1, 1, 1, ())], hf_loss,
                lambda t: hff.llama_grad(G, t, NH, NG, HS, C), 3 + 6 * L)
hff.lora_merge_check(trident, work, name, cfg, ck, src, L,
                     ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"), "Mistral")
tt.finish("PASSED")
