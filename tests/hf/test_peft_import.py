#!/usr/bin/python3
"""PEFT adapters into trident (`trident convert --from hf --input BASE --adapters PEFT --output CK`)
against peft 0.7.1: adapters made by peft on tiny random GPT-2 and Llama bases (lora_A and lora_B
random, so every adapter matters), PEFT's default target_modules (GPT-2: c_attn; Llama: q_proj +
v_proj, different A: rank 2r blocks) and all four kinds (the Llama's q/k/v and gate/up with
different A: rank 3r; and with a shared A as trident's own export writes: rank r), then
  - the printed model / finetune / checkpoint sections as a config: trident's logits = PeftModel's;
  - `convert --to hf --merge-lora` (no --config: CK/base is the base) = peft's merge_and_unload;
  - `--adapters-only` equals the input bit for bit where the rank is PEFT's, and loads in peft
    with PeftModel's logits everywhere; `trident generate CK` runs without --config;
  - every refusal exits 2 naming adapter_config.json's key or the tensor.
usage: test_peft_import.py TRIDENT HF_PROBE WORKDIR VENV"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

trident, probe, work, venv = sys.argv[1:5]
try:
    import peft  # noqa: F401
except ImportError:  # the virtual environment of test_lora_oracle.py (peft added there)
    py = tt.peft_python(venv)
    os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])

import numpy as np  # noqa: E402
import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
torch.set_num_threads(2)
work = tt.fresh_dir(work)
L, T, V, R = 2, 16, 300, 4
# Relative to the largest logit, for every comparison: the merge (W + s B A), the adapters'
# rank k r and the layers' sums run in other orders than torch's, with OpenBLAS's kernel of the
# CPU (SkylakeX, Haswell, Zen), so agreement is to fp32 rounding, not to the bit; a wrong row,
# block or scale is off by O(1)
TOL = 1e-5


def path(*names):
    return os.path.join(work, *names)


def randomize(m, scale=0.1):
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n or "ln_" in n else scale * torch.randn_like(p))


torch.manual_seed(48)
gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=64, n_head=4, n_positions=T, vocab_size=V,
                                  attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0))
llama = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=L, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=T, vocab_size=V,
                                     rms_norm_eps=1e-6, tie_word_embeddings=False))
bases = {}
for name, m in (("gpt2", gpt2), ("llama", llama)):
    randomize(m)
    m.eval()
    bases[name] = path(f"{name}-base")
    m.save_pretrained(bases[name])
other = LlamaForCausalLM(LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=L, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=T, vocab_size=V))
bases["llama48"] = path("llama48-base")
other.save_pretrained(bases["llama48"])
tokens = torch.randint(0, V, (2, T))
tokens.numpy().astype(np.int32).tofile(path("tokens.bin"))


def make_adapter(base, name, shared=False, **kw):
    """peft's adapters of base (random A and B; shared: one A per fused trident layer) saved in
    work/name; returns peft's logits of tokens and its merged model's."""
    model = AutoModelForCausalLM.from_pretrained(bases[base])
    pm = get_peft_model(model, LoraConfig(r=R, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM", **kw))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.copy_(0.15 * torch.randn_like(p))
        if shared:  # k_proj, v_proj take q_proj's A, up_proj gate_proj's (trident's export)
            mods = dict(pm.named_modules())
            for n, mod in mods.items():
                for a, b in (("k_proj", "q_proj"), ("v_proj", "q_proj"), ("up_proj", "gate_proj")):
                    if n.endswith(a) and hasattr(mod, "lora_A"):
                        mod.lora_A["default"].weight.copy_(mods[n[:-len(a)] + b].lora_A["default"].weight)
    pm.eval()
    pm.save_pretrained(path(name))
    with torch.no_grad():
        logits = pm(tokens).logits
        merged = pm.merge_and_unload()(tokens).logits
    return logits, merged


def convert(*args, expect=0):
    rc, out, err = tt.outputs([trident, "convert", *args], timeout=120)
    tt.check(f"convert {' '.join(args[-6:])} exits {expect}", rc == expect, err + out)
    return rc, out, err


def ours(ck, printed):
    """trident's logits of the imported model through the printed sections"""
    text = printed[printed.index("model:"):]
    if "seq_length" not in text:
        text = text.replace("model:\n", f"model:\n  seq_length: {T}\n", 1)
    cfg = tt.write(os.path.join(ck + "-run.yaml"),
                   text + "training: {micro_batch_size: 1, train_iters: 1, lr: 1}\ndata: {data_path: none}\n")
    out = ck + "-logits.bin"
    p = subprocess.run([probe, "logits-config", cfg, path("tokens.bin"), "2", out], capture_output=True, text=True)
    if not tt.check(f"logits of {ck}", p.returncode == 0, p.stderr):
        return None
    return torch.from_numpy(np.fromfile(out, dtype=np.float32).reshape(2, T, V))


def hf_logits(folder):
    with torch.no_grad():
        return AutoModelForCausalLM.from_pretrained(folder)(tokens).logits


def peft_logits(base, folder):
    with torch.no_grad():
        return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(bases[base]), folder).eval()(tokens).logits


def close(what, a, b, tol=TOL):
    """max |a - b| relative to max |b|"""
    d = float((a - b).abs().max() / b.abs().max()) if a is not None else float("inf")
    tt.check(f"{what}: max |diff| / max |logit| {d:.2e} <= {tol}", d <= tol)


