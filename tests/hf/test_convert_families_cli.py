#!/usr/bin/python3
"""`trident convert` of Llama and Bloom folders end to end without PyTorch (it runs in the
sanitizer build too; the folders are written by hf_files.py):
  - a Llama (grouped K/V heads, untied head) HF -> trident -> HF bit for bit, with --config
    and from the manifest's family line alone; rms_norm_eps kept; generate from it; the same
    folder as a Mistral (sliding_window null or spanning the positions) the same checkpoint, one
    whose window is shorter kept as model.sliding_window (round trip, generate and seq_length
    within it), a window that is not a positive integer refused; a Qwen2 (the Llama with q, k and v biases) HF -> trident
    -> HF bit for bit from the manifest alone, its window switch read, its bad inputs refused;
  - every Llama config and tensor trident does not take refused with exit 2 naming the cause;
  - Bloom with and without lm_head.weight; the bad inputs a fuzzer found in both families;
  - a Llama config of max_position_embeddings 2^26 imports and exports in little memory (peak RSS).
usage: test_convert_families_cli.py TRIDENT WORKDIR"""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import (C, CONFIG, L, NH, P, V, Session, gpt2_tensors, rand, same_checkpoint,  # noqa: E402
                      st_read)

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")
base = gpt2_tensors()


# ---------------------------------------------------------------- Llama folders (issue 17)
LC = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": 48,
      "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": 2, "max_position_embeddings": P,
      "vocab_size": V, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu"}


def llama_tensors():
    HS = C // NH
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"model.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "self_attn.q_proj.weight", "F32", (C, C), rand(C * C)),
              (h + "self_attn.k_proj.weight", "F32", (2 * HS, C), rand(2 * HS * C)),
              (h + "self_attn.v_proj.weight", "F32", (2 * HS, C), rand(2 * HS * C)),
              (h + "self_attn.o_proj.weight", "F32", (C, C), rand(C * C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "mlp.gate_proj.weight", "F32", (48, C), rand(48 * C)),
              (h + "mlp.up_proj.weight", "F32", (48, C), rand(48 * C)),
              (h + "mlp.down_proj.weight", "F32", (C, 48), rand(48 * C))]
    return t + [("model.norm.weight", "F32", (C,), rand(C, 2)), ("lm_head.weight", "F32", (V, C), rand(V * C))]


lt = llama_tensors()
d = hf_folder("llama", lt, LC)
ck_llama = os.path.join(work, "ck-llama")
rc, so, se = convert("--from", "hf", "--input", d, "--output", ck_llama)
tt.check("Llama (GQA 4/2, untied): imported, the model section printed", rc == 0 and "rope" in so and
         "num_query_groups: 2" in so, se)
lcfg = tt.write_config(os.path.join(work, "llama.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, num_query_groups=2, seq_length=P,
               max_position_embeddings=P, vocab_size=V, normalization="RMSNorm", position_embedding_type="rope",
               swiglu=True, ffn_hidden_size=48, untie_embeddings_and_output_weights=True, add_bias_linear=False,
               layernorm_epsilon=1e-6),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
back = os.path.join(work, "llama-back")
rc, so, se = convert("--to", "hf", "--input", ck_llama, "--output", back, "--config", lcfg)
ok = rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(d, "model.safetensors"))
tt.check("Llama: HF -> trident -> HF (--config) is bit-exact", ok, se)
# the manifest's family line says Llama: no --config needed, the same files
back2 = os.path.join(work, "llama-back-manifest")
rc, so, se = convert("--to", "hf", "--input", ck_llama, "--output", back2)
same = rc == 0 and all(open(os.path.join(back, f), "rb").read() == open(os.path.join(back2, f), "rb").read()
                       for f in ("model.safetensors", "config.json"))
tt.check("Llama: HF -> trident -> HF without --config (the manifest's family line) gives the same files",
         same, se)
# the manifest keeps rms_norm_eps (the import once recorded 1e-05 whatever the source said, and
# an export without --config wrote that)
eps = json.load(open(os.path.join(back2, "config.json"))).get("rms_norm_eps") if rc == 0 else None
tt.check(f"Llama: rms_norm_eps 1e-6 imported and exported as such (exported {eps})", eps == 1e-6,
         open(os.path.join(ck_llama, "release", "manifest.txt")).read()[:600])
