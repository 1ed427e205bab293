#!/usr/bin/python3
"""`trident convert` of MPT folders (MptForCausalLM) end to end without PyTorch (it runs in the
sanitizer build too; the folders are written by hf_files.py):
  - 4 heads of 8 (Wqkv's [Q | K | V] rows permuted into trident's (head, {q, k, v}, d) and back):
    HF -> trident -> HF bit for bit from the manifest's family line alone (it ends with
    ' gelu_exact 1 layernorm_bias 0'), its switches printed, config.json's keys back (attn_config
    as 4.38 reads it); generate of the folder; shards and BF16 both ways; MptConfig's defaults for
    absent keys (max_seq_len 2048, no attn_config);
  - every setting transformers 4.38's MPT or trident cannot represent refused with exit 2 naming the
    key (no_bias false, expansion_ratio 8, tie_word_embeddings false, logit_scale, norm_type
    rmsnorm, ffn_config of another ffn_type, attn_config's attn_type, alibi false, alibi_bias_max
    16, qk_ln, clip_qkv, prefix_lm, softmax_scale 0.5, kv_n_heads 1; d_model not divisible by
    n_heads), and files that are not the model config.json describes (a norm_1.bias, an up_proj.bias);
  - exports: layernorm_bias false beside learned positions, rope, the tanh GELU, linear biases,
    an untied head or an embedding norm refused (transformers has no such model);
  - the manifest's family line: layernorm_bias 0 twice, 1, before gelu_exact's place or with
    rmsnorm 1 refused; a resume with layernorm_bias true names the difference;
  - configs/mpt-7b.yaml: trident plan counts transformers' 6,649,286,656 parameters.
usage: test_convert_mpt_cli.py TRIDENT WORKDIR"""
import json
import os
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

ATTN = {"attn_type": "multihead_attention", "attn_pdrop": 0, "attn_impl": "torch", "clip_qkv": None,
        "softmax_scale": None, "prefix_lm": False, "qk_ln": False, "attn_uses_sequence_id": False, "alibi": True,
        "alibi_bias_max": 8}
MPT = {"architectures": ["MptForCausalLM"], "model_type": "mpt", "d_model": C, "n_layers": L, "n_heads": NH,
       "max_seq_len": P, "vocab_size": V, "expansion_ratio": 4, "no_bias": True, "layer_norm_epsilon": 1e-5,
       "learned_pos_emb": True, "norm_type": "low_precision_layernorm", "logit_scale": None,
       "tie_word_embeddings": True, "attn_config": ATTN, "bos_token_id": V - 1, "eos_token_id": V - 1}


