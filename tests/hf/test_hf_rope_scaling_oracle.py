#!/usr/bin/python3
"""Hugging Face transformers 4.38.2 as the oracle of a Llama config.json's rope_scaling (Llama 3.1
and 3.2's "llama3", Code Llama-style "linear"). Two tiny LlamaForCausalLM with random weights
(nothing downloaded), 4 heads of 16 in 2 key/value groups:
  - rope_scaling {"type": "linear", "factor": 4}: transformers 4.38's own linear scaling (positions
    divided by the factor);
  - rope_scaling {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
    "original_max_position_embeddings": 64}: 4.38.2 predates it (4.43 added it), so the model is
    made without it and each layer's inv_freq is set to transformers 4.43's
    _compute_llama3_parameters of it (written out below), then the key is written into its
    config.json; its 8 frequencies cover the three regimes (kept: wavelength 6.3; blended: 19.9
    and 62.8; divided by 8: 199 and longer).
Each is saved with save_pretrained and imported with `trident convert --from hf` (the scaling
printed in its model section, recorded in the manifest's family line); trident's logits match
transformers' (1e-4 relative to the largest); greedy `trident generate` of the folder and of the
import gives transformers' tokens; `trident convert --to hf` of the import is bit-exact to
transformers' tensors and writes the same rope_scaling (linear: it loads as LlamaForCausalLM with
the same logits). Refused, naming the key: rope_scaling of type "dynamic" or "yarn", a missing
factor, llama3's high_freq_factor not above its low one, a rope_scaling that is not an object,
and rope_scaling on a Qwen2; a manifest's family line whose rope-scaling end is not one kind, once,
last, with finite factors, on rope; later transformers' Llama keys that say otherwise than 4.38
computes: mlp_bias true, a head_dim other than hidden / heads. configs/llama3.1-8b.yaml (Llama 3.1's scaling): `trident plan` counts the
release's 8,030,261,248 parameters.
usage: test_hf_rope_scaling_oracle.py TRIDENT HF_PROBE WORKDIR VENV"""
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, _ = hff.oracle_start(sys.argv)
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

L, V, T, C, NH, NG = 2, 300, 32, 64, 4, 2
HS = C // NH
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def llama3_inv_freq(inv_freq, rs):
    """transformers 4.43's _compute_llama3_parameters (modeling_rope_utils.py), on float32 inv_freq."""
    factor, low, high, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
        rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    out = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, out)