rc, so, se = tt.outputs([trident, "generate", ck_llama, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                         "--temperature", "0"])
tt.check("generate from the Llama checkpoint without --config: exit 0", rc == 0, se)
# Mistral: a Llama when its sliding window spans every position (null, or >= the positions)
MC = dict(LC, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=None)
for what, cfg_m in (("sliding_window null", MC), (f"sliding_window {P}", dict(MC, sliding_window=P))):
    ck_m = tt.fresh_dir(os.path.join(work, "ck-mistral")) and os.path.join(work, "ck-mistral", "ck")
    rc, so, se = convert("--from", "hf", "--input", hf_folder("mistral", lt, cfg_m), "--output", ck_m)
    tt.check(f"Mistral ({what}): imported, the Llama's checkpoint byte for byte",
             rc == 0 and same_checkpoint(ck_llama, ck_m), se)
# Mistral-7B v0.1's shape: a window shorter than the positions is kept (model.sliding_window),
# sequences within it; exported as a Mistral with it
W = P - 3
dm = hf_folder("mistral-window", lt, dict(MC, sliding_window=W))
ck_mw = os.path.join(work, "ck-mistral-window")
rc, so, se = convert("--from", "hf", "--input", dm, "--output", ck_mw)
tt.check(f"Mistral (sliding_window {W} of {P} positions): imported, the window and seq_length {W} printed",
         rc == 0 and f"sliding_window: {W}" in so and f"seq_length: {W}" in so, se + so)
back_mw = os.path.join(work, "mistral-window-back")
rc, so, se = convert("--to", "hf", "--input", ck_mw, "--output", back_mw)
mcfg = json.load(open(os.path.join(back_mw, "config.json"))) if rc == 0 else {}
tt.check("Mistral with a window: HF -> trident -> HF from the manifest alone is bit-exact, a Mistral of that window",
         rc == 0 and st_read(os.path.join(back_mw, "model.safetensors")) == st_read(os.path.join(dm, "model.safetensors"))
         and mcfg.get("model_type") == "mistral" and mcfg.get("architectures") == ["MistralForCausalLM"]
         and mcfg.get("sliding_window") == W, f"{se}\n{mcfg}")
for n_new, ok in ((W - 3, True), (W - 2, False)):
    rc, so, se = tt.outputs([trident, "generate", ck_mw, "--prompt-ids", "1,2,3", "--max-new-tokens", str(n_new),
                             "--temperature", "0"])
    tt.check(f"generate from it: 3 + {n_new} tokens {'within' if ok else 'beyond'} the window of {W}: "
             f"{'exit 0' if ok else 'refused naming the window'}",
             rc == 0 if ok else rc == 2 and f"sliding window of {W}" in se, se)
