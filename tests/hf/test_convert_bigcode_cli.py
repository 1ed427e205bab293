#!/usr/bin/python3
"""`trident convert` of GPT-BigCode folders (GPTBigCodeForCausalLM: StarCoder, StarCoderBase,
SantaCoder) end to end without PyTorch (it runs in the sanitizer build too; the folders are
written by hf_files.py):
  - multi_query true (c_attn [Q | K | V] of one key/value head: num_query_groups 1) and false
    (n_inner 3h, the exact GELU, untied) HF -> trident -> HF bit for bit from the manifest's
    family line alone, their switches printed, config.json's keys back; generate of the
    multi-query folder; GPTBigCodeConfig's defaults for absent keys;
  - multi_query false of GPT-2's shape (4h, the tanh GELU, tied) exports as GPT-2 (GPT-2 keeps
    its shape); an export of learned positions with 2 key/value groups of 4 heads refused;
  - every setting trident cannot represent refused with exit 2 naming the key
    (scale_attn_weights false, add_cross_attention true, another activation_function, n_embd not
    divisible by n_head), and files that are not the model config.json describes (a multi-query
    c_attn under multi_query false, an unknown tensor);
  - tensor parallelism 2 of one key/value group refused by the config's validator naming both keys;
  - configs/starcoderbase-1b.yaml: trident plan counts transformers' 1,137,207,296 parameters.
usage: test_convert_bigcode_cli.py TRIDENT WORKDIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import C, L, NH, P, V, Session, plan_count_check, rand, st_read  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")
HS = C // NH

BC = {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "n_embd": C, "n_layer": L,
      "n_head": NH, "n_positions": P, "vocab_size": V, "n_inner": None, "activation_function": "gelu_pytorch_tanh",
      "layer_norm_epsilon": 1e-5, "multi_query": True, "scale_attn_weights": True,
      "attention_softmax_in_fp32": True, "scale_attention_softmax_in_fp32": True, "resid_pdrop": 0.1,
      "embd_pdrop": 0.1, "attn_pdrop": 0.1, "bos_token_id": V - 1, "eos_token_id": V - 1}


def bigcode_tensors(mq=True, ffn=4 * C, tied=True):
    kv = HS if mq else C
    t = [("transformer.wte.weight", "F32", (V, C), rand(V * C)), ("transformer.wpe.weight", "F32", (P, C), rand(P * C))]
    for i in range(L):
        h = f"transformer.h.{i}."
        t += [(h + "ln_1.weight", "F32", (C,), rand(C, 2)), (h + "ln_1.bias", "F32", (C,), rand(C)),
              (h + "attn.c_attn.weight", "F32", (C + 2 * kv, C), rand((C + 2 * kv) * C)),
              (h + "attn.c_attn.bias", "F32", (C + 2 * kv,), rand(C + 2 * kv)),
              (h + "attn.c_proj.weight", "F32", (C, C), rand(C * C)), (h + "attn.c_proj.bias", "F32", (C,), rand(C)),
              (h + "ln_2.weight", "F32", (C,), rand(C, 2)), (h + "ln_2.bias", "F32", (C,), rand(C)),
              (h + "mlp.c_fc.weight", "F32", (ffn, C), rand(ffn * C)), (h + "mlp.c_fc.bias", "F32", (ffn,), rand(ffn)),
              (h + "mlp.c_proj.weight", "F32", (C, ffn), rand(ffn * C)), (h + "mlp.c_proj.bias", "F32", (C,), rand(C))]
    t += [("transformer.ln_f.weight", "F32", (C,), rand(C, 2)), ("transformer.ln_f.bias", "F32", (C,), rand(C))]
    return t + ([] if tied else [("lm_head.weight", "F32", (V, C), rand(V * C))])


def roundtrip(name, tensors, config, want_lines, want_keys):
    """config + tensors -> trident -> HF from the manifest alone: its switches printed, the tensors
    bit for bit, config.json's want_keys; the checkpoint."""
    d = hf_folder(name, tensors, config)
    ck = os.path.join(work, "ck-" + name)
    rc, so, se = convert("--from", "hf", "--input", d, "--output", ck)
    tt.check(f"{name}: imported, its switches printed", rc == 0 and all(w in so for w in want_lines) and
             ("gelu_approximate: none" in so) == ("gelu_approximate: none" in want_lines), so + se)
    back = os.path.join(work, name + "-back")
    rc, so2, se2 = convert("--to", "hf", "--input", ck, "--output", back)
    got = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
    tt.check(f"{name}: HF -> trident -> HF (the manifest's family line alone) is bit-exact, config.json "
             f"{want_keys}", rc == 0 and st_read(os.path.join(d, "model.safetensors")) ==
             st_read(os.path.join(back, "model.safetensors")) and
             all(got.get(k) == v for k, v in want_keys.items()), f"exit {rc} {se2}\n{got}")
    return d, ck