prefix = tt.make_corpus(trident, work, 19, ["rope", "scaling", "linear", "llama", "wavelength"], 300, 5, 50)
torch.manual_seed(19)
for name, rs in (("llama-linear-4", {"type": "linear", "factor": 4.0}), ("llama3.1-scaling", LLAMA3)):
    native = rs.get("type") == "linear"  # what 4.38.2 computes itself
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=96, num_hidden_layers=L,
                                         num_attention_heads=NH, num_key_value_heads=NG, max_position_embeddings=T,
                                         rms_norm_eps=1e-5, rope_scaling=rs if native else None,
                                         tie_word_embeddings=False)).eval()
    hff.randomize(model, lambda name: "norm" in name)
    if not native:  # Llama 3.1's frequencies in every layer's rotary embedding
        regimes = set()
        for layer in model.model.layers:
            emb = layer.self_attn.rotary_emb
            base = emb.inv_freq.clone()
            emb.inv_freq.copy_(llama3_inv_freq(base, rs))
            w = 2 * math.pi / base
            regimes = {("kept" if x < 16 else "divided" if x > 64 else "blended") for x in w.tolist()}
        tt.check(f"{name}: the frequencies cover the three regimes", regimes == {"kept", "blended", "divided"},
                 str(regimes))
    src = os.path.join(work, name + "-hf")
    model.save_pretrained(src)
    if not native:
        cfg_path = os.path.join(src, "config.json")
        cfg_json = json.load(open(cfg_path))
        cfg_json["rope_scaling"] = rs
        tt.write(cfg_path, json.dumps(cfg_json, indent=2))
    ck = os.path.join(work, name + "-ck")
    rc, out, err = tt.outputs([trident, "convert", "--from", "hf", "--input", src, "--output", ck], timeout=300)
    if not tt.check(f"trident convert --from hf {name}", rc == 0, err):
        tt.finish()
    want = (["rotary_seq_len_interpolation_factor: 4"] if native else
            ["use_rope_scaling: true", "rope_scaling_factor: 8", "rope_scaling_low_freq_factor: 1",
             "rope_scaling_high_freq_factor: 4", "rope_scaling_original_max_position_embeddings: 64"])
    tt.check(f"{name}: trident convert prints the scaling in the model section", all(w in out for w in want), out)
    fam = [ln for ln in open(os.path.join(ck, "release", "manifest.txt")).read().splitlines()
           if ln.startswith("family ")]
    end = " rope_linear 4" if native else " rope_llama3 8 1 4 64"
    tt.check(f"{name}: the manifest's family line ends with '{end}'", len(fam) == 1 and fam[0].endswith(end), str(fam))
    keys = dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=96,
                num_query_groups=NG, untie_embeddings_and_output_weights=True, add_bias_linear=False,
                layernorm_epsilon=1e-5, num_attention_heads=NH, hidden_size=C)
    keys.update(dict(rotary_seq_len_interpolation_factor=4.0) if native else
                dict(use_rope_scaling=True, rope_scaling_factor=8.0, rope_scaling_low_freq_factor=1.0,
                     rope_scaling_high_freq_factor=4.0, rope_scaling_original_max_position_embeddings=64))
    cfg = tt.write_config(os.path.join(work, name + ".yaml"),
        model={**dict(num_layers=L, seq_length=T, max_position_embeddings=T, vocab_size=V), **keys},
        training=dict(micro_batch_size=2, global_batch_size=8, train_iters=1, lr=1.0e-3, lr_warmup_iters=0,
                      seed=3),
        data=dict(data_path=prefix, split="95,5,0"),
        checkpoint=dict(load=ck))
    hff.logits_check(probe, cfg, work, name, model, T, V)
    model.generation_config.eos_token_id = None  # (and trident's stop token off: the folder has eos 2)
    hff.generate_check(trident, name, model, (("the HF folder", src, ["--eos-id", "-1"]),
                                              ("the import", ck, ["--eos-id", "-1"])))
    if native:
        hff.roundtrip_check(trident, src, ck, cfg, work, name, model, T, V,
                            ("rope_scaling", "rope_theta", "num_key_value_heads", "intermediate_size"))
    else:  # 4.38.2 cannot load a llama3 rope_scaling: the tensors and the key itself
        from safetensors.torch import load_file
        back = os.path.join(work, name + "-back")
        rc, _, err = tt.outputs([trident, "convert", "--to", "hf", "--input", ck, "--output", back], timeout=300)
        if tt.check(f"{name}: trident convert --to hf", rc == 0, err):
            a = load_file(os.path.join(src, "model.safetensors"))
            b = load_file(os.path.join(back, "model.safetensors"))
            tt.check(f"{name}: HF -> trident -> HF is bit-exact (fp32)",
                     set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a))
            got = json.load(open(os.path.join(back, "config.json"))).get("rope_scaling")
            tt.check(f"{name}: the export's rope_scaling is the folder's", got == rs, f"{got} != {rs}")