mw_cfg = tt.write_config(os.path.join(work, "mistral-window.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, num_query_groups=2, seq_length=W + 1,
               max_position_embeddings=P, vocab_size=V, normalization="RMSNorm", position_embedding_type="rope",
               swiglu=True, ffn_hidden_size=48, untie_embeddings_and_output_weights=True, add_bias_linear=False,
               layernorm_epsilon=1e-6, sliding_window=W),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
rc, so, se = tt.outputs([trident, "train", mw_cfg])
tt.check(f"a config of seq_length {W + 1} over a window of {W}: exit 2 naming both keys",
         rc == 2 and "model.sliding_window" in se and "seq_length" in se, se)
for window in ("4096", 0):
    out = os.path.join(work, "bad-out")
    refused(f"Mistral: sliding_window {window!r} (max_position_embeddings {P})",
            ["--from", "hf", "--input", hf_folder("bad-mistral", lt, dict(MC, sliding_window=window)),
             "--output", out], out, "sliding_window must be an integer >= 1 or null")
# Qwen2: the Llama with q, k and v biases; its sliding_window unused unless use_sliding_window
QC = dict(LC, architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False, sliding_window=4,
          max_window_layers=L, rope_theta=1e6)
HS = C // NH
qt = lt + [(f"model.layers.{i}.self_attn.{p}_proj.bias", "F32", (n,), rand(n))
           for i in range(L) for p, n in (("q", C), ("k", 2 * HS), ("v", 2 * HS))]
dq = hf_folder("qwen2", qt, QC)
ck_qwen2 = os.path.join(work, "ck-qwen2")
rc, so, se = convert("--from", "hf", "--input", dq, "--output", ck_qwen2)
tt.check("Qwen2 (q/k/v biases, use_sliding_window false): imported, add_qkv_bias printed",
         rc == 0 and "add_qkv_bias: true" in so and "add_bias_linear: false" in so, se + so)
manifest = open(os.path.join(ck_qwen2, "release", "manifest.txt")).read() if rc == 0 else ""
tt.check("Qwen2: the manifest's family line ends with qkv_bias 1",
         any(line.startswith("family ") and line.endswith(" qkv_bias 1") for line in manifest.splitlines()),
         manifest[:600])
back_q = os.path.join(work, "qwen2-back")
rc, so, se = convert("--to", "hf", "--input", ck_qwen2, "--output", back_q)
qcfg = json.load(open(os.path.join(back_q, "config.json"))) if rc == 0 else {}
tt.check("Qwen2: HF -> trident -> HF from the manifest alone is bit-exact, written as a Qwen2",
         rc == 0 and st_read(os.path.join(back_q, "model.safetensors")) == st_read(os.path.join(dq, "model.safetensors"))
         and qcfg.get("model_type") == "qwen2" and qcfg.get("architectures") == ["Qwen2ForCausalLM"]
         and qcfg.get("use_sliding_window") is False and qcfg.get("rope_theta") == 1e6, f"{se}\n{qcfg}")
rc, so, se = tt.outputs([trident, "generate", ck_qwen2, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                         "--temperature", "0"])
tt.check("generate from the Qwen2 checkpoint without --config: exit 0", rc == 0, se)
for what, tensors, config, cause in [
    ("a binding sliding window", qt, dict(QC, use_sliding_window=True), "sliding_window is not supported"),
    ("use_sliding_window 'no'", qt, dict(QC, use_sliding_window="no"), "use_sliding_window must be true or false"),
    ("a missing v_proj bias", [t for t in qt if t[0] != "model.layers.1.self_attn.v_proj.bias"], QC,
     "no tensor 'model.layers.1.self_attn.v_proj.bias'"),
    ("a q_proj bias of the wrong size", [(n, dt, (C + 1,), rand(C + 1)) if n.endswith("0.self_attn.q_proj.bias")
                                         else (n, dt, sh, v) for n, dt, sh, v in qt], QC,
     "'model.layers.0.self_attn.q_proj.bias' is [33]"),
    ("an o_proj bias (Qwen2 has none)", qt + [("model.layers.0.self_attn.o_proj.bias", "F32", (C,), rand(C))], QC,
     "is not part of the Qwen2 model"),
    ("a Llama folder with Qwen2's biases", qt, LC, "(q, k and v biases alone: a Qwen2, model_type qwen2)"),
]:
    d = hf_folder("bad-qwen2", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"Qwen2: {what}", ["--from", "hf", "--input", d, "--output", out], out, cause)
for what, tensors, config, cause in [
    ("rope scaling", lt, dict(LC, rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling"),
    ("attention biases", lt, dict(LC, attention_bias=True), "attention_bias"),
    ("a gelu MLP", lt, dict(LC, hidden_act="gelu"), "hidden_act"),
    ("key/value heads that do not divide the heads", lt, dict(LC, num_key_value_heads=3), "do not divide"),
    ("no num_hidden_layers", lt, {k: v for k, v in LC.items() if k != "num_hidden_layers"},
     "num_hidden_layers is missing"),
    ("a missing k_proj", [t for t in lt if t[0] != "model.layers.1.self_attn.k_proj.weight"], LC,
     "no tensor 'model.layers.1.self_attn.k_proj.weight'"),
    ("a k_proj of the heads' size (config says 2 groups)",
     [(n, dt, (C, C), rand(C * C)) if n.endswith("0.self_attn.k_proj.weight") else (n, dt, sh, v) for n, dt, sh, v in lt],
     LC, "model.layers.0.self_attn.k_proj.weight' is [32, 32]"),
    ("a foreign tensor", lt + [("model.layers.0.mlp.extra.weight", "F32", (2,), [0.0, 1.0])], LC,
     "'model.layers.0.mlp.extra.weight' is not part of the Llama model"),
]:
    d = hf_folder("bad-llama", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"Llama: {what}", ["--from", "hf", "--input", d, "--output", out], out, cause)
refused("an export with --config of a model transformers lacks",
        ["--to", "hf", "--input", ck_llama, "--output", bad_out, "--config", tt.write_config(
            os.path.join(work, "odd.yaml"), model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH,
            num_query_groups=2, seq_length=P, max_position_embeddings=P, vocab_size=V, normalization="RMSNorm",
            position_embedding_type="alibi", swiglu=True, ffn_hidden_size=48,
            untie_embeddings_and_output_weights=True, add_bias_linear=False),
            training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))],
        bad_out, "neither GPT-2, Llama, Qwen2 nor Bloom")

# ---------------------------------------------------------------- Llama and Bloom: bad inputs a fuzzer found
BC = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": C, "n_layer": L, "n_head": NH,
      "vocab_size": V, "seq_length": P, "layer_norm_epsilon": 1e-5}


