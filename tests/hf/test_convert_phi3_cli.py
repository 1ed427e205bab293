#!/usr/bin/python3
"""`trident convert` of Phi-3 folders (Phi3ForCausalLM) end to end without PyTorch (it runs in the
sanitizer build too; the folders are written by hf_files.py):
  - GQA, untied, a sliding_window below max_position_embeddings (Phi-3-mini-4k's 2047 of 4096,
    which transformers' eager and sdpa attention ignore): imported with every position (no
    sliding_window, seq_length the positions), hf_family: phi3 printed, the manifest's family line
    ending with ' hf_family phi3'; HF -> trident -> HF bit for bit from that line alone (qkv_proj
    and gate_up_proj fused, config.json's keys back, sliding_window null); generate of the folder;
    shards and BF16 both ways; tied (no lm_head) imports; Phi3Config's defaults for absent keys;
  - the same weights as a Llama's q/k/v_proj and gate/up_proj import to the same checkpoint but
    the manifest's hf_family; --config with hf_family phi3 exports the import the same; a config without it (a Llama's
    switches) refused naming hf_family, as is hf_family phi3 for the same weights imported as a
    Llama (the manifest's family line decides);
  - every setting trident cannot represent refused with exit 2 naming the key (rope_scaling:
    longrope / su, partial_rotary_factor, hidden_act, attention_bias, mlp_bias, head_dim, a
    sliding_window or tie_word_embeddings of the wrong type), and files that are not the model
    config.json describes (a Llama's q_proj, a qkv_proj of another GQA's rows);
  - model.hf_family phi3 with a LayerNorm refused by the config, with a window by the export;
  - the manifest's family line: hf_family phi3 twice, phi4, with rmsnorm 0 refused; a resume with
    hf_family auto names the difference;
  - `trident convert --help` names Phi-3;
  - configs/phi-3-mini-4k.yaml: trident plan counts transformers' 3,821,079,552.
usage: test_convert_phi3_cli.py TRIDENT WORKDIR"""
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
NH, NG, F = 4, 2, 48
HS = C // NH

PHI3 = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": C, "num_hidden_layers": L,
        "num_attention_heads": NH, "num_key_value_heads": NG, "intermediate_size": F, "vocab_size": V,
        "max_position_embeddings": P, "original_max_position_embeddings": P, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": False,
        "sliding_window": P // 2 - 1, "pad_token_id": None, "bos_token_id": V - 1, "eos_token_id": V - 1}


