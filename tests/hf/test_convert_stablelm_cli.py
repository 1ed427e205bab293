#!/usr/bin/python3
"""`trident convert` of StableLM folders (StableLmForCausalLM: StableLM-3B-4E1T, StableLM-2) end
to end without PyTorch (it runs in the sanitizer build too; the folders are written by
hf_files.py):
  - a StableLM (4 heads in 2 key/value groups, use_qkv_bias true, partial_rotary_factor 0.5)
    HF -> trident -> HF bit for bit from the manifest's family line alone and with --config,
    its switches printed, generate of the checkpoint and of the folder, in shards and in BF16;
    one without q/k/v biases, tied, partial_rotary_factor 0.25 the same way;
    StableLmConfig's defaults for absent keys;
  - every setting trident cannot represent refused with exit 2 naming it (rope_scaling,
    hidden_act, a rotary share of an odd or no dimension, later transformers' qk_layernorm and
    use_parallel_residual), and files that are not the model config.json describes (a missing
    LayerNorm bias, q/k/v biases with use_qkv_bias false, a Phi's dense);
  - the export's family: LayerNorm with SwiGLU and no linear biases is StableLM, a Llama stays
    a Llama, the parallel residual of those switches is refused;
  - configs/stablelm-3b-4e1t.yaml and configs/stablelm-2-1.6b.yaml: the releases' parameter
    counts (transformers 4.38 on the meta device) in trident plan.
usage: test_convert_stablelm_cli.py TRIDENT WORKDIR"""
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
SC = {"architectures": ["StableLmForCausalLM"], "model_type": "stablelm", "hidden_size": C, "intermediate_size": F,
      "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "max_position_embeddings": P,
      "vocab_size": V, "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "layer_norm_eps": 1e-5,
      "hidden_act": "silu", "tie_word_embeddings": False, "use_qkv_bias": True, "rope_scaling": None,
      "hidden_dropout": 0.1, "attention_dropout": 0.1}  # (dropouts: recorded, exported back)


def stablelm_tensors(ng=NG, qkv_bias=True, head=True, norm_bias=True):
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"model.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)), (h + "input_layernorm.bias", "F32", (C,), rand(C))]
        for p, rows in (("q", C), ("k", ng * HS), ("v", ng * HS)):
            t += [(h + f"self_attn.{p}_proj.weight", "F32", (rows, C), rand(rows * C))]
            t += [(h + f"self_attn.{p}_proj.bias", "F32", (rows,), rand(rows))] if qkv_bias else []
        t += [(h + "self_attn.o_proj.weight", "F32", (C, C), rand(C * C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "post_attention_layernorm.bias", "F32", (C,), rand(C)),
              (h + "mlp.gate_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.up_proj.weight", "F32", (F, C), rand(F * C)),
              (h + "mlp.down_proj.weight", "F32", (C, F), rand(F * C))]
    t += [("model.norm.weight", "F32", (C,), rand(C, 2))]
    t += [("model.norm.bias", "F32", (C,), rand(C))] if norm_bias else []
    return t + ([("lm_head.weight", "F32", (V, C), rand(V * C))] if head else [])


SWITCHES = ("normalization: LayerNorm", "position_embedding_type: rope", "swiglu: true",
            "add_bias_linear: false", "embedding_layernorm: false", "layernorm_epsilon: 1e-05")
st = stablelm_tensors()
dp = hf_folder("stablelm", st, SC)
ck = os.path.join(work, "ck-stablelm")
rc, so, se = convert("--from", "hf", "--input", dp, "--output", ck)
tt.check("StableLM (GQA 4/2, use_qkv_bias, partial_rotary_factor 0.5): imported, its switches printed",
         rc == 0 and all(k in so for k in SWITCHES + ("rotary_percent: 0.5", "add_qkv_bias: true",
                                                     f"ffn_hidden_size: {F}", f"num_query_groups: {NG}",
                                                     "untie_embeddings_and_output_weights: true"))
         and "parallel_residual: true" not in so and "output_layer_bias: true" not in so, se + so)
manifest = open(os.path.join(ck, "release", "manifest.txt")).read() if rc == 0 else ""
fam = [line for line in manifest.splitlines() if line.startswith("family ")]
tt.check("StableLM: the manifest's family line: rmsnorm 0, rotary_dims 4, swiglu 1, query_groups 2, untie 1, "
         "linear_bias 0, qkv_bias 1",
         len(fam) == 1 and all(f" {k} " in fam[0] + " " for k in ("rmsnorm 0", "rotary_dims 4", "swiglu 1",
                                                                  "query_groups 2", "untie 1", "linear_bias 0",
                                                                  "qkv_bias 1")), manifest[:600])
model_keys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
                  vocab_size=V, normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.5,
                  swiglu=True, ffn_hidden_size=F, num_query_groups=NG, untie_embeddings_and_output_weights=True,
                  add_bias_linear=False, add_qkv_bias=True)


