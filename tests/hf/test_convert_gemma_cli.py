#!/usr/bin/python3
"""`trident convert` of Gemma folders (GemmaForCausalLM: Gemma-2B, -7B) end to end without PyTorch
(it runs in the sanitizer build too; the folders are written by hf_files.py):
  - a Gemma (4 heads of head_dim 16 in a hidden size of 32: kv_channels 16; 2 key/value groups;
    hidden_act gelu) HF -> trident -> HF bit for bit from the manifest's family line alone and
    with --config, its switches printed and in the family line (kv_channels 16 layernorm_1p 1
    embedding_multiplier X geglu 1 last), generate of the checkpoint and of the folder, in shards
    and in BF16; a file's lm_head.weight equal to the embedding accepted;
  - the activation: hidden_activation read before hidden_act (later config.json files carry
    "gelu" beside "gelu_pytorch_tanh"), null hidden_activation, every tanh name, the exported
    hidden_act and hidden_activation; GemmaConfig's defaults for absent keys;
  - every setting trident cannot represent refused with exit 2 naming it (attention_bias,
    an unknown hidden_act or hidden_activation, rope_scaling, tie_word_embeddings false, ...),
    and files that are not the model config.json describes (a missing tensor, an unknown one,
    a q_proj of another head size, an lm_head that is not the embedding);
  - exports of a model transformers has no such model for refused: kv_channels,
    apply_layernorm_1p, embedding_multiplier or geglu on another family, a Gemma with another
    embedding scale, SwiGLU, LayerNorm, untied; corrupt suffixes of the manifest's family line
    (a switch twice, out of order, kv_channels 0 or negative, multiplier inf or nan) refused;
  - Gemma-7B's released config.json beside a tiny model's weights: its 8,537,680,896 parameters
    named by the import's size check; configs/gemma-2b.yaml and gemma-7b.yaml: the releases'
    counts (2,506,172,416 and 8,537,680,896) in trident plan.
usage: test_convert_gemma_cli.py TRIDENT WORKDIR"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import C, L, NH, P, V, Session, plan_count_check, rand, same_checkpoint, st_read  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")

HS, NG, F = 16, 2, 48  # head_dim 16 of hidden 32, 4 heads: the attention is 64 wide
MULT = struct.unpack("<f", struct.pack("<f", math.sqrt(C)))[0]  # (float)sqrt(32)
GC = {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_size": C, "intermediate_size": F,
      "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "head_dim": HS,
      "max_position_embeddings": P, "vocab_size": V, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
      "hidden_act": "gelu", "tie_word_embeddings": True, "attention_bias": False, "attention_dropout": 0.0,
      "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1}


def gemma_tensors(hs=HS, ng=NG, nh=NH):
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"model.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C))]
        for p, rows in (("q", nh * hs), ("k", ng * hs), ("v", ng * hs)):
            t.append((h + f"self_attn.{p}_proj.weight", "F32", (rows, C), rand(rows * C)))
        t += [(h + "self_attn.o_proj.weight", "F32", (C, nh * hs), rand(C * nh * hs)),
              (h + "mlp.gate_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.up_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.down_proj.weight", "F32", (C, F), rand(F * C))]
    t.append(("model.norm.weight", "F32", (C,), rand(C)))
    return t


ABSENT = object()


def gemma_json(**keys):
    """GC with keys changed (ABSENT: removed)"""
    return {k: v for k, v in dict(GC, **keys).items() if v is not ABSENT}


def family_line(ck):
    text = open(os.path.join(ck, "release", "manifest.txt")).read()
    return [line for line in text.splitlines() if line.startswith("family ")]


gt = gemma_tensors()
dg = hf_folder("gemma", gt, GC)
ck = os.path.join(work, "ck-gemma")
rc, so, se = convert("--from", "hf", "--input", dg, "--output", ck)
tt.check("Gemma (4 heads of 16 in hidden 32, 2 key/value groups, gelu): imported, its switches printed",
         rc == 0 and all(k in so for k in ("normalization: RMSNorm", "position_embedding_type: rope", "swiglu: false",
                                          "geglu: true", "apply_layernorm_1p: true",
                                          f"embedding_multiplier: {MULT:.9g}",
                                          f"kv_channels: {HS}", f"ffn_hidden_size: {F}", f"num_query_groups: {NG}",
                                          "untie_embeddings_and_output_weights: false", "add_bias_linear: false",
                                          "gelu_approximate: none", "layernorm_epsilon: 1e-06"))
         and "rotary_percent" not in so, se + so)
fam = family_line(ck) if rc == 0 else []
tt.check(f"Gemma: the manifest's family line: rotary_dims {HS}, query_groups {NG}, untie 0, gelu_exact 1, ends with "
         f"kv_channels {HS} layernorm_1p 1 embedding_multiplier X geglu 1",
         len(fam) == 1 and f" rotary_dims {HS} " in fam[0] and f" query_groups {NG} " in fam[0]
         and " untie 0 " in fam[0] and " gelu_exact 1 " in fam[0]
         and f" kv_channels {HS} layernorm_1p 1 embedding_multiplier " in fam[0] and fam[0].endswith(" geglu 1"),
         str(fam))
gkeys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
             vocab_size=V, normalization="RMSNorm", position_embedding_type="rope", kv_channels=HS,
             num_query_groups=NG, ffn_hidden_size=F, geglu=True, gelu_approximate="none", apply_layernorm_1p=True,
             embedding_multiplier=MULT, untie_embeddings_and_output_weights=False, add_bias_linear=False,
             layernorm_epsilon=1e-6)


def gemma_config(name, **keys):
    model = {k: v for k, v in dict(gkeys, **keys).items() if v is not None}
    return tt.write_config(os.path.join(work, name + ".yaml"), model=model,
                           training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))


gcfg = gemma_config("gemma")
back = os.path.join(work, "gemma-back")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", back)
out_cfg = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
want = {"model_type": "gemma", "architectures": ["GemmaForCausalLM"], "hidden_size": C, "intermediate_size": F,
        "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "head_dim": HS,
        "max_position_embeddings": P, "vocab_size": V, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "hidden_act": "gelu", "hidden_activation": "gelu", "tie_word_embeddings": True, "attention_bias": False,
        "rope_scaling": None, "torch_dtype": "float32"}
tt.check("Gemma: HF -> trident -> HF from the manifest alone is bit-exact (no lm_head: tied), a GemmaForCausalLM of "
         "the same settings, hidden_act and hidden_activation gelu",
         rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(dg, "model.safetensors"))
         and all(out_cfg.get(k) == v for k, v in want.items()), f"{se}\n{ {k: out_cfg.get(k) for k in want} }")
back2 = os.path.join(work, "gemma-back-config")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", back2, "--config", gcfg)
tt.check("Gemma: the export with --config gives the same files",
         rc == 0 and all(open(os.path.join(back, f), "rb").read() == open(os.path.join(back2, f), "rb").read()
                         for f in ("model.safetensors", "config.json")), se)
ck_back = os.path.join(work, "ck-gemma-back")
rc, so, se = convert("--from", "hf", "--input", back, "--output", ck_back)
tt.check("Gemma: the export imports to the same checkpoint", rc == 0 and same_checkpoint(ck, ck_back), se)
for what, where in (("the checkpoint without --config", ck), ("the HF folder", dg)):
    rc, so, se = tt.outputs([trident, "generate", where, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                             "--temperature", "0"])
    tt.check(f"generate from {what} (Gemma): exit 0", rc == 0, se)
session.shards_check("Gemma in shards: imported, the same checkpoint", ck, "gemma", "8KB")
session.bf16_check("Gemma in BF16: exported, imported (the size check at 2 bytes a parameter passes) and exported "
                   "again bit for bit, torch_dtype bfloat16", ck, "gemma")
ck_h = os.path.join(work, "ck-gemma-head")
rc, so, se = convert("--from", "hf", "--input",
                     hf_folder("gemma-head", gt + [("lm_head.weight", "F32", (V, C), gt[0][3])], GC), "--output", ck_h)
tt.check("Gemma with an lm_head.weight equal to embed_tokens: the same checkpoint",
         rc == 0 and same_checkpoint(ck, ck_h), se)
# the activation: hidden_activation before hidden_act; the tanh names; exported names
ck_tanh = None
for what, keys in (("hidden_act gelu beside hidden_activation gelu_pytorch_tanh (later Gemma files)",
                    dict(hidden_act="gelu", hidden_activation="gelu_pytorch_tanh")),
                   ("hidden_act gelu_pytorch_tanh", dict(hidden_act="gelu_pytorch_tanh")),
                   ("hidden_act gelu_new", dict(hidden_act="gelu_new")),
                   ("hidden_act gelu_accurate", dict(hidden_act="gelu_accurate")),
                   ("hidden_act gelu_fast with hidden_activation null",
                    dict(hidden_act="gelu_fast", hidden_activation=None)),
                   ("hidden_activation gelu_new without hidden_act",
                    dict(hidden_act=ABSENT, hidden_activation="gelu_new"))):
    ck_a = os.path.join(work, f"ck-gemma-act-{len(os.listdir(work))}")
    rc, so, se = convert("--from", "hf", "--input", hf_folder("gemma-act", gt, gemma_json(**keys)), "--output", ck_a)
    fam = family_line(ck_a) if rc == 0 else [""]
    if ck_tanh is None and rc == 0:
        ck_tanh = ck_a
    tt.check(f"Gemma with {what}: the tanh GELU (no gelu_approximate printed, no gelu_exact)",
             rc == 0 and "gelu_approximate" not in so and " gelu_exact 1" not in fam[0]
             and same_checkpoint(ck_tanh, ck_a), se + so)
back_t = os.path.join(work, "gemma-tanh-back")
rc, so, se = convert("--to", "hf", "--input", ck_tanh, "--output", back_t) if ck_tanh else (1, "", "")
tcfg = json.load(open(os.path.join(back_t, "config.json"))) if rc == 0 else {}
tt.check("Gemma with the tanh GELU: exported with hidden_act and hidden_activation gelu_pytorch_tanh",
         tcfg.get("hidden_act") == "gelu_pytorch_tanh" and tcfg.get("hidden_activation") == "gelu_pytorch_tanh", se)
for what, keys in (("hidden_activation gelu beside hidden_act gelu_pytorch_tanh",
                    dict(hidden_act="gelu_pytorch_tanh", hidden_activation="gelu")),
                   ("hidden_act gelu_python", dict(hidden_act="gelu_python")),
                   ("no hidden_act (GemmaConfig's gelu)", dict(hidden_act=ABSENT))):
    ck_a = os.path.join(work, f"ck-gemma-act-{len(os.listdir(work))}")
    rc, so, se = convert("--from", "hf", "--input", hf_folder("gemma-act", gt, gemma_json(**keys)), "--output", ck_a)
    tt.check(f"Gemma with {what}: the exact GELU, the gelu import's checkpoint",
             rc == 0 and "gelu_approximate: none" in so and same_checkpoint(ck, ck_a), se + so)
# GemmaConfig's defaults: 8192 positions, eps 1e-6, rope_theta 10000, 16 key/value heads, head_dim
# 256, tied, gelu (the sizes given)
t16 = gemma_tensors(ng=16, nh=16)
dcfg = {k: v for k, v in GC.items() if k in ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                                             "vocab_size", "head_dim")}
ck_d = os.path.join(work, "ck-gemma-defaults")
rc, so, se = convert("--from", "hf", "--input", hf_folder("gemma-defaults", t16, dict(dcfg, num_attention_heads=16)),
                     "--output", ck_d)
tt.check("Gemma with the sizes alone: GemmaConfig's defaults (8192 positions, eps 1e-6, rope_theta 10000, 16 key/value "
         "heads, tied, the exact GELU)",
         rc == 0 and all(k in so for k in ("max_position_embeddings: 8192", "layernorm_epsilon: 1e-06",
                                          "rotary_base: 10000", "num_query_groups: 16", "gelu_approximate: none",
                                          "untie_embeddings_and_output_weights: false", f"kv_channels: {HS}")),
         se + so)
q8 = [(n, dt, (NH * 8, C), rand(NH * 8 * C)) if n == "model.layers.0.self_attn.q_proj.weight" else (n, dt, sh, v)
      for n, dt, sh, v in gt]
for what, tensors, config, cause in [
    ("attention_bias true", gt, gemma_json(attention_bias=True), "attention_bias is not supported"),
    ("hidden_act relu", gt, gemma_json(hidden_act="relu"), "hidden_act is not supported"),
    ("hidden_act gelu_10", gt, gemma_json(hidden_act="gelu_10"), "hidden_act is not supported"),
    ("hidden_act 7", gt, gemma_json(hidden_act=7), "hidden_act is not supported"),
    ("hidden_activation silu beside hidden_act gelu", gt, gemma_json(hidden_activation="silu"),
     "hidden_activation is not supported"),
    ("rope_scaling", gt, gemma_json(rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling is not supported"),
    ("tie_word_embeddings false", gt, gemma_json(tie_word_embeddings=False),
     "tie_word_embeddings false is not supported"),
    ("tie_word_embeddings 1", gt, gemma_json(tie_word_embeddings=1), "tie_word_embeddings must be true or false"),
    ("head_dim 0", gt, gemma_json(head_dim=0), "head_dim must be an integer"),
    ("head_dim 2.5", gt, gemma_json(head_dim=2.5), "head_dim must be an integer"),
    ("head_dim 15 (odd: no rotary pairs)", gt, gemma_json(head_dim=15), "head_dim 15 is odd"),
    ("pretraining_tp 2", gt, gemma_json(pretraining_tp=2), "pretraining_tp is not supported"),
    ("rms_norm_eps 0", gt, gemma_json(rms_norm_eps=0), "rms_norm_eps must be a positive number"),
    ("3 key/value heads of 4", gt, gemma_json(num_key_value_heads=3), "do not divide"),
    ("no intermediate_size", gt, gemma_json(intermediate_size=ABSENT), "intermediate_size is missing"),
    ("a missing up_proj", [t for t in gt if t[0] != "model.layers.1.mlp.up_proj.weight"], GC,
     "no tensor 'model.layers.1.mlp.up_proj.weight'"),
    ("a missing norm", [t for t in gt if t[0] != "model.norm.weight"], GC, "no tensor 'model.norm.weight'"),
    ("a q_proj of head_dim 8 (config says 16)", q8, GC, "'model.layers.0.self_attn.q_proj.weight' is [32, 32]"),
    ("an unknown tensor", gt + [("model.layers.0.self_attn.extra", "F32", (2,), [0.0, 1.0])], GC,
     "'model.layers.0.self_attn.extra' is not part of the Gemma model"),
    ("a q_proj bias", gt + [("model.layers.0.self_attn.q_proj.bias", "F32", (NH * HS,), rand(NH * HS))], GC,
     "'model.layers.0.self_attn.q_proj.bias' is not part of the Gemma model"),
    ("an lm_head.weight other than the embedding", gt + [("lm_head.weight", "F32", (V, C), rand(V * C))], GC,
     "lm_head.weight differs from model.embed_tokens.weight"),
    ("config.json of 4194304 layers", gt, gemma_json(num_hidden_layers=1 << 22), "config.json describes a Gemma model"),
]:
    d = hf_folder("bad-gemma", tensors, config)
    refused(f"Gemma: {what}", ["--from", "hf", "--input", d, "--output", bad_out], bad_out, cause)
# transformers has no such model: Gemma's switches on another family, or a Gemma without its others
llama = dict(gkeys, kv_channels=None, geglu=None, swiglu=True, apply_layernorm_1p=None, embedding_multiplier=None,
             gelu_approximate=None)
for what, keys in (("a Llama with kv_channels 16 and q/k/v biases (a Mistral's head_dim has none)",
                    dict(llama, kv_channels=HS, add_qkv_bias=True)),
                   ("a Llama with apply_layernorm_1p", dict(llama, apply_layernorm_1p=True)),
                   ("a Llama with embedding_multiplier", dict(llama, embedding_multiplier=MULT)),
                   ("a Gemma with the embedding times 2", dict(embedding_multiplier=2.0)),
                   ("a Gemma without apply_layernorm_1p", dict(apply_layernorm_1p=None)),
                   ("a Gemma with LayerNorm", dict(normalization="LayerNorm")),
                   ("a Gemma with SwiGLU", dict(geglu=None, swiglu=True, gelu_approximate=None)),
                   ("an untied Gemma", dict(untie_embeddings_and_output_weights=True)),
                   ("a Gemma with linear biases", dict(add_bias_linear=True))):
    refused(f"an export with --config of {what}",
            ["--to", "hf", "--input", ck, "--output", bad_out, "--config", gemma_config("odd-switches", **keys)],
            bad_out, "transformers has no such model to export to")
# the family line's Gemma end: each switch once, in order, kv_channels >= 1, a finite multiplier
gtext = open(os.path.join(ck, "release", "manifest.txt")).read()
mult_text = gtext.split(" embedding_multiplier ")[1].split()[0]
session.manifest_refused("Gemma", ck, (
    ("geglu 1 twice", " geglu 1", " geglu 1 geglu 1"),
    ("kv_channels twice", f" kv_channels {HS}", f" kv_channels {HS} kv_channels {HS}"),
    ("layernorm_1p 1 before kv_channels", f" kv_channels {HS} layernorm_1p 1",
     f" layernorm_1p 1 kv_channels {HS}"),
    ("geglu 1 before embedding_multiplier", f" embedding_multiplier {mult_text} geglu 1",
     f" geglu 1 embedding_multiplier {mult_text}"),
    ("kv_channels 0", f" kv_channels {HS}", " kv_channels 0"),
    ("kv_channels -16", f" kv_channels {HS}", " kv_channels -16"),
    ("embedding_multiplier inf", f" embedding_multiplier {mult_text}", " embedding_multiplier inf"),
    ("embedding_multiplier nan", f" embedding_multiplier {mult_text}", " embedding_multiplier nan"),
    ("layernorm_1p 2", " layernorm_1p 1", " layernorm_1p 2")),
    "expected the family line")
# Gemma-7B's released config.json (with the later hidden_activation) beside a tiny model's
# weights: the import's size check names the release's parameter count
GEMMA7B = {"architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
           "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu",
           "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3072, "initializer_range": 0.02,
           "intermediate_size": 24576, "max_position_embeddings": 8192, "model_type": "gemma",
           "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16, "pad_token_id": 0,
           "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
           "transformers_version": "4.38.0.dev0", "use_cache": True, "vocab_size": 256000}
refused("Gemma-7B's config.json beside a tiny model's weights (its size: the release's 8,537,680,896 parameters)",
        ["--from", "hf", "--input", hf_folder("gemma7b-config", gt, GEMMA7B), "--output", bad_out], bad_out,
        "describes a Gemma model of 8537680896 parameters")
# configs/gemma-2b.yaml, gemma-7b.yaml: the planner's parameter count is the release's
for cname, release in (("gemma-2b.yaml", 2_506_172_416), ("gemma-7b.yaml", 8_537_680_896)):
    plan_count_check(trident, cname, release)
tt.finish("convert-gemma-cli: all checks passed")
