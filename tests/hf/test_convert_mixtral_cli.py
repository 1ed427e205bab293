#!/usr/bin/python3
"""`trident convert` of Mixtral folders (MixtralForCausalLM) end to end without PyTorch (it runs in the
sanitizer build too; the folders are written by hf_files.py): a tiny Mixtral of 3 experts, 2 a token,
GQA, untied, imported with its expert keys printed (num_experts, moe_router_topk,
moe_router_pre_softmax false, moe_aux_loss_coeff = router_aux_loss_coef) and the manifest's family line
'experts 3 2 0 1 0.01 0'; HF -> trident -> HF bit for bit from that line alone (config.json's expert
keys back); shards; MixtralConfig's defaults for absent keys (8 key/value heads, 0.001, rope_theta
1e6); and every input trident cannot honour refused with exit 2 naming the key or tensor:
num_local_experts that disagrees with the tensors (more, fewer), a missing expert tensor, an extra
one, a router of another shape, top-k above the experts, top-1, router_jitter_noise, a negative
router_aux_loss_coef, output_router_logits not a bool, rope_scaling, hidden_act; and a run's config
with moe_router_pre_softmax (not Mixtral's routing) refused by the export.
usage: test_convert_mixtral_cli.py TRIDENT WORKDIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import C, L, P, V, Session, family_lines, rand, same_checkpoint, st_read  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused
bad_out = os.path.join(work, "bad-out")
NH, NG, F, E = 4, 2, 24, 3
HS = C // NH

MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": C,
           "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NG, "intermediate_size": F,
           "vocab_size": V, "max_position_embeddings": P, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
           "hidden_act": "silu", "tie_word_embeddings": False, "sliding_window": None, "num_local_experts": E,
           "num_experts_per_tok": 2, "router_aux_loss_coef": 0.01, "output_router_logits": False,
           "bos_token_id": V - 1, "eos_token_id": V - 1}


def mixtral_tensors(experts=E, router_rows=E, kv_rows=NG * HS):
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        b = f"model.layers.{i}."
        t += [(b + "input_layernorm.weight", "F32", (C,), rand(C, 2)),
              (b + "self_attn.q_proj.weight", "F32", (C, C), rand(C * C)),
              (b + "self_attn.k_proj.weight", "F32", (kv_rows, C), rand(kv_rows * C)),
              (b + "self_attn.v_proj.weight", "F32", (kv_rows, C), rand(kv_rows * C)),
              (b + "self_attn.o_proj.weight", "F32", (C, C), rand(C * C)),
              (b + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (b + "block_sparse_moe.gate.weight", "F32", (router_rows, C), rand(router_rows * C))]
        for e in range(experts):
            x = f"{b}block_sparse_moe.experts.{e}."
            t += [(x + "w1.weight", "F32", (F, C), rand(F * C)), (x + "w3.weight", "F32", (F, C), rand(F * C)),
                  (x + "w2.weight", "F32", (C, F), rand(C * F))]
    t += [("model.norm.weight", "F32", (C,), rand(C, 2)), ("lm_head.weight", "F32", (V, C), rand(V * C))]
    return t


tensors = mixtral_tensors()
src = hf_folder("mixtral", tensors, MIXTRAL)
ck = os.path.join(work, "ck-mixtral")
rc, out, err = convert("--from", "hf", "--input", src, "--output", ck)
tt.check("Mixtral: imported, its expert keys printed (router_aux_loss_coef as moe_aux_loss_coeff)",
         rc == 0 and all(w in out for w in (f"num_experts: {E}", "moe_router_topk: 2", "moe_router_pre_softmax: false",
                                            "moe_aux_loss_coeff: 0.01", f"num_query_groups: {NG}",
                                            "rotary_base: 1000000")), out + err)
fam = family_lines(ck)
tt.check("Mixtral: the manifest's family line ends with ' experts 3 2 0 1 0.01 0'",
         len(fam) == 1 and fam[0].endswith(f" experts {E} 2 0 1 0.01 0"), str(fam))
back = os.path.join(work, "mixtral-back")
rc, out, err = convert("--to", "hf", "--input", ck, "--output", back)
a = st_read(os.path.join(src, "model.safetensors"))
b = st_read(os.path.join(back, "model.safetensors")) if rc == 0 else {}
cfg = json.load(open(os.path.join(back, "config.json"))) if rc == 0 else {}
tt.check("Mixtral: HF -> trident -> HF bit for bit from the manifest alone, config.json's keys back",
         a == b and all(cfg.get(k) == v for k, v in MIXTRAL.items() if k not in ("bos_token_id", "eos_token_id")),
         f"exit {rc} {err}; tensors differ: {sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))}; {cfg}")
session.shards_check("Mixtral in shards: imported, the same checkpoint", ck, "mixtral", "8KB")

# Megatron-LM's --ckpt-format torch (megatron-core's SequentialMLP names) both ways
for tp, pp in ((1, 1), (2, 1), (1, 2)):
    save, ck_m = os.path.join(work, f"mlm-tp{tp}-pp{pp}"), os.path.join(work, f"ck-mlm-tp{tp}-pp{pp}")
    rc, out, err = convert("--to", "megatron", "--input", ck, "--output", save, "--tp", str(tp), "--pp", str(pp))
    rc2, out2, err2 = convert("--from", "megatron", "--input", save, "--output", ck_m) if rc == 0 else (1, "", "")
    tt.check(f"Mixtral -> Megatron-LM TP {tp} PP {pp} -> trident: the same checkpoint, the expert keys printed",
             rc2 == 0 and same_checkpoint(ck, ck_m) and f"num_experts: {E}" in out2
             and "moe_aux_loss_coeff: 0.01" in out2, f"exit {rc}/{rc2}: {err}{err2}")

# MixtralConfig's defaults for absent keys: 8 key/value heads (here 8 heads), 0.001, rope_theta 1e6
defaults = {k: v for k, v in MIXTRAL.items() if k not in ("num_key_value_heads", "router_aux_loss_coef",
                                                           "rope_theta", "sliding_window", "output_router_logits")}
defaults["num_attention_heads"] = 8
d = hf_folder("mixtral-defaults", mixtral_tensors(kv_rows=C), defaults)
rc, out, err = convert("--from", "hf", "--input", d, "--output", os.path.join(work, "ck-defaults"))
tt.check("Mixtral: MixtralConfig's defaults (8 key/value heads, aux 0.001, rope_theta 1e6)",
         rc == 0 and "num_query_groups: 8" in out and "moe_aux_loss_coeff: 0.001" in out
         and "rotary_base: 1000000" in out, out + err)
# a jitter of 0 is no jitter
d = hf_folder("mixtral-jitter-0", tensors, {**MIXTRAL, "router_jitter_noise": 0.0})
rc, out, err = convert("--from", "hf", "--input", d, "--output", os.path.join(work, "ck-jitter-0"))
tt.check("Mixtral: router_jitter_noise 0 converts", rc == 0, err)


def refused_config(what, edits, cause, names=(), files=None):
    d = hf_folder("mixtral-bad", files if files is not None else tensors, {**MIXTRAL, **edits})
    refused(what, ["--from", "hf", "--input", d, "--output", bad_out], bad_out, cause, list(names))


refused_config("num_local_experts 4 with 3 experts' tensors", {"num_local_experts": 4},
               "'model.layers.0.block_sparse_moe.gate.weight' is [3, 32]; the model of config.json has [4, 32]")
refused_config("num_local_experts 2 with 3 experts' tensors", {"num_local_experts": 2},
               "'model.layers.0.block_sparse_moe.experts.2.w1.weight' is not part of the Mixtral model")
refused_config("a missing expert tensor", {},
               "no tensor 'model.layers.1.block_sparse_moe.experts.1.w3.weight'",
               files=[t for t in tensors if t[0] != "model.layers.1.block_sparse_moe.experts.1.w3.weight"])
refused_config("an extra expert tensor", {},
               "'model.layers.0.block_sparse_moe.experts.0.w4.weight' is not part of the Mixtral model",
               files=tensors + [("model.layers.0.block_sparse_moe.experts.0.w4.weight", "F32", (F, C), rand(F * C))])
refused_config("a router bias", {}, "'model.layers.0.block_sparse_moe.gate.bias' is not part of the Mixtral",
               files=tensors + [("model.layers.0.block_sparse_moe.gate.bias", "F32", (E,), rand(E))])
refused_config("a router of another width", {}, "'model.layers.0.block_sparse_moe.gate.weight' is [3, 16]",
               files=[t if t[0] != "model.layers.0.block_sparse_moe.gate.weight" else (t[0], "F32", (E, C // 2),
                                                                                     rand(E * C // 2))
                      for t in tensors])
refused_config("num_experts_per_tok 4 of 3 experts", {"num_experts_per_tok": 4},
               "num_experts_per_tok 4 is more than num_local_experts 3")
refused_config("num_experts_per_tok 1", {"num_experts_per_tok": 1}, "num_experts_per_tok is not supported")
refused_config("router_jitter_noise 0.1", {"router_jitter_noise": 0.1}, "router_jitter_noise is not supported")
refused_config("router_aux_loss_coef -1", {"router_aux_loss_coef": -1},
               "router_aux_loss_coef must be a number >= 0")
refused_config("output_router_logits \"yes\"", {"output_router_logits": "yes"}, "output_router_logits")
refused_config("rope_scaling", {"rope_scaling": {"type": "linear", "factor": 2.0}},
               "rope_scaling is not supported: no rope scaling in trident's Qwen2, Mistral, Mixtral")
refused_config("hidden_act gelu", {"hidden_act": "gelu"}, "hidden_act is not supported")
refused_config("num_local_experts 0", {"num_local_experts": 0}, "num_local_experts")

# the export: a run's config whose routing is not Mixtral's
run = tt.write_config(os.path.join(work, "pre-softmax.yaml"), model=dict(
    num_layers=L, hidden_size=C, num_attention_heads=NH, vocab_size=V, max_position_embeddings=P,
    seq_length=P, normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=F,
    num_query_groups=NG, untie_embeddings_and_output_weights=True, add_bias_linear=False, num_experts=E,
    moe_router_topk=2, moe_router_pre_softmax=True),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
refused("a run's config with moe_router_pre_softmax", ["--to", "hf", "--input", ck, "--output", bad_out,
                                                       "--config", run], bad_out,
        "(with experts: Mixtral, a Llama's or Mistral's layer, top-k 2 or more, moe_router_pre_softmax "
        "false)")
tt.finish("PASSED")
