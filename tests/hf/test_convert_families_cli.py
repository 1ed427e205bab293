#!/usr/bin/python3
"""`trident convert` of Llama, Bloom and GPT-NeoX folders end to end without PyTorch (it runs in the
sanitizer build too; the folders are written by hf_files.py):
  - a Llama (grouped K/V heads, untied head) HF -> trident -> HF bit for bit, with --config
    and from the manifest's family line alone; rms_norm_eps kept; generate from it; the same
    folder as a Mistral (sliding_window null or spanning the positions) the same checkpoint, one
    whose window is shorter kept as model.sliding_window (round trip, generate and seq_length
    within it), a window that is not a positive integer refused; a Qwen2 (the Llama with q, k and v biases) HF -> trident
    -> HF bit for bit from the manifest alone, its window switch read, its bad inputs refused;
  - every Llama config and tensor trident does not take refused with exit 2 naming the cause;
  - Bloom with and without lm_head.weight; the bad inputs a fuzzer found in both families;
  - a Llama config of max_position_embeddings 2^26 imports and exports in little memory (peak RSS);
  - GPT-NeoX (Pythia's parallel residual and exact GELU, with the buffers older files carry; and
    the sequential residual, a tanh GELU, tied) HF -> trident -> HF bit for bit from the manifest
    alone, the switches printed and in the family line, generate of both, every hidden_act
    read, the settings trident lacks and foreign or missing tensors refused, corrupt family
    line ends refused; configs/pythia-410m.yaml and pythia-1.4b.yaml: the release's parameter
    count in trident plan.
usage: test_convert_families_cli.py TRIDENT WORKDIR"""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import (C, CONFIG, L, NH, P, V, Session, gpt2_tensors, plan_count_check, rand,  # noqa: E402
                      same_checkpoint, st_read)
from hf_files import llama_tensors as hf_llama_tensors  # noqa: E402

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
    return hf_llama_tensors(C, L, NH, 2, 48, V)


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
    ("dynamic rope scaling", lt, dict(LC, rope_scaling={"type": "dynamic", "factor": 2.0}),
     "rope_scaling of type 'dynamic'"),
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
        bad_out, "neither GPT-2, Llama, Qwen2, Bloom, GPT-NeoX, Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT nor OPT")

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
            "config.json describes a", [os.path.join(d, "config.json"), "its weights hold"])
# the check counts every shard of an index: a sharded export imports again
shards = session.shards_check("Llama in shards: imported, the same checkpoint", ck_llama, "llama", "8KB",
                              "--config", lcfg)
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

# ---------------------------------------------------------------- GPT-NeoX (Pythia) folders
NF = 48
NC = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": C, "intermediate_size": NF,
      "num_hidden_layers": L, "num_attention_heads": NH, "max_position_embeddings": P, "vocab_size": V,
      "rotary_pct": 0.25, "rotary_emb_base": 10000, "layer_norm_eps": 1e-5, "use_parallel_residual": True,
      "hidden_act": "gelu", "tie_word_embeddings": False, "attention_bias": True, "rope_scaling": None}


def neox_tensors(head=True, buffers=False):
    """A GPTNeoXForCausalLM's tensors; buffers: the causal mask (BOOL), masked_bias and inv_freq
    each layer of an older checkpoint (Pythia's) carries."""
    t = [("gpt_neox.embed_in.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"gpt_neox.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)), (h + "input_layernorm.bias", "F32", (C,), rand(C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "post_attention_layernorm.bias", "F32", (C,), rand(C)),
              (h + "attention.query_key_value.weight", "F32", (3 * C, C), rand(3 * C * C)),
              (h + "attention.query_key_value.bias", "F32", (3 * C,), rand(3 * C)),
              (h + "attention.dense.weight", "F32", (C, C), rand(C * C)),
              (h + "attention.dense.bias", "F32", (C,), rand(C)),
              (h + "mlp.dense_h_to_4h.weight", "F32", (NF, C), rand(NF * C)),
              (h + "mlp.dense_h_to_4h.bias", "F32", (NF,), rand(NF)),
              (h + "mlp.dense_4h_to_h.weight", "F32", (C, NF), rand(NF * C)),
              (h + "mlp.dense_4h_to_h.bias", "F32", (C,), rand(C))]
        if buffers:
            t += [(h + "attention.bias", "BOOL", (1, 1, P, P), [r >= c for r in range(P) for c in range(P)]),
                  (h + "attention.masked_bias", "F32", (), [-1e9]),
                  (h + "attention.rotary_emb.inv_freq", "F32", (1,), [1.0])]
    t += [("gpt_neox.final_layer_norm.weight", "F32", (C,), rand(C, 2)),
          ("gpt_neox.final_layer_norm.bias", "F32", (C,), rand(C))]
    return t + ([("embed_out.weight", "F32", (V, C), rand(V * C))] if head else [])


def params_only(path):
    return {k: v for k, v in st_read(path).items()
            if not k.endswith((".attention.bias", ".masked_bias", ".inv_freq"))}


