#!/usr/bin/python3
"""`trident convert` of GPT-J folders (GPTJForCausalLM) end to end without PyTorch (it runs in the
sanitizer build too; the folders are written by hf_files.py):
  - rotary_dim 4 of a head of 8 (q_proj's and k_proj's interleaved rotary rows permuted into
    trident's halves and back) with gelu_new, and rotary_dim 8 with the exact GELU and n_inner 3h:
    HF -> trident -> HF bit for bit from the manifest's family line alone (it ends with
    ' output_bias 1 mlp_bias 1'), their switches printed, config.json's keys back; generate of the
    folder; the causal-mask buffers of older files (attn.bias, attn.masked_bias) ignored;
    shards and BF16 both ways; GPTJConfig's defaults for absent keys;
  - every setting trident cannot represent refused with exit 2 naming the key (rotary_dim null,
    odd, past the head, a string; another activation_function; tie_word_embeddings true; n_embd not
    divisible by n_head), and files that are not the model config.json describes (a q_proj.bias);
  - exports: add_mlp_bias beside the attention's biases (add_bias_linear true: ignored) is a Phi;
    add_mlp_bias with learned positions, 2 key/value groups, a rotary base other than 10000 or
    sequential layers refused (transformers has no such model);
  - the manifest's family line: mlp_bias twice, 2, before output_bias or with linear_bias 1
    refused; a resume without add_mlp_bias names the difference;
  - configs/gptj-6b.yaml: trident plan counts transformers' 6,050,882,784 parameters.
usage: test_convert_gptj_cli.py TRIDENT WORKDIR"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import C, L, P, V, Session, plan_count_check, rand, st_read  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")
NH = 4
HS = C // NH  # 8

GJ = {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": C, "n_layer": L, "n_head": NH,
      "n_positions": P, "vocab_size": V, "rotary_dim": 4, "n_inner": None, "activation_function": "gelu_new",
      "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
      "attn_pdrop": 0.0, "bos_token_id": V - 1, "eos_token_id": V - 1}


def gptj_tensors(ffn=4 * C, buffers=False):
    t = [("transformer.wte.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"transformer.h.{i}."
        t += [(h + "ln_1.weight", "F32", (C,), rand(C, 2)), (h + "ln_1.bias", "F32", (C,), rand(C))]
        t += [(h + f"attn.{p}_proj.weight", "F32", (C, C), rand(C * C)) for p in ("q", "k", "v", "out")]
        t += [(h + "mlp.fc_in.weight", "F32", (ffn, C), rand(ffn * C)), (h + "mlp.fc_in.bias", "F32", (ffn,), rand(ffn)),
              (h + "mlp.fc_out.weight", "F32", (C, ffn), rand(ffn * C)), (h + "mlp.fc_out.bias", "F32", (C,), rand(C))]
        if buffers:
            t += [(h + "attn.bias", "F32", (1, 1, P, P), [1.0] * (P * P)), (h + "attn.masked_bias", "F32", (), [-1e9])]
    return t + [("transformer.ln_f.weight", "F32", (C,), rand(C, 2)), ("transformer.ln_f.bias", "F32", (C,), rand(C)),
                ("lm_head.weight", "F32", (V, C), rand(V * C)), ("lm_head.bias", "F32", (V,), rand(V))]


def family_line(ck):
    text = open(os.path.join(ck, "release", "manifest.txt")).read()
    return [line for line in text.splitlines() if line.startswith("family ")]


def roundtrip(name, tensors, config, want_lines, want_keys, rot):
    """config + tensors -> trident -> HF from the manifest alone: its switches printed, the family
    line, the tensors bit for bit, config.json's want_keys; the checkpoint."""
    d = hf_folder(name, tensors, config)
    ck = os.path.join(work, "ck-" + name)
    rc, so, se = convert("--from", "hf", "--input", d, "--output", ck)
    tt.check(f"{name}: imported, its switches printed", rc == 0 and all(w in so for w in want_lines) and
             ("gelu_approximate: none" in so) == ("gelu_approximate: none" in want_lines), so + se)
    fam = family_line(ck) if rc == 0 else []
    tt.check(f"{name}: the family line: linear_bias 0, rotary_dims {rot}, ends with ' output_bias 1 mlp_bias 1'",
             len(fam) == 1 and " linear_bias 0 " in fam[0] and f" rotary_dims {rot} " in fam[0] and
             fam[0].endswith(" parallel_shared_norm 1 output_bias 1 mlp_bias 1"), str(fam))
    back = os.path.join(work, name + "-back")
    rc, so2, se2 = convert("--to", "hf", "--input", ck, "--output", back)
    got = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
    src = {k: v for k, v in st_read(os.path.join(d, "model.safetensors")).items()
           if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # (buffers: not written back)
    tt.check(f"{name}: HF -> trident -> HF (the manifest's family line alone) is bit-exact",
             rc == 0 and st_read(os.path.join(back, "model.safetensors")) == src, f"exit {rc} {se2}")
    tt.check(f"{name}: the export's config.json {want_keys}", all(got.get(k) == v for k, v in want_keys.items()),
             str(got))
    return d, ck


gt = gptj_tensors()
d4, ck4 = roundtrip("gptj-rot4", gt, GJ,
                    ["position_embedding_type: rope", "rotary_percent: 0.5", "add_bias_linear: false",
                     "add_mlp_bias: true", "parallel_residual: true", "parallel_shared_norm: true",
                     "output_layer_bias: true", "untie_embeddings_and_output_weights: true", f"num_query_groups: {NH}",
                     f"ffn_hidden_size: {4 * C}", "rotary_base: 10000"],
                    {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "rotary_dim": 4, "n_inner": 4 * C,
                     "activation_function": "gelu_new", "tie_word_embeddings": False, "n_positions": P}, 4)
rc, so, se = tt.outputs([trident, "generate", d4, "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                         "--temperature", "0", "--json"], timeout=120)
tt.check("gptj-rot4: trident generate of the folder", rc == 0 and len(json.loads(so)["generated_ids"]) >= 1,
         f"exit {rc} {se[-500:]}")
session.shards_check("GPT-J in shards: imported, the same checkpoint", ck4, "gptj", "8KB")
session.bf16_check("GPT-J in BF16: exported, imported and exported again, the same bytes", ck4, "gptj")
roundtrip("gptj-rot8", gptj_tensors(ffn=3 * C, buffers=True),
          dict(GJ, rotary_dim=HS, n_inner=3 * C, activation_function="gelu"),
          [f"ffn_hidden_size: {3 * C}", "gelu_approximate: none", "add_mlp_bias: true"],
          {"model_type": "gptj", "rotary_dim": HS, "n_inner": 3 * C, "activation_function": "gelu"}, HS)
# GPTJConfig's defaults for absent keys (2048 positions: no table to hold them; n_inner 4h, gelu_new)
lean = {k: v for k, v in GJ.items() if k not in ("n_inner", "activation_function", "layer_norm_epsilon",
                                                  "n_positions", "tie_word_embeddings")}
rc, so, se = convert("--from", "hf", "--input", hf_folder("gptj-lean", gt, lean), "--output",
                     os.path.join(work, "ck-lean"))
tt.check("absent keys take GPTJConfig's defaults (2048 positions, n_inner 4 n_embd, gelu_new, untied)",
         rc == 0 and "max_position_embeddings: 2048" in so and f"ffn_hidden_size: {4 * C}" in so and
         "gelu_approximate" not in so and "untie_embeddings_and_output_weights: true" in so, so + se)
rc, so, se = convert("--from", "hf", "--input", hf_folder("gptj-rot64", gt, {k: v for k, v in GJ.items()
                                                                              if k != "rotary_dim"}),
                     "--output", bad_out)
tt.check("rotary_dim absent: GPTJConfig's 64, past the head of 8: refused naming it",
         rc == 2 and "rotary_dim 64 is not supported" in se, f"exit {rc} {se}")
shutil.rmtree(bad_out, ignore_errors=True)

# config.json settings trident cannot represent: exit 2 naming the key
for what, edit, cause in (
        ("rotary_dim null", dict(rotary_dim=None), "rotary_dim null is not supported"),
        ("rotary_dim 3 (odd)", dict(rotary_dim=3), "rotary_dim 3 is not supported"),
        ("rotary_dim 16 (past the head of 8)", dict(rotary_dim=16), "rotary_dim 16 is not supported"),
        ("rotary_dim a string", dict(rotary_dim="4"), "rotary_dim must be an integer"),
        ("activation_function relu", dict(activation_function="relu"), "activation_function is not supported"),
        ("tie_word_embeddings true", dict(tie_word_embeddings=True), "tie_word_embeddings true is not supported"),
        ("n_embd not divisible by n_head", dict(n_head=5), "n_embd 32 is not divisible by n_head 5")):
    d = hf_folder("bad-gptj", gt, dict(GJ, **edit))
    refused(f"GPT-J: {what}", ["--from", "hf", "--input", d, "--output", bad_out], bad_out, cause)
refused("GPT-J: a q_proj.bias (GPT-J's attention has none)",
        ["--from", "hf", "--input", hf_folder("bad-gptj", gt + [("transformer.h.0.attn.q_proj.bias", "F32", (C,),
                                                                   rand(C))], GJ), "--output", bad_out],
        bad_out, "tensor 'transformer.h.0.attn.q_proj.bias' is not part of the GPT-J model")

# exports by the config's switches
gkeys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
             vocab_size=V, normalization="LayerNorm", position_embedding_type="rope", rotary_percent=0.5,
             untie_embeddings_and_output_weights=True, output_layer_bias=True, add_bias_linear=False,
             add_mlp_bias=True, parallel_residual=True, parallel_shared_norm=True)


def gptj_config(name, **keys):
    model = {k: v for k, v in dict(gkeys, **keys).items() if v is not None}  # (None: the key unset)
    return tt.write_config(os.path.join(work, name + ".yaml"), model=model,
                           training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))


for what, keys in (("add_mlp_bias with learned positions", dict(position_embedding_type="learned_absolute",
                                                                             rotary_percent=None)),
                   ("add_mlp_bias with 2 key/value groups", dict(num_query_groups=2)),
                   ("add_mlp_bias with rotary_base 500000", dict(rotary_base=500000)),
                   ("add_mlp_bias with the sequential residual", dict(parallel_residual=False,
                                                                       parallel_shared_norm=False))):
    refused(f"an export with --config of {what}",
            ["--to", "hf", "--input", ck4, "--output", bad_out, "--config", gptj_config("odd", **keys)],
            bad_out, "GPTBigCode, GPT-J, MPT nor OPT: transformers has no such model to export to")

# the family line's GPT-J end: mlp_bias 1 once, last, only without linear biases
session.manifest_refused("GPT-J", ck4, (
    ("mlp_bias 1 twice", " mlp_bias 1", " mlp_bias 1 mlp_bias 1"),
    ("mlp_bias 2", " mlp_bias 1", " mlp_bias 2"),
    ("mlp_bias 1 before output_bias 1", " output_bias 1 mlp_bias 1", " mlp_bias 1 output_bias 1"),
    ("mlp_bias 1 with linear_bias 1", " linear_bias 0 ", " linear_bias 1 ")),
    "expected the family line")
# a run from the import without add_mlp_bias: the difference named
session.resume_refused("GPT-J", "add_mlp_bias false", dict(gkeys, add_mlp_bias=False), ck4,
                       "add_mlp_bias 0 (the checkpoint's: 1)")

# configs/gptj-6b.yaml: the planner's count is transformers'
plan_count_check(trident, "gptj-6b.yaml", 6_050_882_784)
tt.finish("convert-gptj-cli: all checks passed")