def phi3_tensors(tied=False, qkv_rows=(NH + 2 * NG) * HS):
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        b = f"model.layers.{i}."
        t += [(b + "input_layernorm.weight", "F32", (C,), rand(C, 2)),
              (b + "self_attn.qkv_proj.weight", "F32", (qkv_rows, C), rand(qkv_rows * C)),
              (b + "self_attn.o_proj.weight", "F32", (C, C), rand(C * C)),
              (b + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (b + "mlp.gate_up_proj.weight", "F32", (2 * F, C), rand(2 * F * C)),
              (b + "mlp.down_proj.weight", "F32", (C, F), rand(C * F))]
    t += [("model.norm.weight", "F32", (C,), rand(C, 2))]
    return t + ([] if tied else [("lm_head.weight", "F32", (V, C), rand(V * C))])


def llama_of(tensors):
    """The same model's tensors under a Llama's names: q/k/v_proj, gate/up_proj cut from the fused"""
    out = []
    for n, dt, shape, vals in tensors:
        if n.endswith("qkv_proj.weight"):
            cut = [0, NH * HS * C, (NH + NG) * HS * C, (NH + 2 * NG) * HS * C]
            out += [(n.replace("qkv_proj", p + "_proj"), dt, ((cut[i + 1] - cut[i]) // C, C), vals[cut[i]:cut[i + 1]])
                    for i, p in enumerate("qkv")]
        elif n.endswith("gate_up_proj.weight"):
            out += [(n.replace("gate_up_proj", "gate_proj"), dt, (F, C), vals[:F * C]),
                    (n.replace("gate_up_proj", "up_proj"), dt, (F, C), vals[F * C:])]
        else:
            out.append((n, dt, shape, vals))
    return out


pt = phi3_tensors()
d = hf_folder("phi3", pt, PHI3)
ck = os.path.join(work, "ck-phi3")
rc, so, se = convert("--from", "hf", "--input", d, "--output", ck)
want = ["normalization: RMSNorm", "position_embedding_type: rope", "swiglu: true", f"num_query_groups: {NG}",
        f"ffn_hidden_size: {F}", "untie_embeddings_and_output_weights: true", "add_bias_linear: false",
        "hf_family: phi3", f"seq_length: {P}"]
tt.check("phi3: imported, its switches printed, every position kept (no sliding_window)",
         rc == 0 and all(w in so for w in want) and "sliding_window" not in so, so + se)
fam = family_lines(ck) if rc == 0 else []
tt.check("phi3: the family line: rmsnorm 1, swiglu 1, query_groups 2, ends with ' hf_family phi3' alone",
         len(fam) == 1 and " rmsnorm 1 " in fam[0] and " swiglu 1 " in fam[0] and f" query_groups {NG} " in fam[0]
         and fam[0].endswith(" eps 1e-05 hf_family phi3"), str(fam))
back = os.path.join(work, "phi3-back")
rc, so2, se2 = convert("--to", "hf", "--input", ck, "--output", back)
got = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
tt.check("phi3: HF -> trident -> HF (the manifest's family line alone) is bit-exact",
         rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(d, "model.safetensors")),
         f"exit {rc} {se2}")
tt.check("phi3: the export's config.json: Phi3ForCausalLM, the sizes, silu, untied, sliding_window null",
         all(got.get(k) == PHI3[k] for k in PHI3 if k not in ("bos_token_id", "eos_token_id", "sliding_window"))
         and "sliding_window" in got and got["sliding_window"] is None, str(got))
rc, so, se = tt.outputs([trident, "generate", d, "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                         "--temperature", "0", "--json"], timeout=120)
tt.check("phi3: trident generate of the folder", rc == 0 and len(json.loads(so)["generated_ids"]) >= 1,
         f"exit {rc} {se[-500:]}")
session.shards_check("Phi-3 in shards: imported, the same checkpoint", ck, "phi3", "8KB")
session.bf16_check("Phi-3 in BF16: exported, imported and exported again, the same bytes", ck, "phi3")
rc, so, se = convert("--from", "hf", "--input", hf_folder("phi3-tied", phi3_tensors(tied=True),
                                                          dict(PHI3, tie_word_embeddings=True)),
                     "--output", os.path.join(work, "ck-phi3-tied"))
tt.check("phi3 tied (no lm_head): imported, untie false", rc == 0 and "untie_embeddings_and_output_weights: false" in so,
         so + se)
lean = {k: v for k, v in PHI3.items() if k not in ("num_key_value_heads", "rms_norm_eps", "rope_theta", "hidden_act",
                                                   "tie_word_embeddings", "sliding_window", "rope_scaling")}
rc, so, se = convert("--from", "hf", "--input", hf_folder("phi3-lean", phi3_tensors(qkv_rows=3 * C), lean),
                     "--output", os.path.join(work, "ck-lean"))
tt.check("absent keys take Phi3Config's defaults (a key/value head per head, eps 1e-5, silu, untied)",
         rc == 0 and f"num_query_groups: {NH}" in so and "layernorm_epsilon: 1e-05" in so and
         "untie_embeddings_and_output_weights: true" in so, so + se)

# hf_family is part of the model: a config that says otherwise than the checkpoint is refused
pkeys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
             vocab_size=V, normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=F,
             num_query_groups=NG, untie_embeddings_and_output_weights=True, add_bias_linear=False)


def phi3_config(name, **keys):
    return tt.write_config(os.path.join(work, name + ".yaml"), model=dict(pkeys, **keys),
                           training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))


rc, so, se = convert("--to", "hf", "--input", ck, "--output", os.path.join(work, "phi3-cfg"), "--config",
                     phi3_config("phi3-cfg", hf_family="phi3"))
tt.check("phi3: exported with --config of hf_family phi3, the same bytes",
         rc == 0 and st_read(os.path.join(work, "phi3-cfg", "model.safetensors")) ==
         st_read(os.path.join(d, "model.safetensors")), f"exit {rc} {se}")
refused("the Phi-3 import exported with --config without hf_family (a Llama's)",
        ["--to", "hf", "--input", ck, "--output", bad_out, "--config", phi3_config("as-llama")],
        bad_out, "hf_family auto (the checkpoint's: phi3)")
LLAMA = {k: v for k, v in PHI3.items() if k not in ("original_max_position_embeddings", "sliding_window")}
LLAMA.update(architectures=["LlamaForCausalLM"], model_type="llama")
ck_l = os.path.join(work, "ck-llama")
rc, so, se = convert("--from", "hf", "--input", hf_folder("llama", llama_of(pt), LLAMA), "--output", ck_l)


def release_files(c):
    r = os.path.join(c, "release")
    return {f: open(os.path.join(r, f), "rb").read().replace(b" hf_family phi3", b"") for f in sorted(os.listdir(r))}


tt.check("the same weights as a Llama (q/k/v_proj, gate/up_proj): the same checkpoint but for ' hf_family phi3'",
         rc == 0 and "hf_family" not in so and release_files(ck) == release_files(ck_l), so + se)
refused("a Llama's checkpoint exported with --config of hf_family phi3",
        ["--to", "hf", "--input", ck_l, "--output", bad_out, "--config", phi3_config("as-phi3", hf_family="phi3")],
        bad_out, "hf_family phi3 (the checkpoint's: auto)")

# config.json settings trident cannot represent: exit 2 naming the key
for what, edit, cause in (
        ("rope_scaling longrope (Phi-3-128k, Phi-3.5)", dict(rope_scaling={"type": "longrope", "short_factor": [1.0] * 4,
                                                                          "long_factor": [1.0] * 4}),
         "rope_scaling is not supported: Phi-3-128k's and Phi-3.5's"),
        ("rope_scaling su", dict(rope_scaling={"type": "su"}), "rope_scaling is not supported"),
        ("partial_rotary_factor 0.75", dict(partial_rotary_factor=0.75), "partial_rotary_factor is not supported"),
        ("hidden_act gelu", dict(hidden_act="gelu"), "hidden_act is not supported"),
        ("attention_bias true", dict(attention_bias=True), "attention_bias is not supported"),
        ("mlp_bias true", dict(mlp_bias=True), "mlp_bias is not supported"),
        ("head_dim 16 of hidden 32 in 4 heads", dict(head_dim=16), "head_dim is not supported"),
        ("sliding_window 0", dict(sliding_window=0), "sliding_window must be an integer >= 1 or null"),
        ("sliding_window a string", dict(sliding_window="2047"), "sliding_window must be an integer >= 1 or null"),
        ("tie_word_embeddings a string", dict(tie_word_embeddings="no"), "tie_word_embeddings must be true or false"),
        ("attention_bias a string", dict(attention_bias="no"), "attention_bias must be true or false"),
        ("7 heads of hidden 32", dict(num_attention_heads=7, num_key_value_heads=7), "do not divide the hidden size")):
    refused(f"Phi-3: {what}", ["--from", "hf", "--input", hf_folder("bad-phi3", pt, dict(PHI3, **edit)), "--output",
                               bad_out], bad_out, cause)
refused("Phi-3: a Llama's q_proj (not fused)",
        ["--from", "hf", "--input", hf_folder("bad-phi3", llama_of(pt), PHI3), "--output", bad_out],
        bad_out, "_proj.weight' is not part of the Phi3 model")
refused("Phi-3: qkv_proj of a key/value head per head in a config of 2",
        ["--from", "hf", "--input", hf_folder("bad-phi3", phi3_tensors(qkv_rows=3 * C), PHI3), "--output", bad_out],
        bad_out, f"tensor 'model.layers.0.self_attn.qkv_proj.weight' is [{3 * C}, {C}]; "
                 f"the model of config.json has [{(NH + 2 * NG) * HS}, {C}]")

# model.hf_family: phi3 needs a Llama's layer (the config) and no window (the export)
rc, so, se = convert("--to", "hf", "--input", ck, "--output", bad_out, "--config",
                     phi3_config("phi3-ln", hf_family="phi3", normalization="LayerNorm"))
tt.check("hf_family phi3 with a LayerNorm: refused by the config naming model.hf_family",
         rc == 2 and "model.hf_family is 'phi3' but the model is not a Llama's layer" in se and
         not os.path.exists(bad_out), f"exit {rc} {se}")
refused("an export with --config of hf_family phi3 and a sliding window",
        ["--to", "hf", "--input", ck, "--output", bad_out, "--config",
         phi3_config("phi3-window", hf_family="phi3", sliding_window=P)],
        bad_out, "MPT nor OPT: transformers has no such model to export to")

# the family line's Phi-3 end: hf_family phi3 once, last, with a Llama's switches only
session.manifest_refused("Phi3", ck, (
    ("hf_family phi3 twice", " hf_family phi3", " hf_family phi3 hf_family phi3"),
    ("hf_family phi4", " hf_family phi3", " hf_family phi4"),
    ("hf_family with nothing", " hf_family phi3", " hf_family"),
    ("hf_family phi3 with rmsnorm 0", " rmsnorm 1 ", " rmsnorm 0 "),
    ("hf_family phi3 with linear_bias 1", " linear_bias 0 ", " linear_bias 1 ")),
    "expected the family line")
# a run from the import without hf_family: the difference named
session.resume_refused("Phi-3", "hf_family auto", dict(pkeys), ck, "hf_family auto (the checkpoint's: phi3)")

rc, so, se = convert("--help")
tt.check("trident convert --help names Phi-3 and its switch", rc == 0 and "Phi-3: a Llama's with hf_family phi3" in so,
         so + se)
plan_count_check(trident, "phi-3-mini-4k.yaml", 3_821_079_552)
tt.finish("convert-phi3-cli: all checks passed")