def bloom_tensors():
    t = [("transformer.word_embeddings.weight", "F32", (V, C), rand(V * C)),
         ("transformer.word_embeddings_layernorm.weight", "F32", (C,), rand(C, 2)),
         ("transformer.word_embeddings_layernorm.bias", "F32", (C,), rand(C))]
    for i in range(L):
        h = f"transformer.h.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)), (h + "input_layernorm.bias", "F32", (C,), rand(C)),
              (h + "self_attention.query_key_value.weight", "F32", (3 * C, C), rand(3 * C * C)),
              (h + "self_attention.query_key_value.bias", "F32", (3 * C,), rand(3 * C)),
              (h + "self_attention.dense.weight", "F32", (C, C), rand(C * C)),
              (h + "self_attention.dense.bias", "F32", (C,), rand(C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "post_attention_layernorm.bias", "F32", (C,), rand(C)),
              (h + "mlp.dense_h_to_4h.weight", "F32", (4 * C, C), rand(4 * C * C)),
              (h + "mlp.dense_h_to_4h.bias", "F32", (4 * C,), rand(4 * C)),
              (h + "mlp.dense_4h_to_h.weight", "F32", (C, 4 * C), rand(4 * C * C)),
              (h + "mlp.dense_4h_to_h.bias", "F32", (C,), rand(C))]
    return t + [("transformer.ln_f.weight", "F32", (C,), rand(C, 2)), ("transformer.ln_f.bias", "F32", (C,), rand(C))]


bt = bloom_tensors()
emb = bt[0][3]
ck_bloom = os.path.join(work, "ck-bloom")
rc, so, se = convert("--from", "hf", "--input", hf_folder("bloom", bt, BC), "--output", ck_bloom)
tt.check("Bloom without lm_head.weight: imported", rc == 0 and "alibi" in so, se)
ck_bloom_head = os.path.join(work, "ck-bloom-head")
rc, so, se = convert("--from", "hf", "--input", hf_folder("bloom-head", bt + [("lm_head.weight", "F32", (V, C), emb)], BC),
                     "--output", ck_bloom_head)
tt.check("Bloom with lm_head.weight equal to the word embedding: imported, the same checkpoint",
         rc == 0 and same_checkpoint(ck_bloom, ck_bloom_head), se)