nt = neox_tensors(buffers=True)
dn = hf_folder("neox", nt, NC)
ck_neox = os.path.join(work, "ck-neox")
rc, so, se = convert("--from", "hf", "--input", dn, "--output", ck_neox)
tt.check("GPT-NeoX (Pythia's: parallel residual, exact GELU, rotary_pct 0.25, untied, the buffers of older files): "
         "imported, its switches printed",
         rc == 0 and all(k in so for k in ("normalization: LayerNorm", "position_embedding_type: rope",
                                          "rotary_percent: 0.25", "parallel_residual: true",
                                          "gelu_approximate: none", f"ffn_hidden_size: {NF}",
                                          "untie_embeddings_and_output_weights: true", "add_bias_linear: true")),
         se + so)
manifest = open(os.path.join(ck_neox, "release", "manifest.txt")).read() if rc == 0 else ""
fam = [line for line in manifest.splitlines() if line.startswith("family ")]
tt.check("GPT-NeoX: the manifest's family line: rotary_dims 2, ends with parallel_residual 1 gelu_exact 1",
         len(fam) == 1 and " rotary_dims 2 " in fam[0] and fam[0].endswith(" parallel_residual 1 gelu_exact 1"),
         manifest[:600])
ncfg = tt.write_config(os.path.join(work, "neox.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
               vocab_size=V, normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.25,
               ffn_hidden_size=NF, untie_embeddings_and_output_weights=True, parallel_residual=True,
               gelu_approximate="none"),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
back_n = os.path.join(work, "neox-back")
rc, so, se = convert("--to", "hf", "--input", ck_neox, "--output", back_n)
ncfg_out = json.load(open(os.path.join(back_n, "config.json"))) if rc == 0 else {}
want = {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "use_parallel_residual": True,
        "hidden_act": "gelu", "rotary_pct": 0.25, "rotary_emb_base": 10000, "tie_word_embeddings": False,
        "intermediate_size": NF, "layer_norm_eps": 1e-5, "attention_bias": True, "rope_scaling": None}
tt.check("GPT-NeoX: HF -> trident -> HF from the manifest alone is bit-exact (the buffers left out), "
         "a GPTNeoXForCausalLM of the same switches",
         rc == 0 and st_read(os.path.join(back_n, "model.safetensors")) == params_only(os.path.join(dn, "model.safetensors"))
         and all(ncfg_out.get(k) == v for k, v in want.items()),
         f"{se}\n{ {k: ncfg_out.get(k) for k in want} }")
back_n2 = os.path.join(work, "neox-back-config")
rc, so, se = convert("--to", "hf", "--input", ck_neox, "--output", back_n2, "--config", ncfg)
tt.check("GPT-NeoX: the export with --config gives the same files",
         rc == 0 and all(open(os.path.join(back_n, f), "rb").read() == open(os.path.join(back_n2, f), "rb").read()
                         for f in ("model.safetensors", "config.json")), se)
for what, where in (("the checkpoint without --config", ck_neox), ("the HF folder", dn)):
    rc, so, se = tt.outputs([trident, "generate", where, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                             "--temperature", "0"])
    tt.check(f"generate from {what} (GPT-NeoX): exit 0", rc == 0, se)
# in shards (model.safetensors.index.json) and in BF16: imported again, the same checkpoint / bf16's values
session.shards_check("GPT-NeoX in shards: imported, the same checkpoint", ck_neox, "neox", "8KB")
session.bf16_check("GPT-NeoX in BF16: exported, imported and exported again bit for bit, torch_dtype bfloat16",
                   ck_neox, "neox")
# the sequential residual, a tanh GELU and a tied head (no embed_out.weight; or one equal to embed_in)
NC2 = dict(NC, use_parallel_residual=False, hidden_act="gelu_new", tie_word_embeddings=True, rotary_pct=0.5)
nt2 = neox_tensors(head=False)
dn2 = hf_folder("neox-seq", nt2, NC2)
ck_neox2 = os.path.join(work, "ck-neox-seq")
rc, so, se = convert("--from", "hf", "--input", dn2, "--output", ck_neox2)
manifest = open(os.path.join(ck_neox2, "release", "manifest.txt")).read() if rc == 0 else ""
fam = [line for line in manifest.splitlines() if line.startswith("family ")]
tt.check("GPT-NeoX (sequential residual, gelu_new, tied, rotary_pct 0.5): imported, neither switch printed "
         "nor in the manifest, rotary_dims 4",
         rc == 0 and "parallel_residual" not in so and "gelu_approximate" not in so and "rotary_percent: 0.5" in so
         and "untie_embeddings_and_output_weights: false" in so and len(fam) == 1 and " rotary_dims 4 " in fam[0]
         and fam[0].endswith(" eps 1e-05"), se + so + manifest[:600])
back_n3 = os.path.join(work, "neox-seq-back")
rc, so, se = convert("--to", "hf", "--input", ck_neox2, "--output", back_n3)
c3 = json.load(open(os.path.join(back_n3, "config.json"))) if rc == 0 else {}
tt.check("GPT-NeoX sequential, tied: HF -> trident -> HF from the manifest alone is bit-exact (no embed_out), "
         "use_parallel_residual false, hidden_act gelu_pytorch_tanh, tie_word_embeddings true",
         rc == 0 and st_read(os.path.join(back_n3, "model.safetensors")) == st_read(os.path.join(dn2, "model.safetensors"))
         and c3.get("use_parallel_residual") is False and c3.get("hidden_act") == "gelu_pytorch_tanh"
         and c3.get("tie_word_embeddings") is True and c3.get("rotary_pct") == 0.5, f"{se}\n{c3}")
for act in ("gelu_pytorch_tanh", "gelu_fast", "gelu_accurate"):
    ck_a = os.path.join(work, "ck-neox-act-" + act)
    rc, so, se = convert("--from", "hf", "--input", hf_folder("neox-act", nt2, dict(NC2, hidden_act=act)),
                         "--output", ck_a)
    tt.check(f"GPT-NeoX with hidden_act {act} (the tanh formula): the gelu_new import's checkpoint",
             rc == 0 and same_checkpoint(ck_neox2, ck_a), se)
ck_a = os.path.join(work, "ck-neox-gelu-python")
rc, so, se = convert("--from", "hf", "--input", hf_folder("neox-act", nt2, dict(NC2, hidden_act="gelu_python")),
                     "--output", ck_a)
tt.check("GPT-NeoX with hidden_act gelu_python: the exact GELU", rc == 0 and "gelu_approximate: none" in so, se)
ck_n2h = os.path.join(work, "ck-neox-seq-head")
rc, so, se = convert("--from", "hf", "--input",
                     hf_folder("neox-seq-head", nt2 + [("embed_out.weight", "F32", (V, C), nt2[0][3])], NC2),
                     "--output", ck_n2h)
tt.check("GPT-NeoX tied with embed_out.weight equal to embed_in: imported, the same checkpoint",
         rc == 0 and same_checkpoint(ck_neox2, ck_n2h), se)
# what trident cannot represent, and files that are not the model config.json describes
nt_plain = neox_tensors()
for what, tensors, config, cause in [
    ("rope scaling", nt_plain, dict(NC, rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling"),
    ("hidden_act relu", nt_plain, dict(NC, hidden_act="relu"), "hidden_act is not supported"),
    ("hidden_act quick_gelu", nt_plain, dict(NC, hidden_act="quick_gelu"), "hidden_act is not supported"),
    ("hidden_act 7", nt_plain, dict(NC, hidden_act=7), "hidden_act is not supported"),
    ("rotary_pct 0.375 (3 rotated dimensions of 8: odd)", nt_plain, dict(NC, rotary_pct=0.375),
     "rotary_pct 0.375 of the head size 8 rotates 3"),
    ("rotary_pct 0.1 (0 rotated dimensions)", nt_plain, dict(NC, rotary_pct=0.1), "rotates 0"),
    ("rotary_pct 1.5", nt_plain, dict(NC, rotary_pct=1.5), "rotary_pct must be in (0, 1]"),
    ("rotary_pct 0", nt_plain, dict(NC, rotary_pct=0), "rotary_pct must be a positive number"),
    ("rotary_pct a string", nt_plain, dict(NC, rotary_pct="0.25"), "rotary_pct must be a positive number"),
    ("rotary_emb_base 0", nt_plain, dict(NC, rotary_emb_base=0), "rotary_emb_base must be a positive number"),
    ("attention_bias false", nt_plain, dict(NC, attention_bias=False), "attention_bias is not supported"),
    ("use_parallel_residual 'yes'", nt_plain, dict(NC, use_parallel_residual="yes"),
     "use_parallel_residual must be true or false"),
    ("tie_word_embeddings 1", nt_plain, dict(NC, tie_word_embeddings=1), "tie_word_embeddings must be true or false"),
    ("heads that do not divide the hidden size", nt_plain, dict(NC, num_attention_heads=5), "do not divide"),
    ("no intermediate_size", nt_plain, {k: v for k, v in NC.items() if k != "intermediate_size"},
     "intermediate_size is missing"),
    ("an unknown tensor", nt_plain + [("gpt_neox.layers.0.attention.extra", "F32", (2,), [0.0, 1.0])], NC,
     "'gpt_neox.layers.0.attention.extra' is not part of the GPT-NeoX model"),
    ("a mask buffer outside a layer", nt_plain + [("gpt_neox.attention.bias", "BOOL", (2,), [1, 1])], NC,
     "'gpt_neox.attention.bias' is not part of the GPT-NeoX model"),
    ("an lm_head.weight (GPT-NeoX's head is embed_out)", nt_plain + [("lm_head.weight", "F32", (V, C), rand(V * C))],
     NC, "'lm_head.weight' is not part of the GPT-NeoX model"),
    ("a missing dense bias", [t for t in nt_plain if t[0] != "gpt_neox.layers.1.attention.dense.bias"], NC,
     "no tensor 'gpt_neox.layers.1.attention.dense.bias'"),
    ("no embed_out.weight (untied)", [t for t in nt_plain if t[0] != "embed_out.weight"], NC,
     "no tensor 'embed_out.weight'"),
    ("a dense_h_to_4h of 4h rows (config says 48)",
     [(n, dt, (4 * C, C), rand(4 * C * C)) if n.endswith("0.mlp.dense_h_to_4h.weight") else (n, dt, sh, v)
      for n, dt, sh, v in nt_plain], NC, "'gpt_neox.layers.0.mlp.dense_h_to_4h.weight' is [128, 32]"),
    ("a tied embed_out.weight of other values", nt2 + [("embed_out.weight", "F32", (V, C), rand(V * C))], NC2,
     "embed_out.weight differs from gpt_neox.embed_in.weight"),
    ("a tied embed_out.weight of shape [3]", nt2 + [("embed_out.weight", "F32", (3,), [0.0, 1.0, 2.0])], NC2,
     "embed_out.weight is [3], gpt_neox.embed_in.weight [50, 32]"),
    ("config.json of 4194304 layers", nt_plain, dict(NC, num_hidden_layers=1 << 22),
     "config.json describes a GPT-NeoX model"),
]:
    d = hf_folder("bad-neox", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"GPT-NeoX: {what}", ["--from", "hf", "--input", d, "--output", out], out, cause)
# transformers has no model of these switches: the export refuses them rather than write a
# folder of another model (a Llama's or Bloom's sequential residual, Bloom's tanh GELU,
# GPT-NeoX's two norms)
base_keys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
                 vocab_size=V)
for what, ck_in, keys in (
        ("the Llama with parallel_residual", ck_llama,
         dict(num_query_groups=2, normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
              ffn_hidden_size=48, untie_embeddings_and_output_weights=True, add_bias_linear=False,
              layernorm_epsilon=1e-6, parallel_residual=True)),
        ("the Bloom with gelu_approximate none", ck_bloom,
         dict(position_embedding_type="alibi", embedding_layernorm=True, gelu_approximate="none")),
        ("the Bloom with parallel_residual", ck_bloom,
         dict(position_embedding_type="alibi", embedding_layernorm=True, parallel_residual=True)),
        ("the GPT-NeoX with parallel_shared_norm (one norm: Falcon's, GPT-J's)", ck_neox,
         dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.25, ffn_hidden_size=NF,
              untie_embeddings_and_output_weights=True, parallel_residual=True, parallel_shared_norm=True,
              gelu_approximate="none"))):
    odd = tt.write_config(os.path.join(work, "odd-switches.yaml"), model=dict(base_keys, **keys),
                          training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
    refused(f"an export with --config of {what}", ["--to", "hf", "--input", ck_in, "--output", bad_out,
                                                     "--config", odd],
            bad_out, "neither GPT-2, Llama, Qwen2, Bloom, GPT-NeoX, Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT nor OPT")
# the family line's GPT-NeoX end: " parallel_residual 1" then " gelu_exact 1", each once
session.manifest_refused("GPT-NeoX", ck_neox, (
    ("gelu_exact 2", " gelu_exact 1", " gelu_exact 2"),
    ("parallel_residual 1 parallel_residual 1", " parallel_residual 1",
     " parallel_residual 1 parallel_residual 1"),
    ("gelu_exact 1 parallel_residual 1 (the wrong order)", " parallel_residual 1 gelu_exact 1",
     " gelu_exact 1 parallel_residual 1"),
    ("parallel_residual 0", " parallel_residual 1", " parallel_residual 0"),
    ("gelu_exact 1 and more", " gelu_exact 1", " gelu_exact 1 x")),
    "parallel_residual 1, gelu_exact 1")
# the released config.json files of Pythia-410M and -1.4B (transformers 4.24's keys; GPT-NeoX-20B's
# of head size 96 and gelu_fast) describe
# the release's parameters: with weights of a tiny model, the import's size check names the count
PYTHIA = {"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
          "initializer_range": 0.02, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
          "model_type": "gpt_neox", "num_attention_heads": 16, "num_hidden_layers": 24, "rotary_emb_base": 10000,
          "rotary_pct": 0.25, "tie_word_embeddings": False, "torch_dtype": "float16",
          "transformers_version": "4.24.0", "use_cache": True, "use_parallel_residual": True, "vocab_size": 50304}
for what, size, release in (("Pythia-410M", dict(hidden_size=1024, intermediate_size=4096), 405334016),
                            ("Pythia-1.4B", dict(hidden_size=2048, intermediate_size=8192), 1414647808),
                            ("GPT-NeoX-20B", dict(hidden_size=6144, intermediate_size=24576, num_hidden_layers=44,
                                                  num_attention_heads=64, vocab_size=50432, hidden_act="gelu_fast",
                                                  bos_token_id=0, eos_token_id=0), 20554567680)):
    d = hf_folder("pythia-config", nt_plain, dict(PYTHIA, **size))
    refused(f"{what}'s config.json beside a tiny model's weights (its size: the release's {release:,} "
            f"parameters)", ["--from", "hf", "--input", d, "--output", bad_out], bad_out,
            f"describes a GPT-NeoX model of {release} parameters")
# the shipped Pythia configs: the planner's parameter count is the release's
for cfg_name, release in (("pythia-410m.yaml", 405_334_016), ("pythia-1.4b.yaml", 1_414_647_808)):
    plan_count_check(trident, cfg_name, release)
# ---------------------------------------------------------------- Falcon folders
# FalconForCausalLM's three layers: new_decoder_architecture (Falcon-40B, -180B: ln_attn and
# ln_mlp, num_kv_heads groups), parallel_attn (Falcon-7B: one input_layernorm for both branches,
# parallel_shared_norm) and the sequential one (input_layernorm, post_attention_layernorm); the
# latter two with one key/value head (multi_query) or one per head. query_key_value is trident's
# qkv rows in all three.
FC = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": C, "num_hidden_layers": L,
      "num_attention_heads": NH, "num_kv_heads": 2, "new_decoder_architecture": True, "multi_query": True,
      "parallel_attn": True, "bias": False, "alibi": False, "max_position_embeddings": P, "vocab_size": V,
      "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0, "rope_scaling": None}


def falcon_tensors(arch, nh=NH, ng=2, bias=False, head=False, c=C):
    """A FalconForCausalLM's tensors: arch "new" (ln_attn, ln_mlp), "shared" (input_layernorm
    alone), "seq" (input_layernorm, post_attention_layernorm); ng key/value heads."""
    hs = c // nh
    qkv = (nh + 2 * ng) * hs
    t = [("transformer.word_embeddings.weight", "F32", (V, c), rand(V * c))]
    norms = {"new": ("ln_attn", "ln_mlp"), "shared": ("input_layernorm",),
             "seq": ("input_layernorm", "post_attention_layernorm")}[arch]
    for i in range(L):
        h = f"transformer.h.{i}."
        for n in norms:
            t += [(h + n + ".weight", "F32", (c,), rand(c, 2)), (h + n + ".bias", "F32", (c,), rand(c))]
        for name, rows, cols in (("self_attention.query_key_value", qkv, c), ("self_attention.dense", c, c),
                                 ("mlp.dense_h_to_4h", 4 * c, c), ("mlp.dense_4h_to_h", c, 4 * c)):
            t.append((h + name + ".weight", "F32", (rows, cols), rand(rows * cols)))
            if bias:
                t.append((h + name + ".bias", "F32", (rows,), rand(rows)))
    t += [("transformer.ln_f.weight", "F32", (c,), rand(c, 2)), ("transformer.ln_f.bias", "F32", (c,), rand(c))]
    return t + ([("lm_head.weight", "F32", (V, c), rand(V * c))] if head else [])


def family_line(ck):
    text = open(os.path.join(ck, "release", "manifest.txt")).read()
    return ([line for line in text.splitlines() if line.startswith("family ")] or [""])[0]


# Falcon-7B's shape has 71 heads: an odd head count here (3 heads of 8 in a hidden size of 24)
FC7 = dict(FC, hidden_size=24, num_attention_heads=3, new_decoder_architecture=False, num_kv_heads=3)
FCS = dict(FC, new_decoder_architecture=False, parallel_attn=False, bias=True, tie_word_embeddings=False,
           num_kv_heads=NH)
falcon_cases = [  # name, tensors, config, switches printed, config.json written back
    ("new_decoder_architecture, 2 key/value groups of 4 heads, no biases, tied", falcon_tensors("new"), FC,
     ["num_query_groups: 2", "parallel_residual: true", "add_bias_linear: false", "gelu_approximate: none",
      "untie_embeddings_and_output_weights: false", f"ffn_hidden_size: {4 * C}"], ["parallel_shared_norm"],
     " parallel_residual 1 gelu_exact 1",
     dict(new_decoder_architecture=True, num_kv_heads=2, bias=False, tie_word_embeddings=True, parallel_attn=True)),
    ("Falcon-7B's layer (parallel_attn, one input_layernorm, multi_query), 3 heads, no biases, tied",
     falcon_tensors("shared", nh=3, ng=1, c=24), FC7,
     ["num_query_groups: 1", "parallel_residual: true", "parallel_shared_norm: true", "add_bias_linear: false"],
     [], " parallel_residual 1 gelu_exact 1 parallel_shared_norm 1",
     dict(new_decoder_architecture=False, multi_query=True, parallel_attn=True, num_kv_heads=1)),
    ("parallel_attn without multi_query (one key/value head per head), no biases", falcon_tensors("shared", ng=NH),
     dict(FC, new_decoder_architecture=False, multi_query=False, num_kv_heads=NH),
     ["num_query_groups: 4", "parallel_shared_norm: true"], [], " parallel_shared_norm 1",
     dict(new_decoder_architecture=False, multi_query=False, parallel_attn=True, num_kv_heads=NH)),
    ("the sequential layer (parallel_attn false), multi_query, biases, untied",
     falcon_tensors("seq", ng=1, bias=True, head=True), FCS,
     ["num_query_groups: 1", "add_bias_linear: true", "untie_embeddings_and_output_weights: true",
      "gelu_approximate: none"], ["parallel_residual", "parallel_shared_norm"], " eps 1e-05 gelu_exact 1",
     dict(new_decoder_architecture=False, multi_query=True, parallel_attn=False, bias=True, tie_word_embeddings=False)),
    ("the sequential layer without multi_query and biases", falcon_tensors("seq", ng=NH),
     dict(FCS, multi_query=False, bias=False, tie_word_embeddings=True),
     ["num_query_groups: 4", "add_bias_linear: false"], ["parallel_residual"], " gelu_exact 1",
     dict(new_decoder_architecture=False, multi_query=False, parallel_attn=False, num_kv_heads=NH)),
]
ck_falcon = {}
for i, (what, tensors, config, printed, absent, line_end, written) in enumerate(falcon_cases):
    d = hf_folder(f"falcon-{i}", tensors, config)
    ck = os.path.join(work, f"ck-falcon-{i}")
    ck_falcon[i] = ck
    rc, so, se = convert("--from", "hf", "--input", d, "--output", ck)
    fam = family_line(ck) if rc == 0 else ""
    tt.check(f"Falcon ({what}): imported, the switches printed and in the manifest's family line",
             rc == 0 and all(p in so for p in printed) and not any(a + ":" in so for a in absent)
             and fam.endswith(line_end) and "rotary_percent" not in so, f"{se}{so}\n{fam}")
    back_f = os.path.join(work, f"falcon-{i}-back")
    rc, so, se = convert("--to", "hf", "--input", ck, "--output", back_f)
    fc_out = json.load(open(os.path.join(back_f, "config.json"))) if rc == 0 else {}
    want = dict(written, architectures=["FalconForCausalLM"], model_type="falcon", alibi=False,
                hidden_size=config["hidden_size"], num_attention_heads=config["num_attention_heads"],
                layer_norm_epsilon=1e-5, rope_theta=10000.0)
    tt.check(f"Falcon ({what}): HF -> trident -> HF from the manifest alone is bit-exact, a FalconForCausalLM of "
             f"the same architecture", rc == 0 and st_read(os.path.join(back_f, "model.safetensors")) ==
             st_read(os.path.join(d, "model.safetensors")) and all(fc_out.get(k) == v for k, v in want.items()),
             f"{se}\n{ {k: fc_out.get(k) for k in want} }")
    for where in (ck, d):
        rc, so, se = tt.outputs([trident, "generate", where, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                                 "--temperature", "0"])
        tt.check(f"Falcon ({what}): generate from {'the checkpoint' if where == ck else 'the HF folder'}: exit 0",
                 rc == 0, se)
# in shards (model.safetensors.index.json) and in BF16 (Falcon-7B's layer): imported again, the
# same checkpoint / bf16's values bit for bit
session.shards_check("Falcon-7B's layer in shards: imported, the same checkpoint", ck_falcon[1], "falcon", "4KB")
session.bf16_check("Falcon-7B's layer in BF16: exported, imported and exported again bit for bit, torch_dtype "
                   "bfloat16", ck_falcon[1], "falcon")
# Falcon-7B's released config.json keys (FalconConfig's defaults left out: multi_query, parallel_attn,
# bias; transformers 4.27's apply_residual_connection_post_layernorm false, bos/eos 11), n_embed
# for hidden_size: the same checkpoint as the explicit one
FC7_release = {k: v for k, v in FC7.items() if k not in ("multi_query", "parallel_attn", "bias", "num_kv_heads",
                                                          "new_decoder_architecture", "hidden_size")}
FC7_release.update(n_embed=24, apply_residual_connection_post_layernorm=False, bos_token_id=11, eos_token_id=11,
                   hidden_dropout=0.0, attention_dropout=0.0, torch_dtype="bfloat16",
                   transformers_version="4.27.4", use_cache=True)
ck7 = os.path.join(work, "ck-falcon-7b-defaults")
rc, so, se = convert("--from", "hf", "--input", hf_folder("falcon-7b-defaults", falcon_cases[1][1], FC7_release),
                     "--output", ck7)
tt.check("Falcon-7B's config.json keys (defaults absent, n_embed): the same checkpoint",
         rc == 0 and same_checkpoint(ck_falcon[1], ck7), se)
# a tied lm_head.weight equal to the word embedding is the same model
ft = falcon_cases[0][1]
ck_fh = os.path.join(work, "ck-falcon-head")
rc, so, se = convert("--from", "hf", "--input", hf_folder("falcon-head", ft + [("lm_head.weight", "F32", (V, C),
                                                                               ft[0][3])], FC), "--output", ck_fh)
tt.check("Falcon tied with lm_head.weight equal to word_embeddings: imported, the same checkpoint",
         rc == 0 and same_checkpoint(ck_falcon[0], ck_fh), se)
# new_decoder_architecture with biases and a key/value head per head is GPT-NeoX's model too (rope
# over whole heads, two norms, the parallel residual, the exact GELU): GPT-NeoX keeps exporting it
fnb = falcon_tensors("new", ng=NH, bias=True, head=True)
dfn = hf_folder("falcon-new-bias", fnb, dict(FC, num_kv_heads=NH, bias=True, tie_word_embeddings=False))
ck_fn = os.path.join(work, "ck-falcon-new-bias")
rc, so, se = convert("--from", "hf", "--input", dfn, "--output", ck_fn)
back_fn = os.path.join(work, "falcon-new-bias-back")
rc2, so2, se2 = convert("--to", "hf", "--input", ck_fn, "--output", back_fn) if rc == 0 else (1, "", "")
cn = json.load(open(os.path.join(back_fn, "config.json"))) if rc2 == 0 else {}
tt.check("Falcon new_decoder_architecture with biases and 4 of 4 key/value heads: imported; exported as the "
         "same model in GPT-NeoX's form (rotary_pct 1, use_parallel_residual, gelu)",
         rc2 == 0 and cn.get("model_type") == "gpt_neox" and cn.get("rotary_pct") == 1.0
         and cn.get("use_parallel_residual") is True and cn.get("hidden_act") == "gelu", f"{se}{se2}\n{cn}")
# what trident cannot represent, and files that are not the model config.json describes
f7 = falcon_cases[1][1]
fs = falcon_cases[3][1]
for what, tensors, config, cause in [
    ("alibi true", ft, dict(FC, alibi=True), "alibi true is not supported"),
    ("alibi 'no'", ft, dict(FC, alibi="no"), "alibi must be true or false"),
    ("rope scaling", ft, dict(FC, rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling is not supported"),
    ("model_type RefinedWebModel (trust_remote_code's Falcon)", ft, dict(FC, model_type="RefinedWebModel"),
     "model_type \"RefinedWebModel\" is not supported: it is the Falcon of trust_remote_code"),
    ("model_type RefinedWeb", ft, dict(FC, model_type="RefinedWeb"), "model_type \"falcon\" (FalconForCausalLM"),
    ("new_decoder_architecture 1", ft, dict(FC, new_decoder_architecture=1),
     "new_decoder_architecture must be true or false"),
    ("multi_query 'yes'", f7, dict(FC7, multi_query="yes"), "multi_query must be true or false"),
    ("parallel_attn null", f7, dict(FC7, parallel_attn=None), "parallel_attn must be true or false"),
    ("bias 0", ft, dict(FC, bias=0), "bias must be true or false"),
    ("apply_residual_connection_post_layernorm true", ft, dict(FC, apply_residual_connection_post_layernorm=True),
     "apply_residual_connection_post_layernorm is not supported"),
    ("num_kv_heads 3 without the new architecture or multi_query", falcon_tensors("shared", ng=NH),
     dict(FC, new_decoder_architecture=False, multi_query=False, num_kv_heads=3),
     "num_kv_heads 3 with new_decoder_architecture false and multi_query false is not supported"),
    ("num_kv_heads 3 of 4 heads (new architecture)", ft, dict(FC, num_kv_heads=3), "do not divide"),
    ("num_kv_heads 0", ft, dict(FC, num_kv_heads=0), "num_kv_heads must be an integer"),
    ("ffn_hidden_size 64 (a later transformers' key)", ft, dict(FC, ffn_hidden_size=64), "ffn_hidden_size"),
    ("activation relu", ft, dict(FC, activation="relu"), "activation is not supported"),
    ("num_ln_in_parallel_attn 1 (Falcon2's)", ft, dict(FC, num_ln_in_parallel_attn=1), "num_ln_in_parallel_attn"),
    ("layer_norm_epsilon 0", ft, dict(FC, layer_norm_epsilon=0), "layer_norm_epsilon must be a positive number"),
    ("no num_hidden_layers", ft, {k: v for k, v in FC.items() if k != "num_hidden_layers"},
     "num_hidden_layers is missing"),
    ("a new_decoder_architecture folder without ln_mlp", [t for t in ft if ".ln_mlp." not in t[0]], FC,
     "no tensor 'transformer.h.0.ln_mlp.weight'"),
    ("Falcon-7B's files (input_layernorm) under new_decoder_architecture true",
     falcon_tensors("shared", ng=2), FC, "(its norms say another Falcon layer: new_decoder_architecture true has "
                                         "ln_attn and ln_mlp"),
    ("a post_attention_layernorm in a parallel_attn folder", f7 + [
        ("transformer.h.0.post_attention_layernorm.weight", "F32", (24,), rand(24, 2))], FC7,
     "'transformer.h.0.post_attention_layernorm.weight' is not part of the Falcon model"),
    ("biases with bias false", falcon_tensors("new", bias=True), FC, "(config.json's bias is false)"),
    ("a missing dense bias (bias true)", [t for t in fs if t[0] != "transformer.h.1.self_attention.dense.bias"],
     FCS, "no tensor 'transformer.h.1.self_attention.dense.bias'"),
    ("a query_key_value of 4 + 2 heads' rows under multi_query false",
     falcon_tensors("shared", ng=1), dict(FC, new_decoder_architecture=False, multi_query=False, num_kv_heads=NH),
     "'transformer.h.0.self_attention.query_key_value.weight' is [48, 32]; the model of config.json has [96, 32]"),
    ("no lm_head.weight (untied)", [t for t in fs if t[0] != "lm_head.weight"], FCS, "no tensor 'lm_head.weight'"),
    ("a tied lm_head.weight of other values", ft + [("lm_head.weight", "F32", (V, C), rand(V * C))], FC,
     "lm_head.weight differs from transformer.word_embeddings.weight"),
    ("an unknown tensor", ft + [("transformer.h.0.self_attention.extra", "F32", (2,), [0.0, 1.0])], FC,
     "'transformer.h.0.self_attention.extra' is not part of the Falcon model"),
    ("config.json of 4194304 layers", ft, dict(FC, num_hidden_layers=1 << 22), "config.json describes a Falcon model"),
]:
    d = hf_folder("bad-falcon", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"Falcon: {what}", ["--from", "hf", "--input", d, "--output", out], out, cause)
# exports transformers' FalconConfig cannot express (one norm or the sequential residual with
# key/value groups neither 1 nor all heads), and one norm with a model not Falcon's (the tanh
# GELU): refused naming the switches
falcon_keys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
                   vocab_size=V, normalization="LayerNorm", position_embedding_type="rope", add_bias_linear=False,
                   gelu_approximate="none", num_query_groups=2)
for what, keys, cause in (
        ("parallel_shared_norm with 2 key/value groups of 4 heads", dict(parallel_residual=True,
                                                                         parallel_shared_norm=True),
         "model.num_query_groups 2 of 4 heads with model.parallel_shared_norm true cannot be exported"),
        ("the sequential residual with 2 key/value groups of 4 heads", dict(parallel_residual=False),
         "model.num_query_groups 2 of 4 heads with model.parallel_residual false cannot be exported"),
        ("parallel_shared_norm with the tanh GELU", dict(parallel_residual=True, parallel_shared_norm=True,
                                                         num_query_groups=1, gelu_approximate="tanh"),
         "neither GPT-2, Llama, Qwen2, Bloom, GPT-NeoX, Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT nor OPT"),
        ("no linear biases with an MLP of 3h", dict(parallel_residual=True, ffn_hidden_size=3 * C),
         "neither GPT-2, Llama, Qwen2, Bloom, GPT-NeoX, Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT nor OPT")):
    odd = tt.write_config(os.path.join(work, "odd-falcon.yaml"), model=dict(falcon_keys, **keys),
                          training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
    refused(f"an export with --config of {what}", ["--to", "hf", "--input", ck_falcon[0], "--output", bad_out,
                                                     "--config", odd], bad_out, cause)
# the family line's parallel_shared_norm end: once, after gelu_exact, only with parallel_residual
session.manifest_refused("Falcon", ck_falcon[1], (
    ("parallel_shared_norm 1 without parallel_residual 1", " parallel_residual 1 gelu_exact 1",
     " gelu_exact 1"),
    ("parallel_shared_norm 1 twice", " parallel_shared_norm 1",
     " parallel_shared_norm 1 parallel_shared_norm 1"),
    ("parallel_shared_norm 1 before gelu_exact 1", " gelu_exact 1 parallel_shared_norm 1",
     " parallel_shared_norm 1 gelu_exact 1"),
    ("parallel_shared_norm 2", " parallel_shared_norm 1", " parallel_shared_norm 2"),
    ("parallel_shared_norm 1 and more", " parallel_shared_norm 1", " parallel_shared_norm 1 x")),
    "parallel_shared_norm 1 only with parallel_residual 1")
# the released config.json files of Falcon-7B, -40B and -180B describe the releases' parameters:
# with a tiny model's weights, the import's size check names the count
F7B = {"alibi": False, "apply_residual_connection_post_layernorm": False, "architectures": ["FalconForCausalLM"],
       "attention_dropout": 0.0, "bias": False, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0,
       "hidden_size": 4544, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
       "multi_query": True, "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32,
       "parallel_attn": True, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 65024}
F40B = dict(F7B, hidden_size=8192, num_attention_heads=128, num_hidden_layers=60, num_kv_heads=8,
            new_decoder_architecture=True)
F180B = dict(F40B, hidden_size=14848, num_attention_heads=232, num_hidden_layers=80)
for what, cfg_r, release in (("Falcon-7B", F7B, 6921720704), ("Falcon-40B", F40B, 41303293952),
                             ("Falcon-180B", F180B, 178557088768)):
    d = hf_folder("falcon-config", ft, cfg_r)
    refused(f"{what}'s config.json beside a tiny model's weights (its size: the release's {release:,} parameters)",
            ["--from", "hf", "--input", d, "--output", bad_out], bad_out,
            f"describes a Falcon model of {release} parameters")
# the shipped Falcon configs: trident plan counts the releases' parameters
for cfg_name, release in (("falcon-7b.yaml", 6_921_720_704), ("falcon-40b.yaml", 41_303_293_952)):
    plan_count_check(trident, cfg_name, release)
tt.finish("convert-families-cli: all checks passed")