cases = [  # name, base, peft's options, trident's rank, the re-export bit for bit
    ("gpt2-default", "gpt2", dict(), R, True),
    ("gpt2-all", "gpt2", dict(target_modules=["c_attn", "c_proj", "c_fc"]), R, True),
    ("llama-default", "llama", dict(), 2 * R, False),
    ("llama-all", "llama", dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"]), 3 * R, False),
    ("llama-shared", "llama", dict(shared=True, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj"]), R, True),
    ("llama-regex", "llama", dict(target_modules=r".*\.(q_proj|v_proj)"), 2 * R, False),
]
for name, base, kw, rank, bitwise in cases:
    want, want_merged = make_adapter(base, name, **kw)
    ck = path(f"{name}-ck")
    rc, out, _ = convert("--from", "hf", "--input", bases[base], "--adapters", path(name), "--output", ck)
    if rc:
        continue
    tt.check(f"{name}: rank {rank} printed", f"rank: {rank}\n" in out, out)
    # trident's forward against torch's: float32 sums in another order, a few ulps of the largest
    # logit; the exact checks are the exports' below
    close(f"{name}: trident's logits vs PeftModel's", ours(ck, out), want)
    convert("--to", "hf", "--input", ck, "--output", path(f"{name}-merged"), "--merge-lora")
    close(f"{name}: --merge-lora in transformers vs peft's merge_and_unload", hf_logits(path(f"{name}-merged")),
          want_merged)
    re = path(f"{name}-re")
    convert("--to", "hf", "--input", ck, "--output", re, "--adapters-only")
    close(f"{name}: --adapters-only in peft vs PeftModel's", peft_logits(base, re), want)
    if bitwise:
        a, b = load_file(os.path.join(path(name), "adapter_model.safetensors")), \
            load_file(os.path.join(re, "adapter_model.safetensors"))
        tt.check(f"{name}: --adapters-only's tensors are the input's bit for bit",
                 a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), sorted(set(a) ^ set(b)))
g = tt.outputs([trident, "generate", path("llama-default-ck"), "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                "--temperature", "0"], timeout=60)
gm = tt.outputs([trident, "generate", path("llama-default-merged"), "--prompt-ids", "1,2,3", "--max-new-tokens",
                 "4", "--temperature", "0"], timeout=60)
tt.check("generate CK (no --config) = generate of the merged folder", g[0] == 0 and g[1] == gm[1], g[2] + g[1])

# ---------------------------------------------------------------- refusals (exit 2, named)
good = path("llama-default")
cfg0 = json.load(open(os.path.join(good, "adapter_config.json")))
tensors = load_file(os.path.join(good, "adapter_model.safetensors"))


last_error = [""]


def refused(what, want, config=None, drop=None, add=None, base="llama"):
    d = path("bad")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = dict(cfg0)
    c.update(config or {})
    json.dump(c, open(os.path.join(d, "adapter_config.json"), "w"))
    t = {k: v for k, v in tensors.items() if k != drop}
    t.update(add or {})
    save_file(t, os.path.join(d, "adapter_model.safetensors"))
    shutil.rmtree(path("bad-ck"), ignore_errors=True)
    rc, out, err = tt.outputs([trident, "convert", "--from", "hf", "--input", bases[base], "--adapters", d,
                               "--output", path("bad-ck")], timeout=60)
    last_error[0] = err
    tt.check(f"refused: {what}", rc == 2 and want in err and "Traceback" not in err and
             not os.path.exists(path("bad-ck")), f"rc {rc}: {err}")


q = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
for key, value, why in (("peft_type", "PREFIX_TUNING", "LORA"), ("bias", "all", "lora_only"),
                        ("bias", "lora_only", "lora_only"), ("use_rslora", True, "sqrt"), ("use_dora", True, "DoRA"),
                        ("modules_to_save", ["lm_head"], "full copies"), ("layers_to_transform", [0], "every layer"),
                        ("rank_pattern", {"q_proj": 8}, "one rank"), ("alpha_pattern", {"q_proj": 8}, "one alpha"),
                        ("task_type", "SEQ_CLS", "CAUSAL_LM"), ("target_modules", "^.*attn.*$", "regular expression"),
                        ("target_modules", None, "the list"), ("r", 2.5, "integer"), ("lora_alpha", 0, "positive"),
                        ("lora_dropout", 1.0, "probability"), ("layer_replication", [[0, 1]], "replicate"),
                        ("some_new_key", 3, "does not know")):
    refused(f"{key} {value!r}", f"adapter_config.json: {key} is not supported: ", {key: value})
    tt.check(f"... because {why}", why in last_error[0], last_error[0])
refused("a target trident does not adapt", "'lm_head'", {"target_modules": ["q_proj", "v_proj", "lm_head"]})
refused("a missing tensor", q, drop=q)
refused("an extra tensor", "k_proj.lora_A", add={q.replace("q_proj", "k_proj"): tensors[q].clone()})
refused("a misshapen tensor", "shape [4, 63]", add={q: tensors[q][:, :63].contiguous()})
refused("another rank", "shape [4, 64]", {"r": 8})
refused("adapters of another base", "not [4, 48]", base="llama48")
refused("a Llama's adapters on a GPT-2", "names no module trident adapts", base="gpt2")
d = path("bad")
os.remove(os.path.join(d, "adapter_model.safetensors"))
rc, _, err = tt.outputs([trident, "convert", "--from", "hf", "--input", bases["llama"], "--adapters", d,
                         "--output", path("bad-ck")], timeout=60)
tt.check("refused: no adapter file", rc == 2 and "adapter_model.bin" in err, err)
tt.finish()