# the family line's rope-scaling end: one kind, once, last, finite factors (llama3's high above
# its low), only on rope: anything else is a corrupt manifest, refused naming it
for name, good_end, bad_ends in (
        ("llama-linear-4", " rope_linear 4", (" rope_linear 1", " rope_linear -2", " rope_linear inf",
                                              " rope_linear 4 rope_linear 4", " rope_linear 4 rope_llama3 8 1 4 64")),
        ("llama3.1-scaling", " rope_llama3 8 1 4 64", (" rope_llama3 8 4 1 64", " rope_llama3 8 1 4 0",
                                                       " rope_llama3 nan 1 4 64", " rope_llama3 8 1 4",
                                                       " rope_llama3 8 1 4 64 geglu 1"))):
    ck = os.path.join(work, name + "-ck")
    mtext = open(os.path.join(ck, "release", "manifest.txt")).read()
    for bad_end in bad_ends + (("position 1", "position 0"),):
        ck_bad = os.path.join(work, "ck-bad")
        tt.fresh_dir(ck_bad)
        os.rmdir(ck_bad)
        shutil.copytree(ck, ck_bad)
        mpath = os.path.join(ck_bad, "release", "manifest.txt")
        old, new = bad_end if isinstance(bad_end, tuple) else (good_end, bad_end)
        tt.write(mpath, mtext.replace(" " + old if isinstance(bad_end, tuple) else old,
                                      " " + new if isinstance(bad_end, tuple) else new))
        what = f"{new} (learned positions)" if isinstance(bad_end, tuple) else bad_end.strip()
        rc, _, err = tt.outputs([trident, "convert", "--to", "hf", "--input", ck_bad, "--output",
                                 os.path.join(work, "bad-out")], timeout=120)
        tt.check(f"refused: a manifest of {name} ending '{what}' (exit 2, naming the family line)",
                 rc == 2 and "expected the family line" in err and mpath in err, f"exit {rc}: {err[-400:]}")

# refusals, naming the key
good = os.path.join(work, "llama-linear-4-hf")
for what, rs, model_type, must in (
        ("dynamic scaling", {"type": "dynamic", "factor": 2.0}, "llama", "rope_scaling of type 'dynamic'"),
        ("yarn scaling", {"rope_type": "yarn", "factor": 2.0}, "llama", "rope_scaling of type 'yarn'"),
        ("a linear scaling without its factor", {"type": "linear"}, "llama", "rope_scaling: factor is missing"),
        ("a zero factor", {"type": "linear", "factor": 0}, "llama", "factor must be a positive number"),
        ("llama3's high_freq_factor below its low one", dict(LLAMA3, high_freq_factor=0.5), "llama",
         "high_freq_factor 0.5 is not above its low_freq_factor 1"),
        ("llama3 without its original positions", {k: v for k, v in LLAMA3.items()
                                                   if k != "original_max_position_embeddings"}, "llama",
         "original_max_position_embeddings is missing"),
        ("a rope_scaling that is a number", 4, "llama", "rope_scaling must be null or an object"),
        ("rope_scaling on a Qwen2", {"type": "linear", "factor": 2.0}, "qwen2", "rope_scaling is not supported"),
        ("a Llama with mlp_bias true (a later transformers' key)", None, "llama mlp_bias", "mlp_bias is not supported"),
        ("a Llama whose head_dim is not hidden / heads", None, "llama head_dim",
         "head_dim is not supported unless it is hidden_size / num_attention_heads (64 / 4)")):
    bad = os.path.join(work, "bad-hf")
    tt.fresh_dir(bad)
    for f in os.listdir(good):
        if f != "config.json":
            os.symlink(os.path.join(good, f), os.path.join(bad, f))
    cfg_json = json.load(open(os.path.join(good, "config.json")))
    cfg_json["rope_scaling"] = rs
    if model_type == "qwen2":
        cfg_json.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    if model_type == "llama mlp_bias":
        cfg_json.update(rope_scaling=None, mlp_bias=True)
    if model_type == "llama head_dim":
        cfg_json.update(rope_scaling=None, head_dim=32)
    tt.write(os.path.join(bad, "config.json"), json.dumps(cfg_json))
    rc, _, err = tt.outputs([trident, "convert", "--from", "hf", "--input", bad, "--output",
                             os.path.join(work, "bad-ck")], timeout=120)
    tt.check(f"refused: {what} (exit 2, naming it)", rc == 2 and must in err and "config.json" in err,
             f"exit {rc}: {err[-500:]}")
# configs/llama3.1-8b.yaml: the release's parameter count
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
rc, so, se = tt.outputs([trident, "plan", os.path.join(root, "configs", "llama3.1-8b.yaml"), "--json"])
count = json.loads(so).get("parameters") if rc == 0 else None
tt.check("configs/llama3.1-8b.yaml: trident plan counts the release's 8,030,261,248 parameters",
         count == 8030261248, f"exit {rc} {se[-300:]}; parameters {count}")
tt.finish("PASSED")
