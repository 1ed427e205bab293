#!/usr/bin/python3
"""`trident convert` of Phi folders (PhiForCausalLM: Phi-1, Phi-1.5, Phi-2) end to end without
PyTorch (it runs in the sanitizer build too; the folders are written by hf_files.py):
  - a Phi (4 heads in 2 key/value groups, partial_rotary_factor 0.5, gelu_new) HF -> trident
    -> HF bit for bit from the manifest's family line alone and with --config, its switches
    printed and in the family line (output_bias 1 last), generate of the checkpoint and of the
    folder, in shards and in BF16; num_key_value_heads null (a key/value head per head), every
    hidden_act read, PhiConfig's defaults for absent keys;
  - every setting trident cannot represent refused with exit 2 naming it (qk_layernorm,
    tie_word_embeddings true, a rotary share of an odd or no dimension, rope_scaling, ...), and
    files that are not the model config.json describes (lm_head.bias missing or misshapen, an
    unknown tensor, a Llama's o_proj);
  - an export of a model with the output layer's bias but not Phi's other switches refused;
    corrupt ' output_bias 1' ends of the manifest's family line (without untie, twice, before
    parallel_shared_norm) refused;
  - Phi-2's released config.json beside a tiny model's weights: its 2,779,683,840 parameters
    named by the import's size check; configs/phi-2.yaml: the same count in trident plan.
usage: test_convert_phi_cli.py TRIDENT WORKDIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import C, L, NH, P, V, Session, plan_count_check, rand, same_checkpoint, st_read  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")

HS, NG, F = C // NH, 2, 48
PC = {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": C, "intermediate_size": F,
      "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "max_position_embeddings": P,
      "vocab_size": V, "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "layer_norm_eps": 1e-5,
      "hidden_act": "gelu_new", "tie_word_embeddings": False, "qk_layernorm": False, "rope_scaling": None,
      "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attention_dropout": 0.1}  # (dropouts: recorded, exported back)


def phi_tensors(ng=NG, head_bias=True):
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"model.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)), (h + "input_layernorm.bias", "F32", (C,), rand(C))]
        for p, rows in (("q", C), ("k", ng * HS), ("v", ng * HS)):
            t += [(h + f"self_attn.{p}_proj.weight", "F32", (rows, C), rand(rows * C)),
                  (h + f"self_attn.{p}_proj.bias", "F32", (rows,), rand(rows))]
        t += [(h + "self_attn.dense.weight", "F32", (C, C), rand(C * C)), (h + "self_attn.dense.bias", "F32", (C,), rand(C)),
              (h + "mlp.fc1.weight", "F32", (F, C), rand(F * C)), (h + "mlp.fc1.bias", "F32", (F,), rand(F)),
              (h + "mlp.fc2.weight", "F32", (C, F), rand(F * C)), (h + "mlp.fc2.bias", "F32", (C,), rand(C))]
    t += [("model.final_layernorm.weight", "F32", (C,), rand(C, 2)), ("model.final_layernorm.bias", "F32", (C,), rand(C)),
          ("lm_head.weight", "F32", (V, C), rand(V * C))]
    return t + ([("lm_head.bias", "F32", (V,), rand(V))] if head_bias else [])


pt = phi_tensors()
dp = hf_folder("phi", pt, PC)
ck = os.path.join(work, "ck-phi")
rc, so, se = convert("--from", "hf", "--input", dp, "--output", ck)
tt.check("Phi (GQA 4/2, partial_rotary_factor 0.5, gelu_new): imported, its switches printed",
         rc == 0 and all(k in so for k in ("normalization: LayerNorm", "position_embedding_type: rope",
                                          "rotary_percent: 0.5", "parallel_residual: true",
                                          "parallel_shared_norm: true", "output_layer_bias: true",
                                          f"ffn_hidden_size: {F}", f"num_query_groups: {NG}",
                                          "untie_embeddings_and_output_weights: true", "add_bias_linear: true",
                                          "embedding_layernorm: false", "layernorm_epsilon: 1e-05"))
         and "gelu_approximate" not in so, se + so)
manifest = open(os.path.join(ck, "release", "manifest.txt")).read() if rc == 0 else ""
fam = [line for line in manifest.splitlines() if line.startswith("family ")]
tt.check("Phi: the manifest's family line: rotary_dims 4, query_groups 2, untie 1, ends with "
         "parallel_residual 1 parallel_shared_norm 1 output_bias 1",
         len(fam) == 1 and " rotary_dims 4 " in fam[0] and " query_groups 2 " in fam[0] and " untie 1 " in fam[0]
         and fam[0].endswith(" parallel_residual 1 parallel_shared_norm 1 output_bias 1"), manifest[:600])
pcfg = tt.write_config(os.path.join(work, "phi.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
               vocab_size=V, normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.5,
               ffn_hidden_size=F, num_query_groups=NG, untie_embeddings_and_output_weights=True,
               output_layer_bias=True, parallel_residual=True, parallel_shared_norm=True),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
back = os.path.join(work, "phi-back")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", back)
out_cfg = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
want = {"model_type": "phi", "architectures": ["PhiForCausalLM"], "hidden_size": C, "intermediate_size": F,
        "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "max_position_embeddings": P,
        "vocab_size": V, "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "layer_norm_eps": 1e-5,
        "hidden_act": "gelu_new", "tie_word_embeddings": False, "qk_layernorm": False, "rope_scaling": None,
        "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attention_dropout": 0.1, "torch_dtype": "float32"}
tt.check("Phi: HF -> trident -> HF from the manifest alone is bit-exact (lm_head.bias too), a PhiForCausalLM of "
         "the same settings",
         rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(dp, "model.safetensors"))
         and all(out_cfg.get(k) == v for k, v in want.items()),
         f"{se}\n{ {k: out_cfg.get(k) for k in want} }")
back2 = os.path.join(work, "phi-back-config")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", back2, "--config", pcfg)
tt.check("Phi: the export with --config gives the same files",
         rc == 0 and all(open(os.path.join(back, f), "rb").read() == open(os.path.join(back2, f), "rb").read()
                         for f in ("model.safetensors", "config.json")), se)
ck_back = os.path.join(work, "ck-phi-back")
rc, so, se = convert("--from", "hf", "--input", back, "--output", ck_back)
tt.check("Phi: the export imports to the same checkpoint", rc == 0 and same_checkpoint(ck, ck_back), se)
for what, where in (("the checkpoint without --config", ck), ("the HF folder", dp)):
    rc, so, se = tt.outputs([trident, "generate", where, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                             "--temperature", "0"])
    tt.check(f"generate from {what} (Phi): exit 0", rc == 0, se)
# in shards (model.safetensors.index.json) and in BF16
session.shards_check("Phi in shards: imported, the same checkpoint", ck, "phi", "8KB")
session.bf16_check("Phi in BF16: exported, imported (the size check at 2 bytes a parameter passes) and exported again bit "
                   "for bit, torch_dtype bfloat16", ck, "phi")
# the tanh GELU by every name; the exact one; num_key_value_heads null; PhiConfig's defaults
for act in ("gelu_pytorch_tanh", "gelu_fast", "gelu_accurate"):
    ck_a = os.path.join(work, "ck-phi-act-" + act)
    rc, so, se = convert("--from", "hf", "--input", hf_folder("phi-act", pt, dict(PC, hidden_act=act)), "--output", ck_a)
    tt.check(f"Phi with hidden_act {act} (the tanh formula): the gelu_new import's checkpoint",
             rc == 0 and same_checkpoint(ck, ck_a), se)
for act in ("gelu", "gelu_python"):
    ck_a = os.path.join(work, "ck-phi-act-" + act)
    rc, so, se = convert("--from", "hf", "--input", hf_folder("phi-act", pt, dict(PC, hidden_act=act)), "--output", ck_a)
    back_a = os.path.join(work, "phi-act-back-" + act)
    rc2, so2, se2 = convert("--to", "hf", "--input", ck_a, "--output", back_a) if rc == 0 else (1, "", "")
    hact = json.load(open(os.path.join(back_a, "config.json"))).get("hidden_act") if rc2 == 0 else None
    tt.check(f"Phi with hidden_act {act}: the exact GELU (gelu_approximate none, gelu_exact 1), exported as gelu",
             rc2 == 0 and "gelu_approximate: none" in so and hact == "gelu" and
             " gelu_exact 1 " in open(os.path.join(ck_a, "release", "manifest.txt")).read(), se + se2)
pt_mha = phi_tensors(ng=NH)
ck_m = os.path.join(work, "ck-phi-mha")
rc, so, se = convert("--from", "hf", "--input", hf_folder("phi-mha", pt_mha, dict(PC, num_key_value_heads=None)),
                     "--output", ck_m)
back_m = os.path.join(work, "phi-mha-back")
rc2, so2, se2 = convert("--to", "hf", "--input", ck_m, "--output", back_m) if rc == 0 else (1, "", "")
tt.check("Phi with num_key_value_heads null: a key/value head per head, exported bit for bit with "
         f"num_key_value_heads {NH}",
         rc2 == 0 and f"num_query_groups: {NH}" in so and
         st_read(os.path.join(back_m, "model.safetensors")) == st_read(os.path.join(work, "phi-mha", "model.safetensors"))
         and json.load(open(os.path.join(back_m, "config.json"))).get("num_key_value_heads") == NH, se + se2)
defaults = {k: v for k, v in PC.items() if k in ("architectures", "model_type", "hidden_size", "intermediate_size",
                                                 "num_hidden_layers", "num_attention_heads", "vocab_size")}
ck_d = os.path.join(work, "ck-phi-defaults")
rc, so, se = convert("--from", "hf", "--input", hf_folder("phi-defaults", pt_mha, defaults), "--output", ck_d)
tt.check("Phi with the sizes alone: PhiConfig's defaults (2048 positions, eps 1e-5, rope_theta 10000, "
         "partial_rotary_factor 0.5, gelu_new, untied, a key/value head per head)",
         rc == 0 and all(k in so for k in ("max_position_embeddings: 2048", "layernorm_epsilon: 1e-05",
                                          "rotary_base: 10000", "rotary_percent: 0.5", f"num_query_groups: {NH}",
                                          "output_layer_bias: true")) and "gelu_approximate" not in so, se + so)
# what trident cannot represent, and files that are not the model config.json describes
for what, tensors, config, cause in [
    ("qk_layernorm true", pt, dict(PC, qk_layernorm=True), "qk_layernorm true is not supported"),
    ("qk_layernorm 'no'", pt, dict(PC, qk_layernorm="no"), "qk_layernorm must be true or false"),
    ("tie_word_embeddings true (the tied head keeps lm_head.bias)", pt, dict(PC, tie_word_embeddings=True),
     "tie_word_embeddings true is not supported"),
    ("tie_word_embeddings 0", pt, dict(PC, tie_word_embeddings=0), "tie_word_embeddings must be true or false"),
    ("partial_rotary_factor 0.375 (3 rotated dimensions of 8: odd)", pt, dict(PC, partial_rotary_factor=0.375),
     "partial_rotary_factor 0.375 of the head size 8 rotates 3"),
    ("partial_rotary_factor 0.1 (0 rotated dimensions)", pt, dict(PC, partial_rotary_factor=0.1), "rotates 0"),
    ("partial_rotary_factor 1.5", pt, dict(PC, partial_rotary_factor=1.5), "partial_rotary_factor must be in (0, 1]"),
    ("partial_rotary_factor 0", pt, dict(PC, partial_rotary_factor=0), "partial_rotary_factor must be a positive number"),
    ("partial_rotary_factor a string", pt, dict(PC, partial_rotary_factor="0.5"),
     "partial_rotary_factor must be a positive number"),
    ("rope_scaling", pt, dict(PC, rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling is not supported"),
    ("rope_theta 0", pt, dict(PC, rope_theta=0), "rope_theta must be a positive number"),
    ("layer_norm_eps -1", pt, dict(PC, layer_norm_eps=-1), "layer_norm_eps must be a positive number"),
    ("hidden_act relu", pt, dict(PC, hidden_act="relu"), "hidden_act is not supported"),
    ("hidden_act gelu_10", pt, dict(PC, hidden_act="gelu_10"), "hidden_act is not supported"),
    ("hidden_act 7", pt, dict(PC, hidden_act=7), "hidden_act is not supported"),
    ("heads that do not divide the hidden size", pt, dict(PC, num_attention_heads=5), "do not divide"),
    ("3 key/value heads of 4", pt, dict(PC, num_key_value_heads=3), "do not divide"),
    ("num_key_value_heads 0", pt, dict(PC, num_key_value_heads=0), "num_key_value_heads must be an integer"),
    ("no intermediate_size", pt, {k: v for k, v in PC.items() if k != "intermediate_size"},
     "intermediate_size is missing"),
    ("no hidden_size", pt, {k: v for k, v in PC.items() if k != "hidden_size"}, "hidden_size is missing"),
    ("a missing lm_head.bias", phi_tensors(head_bias=False), PC, "no tensor 'lm_head.bias'"),
    ("an lm_head.bias of shape [50, 1]", pt[:-1] + [("lm_head.bias", "F32", (V, 1), rand(V))], PC,
     "'lm_head.bias' is [50, 1]"),
    ("an lm_head.bias of I64", pt[:-1] + [("lm_head.bias", "I64", (V,), [0] * V)], PC,
     "tensor 'lm_head.bias' is I64"),
    ("a missing k_proj bias", [t for t in pt if t[0] != "model.layers.1.self_attn.k_proj.bias"], PC,
     "no tensor 'model.layers.1.self_attn.k_proj.bias'"),
    ("a k_proj of a key/value head per head (config says 2)",
     [(n, dt, (C, C), rand(C * C)) if n == "model.layers.0.self_attn.k_proj.weight" else (n, dt, sh, v)
      for n, dt, sh, v in pt], PC, "'model.layers.0.self_attn.k_proj.weight' is [32, 32]"),
    ("an unknown tensor", pt + [("model.layers.0.self_attn.extra", "F32", (2,), [0.0, 1.0])], PC,
     "'model.layers.0.self_attn.extra' is not part of the Phi model"),
    ("a Llama's o_proj", pt + [("model.layers.0.self_attn.o_proj.weight", "F32", (C, C), rand(C * C))], PC,
     "'model.layers.0.self_attn.o_proj.weight' is not part of the Phi model"),
    ("qk_layernorm's tensors with qk_layernorm false",
     pt + [("model.layers.0.self_attn.q_layernorm.weight", "F32", (HS,), rand(HS))], PC,
     "'model.layers.0.self_attn.q_layernorm.weight' is not part of the Phi model"),
    ("a post_attention_layernorm (Phi's layer has one norm)",
     pt + [("model.layers.1.post_attention_layernorm.weight", "F32", (C,), rand(C))], PC,
     "'model.layers.1.post_attention_layernorm.weight' is not part of the Phi model"),
    ("config.json of 4194304 layers", pt, dict(PC, num_hidden_layers=1 << 22), "config.json describes a Phi model"),
    ("model_type phi-msft (trust_remote_code's Phi)", pt, dict(PC, model_type="phi-msft"),
     "model_type \"phi-msft\" is not supported"),
]:
    d = hf_folder("bad-phi", tensors, config)
    refused(f"Phi: {what}", ["--from", "hf", "--input", d, "--output", bad_out], bad_out, cause)
# transformers has no model of the output layer's bias with other switches: the export refuses
base_keys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
                 vocab_size=V, normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.5,
                 ffn_hidden_size=F, num_query_groups=NG, untie_embeddings_and_output_weights=True,
                 output_layer_bias=True, parallel_residual=True, parallel_shared_norm=True)
for what, keys in (("two norms (parallel_shared_norm false)", dict(parallel_shared_norm=False)),
                   ("the sequential residual", dict(parallel_residual=False, parallel_shared_norm=False)),
                   ("RMSNorm", dict(normalization="RMSNorm")),
                   ("no linear biases", dict(add_bias_linear=False)),
                   ("learned positions", dict(position_embedding_type="learned_absolute", rotary_percent=None))):
    model = {k: v for k, v in dict(base_keys, **keys).items() if v is not None}
    odd = tt.write_config(os.path.join(work, "odd-switches.yaml"), model=model,
                          training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
    refused(f"an export with --config of the Phi with {what}",
            ["--to", "hf", "--input", ck, "--output", bad_out, "--config", odd], bad_out,
            "transformers has no such model to export to")
# the family line's Phi end: ' output_bias 1' once, last, only with untie 1
session.manifest_refused("Phi", ck, (
    ("output_bias 1 without untie", " untie 1 ", " untie 0 "),
    ("output_bias 1 twice", " output_bias 1", " output_bias 1 output_bias 1"),
    ("output_bias 1 before parallel_shared_norm 1", " parallel_shared_norm 1 output_bias 1",
     " output_bias 1 parallel_shared_norm 1"),
    ("output_bias 2", " output_bias 1", " output_bias 2"),
    ("output_bias 1 and more", " output_bias 1", " output_bias 1 x")),
    "output_bias 1 only with untie 1")
# Phi-2's released config.json (transformers 4.37's) beside a tiny model's weights: the import's
# size check names the release's parameter count
PHI2 = {"architectures": ["PhiForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 50256, "embd_pdrop": 0.0,
        "eos_token_id": 50256, "hidden_act": "gelu_new", "hidden_size": 2560, "initializer_range": 0.02,
        "intermediate_size": 10240, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "phi",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.4,
        "qk_layernorm": False, "resid_pdrop": 0.1, "rope_scaling": None, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.37.0", "use_cache": True,
        "vocab_size": 51200}
refused("Phi-2's config.json beside a tiny model's weights (its size: the release's 2,779,683,840 parameters)",
        ["--from", "hf", "--input", hf_folder("phi2-config", pt, PHI2), "--output", bad_out], bad_out,
        "describes a Phi model of 2779683840 parameters")
# configs/phi-2.yaml: the planner's parameter count is the release's
plan_count_check(trident, "phi-2.yaml", 2_779_683_840)
tt.finish("convert-phi-cli: all checks passed")