# multi_query true: one key/value head (num_query_groups 1), tied, 4h, tanh
mq_t = bigcode_tensors()
d_mq, ck_mq = roundtrip("bigcode-mq", mq_t, BC,
                        ["num_query_groups: 1", "position_embedding_type: learned_absolute", "normalization: LayerNorm",
                         f"ffn_hidden_size: {4 * C}", "untie_embeddings_and_output_weights: false"],
                        {"model_type": "gpt_bigcode", "architectures": ["GPTBigCodeForCausalLM"], "multi_query": True,
                         "n_inner": 4 * C, "activation_function": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                         "n_positions": P, "scale_attn_weights": True})
rc, so, se = tt.outputs([trident, "generate", d_mq, "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                         "--temperature", "0", "--json"], timeout=120)
tt.check("bigcode-mq: trident generate of the folder (cached multi-query attention)",
         rc == 0 and len(json.loads(so)["generated_ids"]) >= 1, f"exit {rc} {se[-500:]}")
# multi_query false, n_inner 3h, the exact GELU, untied
roundtrip("bigcode-heads", bigcode_tensors(mq=False, ffn=3 * C, tied=False),
          dict(BC, multi_query=False, n_inner=3 * C, activation_function="gelu", tie_word_embeddings=False),
          [f"num_query_groups: {NH}", f"ffn_hidden_size: {3 * C}", "gelu_approximate: none",
           "untie_embeddings_and_output_weights: true"],
          {"model_type": "gpt_bigcode", "multi_query": False, "n_inner": 3 * C, "activation_function": "gelu",
           "tie_word_embeddings": False})
# GPTBigCodeConfig's defaults for absent keys (n_positions 1024, multi_query true, tanh)
lean = {k: v for k, v in BC.items() if k not in ("n_inner", "activation_function", "layer_norm_epsilon",
                                                  "multi_query", "scale_attn_weights", "n_positions")}
big_p = [(n, dt, (1024, C), rand(1024 * C)) if n == "transformer.wpe.weight" else (n, dt, s, v)
         for n, dt, s, v in mq_t]
rc, so, se = convert("--from", "hf", "--input", hf_folder("bigcode-lean", big_p, lean), "--output",
                     os.path.join(work, "ck-lean"))
tt.check("absent keys take GPTBigCodeConfig's defaults (1024 positions, multi_query, gelu_pytorch_tanh)",
         rc == 0 and "num_query_groups: 1" in so and "max_position_embeddings: 1024" in so and
         "gelu_approximate" not in so, so + se)
# multi_query false of GPT-2's shape: a GPT-2 (trident keeps GPT-2's shape GPT-2's)
d_g = hf_folder("bigcode-gpt2-shape", bigcode_tensors(mq=False), dict(BC, multi_query=False))
ck_g = os.path.join(work, "ck-gpt2-shape")
rc, so, se = convert("--from", "hf", "--input", d_g, "--output", ck_g)
back = os.path.join(work, "gpt2-shape-back")
rc2, so2, se2 = convert("--to", "hf", "--input", ck_g, "--output", back) if rc == 0 else (1, "", "")
got = json.load(open(os.path.join(back, "config.json"))) if rc2 == 0 else {}
tt.check("multi_query false, 4h, tanh, tied (GPT-2's shape) exports as GPT-2",
         rc2 == 0 and got.get("model_type") == "gpt2" and "transformer.h.0.attn.c_attn.weight" in
         st_read(os.path.join(back, "model.safetensors")), f"exit {rc}/{rc2} {se}{se2}\n{got}")
# learned positions with 2 key/value groups of 4 heads: transformers has no such model
odd = tt.write_config(os.path.join(work, "odd-groups.yaml"), model=dict(
    num_layers=L, hidden_size=C, num_attention_heads=NH, num_query_groups=2, seq_length=P, max_position_embeddings=P,
    vocab_size=V, normalization="LayerNorm", position_embedding_type="learned_absolute"),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
refused("an export with --config of learned positions with 2 key/value groups of 4 heads",
        ["--to", "hf", "--input", ck_mq, "--output", bad_out, "--config", odd], bad_out,
        "Gemma, GPTBigCode, GPT-J, MPT nor OPT: transformers has no such model to export to")

# config.json settings trident cannot represent: exit 2 naming the key
for what, edit, cause in (
        ("scale_attn_weights false", dict(scale_attn_weights=False), "scale_attn_weights false is not supported"),
        ("add_cross_attention true", dict(add_cross_attention=True), "add_cross_attention true is not supported"),
        ("activation_function relu", dict(activation_function="relu"), "activation_function is not supported"),
        ("n_embd not divisible by n_head", dict(n_head=5), "n_embd 32 is not divisible by n_head 5"),
        ("multi_query a string", dict(multi_query="yes"), "multi_query must be true or false"),
        ("n_inner 0", dict(n_inner=0), "n_inner must be an integer")):
    d = hf_folder("bad-bigcode", mq_t, dict(BC, **edit))
    refused(f"GPT-BigCode: {what}", ["--from", "hf", "--input", d, "--output", bad_out], bad_out, cause)
# files that are not the model config.json describes
refused("GPT-BigCode: a multi-query c_attn under multi_query false",
        ["--from", "hf", "--input", hf_folder("bad-bigcode", mq_t, dict(BC, multi_query=False)), "--output", bad_out],
        bad_out, "tensor 'transformer.h.0.attn.c_attn.weight' is [48, 32]; the model of config.json has [96, 32]")
refused("GPT-BigCode: an unknown tensor",
        ["--from", "hf", "--input", hf_folder("bad-bigcode", mq_t + [("transformer.h.0.attn.q_attn.weight", "F32",
                                                                       (C, C), rand(C * C))], BC), "--output", bad_out],
        bad_out, "tensor 'transformer.h.0.attn.q_attn.weight' is not part of the GPTBigCode model")

# tensor parallelism 2 of the one key/value group: the validator names both keys
cfg = tt.write_config(os.path.join(work, "mq-tp2.yaml"), model=dict(
    num_layers=L, hidden_size=C, num_attention_heads=NH, num_query_groups=1, seq_length=P, max_position_embeddings=P,
    vocab_size=V, normalization="LayerNorm", position_embedding_type="learned_absolute"),
    parallel=dict(tensor_model_parallel_size=2),
    training=dict(micro_batch_size=1, global_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"),
    checkpoint=dict(load=ck_mq))
rc, so, se = tt.outputs([trident, "train", "--nproc", "2", cfg, "--run-dir", os.path.join(work, "tp2-run")],
                        timeout=120)
tt.check("TP 2 of a multi-query model (one key/value group) refused naming both keys",
         rc == 2 and "parallel.tensor_model_parallel_size = 2 does not divide model.num_query_groups = 1" in se,
         f"exit {rc} {se[-600:]}")

# configs/starcoderbase-1b.yaml: the planner's count is transformers'
plan_count_check(trident, "starcoderbase-1b.yaml", 1_137_207_296)
tt.finish("convert-bigcode-cli: all checks passed")