def config(name, **keys):
    model = {k: v for k, v in dict(model_keys, **keys).items() if v is not None}
    return tt.write_config(os.path.join(work, name + ".yaml"), model=model,
                           training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))


scfg = config("stablelm")
back = os.path.join(work, "stablelm-back")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", back)
out_cfg = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
want = {"model_type": "stablelm", "architectures": ["StableLmForCausalLM"], "hidden_size": C, "intermediate_size": F,
        "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "max_position_embeddings": P,
        "vocab_size": V, "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "layer_norm_eps": 1e-5,
        "hidden_act": "silu", "tie_word_embeddings": False, "use_qkv_bias": True, "rope_scaling": None,
        "qk_layernorm": False, "use_parallel_residual": False, "hidden_dropout": 0.1, "attention_dropout": 0.1,
        "torch_dtype": "float32"}
tt.check("StableLM: HF -> trident -> HF from the manifest alone is bit-exact (LayerNorm and q/k/v biases too), a "
         "StableLmForCausalLM of the same settings",
         rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(dp, "model.safetensors"))
         and all(out_cfg.get(k) == v for k, v in want.items()),
         f"{se}\n{ {k: out_cfg.get(k) for k in want} }")
back2 = os.path.join(work, "stablelm-back-config")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", back2, "--config", scfg)
tt.check("StableLM: the export with --config gives the same files",
         rc == 0 and all(open(os.path.join(back, f), "rb").read() == open(os.path.join(back2, f), "rb").read()
                         for f in ("model.safetensors", "config.json")), se)
ck_back = os.path.join(work, "ck-stablelm-back")
rc, so, se = convert("--from", "hf", "--input", back, "--output", ck_back)
tt.check("StableLM: the export imports to the same checkpoint", rc == 0 and same_checkpoint(ck, ck_back), se)
for what, where in (("the checkpoint without --config", ck), ("the HF folder", dp)):
    rc, so, se = tt.outputs([trident, "generate", where, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                             "--temperature", "0"])
    tt.check(f"generate from {what} (StableLM): exit 0", rc == 0, se)
session.shards_check("StableLM in shards: imported, the same checkpoint", ck, "stablelm", "8KB")
session.bf16_check("StableLM in BF16: exported, imported (the size check at 2 bytes a parameter passes) and exported "
                   "again bit for bit, torch_dtype bfloat16", ck, "stablelm")
# no q/k/v biases, the head tied (no lm_head.weight in the files), a quarter of each head rotated
st_tied = stablelm_tensors(qkv_bias=False, head=False)
tied_cfg = dict(SC, use_qkv_bias=False, tie_word_embeddings=True, partial_rotary_factor=0.25)
dt = hf_folder("stablelm-tied", st_tied, tied_cfg)
ck_t = os.path.join(work, "ck-stablelm-tied")
rc, so, se = convert("--from", "hf", "--input", dt, "--output", ck_t)
back_t = os.path.join(work, "stablelm-tied-back")
rc2, so2, se2 = convert("--to", "hf", "--input", ck_t, "--output", back_t) if rc == 0 else (1, "", "")
tcfg = json.load(open(os.path.join(back_t, "config.json"))) if rc2 == 0 else {}
tt.check("StableLM without q/k/v biases, tied, partial_rotary_factor 0.25 (2 of 8 dimensions): imported and exported "
         "bit for bit, the same settings",
         rc2 == 0 and "rotary_percent: 0.25" in so and "add_qkv_bias" not in so and
         "untie_embeddings_and_output_weights: false" in so and
         st_read(os.path.join(back_t, "model.safetensors")) == st_read(os.path.join(dt, "model.safetensors")) and
         tcfg.get("use_qkv_bias") is False and tcfg.get("tie_word_embeddings") is True and
         tcfg.get("partial_rotary_factor") == 0.25, se + se2 + so)