# the head is tied: one that is not the embedding cannot be represented (it used to be dropped)
head_cases = [
    ("Bloom: an lm_head.weight of other values", bt, BC, ("lm_head.weight", "F32", (V, C), rand(V * C)),
     "lm_head.weight differs from transformer.word_embeddings.weight"),
    ("Bloom: an lm_head.weight one value off", bt, BC,
     ("lm_head.weight", "F32", (V, C), emb[:-1] + [emb[-1] + 1 / 1024]), "lm_head.weight differs"),
    ("Bloom: an lm_head.weight of shape [3]", bt, BC, ("lm_head.weight", "F32", (3,), [0.0, 1.0, 2.0]),
     "lm_head.weight is [3], transformer.word_embeddings.weight [50, 32]"),
    ("Bloom: an lm_head.weight of the transposed shape", bt, BC, ("lm_head.weight", "F32", (C, V), emb),
     "lm_head.weight is [32, 50]"),
    ("Bloom: an integer lm_head.weight", bt, BC, ("lm_head.weight", "I64", (V, C), [0] * (V * C)),
     "'lm_head.weight' is I64"),
]
lt_tied = [t for t in lt if t[0] != "lm_head.weight"]
LC_tied = dict(LC, tie_word_embeddings=True)
ck_lt = os.path.join(work, "ck-llama-tied")
rc, so, se = convert("--from", "hf", "--input", hf_folder("llama-tied", lt_tied, LC_tied), "--output", ck_lt)
tt.check("Llama with tie_word_embeddings, no lm_head.weight: imported", rc == 0, se)
ck_lt2 = os.path.join(work, "ck-llama-tied-head")
rc, so, se = convert("--from", "hf", "--input",
                     hf_folder("llama-tied-head", lt_tied + [("lm_head.weight", "F32", (V, C), lt[0][3])], LC_tied),
                     "--output", ck_lt2)
tt.check("Llama with tie_word_embeddings and lm_head.weight equal to embed_tokens: imported, the same checkpoint",
         rc == 0 and same_checkpoint(ck_lt, ck_lt2), se)
head_cases.append(("Llama tied: an lm_head.weight of other values", lt_tied, LC_tied,
                   ("lm_head.weight", "F32", (V, C), rand(V * C)), "lm_head.weight differs from model.embed_tokens.weight"))
for what, tensors, config, head, cause in head_cases:
    d = hf_folder("bad-head", tensors + [head], config)
    out = os.path.join(work, "bad-out")
    refused(what, ["--from", "hf", "--input", d, "--output", out], out, cause, [os.path.join(d, "model.safetensors")])

# a weight that is not finite (NaN or infinity in the file; an F64 beyond float32) used to be
# imported into a checkpoint that every reader then refused ("holds nan ... corrupt data"): the
# import exited 0 and the export of its checkpoint failed. Now refused naming the tensor.
def with_value(tensors, name, value, dtype=None):
    return [(n, dtype or dt, sh, v[:3] + [value] + v[4:]) if n == name else (n, dt, sh, v)
            for n, dt, sh, v in tensors]


for what, tensors, config, name in [
    ("Llama: a NaN in q_proj", with_value(lt, "model.layers.1.self_attn.q_proj.weight", float("nan")), LC,
     "model.layers.1.self_attn.q_proj.weight"),
    ("Llama: an infinity in gate_proj", with_value(lt, "model.layers.0.mlp.gate_proj.weight", float("inf")), LC,
     "model.layers.0.mlp.gate_proj.weight"),
    ("Bloom: an F64 dense weight beyond float32", with_value(bt, "transformer.h.0.self_attention.dense.weight",
                                                            1e300, "F64"), BC,
     "transformer.h.0.self_attention.dense.weight"),
    ("GPT-2: a NaN in c_attn", with_value(gpt2_tensors(), "transformer.h.0.attn.c_attn.weight", float("nan")),
     None, "transformer.h.0.attn.c_attn.weight"),
]:
    d = hf_folder("bad-value", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"{what} (weights must be finite)", ["--from", "hf", "--input", d, "--output", out], out,
            "weights must be finite", [name, "at element 3"])

# a checkpoint manifest whose family line gives rotary positions a rotary_base of 0 (no
# config allows it: model.rotary_base > 0) was exported as "rope_theta": 0.0 (NaN rotations in
# transformers; trident's own import refuses it); refused as a corrupt manifest
ck_rope0 = os.path.join(work, "ck-llama-rope0")
shutil.rmtree(ck_rope0, ignore_errors=True)
shutil.copytree(ck_llama, ck_rope0)
mpath = os.path.join(ck_rope0, "release", "manifest.txt")
mtext = open(mpath).read()
tt.write(mpath, re.sub(r"rotary_base \S+ ", "rotary_base 0 ", mtext))
refused("a Llama checkpoint whose manifest says rotary_base 0",
        ["--to", "hf", "--input", ck_rope0, "--output", os.path.join(work, "rope0-out")],
        os.path.join(work, "rope0-out"), "rotary_base > 0", [mpath])