def mpt_tensors():
    t = [("transformer.wte.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        b = f"transformer.blocks.{i}."
        t += [(b + "norm_1.weight", "F32", (C,), rand(C, 2)), (b + "attn.Wqkv.weight", "F32", (3 * C, C), rand(3 * C * C)),
              (b + "attn.out_proj.weight", "F32", (C, C), rand(C * C)), (b + "norm_2.weight", "F32", (C,), rand(C, 2)),
              (b + "ffn.up_proj.weight", "F32", (4 * C, C), rand(4 * C * C)),
              (b + "ffn.down_proj.weight", "F32", (C, 4 * C), rand(4 * C * C))]
    return t + [("transformer.norm_f.weight", "F32", (C,), rand(C, 2))]


def family_line(ck):
    text = open(os.path.join(ck, "release", "manifest.txt")).read()
    return [line for line in text.splitlines() if line.startswith("family ")]


mt = mpt_tensors()
d = hf_folder("mpt", mt, MPT)
ck = os.path.join(work, "ck-mpt")
rc, so, se = convert("--from", "hf", "--input", d, "--output", ck)
want = ["normalization: LayerNorm", "position_embedding_type: alibi", "add_bias_linear: false", "layernorm_bias: false",
        "gelu_approximate: none", f"num_query_groups: {NH}", f"ffn_hidden_size: {4 * C}",
        "untie_embeddings_and_output_weights: false", "embedding_layernorm: false"]
tt.check("mpt: imported, its switches printed", rc == 0 and all(w in so for w in want), so + se)
fam = family_line(ck) if rc == 0 else []
tt.check("mpt: the family line: position 2, linear_bias 0, ends with ' gelu_exact 1 layernorm_bias 0'",
         len(fam) == 1 and " position 2 " in fam[0] and " linear_bias 0 " in fam[0] and
         fam[0].endswith(" gelu_exact 1 layernorm_bias 0"), str(fam))
back = os.path.join(work, "mpt-back")
rc, so2, se2 = convert("--to", "hf", "--input", ck, "--output", back)
got = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
tt.check("mpt: HF -> trident -> HF (the manifest's family line alone) is bit-exact",
         rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(d, "model.safetensors")),
         f"exit {rc} {se2}")
tt.check("mpt: the export's config.json: MptForCausalLM, d_model, n_heads, max_seq_len, no_bias, tied, attn_config",
         all(got.get(k) == MPT[k] for k in ("model_type", "architectures", "d_model", "n_heads", "n_layers",
                                            "max_seq_len", "vocab_size", "expansion_ratio", "no_bias",
                                            "tie_word_embeddings")) and got.get("attn_config") == ATTN
         and got.get("learned_pos_emb") is False, str(got))
rc, so, se = tt.outputs([trident, "generate", d, "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                         "--temperature", "0", "--json"], timeout=120)
tt.check("mpt: trident generate of the folder", rc == 0 and len(json.loads(so)["generated_ids"]) >= 1,
         f"exit {rc} {se[-500:]}")
session.shards_check("MPT in shards: imported, the same checkpoint", ck, "mpt", "8KB")
session.bf16_check("MPT in BF16: exported, imported and exported again, the same bytes", ck, "mpt")
# MptConfig's defaults for absent keys (2048 positions, no attn_config: MptAttentionConfig's)
lean = {k: v for k, v in MPT.items() if k not in ("max_seq_len", "attn_config", "expansion_ratio", "no_bias",
                                                  "layer_norm_epsilon", "tie_word_embeddings", "norm_type")}
rc, so, se = convert("--from", "hf", "--input", hf_folder("mpt-lean", mt, lean), "--output", os.path.join(work, "ck-lean"))
tt.check("absent keys take MptConfig's defaults (2048 positions, no biases, tied, ALiBi)",
         rc == 0 and "max_position_embeddings: 2048" in so and "layernorm_bias: false" in so and
         "position_embedding_type: alibi" in so, so + se)

# config.json settings transformers 4.38's MPT or trident cannot represent: exit 2 naming the key
for what, edit, cause in (
        ("no_bias false", dict(no_bias=False), "no_bias false is not supported"),
        ("expansion_ratio 8", dict(expansion_ratio=8), "expansion_ratio other than 4 is not supported"),
        ("tie_word_embeddings false", dict(tie_word_embeddings=False), "tie_word_embeddings false is not supported"),
        ("logit_scale 2", dict(logit_scale=2.0), "logit_scale other than null is not supported"),
        ("norm_type rmsnorm", dict(norm_type="rmsnorm"), "norm_type other than"),
        ("ffn_config of ffn_type te_ln_mlp", dict(ffn_config={"ffn_type": "te_ln_mlp"}),
         "ffn_config.ffn_type other than \"mptmlp\" is not supported"),
        ("attn_config not an object", dict(attn_config=3), "attn_config must be an object"),
        ("attn_type multiquery_attention", dict(attn_config=dict(ATTN, attn_type="multiquery_attention")),
         "attn_config.attn_type other than"),
        ("alibi false", dict(attn_config=dict(ATTN, alibi=False)), "attn_config.alibi false is not supported"),
        ("alibi_bias_max 16", dict(attn_config=dict(ATTN, alibi_bias_max=16)),
         "attn_config.alibi_bias_max other than 8 is not supported"),
        ("qk_ln true", dict(attn_config=dict(ATTN, qk_ln=True)), "attn_config.qk_ln true is not supported"),
        ("clip_qkv 6", dict(attn_config=dict(ATTN, clip_qkv=6.0)), "attn_config.clip_qkv other than null"),
        ("prefix_lm true", dict(attn_config=dict(ATTN, prefix_lm=True)), "attn_config.prefix_lm true"),
        ("softmax_scale 0.5", dict(attn_config=dict(ATTN, softmax_scale=0.5)), "attn_config.softmax_scale other"),
        ("kv_n_heads 1", dict(attn_config=dict(ATTN, kv_n_heads=1)), "attn_config.kv_n_heads other than n_heads"),
        ("d_model not divisible by n_heads", dict(n_heads=5), "d_model 32 is not divisible by n_heads 5")):
    refused(f"MPT: {what}", ["--from", "hf", "--input", hf_folder("bad-mpt", mt, dict(MPT, **edit)), "--output",
                             bad_out], bad_out, cause)
rc, so, se = convert("--from", "hf", "--input", hf_folder("mpt-scale", mt, dict(MPT, attn_config=dict(
    ATTN, softmax_scale=(C // NH) ** -0.5, kv_n_heads=NH))), "--output", os.path.join(work, "ck-scale"))
tt.check("MPT: softmax_scale 1/sqrt(head_dim) and kv_n_heads n_heads are accepted", rc == 0, se)
for bias in ("norm_1.bias", "ffn.up_proj.bias"):
    extra = [(f"transformer.blocks.0.{bias}", "F32", (4 * C if "up" in bias else C,), rand(4 * C if "up" in bias else C))]
    refused(f"MPT: a {bias} (4.38's MPT has no biases)",
            ["--from", "hf", "--input", hf_folder("bad-mpt", mt + extra, MPT), "--output", bad_out],
            bad_out, f"tensor 'transformer.blocks.0.{bias}' is not part of the MPT model")

# exports by the config's switches
mkeys = dict(num_layers=L, hidden_size=C, num_attention_heads=NH, seq_length=P, max_position_embeddings=P,
             vocab_size=V, normalization="LayerNorm", position_embedding_type="alibi", add_bias_linear=False,
             layernorm_bias=False, gelu_approximate="none")


def mpt_config(name, **keys):
    model = {k: v for k, v in dict(mkeys, **keys).items() if v is not None}  # (None: the key unset)
    return tt.write_config(os.path.join(work, name + ".yaml"), model=model,
                           training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))


for what, keys in (("layernorm_bias false with learned positions", dict(position_embedding_type="learned_absolute")),
                   ("layernorm_bias false with rope", dict(position_embedding_type="rope")),
                   ("layernorm_bias false with the tanh GELU", dict(gelu_approximate="tanh")),
                   ("layernorm_bias false with linear biases", dict(add_bias_linear=True)),
                   ("layernorm_bias false with an untied head", dict(untie_embeddings_and_output_weights=True)),
                   ("layernorm_bias false with an embedding norm", dict(embedding_layernorm=True))):
    refused(f"an export with --config of {what}",
            ["--to", "hf", "--input", ck, "--output", bad_out, "--config", mpt_config("odd", **keys)],
            bad_out, "MPT nor OPT: transformers has no such model to export to")

# the family line's MPT end: layernorm_bias 0 once, last, only with LayerNorm
session.manifest_refused("MPT", ck, (
    ("layernorm_bias 0 twice", " layernorm_bias 0", " layernorm_bias 0 layernorm_bias 0"),
    ("layernorm_bias 1", " layernorm_bias 0", " layernorm_bias 1"),
    ("layernorm_bias 0 before gelu_exact 1", " gelu_exact 1 layernorm_bias 0",
     " layernorm_bias 0 gelu_exact 1"),
    ("layernorm_bias 0 with rmsnorm 1", "family rmsnorm 0 ", "family rmsnorm 1 ")),
    "expected the family line")
# a run from the import with the norms' biases: the difference named
session.resume_refused("MPT", "layernorm_bias true", dict(mkeys, layernorm_bias=True), ck,
                       "layernorm_bias 1 (the checkpoint's: 0)")

# configs/mpt-7b.yaml: the planner's count is transformers'
plan_count_check(trident, "mpt-7b.yaml", 6_649_286_656)
tt.finish("convert-mpt-cli: all checks passed")