rc, so, se = tt.outputs([trident, "generate", dt, "--prompt-ids", "1,2,3", "--max-new-tokens", "3", "--temperature", "0"])
tt.check("generate from the tied StableLM folder: exit 0", rc == 0, se)
# StableLmConfig's defaults: 32 key/value heads; 4096 positions, eps 1e-5, rope_theta 10000, a
# quarter of each head rotated, no q/k/v biases, untied
st_d = stablelm_tensors(ng=NH, qkv_bias=False)
defaults = {"model_type": "stablelm", "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
            "num_attention_heads": NH, "vocab_size": V}
ck_d = os.path.join(work, "ck-stablelm-defaults")
rc, so, se = convert("--from", "hf", "--input", hf_folder("stablelm-defaults", st_d, defaults), "--output", ck_d)
tt.check("StableLM without num_key_value_heads: StableLmConfig's 32, which 4 heads refuse",
         rc == 2 and "4 heads (32 key/value heads) do not divide" in se, se + so)
rc, so, se = convert("--from", "hf", "--input", hf_folder("stablelm-defaults", st_d, dict(defaults, num_key_value_heads=NH)),
                     "--output", ck_d)
tt.check("StableLM with the sizes alone: StableLmConfig's defaults (4096 positions, eps 1e-5, rope_theta 10000, "
         "partial_rotary_factor 0.25, no q/k/v biases, untied)",
         rc == 0 and all(k in so for k in ("max_position_embeddings: 4096", "layernorm_epsilon: 1e-05",
                                          "rotary_base: 10000", "rotary_percent: 0.25",
                                          "untie_embeddings_and_output_weights: true"))
         and "add_qkv_bias" not in so, se + so)