# the family line's qkv_bias end: " qkv_bias 1" only, and only without linear biases
qtext = open(os.path.join(ck_qwen2, "release", "manifest.txt")).read()
for what, new in (("qkv_bias 2", qtext.replace(" qkv_bias 1", " qkv_bias 2")),
                  ("qkv_bias 1 with linear_bias 1", qtext.replace("linear_bias 0", "linear_bias 1")),
                  ("qkv_bias 1 and more", qtext.replace(" qkv_bias 1", " qkv_bias 1 x"))):
    ck_bad = os.path.join(work, "ck-qwen2-bad")
    shutil.rmtree(ck_bad, ignore_errors=True)
    shutil.copytree(ck_qwen2, ck_bad)
    mpath = os.path.join(ck_bad, "release", "manifest.txt")
    tt.write(mpath, new)
    refused(f"a Qwen2 checkpoint whose manifest says {what}",
            ["--to", "hf", "--input", ck_bad, "--output", os.path.join(work, "qkv-out")],
            os.path.join(work, "qkv-out"), "qkv_bias 1 only with linear_bias 0", [mpath])
# " sliding_window N": N >= 1, digits only, the line's end
wtext = open(os.path.join(ck_mw, "release", "manifest.txt")).read()
for what in ("sliding_window 0", "sliding_window -4", "sliding_window x", "sliding_window  13",
             "sliding_window 13 9", "sliding_window"):
    ck_bad = os.path.join(work, "ck-window-bad")
    shutil.rmtree(ck_bad, ignore_errors=True)
    shutil.copytree(ck_mw, ck_bad)
    mpath = os.path.join(ck_bad, "release", "manifest.txt")
    tt.write(mpath, wtext.replace(f" sliding_window {W}", " " + what))
    refused(f"a Mistral checkpoint whose manifest says {what!r}",
            ["--to", "hf", "--input", ck_bad, "--output", os.path.join(work, "window-out")],
            os.path.join(work, "window-out"), "then sliding_window N >= 1", [mpath])

# a config.json of a far larger model than its weights is refused before anything is allocated
# (4,194,304 layers of a 150-byte config used to cost 7.7 GB and 47 s; 2^26 layers 109 GB)
big = [("Llama of 4194304 layers", lt, dict(LC, num_hidden_layers=1 << 22)),
       ("Llama of 2^26 layers and hidden size 2^26", lt,
        dict(LC, num_hidden_layers=1 << 26, hidden_size=1 << 26, num_attention_heads=1, num_key_value_heads=1,
             intermediate_size=1 << 26, vocab_size=1 << 26)),
       ("Llama of 2^26 vocabulary", lt, dict(LC, vocab_size=1 << 26)),
       ("Bloom of 4194304 layers", bt, dict(BC, n_layer=1 << 22)),
       ("Bloom of hidden size 2^20", bt, dict(BC, hidden_size=1 << 20))]
for what, tensors, config in big:
    d = hf_folder("bad-big", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"config.json of a {what} with small weights", ["--from", "hf", "--input", d, "--output", out], out,
            "config.json describes a", [os.path.join(d, "config.json"), "safetensors weights hold"])
# the check counts every shard of an index: a sharded export imports again
shards = os.path.join(work, "llama-shards")
rc, so, se = convert("--to", "hf", "--input", ck_llama, "--output", shards, "--config", lcfg, "--max-shard-size", "8KB")
n_shards = len([f for f in os.listdir(shards) if f.startswith("model-")]) if rc == 0 else 0
ck_shards = os.path.join(work, "ck-llama-shards")
rc2, so2, se2 = convert("--from", "hf", "--input", shards, "--output", ck_shards) if rc == 0 else (1, "", "")
tt.check("Llama in shards: imported, the same checkpoint", rc2 == 0 and n_shards > 2 and same_checkpoint(ck_llama, ck_shards),
         f"exit {rc}/{rc2} ({n_shards} shards): {se}{se2}")
tt.write(os.path.join(shards, "config.json"), json.dumps(dict(LC, num_hidden_layers=64)))
refused("config.json of 64 layers beside the shards of 2", ["--from", "hf", "--input", shards, "--output", bad_out], bad_out,
        "config.json describes a Llama model", [os.path.join(shards, "config.json")])

