#!/usr/bin/python3
"""`trident convert` of OPT folders (OPTForCausalLM) end to end without PyTorch (it runs in the
sanitizer build too; the folders are written by hf_files.py):
  - every released OPT's shape (ReLU in ffn_dim 3C, biases, tied): HF -> trident -> HF bit for bit
    from the manifest's family line alone (it ends with ' relu 1'), embed_positions' first 2 rows
    (OPTLearnedPositionalEmbedding's offset, read by no position) zeros both ways and dropped on
    import when they are not, its switches printed, config.json's keys back; generate of the
    folder; shards and BF16 both ways; OPTModel's names (decoder.*: the released files') the
    same, both names of a tensor or neither refused; OPTConfig's defaults for absent keys (relu, enable_bias,
    tied, 2048 positions); without linear biases, untied, gelu_new: round trip as OPT too; with
    biases and gelu_new, GPT-BigCode's shape, exported as GPTBigCode, which imports to the same
    checkpoint;
  - every setting trident cannot represent refused with exit 2 naming the key
    (do_layer_norm_before false, word_embed_proj_dim other than hidden_size, _remove_final_layer_norm
    true, layer_norm_elementwise_affine false, another activation, hidden_size not divisible by the
    heads), and files that are not the model config.json describes (a bias with enable_bias false,
    embed_positions without its 2 rows);
  - exports: relu beside rope, ALiBi, RMSNorm, the parallel residual, GQA, an embedding norm, an
    output-layer bias or norms without biases, and learned positions without biases beside GQA,
    the parallel residual or an embedding norm refused (transformers has no such model);
  - the manifest's family line: relu 1 twice, relu 0, relu 2, relu 1 with gelu_exact 1 or swiglu 1
    refused; a resume with relu false names the difference;
  - `trident convert --help` names OPT;
  - configs/opt-1.3b.yaml: trident plan counts transformers' count less embed_positions' 2 rows.
usage: test_convert_opt_cli.py TRIDENT WORKDIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import C, L, P, V, Session, family_lines, plan_count_check, rand, same_checkpoint, st_read  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")
NH, F = 4, 3 * C

OPT = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": C, "num_hidden_layers": L,
       "num_attention_heads": NH, "ffn_dim": F, "max_position_embeddings": P, "vocab_size": V,
       "word_embed_proj_dim": C, "activation_function": "relu", "do_layer_norm_before": True,
       "enable_bias": True, "layer_norm_elementwise_affine": True, "_remove_final_layer_norm": False,
       "tie_word_embeddings": True, "bos_token_id": V - 1, "eos_token_id": V - 1}
NOBIAS = dict(OPT, activation_function="gelu_new", enable_bias=False, tie_word_embeddings=False)


def opt_tensors(bias=True, tied=True, ffn=F, offset_rows=None, positions=P + 2):
    """An OPT's tensors; embed_positions' first 2 rows zeros (offset_rows: theirs)"""
    d = "model.decoder."
    pos = (offset_rows or [0.0] * (2 * C)) + rand((positions - 2) * C)
    t = [(d + "embed_tokens.weight", "F32", (V, C), rand(V * C)),
         (d + "embed_positions.weight", "F32", (positions, C), pos)]
    for i in range(L):
        b = f"{d}layers.{i}."
        lin = [(p, C, C) for p in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                   "self_attn.out_proj")] + [("fc1", ffn, C), ("fc2", C, ffn)]
        for n in ("self_attn_layer_norm", "final_layer_norm"):
            t += [(b + n + ".weight", "F32", (C,), rand(C, 2)), (b + n + ".bias", "F32", (C,), rand(C))]
        for n, rows, cols in lin:
            t += [(b + n + ".weight", "F32", (rows, cols), rand(rows * cols))]
            t += [(b + n + ".bias", "F32", (rows,), rand(rows))] if bias else []
    t += [(d + "final_layer_norm.weight", "F32", (C,), rand(C, 2)), (d + "final_layer_norm.bias", "F32", (C,), rand(C))]
    return t + ([] if tied else [("lm_head.weight", "F32", (V, C), rand(V * C))])


ot = opt_tensors()
d = hf_folder("opt", ot, OPT)
ck = os.path.join(work, "ck-opt")
rc, so, se = convert("--from", "hf", "--input", d, "--output", ck)
want = ["normalization: LayerNorm", "position_embedding_type: learned_absolute", "relu: true",
        f"num_query_groups: {NH}", f"ffn_hidden_size: {F}", "untie_embeddings_and_output_weights: false",
        "embedding_layernorm: false"]
tt.check("opt: imported, its switches printed", rc == 0 and all(w in so for w in want) and "gelu_approximate" not in so
         and "add_bias_linear: false" not in so, so + se)
fam = family_lines(ck) if rc == 0 else []
tt.check("opt: the family line: position 0, untie 0, linear_bias 1, ends with ' relu 1' alone",
         len(fam) == 1 and " position 0 " in fam[0] and " untie 0 " in fam[0] and " linear_bias 1 " in fam[0]
         and fam[0].endswith(" relu 1") and "gelu_exact" not in fam[0], str(fam))
back = os.path.join(work, "opt-back")
rc, so2, se2 = convert("--to", "hf", "--input", ck, "--output", back)
got = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
tt.check("opt: HF -> trident -> HF (the manifest's family line alone) is bit-exact",
         rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(d, "model.safetensors")),
         f"exit {rc} {se2}")
tt.check("opt: the export's config.json: OPTForCausalLM, the sizes, relu, enable_bias, tied, pre-LN",
         all(got.get(k) == OPT[k] for k in OPT if k not in ("bos_token_id", "eos_token_id")), str(got))
rc, so, se = tt.outputs([trident, "generate", d, "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                         "--temperature", "0", "--json"], timeout=120)
tt.check("opt: trident generate of the folder", rc == 0 and len(json.loads(so)["generated_ids"]) >= 1,
         f"exit {rc} {se[-500:]}")
session.shards_check("OPT in shards: imported, the same checkpoint", ck, "opt", "8KB")
session.bf16_check("OPT in BF16: exported, imported and exported again, the same bytes", ck, "opt")
# embed_positions' rows 0 and 1 (no position reads them) dropped: the export writes zeros there
ot_off = [t if "embed_positions" not in t[0] else (t[0], t[1], t[2], [0.5] * (2 * C) + t[3][2 * C:]) for t in ot]
ck_off = os.path.join(work, "ck-offset")
rc, so, se = convert("--from", "hf", "--input", hf_folder("opt-offset", ot_off, OPT), "--output", ck_off)
back_off = os.path.join(work, "opt-offset-back")
rc2, so2, se2 = convert("--to", "hf", "--input", ck_off, "--output", back_off) if rc == 0 else (1, "", "")
tt.check("embed_positions' first 2 rows are dropped on import and exported as zeros (the same checkpoint)",
         rc2 == 0 and
         st_read(os.path.join(back_off, "model.safetensors")) == st_read(os.path.join(d, "model.safetensors")),
         f"exit {rc}/{rc2} {se}{se2}")
# the released facebook/opt-* files' names: OPTModel's (decoder.*, no model. prefix, no lm_head)
ck_base = os.path.join(work, "ck-base-names")
rc, so, se = convert("--from", "hf", "--input", hf_folder("opt-base-names", [(n[len("model."):], *r) for n, *r in ot],
                                                          OPT), "--output", ck_base)
tt.check("OPTModel's names (decoder.*, as facebook/opt-* files hold them) import to the same checkpoint",
         rc == 0 and same_checkpoint(ck, ck_base), se)
LNF = "model.decoder.final_layer_norm.weight"
refused("OPT: a folder holding model.decoder.final_layer_norm.weight and decoder.final_layer_norm.weight",
        ["--from", "hf", "--input", hf_folder("bad-opt", ot + [(LNF[len("model."):], "F32", (C,), rand(C))], OPT),
         "--output", bad_out],
        bad_out, "holds both 'model.decoder.final_layer_norm.weight' and 'decoder.final_layer_norm.weight'")
refused("OPT: no final_layer_norm.weight under either name",
        ["--from", "hf", "--input", hf_folder("bad-opt", [t for t in ot if t[0] != LNF], OPT), "--output", bad_out],
        bad_out, "no tensor 'model.decoder.final_layer_norm.weight' (nor 'decoder.final_layer_norm.weight')")
# OPTConfig's defaults for absent keys (2048 positions, relu, enable_bias, tied, pre-LN)
lean = {k: v for k, v in OPT.items() if k not in ("max_position_embeddings", "enable_bias", "tie_word_embeddings",
                                                  "word_embed_proj_dim", "do_layer_norm_before", "activation_function",
                                                  "layer_norm_elementwise_affine", "_remove_final_layer_norm")}
rc, so, se = convert("--from", "hf", "--input", hf_folder("opt-lean", opt_tensors(positions=2050), lean),
                     "--output", os.path.join(work, "ck-lean"))
tt.check("absent keys take OPTConfig's defaults (2048 positions, relu, biases, tied)",
         rc == 0 and "max_position_embeddings: 2048" in so and "add_bias_linear: false" not in so and
         "untie_embeddings_and_output_weights: false" in so and "relu: true" in so, so + se)
# without linear biases, untied, gelu_new: an OPT too (no other family's shape), both ways
nt = opt_tensors(bias=False, tied=False)
d_nb = hf_folder("opt-nobias", nt, NOBIAS)
ck_nb, back_nb = os.path.join(work, "ck-nobias"), os.path.join(work, "opt-nobias-back")
rc, so, se = convert("--from", "hf", "--input", d_nb, "--output", ck_nb)
fam = family_lines(ck_nb) if rc == 0 else []
rc2, so2, se2 = convert("--to", "hf", "--input", ck_nb, "--output", back_nb) if rc == 0 else (1, "", "")
got = json.load(open(os.path.join(back_nb, "config.json"))) if rc2 == 0 else {}
tt.check("opt without linear biases, untied, gelu_new: linear_bias 0 untie 1 (no relu), HF -> trident -> HF as OPT",
         rc2 == 0 and "add_bias_linear: false" in so and len(fam) == 1 and " linear_bias 0 " in fam[0] and
         " untie 1 " in fam[0] and "relu" not in fam[0] and
         st_read(os.path.join(back_nb, "model.safetensors")) == st_read(os.path.join(d_nb, "model.safetensors")) and
         all(got.get(k) == NOBIAS[k] for k in NOBIAS if k not in ("bos_token_id", "eos_token_id")),
         f"exit {rc}/{rc2} {se}{se2} {fam} {got}")
# with biases and a GELU, GPT-BigCode's shape: exported as that, which imports to the same checkpoint
ck_g, g_out, ck_g2 = (os.path.join(work, n) for n in ("ck-gelu", "opt-gelu-bigcode", "ck-gelu-bigcode"))
rc, so, se = convert("--from", "hf", "--input", hf_folder("opt-gelu", ot, dict(OPT, activation_function="gelu_new")),
                     "--output", ck_g)
rc, so, se = convert("--to", "hf", "--input", ck_g, "--output", g_out) if rc == 0 else (rc, so, se)
got = json.load(open(os.path.join(g_out, "config.json"))) if rc == 0 else {}
rc2, so2, se2 = convert("--from", "hf", "--input", g_out, "--output", ck_g2) if rc == 0 else (1, "", "")
tt.check("an OPT with biases and gelu_new exports as GPT-BigCode (its shape), which imports to the same checkpoint",
         rc2 == 0 and got.get("model_type") == "gpt_bigcode" and same_checkpoint(ck_g, ck_g2),
         f"exit {rc}/{rc2} {se}{se2} {got.get('model_type')}")

# config.json settings trident cannot represent: exit 2 naming the key
for what, edit, cause in (
        ("do_layer_norm_before false (OPT-350m)", dict(do_layer_norm_before=False),
         "do_layer_norm_before false is not supported"),
        ("word_embed_proj_dim 16 (OPT-350m's project_in / project_out)", dict(word_embed_proj_dim=16),
         f"word_embed_proj_dim 16 other than hidden_size {C} is not supported"),
        ("_remove_final_layer_norm true", dict(_remove_final_layer_norm=True),
         "_remove_final_layer_norm true is not supported"),
        ("layer_norm_elementwise_affine false", dict(layer_norm_elementwise_affine=False),
         "layer_norm_elementwise_affine false is not supported"),
        ("activation_function silu", dict(activation_function="silu"), "activation_function is not supported"),
        ("enable_bias not a bool", dict(enable_bias="yes"), "enable_bias must be true or false"),
        ("hidden_size not divisible by the heads", dict(num_attention_heads=5),
         "hidden_size 32 is not divisible by num_attention_heads 5")):
    refused(f"OPT: {what}", ["--from", "hf", "--input", hf_folder("bad-opt", ot, dict(OPT, **edit)), "--output",
                             bad_out], bad_out, cause)
fc1_bias = [("model.decoder.layers.0.fc1.bias", "F32", (F,), rand(F))]
refused("OPT: a fc1.bias with enable_bias false",
        ["--from", "hf", "--input", hf_folder("bad-opt", nt + fc1_bias, NOBIAS), "--output", bad_out],
        bad_out, "tensor 'model.decoder.layers.0.fc1.bias' is not part of the OPT model")
refused("OPT: embed_positions of max_position_embeddings rows (no offset rows)",
        ["--from", "hf", "--input", hf_folder("bad-opt", opt_tensors(positions=P + 1), OPT), "--output", bad_out],
        bad_out, f"tensor 'model.decoder.embed_positions.weight' is [{P + 1}, {C}]; "
                 f"the model of config.json has [{P + 2}, {C}]")

# exports by the config's switches: relu is OPT's alone, learned positions without biases OPT's too
okeys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
             vocab_size=V, normalization="LayerNorm", position_embedding_type="learned_absolute", ffn_hidden_size=F)


def opt_config(name, **keys):
    return tt.write_config(os.path.join(work, name + ".yaml"), model=dict(okeys, **keys),
                           training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))


for what, keys in (("relu with rope", dict(relu=True, position_embedding_type="rope")),
                   ("relu with ALiBi", dict(relu=True, position_embedding_type="alibi")),
                   ("relu with RMSNorm", dict(relu=True, normalization="RMSNorm")),
                   ("relu with the parallel residual", dict(relu=True, parallel_residual=True)),
                   ("relu with 2 key/value groups of 4 heads", dict(relu=True, num_query_groups=2)),
                   ("relu with an embedding norm", dict(relu=True, embedding_layernorm=True)),
                   ("relu with an output-layer bias", dict(relu=True, untie_embeddings_and_output_weights=True,
                                                           output_layer_bias=True)),
                   ("relu with norms without biases", dict(relu=True, layernorm_bias=False)),
                   ("learned positions without biases and 2 key/value groups",
                    dict(add_bias_linear=False, num_query_groups=2)),
                   ("learned positions without biases and the parallel residual",
                    dict(add_bias_linear=False, parallel_residual=True)),
                   ("learned positions without biases and an embedding norm",
                    dict(add_bias_linear=False, embedding_layernorm=True))):
    refused(f"an export with --config of {what}",
            ["--to", "hf", "--input", ck, "--output", bad_out, "--config", opt_config("odd", **keys)],
            bad_out, "MPT nor OPT: transformers has no such model to export to")

# the family line's OPT end: relu 1 once, last, never with gelu_exact 1 or swiglu 1
session.manifest_refused("OPT", ck, (
    ("relu 1 twice", " relu 1", " relu 1 relu 1"),
    ("relu 0", " relu 1", " relu 0"),
    ("relu 2", " relu 1", " relu 2"),
    ("relu 1 with gelu_exact 1", " relu 1", " gelu_exact 1 relu 1"),
    ("relu 1 with swiglu 1", " swiglu 0 ", " swiglu 1 ")),
    "expected the family line")
# a run from the import with relu false: the difference named
session.resume_refused("OPT", "relu false", dict(okeys), ck, "relu 0 (the checkpoint's: 1)")

rc, so, se = convert("--help")
tt.check("trident convert --help names OPT (OPTForCausalLM) and its switches", rc == 0 and "MPT and OPT" in so and
         "OPTForCausalLM" in so and "OPT:" in so, so + se)
# configs/opt-1.3b.yaml: transformers' 1,315,758,080 less embed_positions' 2 offset rows (2 x 2048)
plan_count_check(trident, "opt-1.3b.yaml", 1_315_758_080, 2 * 2048, "embed_positions' 2 rows no position reads")
tt.finish("convert-opt-cli: all checks passed")