# what trident cannot represent, and files that are not the model config.json describes
for what, tensors, cfg, cause, *names in [
    ("rope_scaling", st, dict(SC, rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling is not supported"),
    ("hidden_act gelu", st, dict(SC, hidden_act="gelu"), "hidden_act is not supported"),
    ("hidden_act 7", st, dict(SC, hidden_act=7), "hidden_act is not supported"),
    ("partial_rotary_factor 0.375 (3 rotated dimensions of 8: odd)", st, dict(SC, partial_rotary_factor=0.375),
     "partial_rotary_factor 0.375 of the head size 8 rotates 3"),
    ("partial_rotary_factor 0.2 (1 rotated dimension)", st, dict(SC, partial_rotary_factor=0.2), "rotates 1"),
    ("partial_rotary_factor 0.1 (0 rotated dimensions)", st, dict(SC, partial_rotary_factor=0.1), "rotates 0"),
    ("partial_rotary_factor 1.5", st, dict(SC, partial_rotary_factor=1.5), "partial_rotary_factor must be in (0, 1]"),
    ("partial_rotary_factor a string", st, dict(SC, partial_rotary_factor="0.5"),
     "partial_rotary_factor must be a positive number"),
    ("qk_layernorm true (later transformers')", st, dict(SC, qk_layernorm=True), "qk_layernorm true is not supported"),
    ("use_parallel_residual true (later transformers')", st, dict(SC, use_parallel_residual=True),
     "use_parallel_residual true is not supported"),
    ("use_qkv_bias 1", st, dict(SC, use_qkv_bias=1), "use_qkv_bias must be true or false"),
    ("tie_word_embeddings 'no'", st, dict(SC, tie_word_embeddings="no"), "tie_word_embeddings must be true or false"),
    ("layer_norm_eps 0", st, dict(SC, layer_norm_eps=0), "layer_norm_eps must be a positive number"),
    ("3 key/value heads of 4", st, dict(SC, num_key_value_heads=3), "do not divide"),
    ("no intermediate_size", st, {k: v for k, v in SC.items() if k != "intermediate_size"},
     "intermediate_size is missing"),
    ("a missing model.norm.bias", stablelm_tensors(norm_bias=False), SC, "no tensor 'model.norm.bias'"),
    ("a missing post_attention_layernorm bias",
     [t for t in st if t[0] != "model.layers.1.post_attention_layernorm.bias"], SC,
     "no tensor 'model.layers.1.post_attention_layernorm.bias'"),
    ("q/k/v biases with use_qkv_bias false", st, dict(SC, use_qkv_bias=False),
     "_proj.bias' is not part of the StableLM model", ["use_qkv_bias is false"]),
    ("no q/k/v biases with use_qkv_bias true", stablelm_tensors(qkv_bias=False), SC,
     "no tensor 'model.layers.0.self_attn.q_proj.bias'"),
    ("an o_proj bias", st + [("model.layers.0.self_attn.o_proj.bias", "F32", (C,), rand(C))], SC,
     "'model.layers.0.self_attn.o_proj.bias' is not part of the StableLM model"),
    ("a Phi's dense", st + [("model.layers.0.self_attn.dense.weight", "F32", (C, C), rand(C * C))], SC,
     "'model.layers.0.self_attn.dense.weight' is not part of the StableLM model"),
    ("a k_proj of a key/value head per head (config says 2)",
     [(n, d, (C, C), rand(C * C)) if n == "model.layers.0.self_attn.k_proj.weight" else (n, d, sh, v)
      for n, d, sh, v in st], SC, "'model.layers.0.self_attn.k_proj.weight' is [32, 32]"),
    ("config.json of 4194304 layers", st, dict(SC, num_hidden_layers=1 << 22), "config.json describes a StableLM model"),
]:
    d = hf_folder("bad-stablelm", tensors, cfg)
    refused(f"StableLM: {what}", ["--from", "hf", "--input", d, "--output", bad_out], bad_out, cause, *names)
# the export's family: these switches with the parallel residual, or the head's bias, are no
# transformers model; a Llama (RMSNorm) of the same checkpoint sizes is still a Llama
for what, keys in (("the parallel residual", dict(parallel_residual=True)),
                   ("one norm for the parallel residual", dict(parallel_residual=True, parallel_shared_norm=True)),
                   ("the output layer's bias", dict(output_layer_bias=True)),
                   ("an embedding norm", dict(embedding_layernorm=True))):
    refused(f"an export with --config of the StableLM with {what}",
            ["--to", "hf", "--input", ck, "--output", bad_out, "--config", config("odd-switches", **keys)], bad_out,
            "transformers has no such model to export to")
st_llama = [t for t in st if "layernorm.bias" not in t[0] and t[0] != "model.norm.bias" and "_proj.bias" not in t[0]]
llama_cfg = dict(SC, model_type="llama", architectures=["LlamaForCausalLM"], rms_norm_eps=1e-5)
for k in ("partial_rotary_factor", "use_qkv_bias", "layer_norm_eps"):
    llama_cfg.pop(k)
ck_l = os.path.join(work, "ck-llama")
rc, so, se = convert("--from", "hf", "--input", hf_folder("llama", st_llama, llama_cfg), "--output", ck_l)
back_l = os.path.join(work, "llama-back")
rc2, so2, se2 = convert("--to", "hf", "--input", ck_l, "--output", back_l) if rc == 0 else (1, "", "")
tt.check("a Llama of the same sizes still exports as LlamaForCausalLM",
         rc2 == 0 and json.load(open(os.path.join(back_l, "config.json"))).get("model_type") == "llama", se + se2)
# configs/stablelm-*.yaml: the planner's parameter count is the release's
for name, release in (("stablelm-3b-4e1t.yaml", 2_795_443_200), ("stablelm-2-1.6b.yaml", 1_644_515_328)):
    plan_count_check(trident, name, release)
tt.finish("convert-stablelm-cli: all checks passed")