# float fields are float32 in trident: a value float32 makes infinite (or 0) is refused by name
for what, tensors, config, key in [
        ("rms_norm_eps 1e39", lt, dict(LC, rms_norm_eps=1e39), "rms_norm_eps"),
        ("rms_norm_eps 3.5e38 (past FLT_MAX)", lt, dict(LC, rms_norm_eps=3.5e38), "rms_norm_eps"),
        ("rms_norm_eps 1e-50 (0 as float32)", lt, dict(LC, rms_norm_eps=1e-50), "rms_norm_eps"),
        ("rope_theta 1e300", lt, dict(LC, rope_theta=1e300), "rope_theta"),
        ("rope_theta a string", lt, dict(LC, rope_theta="1e4"), "rope_theta"),
        ("Bloom layer_norm_epsilon 1e39", bt, dict(BC, layer_norm_epsilon=1e39), "layer_norm_epsilon"),
        ("Bloom layer_norm_epsilon -1e-5", bt, dict(BC, layer_norm_epsilon=-1e-5), "layer_norm_epsilon"),
        ("GPT-2 layer_norm_epsilon 1e39", base, dict(CONFIG, layer_norm_epsilon=1e39), "layer_norm_epsilon")]:
    d = hf_folder("bad-float", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"config.json: {what}", ["--from", "hf", "--input", d, "--output", out], out, key,
            [os.path.join(d, "config.json")])
d = hf_folder("bad-float", lt, LC)
tt.write(os.path.join(d, "config.json"), json.dumps(dict(LC, rope_theta=float("inf"))))  # "Infinity": not JSON
refused("config.json: rope_theta Infinity", ["--from", "hf", "--input", d, "--output", bad_out], bad_out, "config.json:1:")
rc, so, se = convert("--from", "hf", "--input", hf_folder("llama-float-max", lt, dict(LC, rope_theta=3.0e38)),
                     "--output", os.path.join(work, "ck-llama-float-max"))
tt.check("rope_theta 3e38 (below FLT_MAX) is still imported", rc == 0, se)

# a conversion sizes nothing by max_position_embeddings where no parameter depends on it: the rope
# tables of 2^26 positions cost 2 GiB on the host plus 2 GiB of kernel copies (they were made for
# max_position_embeddings positions; a conversion runs no forward)
PEAK = "import resource, subprocess, sys\n" \
       "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n" \
       "sys.stderr.write(p.stderr)\n" \
       "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"


def peak_rss(*args):
    """(exit status, peak RSS in MB, stderr) of `trident convert ARGS` alone in a fresh process
    (ru_maxrss of RUSAGE_CHILDREN is the largest of all children ever waited for)."""
    p = tt.run([sys.executable, "-c", PEAK, trident, "convert", *args], timeout=300)
    words = p.stdout.split()
    return (int(words[0]), int(words[1]) / 1024, p.stderr) if len(words) == 2 else (-1, 0, p.stderr)


long_ctx = hf_folder("llama-2p26-positions", lt, dict(LC, max_position_embeddings=1 << 26))
ck_long = os.path.join(work, "ck-llama-2p26-positions")
rc, mb, se = peak_rss("--from", "hf", "--input", long_ctx, "--output", ck_long)
tt.check(f"Llama with max_position_embeddings 2^26: imported in {mb:.0f} MB peak RSS (< 400)",
         rc == 0 and 0 < mb < 400, f"exit {rc}, {mb:.0f} MB: {se}")
back_long = os.path.join(work, "llama-2p26-positions-back")
rc, mb, se = peak_rss("--to", "hf", "--input", ck_long, "--output", back_long) if rc == 0 else (1, 0, "")
ok = rc == 0 and 0 < mb < 400 and \
    json.load(open(os.path.join(back_long, "config.json")))["max_position_embeddings"] == 1 << 26 and \
    st_read(os.path.join(back_long, "model.safetensors")) == st_read(os.path.join(long_ctx, "model.safetensors"))
tt.check(f"... and exported back in {mb:.0f} MB peak RSS, max_position_embeddings and the weights kept", ok,
         f"exit {rc}, {mb:.0f} MB: {se}")
tt.finish("convert-families-cli: all checks passed")
