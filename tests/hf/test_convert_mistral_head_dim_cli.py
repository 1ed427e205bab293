#!/usr/bin/python3
"""`trident convert` of Mistral folders whose head_dim is not hidden_size / num_attention_heads
(Mistral-Nemo-12B's 128 in hidden 5120 of 32 heads; transformers reads Mistral's head_dim from
4.43) end to end without PyTorch (it runs in the sanitizer build too; hf_files.py writes the
folders; the transformers oracle: test_hf_mistral_head_dim_oracle.py):
  - 4 heads of head_dim 16 in a hidden size of 32 (kv_channels 16; 2 key/value groups) HF ->
    trident -> HF bit for bit from the manifest alone, exported as a MistralForCausalLM with
    head_dim 16 and sliding_window null, the export imported again to the same checkpoint;
    generate from it; with a window shorter than the positions, both kept;
  - head_dim equal to hidden / heads (or null) is the plain Llama's checkpoint;
  - refused with exit 2 naming the key: an odd head_dim, 0, a string; a Llama's or a Qwen2's
    head_dim other than hidden / heads (transformers 4.44 reads neither); a q_proj of another
    head size; the export of kv_channels with q/k/v biases (no such transformers model).
usage: test_convert_mistral_head_dim_cli.py TRIDENT WORKDIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import C, L, NH, P, V, Session, rand, same_checkpoint, st_read  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")

HS, NG, F = 16, 2, 48  # head_dim 16 of hidden 32, 4 heads: the attention is 64 wide
MC = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": C, "intermediate_size": F,
      "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "head_dim": HS,
      "max_position_embeddings": P, "vocab_size": V, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
      "hidden_act": "silu", "sliding_window": None}


def mistral_tensors(hs=HS):
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"model.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2))]
        for p, rows in (("q", NH * hs), ("k", NG * hs), ("v", NG * hs)):
            t.append((h + f"self_attn.{p}_proj.weight", "F32", (rows, C), rand(rows * C)))
        t += [(h + "self_attn.o_proj.weight", "F32", (C, NH * hs), rand(C * NH * hs)),
              (h + "mlp.gate_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.up_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.down_proj.weight", "F32", (C, F), rand(F * C))]
    return t + [("model.norm.weight", "F32", (C,), rand(C, 2)), ("lm_head.weight", "F32", (V, C), rand(V * C))]


def exported(folder):
    """config.json of an export, {} when it has none"""
    path = os.path.join(folder, "config.json")
    return json.load(open(path)) if os.path.exists(path) else {}


mt = mistral_tensors()
dm = hf_folder("mistral-hd", mt, MC)
ck = os.path.join(work, "ck-mistral-hd")
rc, so, se = convert("--from", "hf", "--input", dm, "--output", ck)
tt.check(f"Mistral (head_dim {HS} in hidden {C} of {NH} heads): imported, kv_channels: {HS} printed",
         rc == 0 and f"kv_channels: {HS}" in so and f"num_query_groups: {NG}" in so, se + so)
back = os.path.join(work, "mistral-hd-back")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", back)
cfg = exported(back)
tt.check(f"HF -> trident -> HF from the manifest alone is bit-exact, a MistralForCausalLM with head_dim {HS}, "
         "sliding_window null",
         rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(dm, "model.safetensors"))
         and cfg.get("architectures") == ["MistralForCausalLM"] and cfg.get("model_type") == "mistral"
         and cfg.get("head_dim") == HS and "sliding_window" in cfg and cfg["sliding_window"] is None, f"{se}\n{cfg}")
ck2 = os.path.join(work, "ck-mistral-hd-again")
rc, so, se = convert("--from", "hf", "--input", back, "--output", ck2)
tt.check("the export imported again: the same checkpoint", rc == 0 and same_checkpoint(ck, ck2), se)
rc, so, se = tt.outputs([trident, "generate", ck, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                         "--temperature", "0"])
tt.check("generate from the checkpoint without --config: exit 0", rc == 0, se)
# with Mistral-7B v0.1's window shorter than the positions: both kept through the round trip
W = P - 3
dw = hf_folder("mistral-hd-window", mt, dict(MC, sliding_window=W))
ck_w, back_w = os.path.join(work, "ck-mistral-hd-window"), os.path.join(work, "mistral-hd-window-back")
rc, so, se = convert("--from", "hf", "--input", dw, "--output", ck_w)
if tt.check(f"sliding_window {W} with head_dim {HS}: imported, both printed",
            rc == 0 and f"sliding_window: {W}" in so and f"kv_channels: {HS}" in so, se + so):
    rc, so, se = convert("--to", "hf", "--input", ck_w, "--output", back_w)
    cfg = exported(back_w)
    tt.check("... exported bit-exact with both", rc == 0 and cfg.get("sliding_window") == W
             and cfg.get("head_dim") == HS and st_read(os.path.join(back_w, "model.safetensors"))
             == st_read(os.path.join(dw, "model.safetensors")), f"{se}\n{cfg}")
# head_dim hidden / heads, or null: the plain Llama (no kv_channels)
lt = mistral_tensors(C // NH)
ck_plain = os.path.join(work, "ck-plain")
rc, so, se = convert("--from", "hf", "--input", hf_folder("plain", lt, dict(MC, head_dim=None)), "--output", ck_plain)
tt.check("head_dim null: imported without kv_channels", rc == 0 and "kv_channels" not in so, se + so)
ck_eq = os.path.join(work, "ck-eq")
rc, so, se = convert("--from", "hf", "--input", hf_folder("eq", lt, dict(MC, head_dim=C // NH)), "--output", ck_eq)
tt.check(f"head_dim {C // NH} (= {C} / {NH}): the same checkpoint as head_dim null",
         rc == 0 and same_checkpoint(ck_plain, ck_eq), se)
# refusals, naming the key
llama = dict(MC, architectures=["LlamaForCausalLM"], model_type="llama")
del llama["sliding_window"]
qwen2 = dict(llama, architectures=["Qwen2ForCausalLM"], model_type="qwen2")
for what, config, cause in (
        ("an odd head_dim 15", dict(MC, head_dim=15), "head_dim 15 is odd: Mistral's rotary positions"),
        ("head_dim 0", dict(MC, head_dim=0), "head_dim must be an integer"),
        ("head_dim \"16\"", dict(MC, head_dim="16"), "head_dim must be an integer"),
        ("a Llama's head_dim 16", llama, "head_dim is not supported unless it is hidden_size / num_attention_heads "
                                         f"({C} / {NH}): transformers 4.44's Llama has no head_dim"),
        ("a Qwen2's head_dim 16", qwen2, "transformers 4.44's Qwen2 has no head_dim")):
    refused(f"{what}", ["--from", "hf", "--input", hf_folder("bad", mt, config), "--output", bad_out], bad_out,
            cause, ["config.json"])
refused(f"a q_proj of head size 8 (config.json's head_dim {HS})",
        ["--from", "hf", "--input", hf_folder("bad", mistral_tensors(8), MC), "--output", bad_out], bad_out,
        "'model.layers.0.self_attn.q_proj.weight' is [32, 32]")
# an export of kv_channels with q/k/v biases: a Qwen2's, whose head_dim transformers does not read
qcfg = tt.write_config(os.path.join(work, "qkv-bias.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, num_query_groups=NG, seq_length=P,
               max_position_embeddings=P, vocab_size=V, normalization="RMSNorm", position_embedding_type="rope",
               swiglu=True, ffn_hidden_size=F, untie_embeddings_and_output_weights=True, add_bias_linear=False,
               add_qkv_bias=True, layernorm_epsilon=1e-6, kv_channels=HS),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
refused("an export with --config of kv_channels with q/k/v biases",
        ["--to", "hf", "--input", ck, "--output", bad_out, "--config", qcfg], bad_out,
        "transformers has no such model to export to")
tt.finish("PASSED")
