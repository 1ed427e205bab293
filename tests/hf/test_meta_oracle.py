#!/usr/bin/python3
"""Meta's own Llama checkpoints (`trident convert --from meta` / `--to meta`, hf/meta.h) against
transformers 4.38.2's convert_llama_weights_to_hf.py. Small random models in Meta's layout
(params.json + consolidated.NN.pth written with torch.save, split over MP as fairscale's parallel
layers split them) are converted by the script's write_model and by trident:

- llama2-mp1-fp32: Llama 2 7B's form (vocab_size -1, no n_kv_heads, rope.freqs in the file);
- llama2-mp2-gqa-bf16: 70B's form at MP 2 (n_kv_heads 2 = MP: one kv head per file,
  ffn_dim_multiplier 1.3, multiple_of 16);
- llama1-mp2-fp32: no n_kv_heads over 2 files (the script's path for Llama 1 13B);
- llama31-mp1-bf16: rope_theta 500000, use_scaled_rope, ffn_dim_multiplier 1.3;
- llama2-mp2-fp16: float16 files (the import only: the export writes float32 or bfloat16).

The script cannot take every case as it is, so the test bends it and says where: its tokenizer
class a stub of vocab_size 256 (it takes the vocabulary from the tokenizer, 32000 without one), its
reload without low_cpu_mem_usage (that needs accelerate) and in float32 for the fp32 and fp16
cases (it reloads in bfloat16), MP 1 without GQA and MP 2 with n_kv_heads = MP (4.38.2's permute of
wk and num_local_key_value_heads hold only there), and for 3.1 the config.json's rope_scaling
(llama3) and max_position_embeddings set afterwards (4.38.2 knows neither). Checks: trident's import of the
Meta folder is trident's import of the script's HF folder byte for byte (manifest included);
logits of the checkpoint (hf_probe logits-config) within 1e-5 of LlamaForCausalLM's (the Llama 2
cases; 3.1's rope is hf-rope-scaling-oracle's); `--to meta` at the same MP gives back every tensor
bit for bit (rope.freqs aside), and params.json the same sizes; the export (MP 1 -> 2 too) loads
with torch.load and gives the script the same HF model, tensor for tensor. Tensors trident refuses
naming the file and the tensor (torch.save'd edits of a folder): one of no Llama, an integer weight,
one file's shard misshapen, output.weight in one file only, a norm of another size, a NaN.
usage: test_meta_oracle.py TRIDENT HF_PROBE WORKDIR VENV"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402
import transformers.models.llama.convert_llama_weights_to_hf as conv  # noqa: E402

V = 256  # the stub tokenizer's vocab_size, which write_model takes


class StubTokenizer:
    """what write_model asks of its tokenizer class: vocab_size, save_pretrained"""
    vocab_size = V

    def __init__(self, path):
        pass

    def save_pretrained(self, d):
        pass


conv.LlamaTokenizer = conv.LlamaTokenizerFast = StubTokenizer
COLS = ("attention.wo.weight", "feed_forward.w2.weight", "tok_embeddings.weight")  # split on dim 1
ROWS = ("attention.wq.weight", "attention.wk.weight", "attention.wv.weight", "feed_forward.w1.weight",
        "feed_forward.w3.weight", "output.weight")


def ffn(dim, multiple_of, multiplier):
    """Meta's FeedForward width"""
    h = int(2 * 4 * dim / 3)
    if multiplier:
        h = int(multiplier * h)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def split_dim(name):
    return 1 if name.endswith(COLS) else 0 if name.endswith(ROWS) else None


def meta_folder(name, params, mp, dtype, seed, rope_freqs=False):
    """WORK/NAME: params.json and consolidated.NN.pth (NN < mp) of a random Llama; its whole
    tensors by Meta's name."""
    d = tt.fresh_dir(os.path.join(work, name))
    C, L, NH = params["dim"], params["n_layers"], params["n_heads"]
    NKV, HS = params.get("n_kv_heads") or NH, C // NH
    F = ffn(C, params.get("multiple_of", 256), params.get("ffn_dim_multiplier"))
    g = torch.Generator().manual_seed(seed)

    def w(*shape, norm=False):
        x = torch.randn(shape, generator=g)
        return (1.0 + 0.2 * x if norm else 0.1 * x).to(dtype)
    whole = {"tok_embeddings.weight": w(V, C)}
    for i in range(L):
        p = f"layers.{i}."
        whole.update({p + "attention.wq.weight": w(NH * HS, C), p + "attention.wk.weight": w(NKV * HS, C),
                      p + "attention.wv.weight": w(NKV * HS, C), p + "attention.wo.weight": w(C, NH * HS),
                      p + "feed_forward.w1.weight": w(F, C), p + "feed_forward.w2.weight": w(C, F),
                      p + "feed_forward.w3.weight": w(F, C), p + "attention_norm.weight": w(C, norm=True),
                      p + "ffn_norm.weight": w(C, norm=True)})
    whole.update({"norm.weight": w(C, norm=True), "output.weight": w(V, C)})
    for s in range(mp):
        sd = {}
        for n, t in whole.items():
            k = split_dim(n)
            part = t if k is None else t.chunk(mp, k)[s]
            sd[n] = part.clone(memory_format=torch.contiguous_format)
        if rope_freqs:  # (Llama 1 and 2's files keep the table; ignored)
            sd["rope.freqs"] = torch.rand(HS // 2).to(dtype)
        torch.save(sd, os.path.join(d, f"consolidated.{s:02d}.pth"))
    tt.write(os.path.join(d, "params.json"), json.dumps(params))
    return d, whole


def script_hf(meta, name, mp, fp32, version, config_edit=None):
    """WORK/NAME: the script's write_model of folder meta (MP 1: "7B", 2: "13B"), reloaded in
    float32 for fp32 (its own reload is bfloat16); config_edit: config.json keys set after."""
    out = os.path.join(work, name)

    class Reload(LlamaForCausalLM):
        @classmethod
        def from_pretrained(cls, *a, **kw):
            kw.pop("low_cpu_mem_usage", None)  # (it needs accelerate, which hf-venv has not)
            if fp32:
                kw["torch_dtype"] = torch.float32
            return LlamaForCausalLM.from_pretrained(*a, **kw)
    conv.LlamaForCausalLM = Reload
    with open(os.devnull, "w") as null:
        old, sys.stdout = sys.stdout, null
        try:
            conv.write_model(model_path=out, input_base_path=meta, model_size={1: "7B", 2: "13B"}[mp],
                             tokenizer_path="stub", safe_serialization=True, llama_version=version)
        finally:
            sys.stdout = old
    if config_edit:
        path = os.path.join(out, "config.json")
        cfg = json.load(open(path))
        cfg.update(config_edit)
        tt.write(path, json.dumps(cfg))
    return out


def convert(name, *args):
    rc, so, se = tt.outputs([trident, "convert", *args], timeout=120)
    tt.check(f"{name}: trident convert {' '.join(args[:2])}", rc == 0, se)
    return rc == 0, so


def hf_tensors(d):
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    out = {}
    for f in files:
        out.update(load_file(os.path.join(d, f)))
    return out


def logits_check(name, ck, hf, params, ffn_width):
    """hf_probe logits-config of checkpoint ck against LlamaForCausalLM of folder hf (2 x 16
    tokens): max |diff| <= 1e-5 (and relative to the largest logit)."""
    T = 16
    cfg = tt.write_config(os.path.join(work, name + ".yaml"),
                          model=dict(num_layers=params["n_layers"], hidden_size=params["dim"],
                                     num_attention_heads=params["n_heads"],
                                     num_query_groups=params.get("n_kv_heads") or params["n_heads"],
                                     vocab_size=V, seq_length=T, max_position_embeddings=4096,
                                     normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
                                     ffn_hidden_size=ffn_width, untie_embeddings_and_output_weights=True,
                                     add_bias_linear=False, layernorm_epsilon=params["norm_eps"]),
                          training=dict(micro_batch_size=2, global_batch_size=2, train_iters=1, lr=1e-3),
                          data=dict(data_path=os.path.join(work, "unused")), checkpoint=dict(load=ck))
    tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    tokens.numpy().astype(np.int32).tofile(os.path.join(work, "tokens.bin"))
    lfile = os.path.join(work, name + "-logits.bin")
    p = subprocess.run([probe, "logits-config", cfg, os.path.join(work, "tokens.bin"), "2", lfile],
                       capture_output=True, text=True)
    if not tt.check(f"{name}: hf_probe logits-config", p.returncode == 0, p.stderr):
        return
    ours = torch.from_numpy(np.fromfile(lfile, dtype=np.float32).reshape(2, T, V))
    model = LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        ref = model(tokens).logits
    diff = (ours - ref).abs().max().item()
    tt.check(f"{name}: logits of the import within 1e-5 of LlamaForCausalLM's (2 x {T} tokens)",
             diff <= 1e-5, f"max |diff| {diff:.2e}, max |logit| {ref.abs().max().item():.2f}", show=True)


def export_check(name, ck, whole, params, mp, bf16, hf, fp32, version):
    """--to meta of ck at mp files: torch.load's tensors are the originals cut for mp, bit for bit
    (when mp is the source's) or the same whole tensors; params.json's sizes; and the script makes
    the HF folder hf of it."""
    back = os.path.join(work, f"{name}-back-mp{mp}")
    ok, so = convert(f"{name} -> meta mp {mp}", "--to", "meta", "--input", ck, "--output", back, "--mp",
                     str(mp), *(["--dtype", "bf16"] if bf16 else []))
    if not ok:
        return
    files = sorted(f for f in os.listdir(back) if f.startswith("consolidated."))
    sds = [torch.load(os.path.join(back, f), map_location="cpu") for f in files]
    bad = []
    for n, t in whole.items():
        k = split_dim(n)
        got = sds[0][n] if k is None else torch.cat([sd[n] for sd in sds], k)
        if got.dtype != t.dtype or not torch.equal(got, t):
            bad.append(n)
    extra = [n for sd in sds for n in sd if n not in whole]
    tt.check(f"{name}: --to meta --mp {mp}: {len(files)} files, every tensor the original's bit for bit "
             f"({len(whole)}, {'bfloat16' if bf16 else 'float32'})",
             len(files) == mp and not bad and not extra, f"differ: {bad[:5]}; extra: {extra[:5]}")
    got = json.load(open(os.path.join(back, "params.json")))
    want_ffn = ffn(params["dim"], params.get("multiple_of", 256), params.get("ffn_dim_multiplier"))
    same = (got["dim"] == params["dim"] and got["n_layers"] == params["n_layers"] and
            got["n_heads"] == params["n_heads"] and
            (got.get("n_kv_heads") or got["n_heads"]) == (params.get("n_kv_heads") or params["n_heads"]) and got["vocab_size"] == V and
            got["norm_eps"] == params["norm_eps"] and got["rope_theta"] == params.get("rope_theta", 10000.0) and
            ffn(got["dim"], got["multiple_of"], got.get("ffn_dim_multiplier")) == want_ffn and
            got.get("use_scaled_rope", False) == params.get("use_scaled_rope", False))
    tt.check(f"{name}: --to meta --mp {mp}: params.json gives the same model", same, json.dumps(got))
    hf2 = script_hf(back, f"{name}-back-mp{mp}-hf", mp, fp32, version)
    a, b = hf_tensors(hf), hf_tensors(hf2)
    tt.check(f"{name}: --to meta --mp {mp}: the script's HF model of the export is the original's, tensor "
             f"for tensor", set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
             f"differ: {[k for k in a if k not in b or not torch.equal(a[k], b[k])][:5]}")


CASES = [
    # name, params, mp, dtype, llama_version, rope.freqs, logits, config.json edit
    ("llama2-mp1-fp32", dict(dim=32, n_layers=2, n_heads=4, multiple_of=32, norm_eps=1e-05, vocab_size=-1),
     1, torch.float32, 2, True, True, None),
    ("llama2-mp2-gqa-bf16", dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, multiple_of=16,
                                 ffn_dim_multiplier=1.3, norm_eps=1e-05, vocab_size=-1),
     2, torch.bfloat16, 2, True, True, None),
    ("llama1-mp2-fp32", dict(dim=32, n_layers=2, n_heads=4, multiple_of=256, norm_eps=1e-06, vocab_size=-1),
     2, torch.float32, 1, False, False, dict(max_position_embeddings=4096)),
    ("llama31-mp1-bf16", dict(dim=64, n_layers=2, n_heads=4, multiple_of=32,
                              ffn_dim_multiplier=1.3, norm_eps=1e-05, rope_theta=500000.0,
                              use_scaled_rope=True, vocab_size=V),
     1, torch.bfloat16, 2, False, False,
     dict(max_position_embeddings=131072, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                          high_freq_factor=4.0,
                                                          original_max_position_embeddings=8192))),
    ("llama2-mp2-fp16", dict(dim=32, n_layers=1, n_heads=4, multiple_of=32, norm_eps=1e-05, vocab_size=-1),
     2, torch.float16, 2, False, False, None),
]

for i, (name, params, mp, dtype, version, freqs, logits, edit) in enumerate(CASES):
    meta, whole = meta_folder(name + "-meta", params, mp, dtype, 10 + i, freqs)
    fp32 = dtype != torch.bfloat16  # (float16 too: its values are float32's exactly)
    hf = script_hf(meta, name + "-hf", mp, fp32, version, edit)
    ck_hf, ck_meta = os.path.join(work, name + "-ck-hf"), os.path.join(work, name + "-ck-meta")
    ok1, _ = convert(name, "--from", "hf", "--input", hf, "--output", ck_hf)
    ok2, so = convert(name, "--from", "meta", "--input", meta, "--output", ck_meta)
    if not (ok1 and ok2):
        continue
    tt.check(f"{name}: the Meta folder's checkpoint is the script's HF folder's, byte for byte",
             hff.same_checkpoint(ck_hf, ck_meta), so)
    width = ffn(params["dim"], params.get("multiple_of", 256), params.get("ffn_dim_multiplier"))
    if logits:
        logits_check(name, ck_meta, hf, params, width)
    if dtype == torch.float16:  # (the export writes float32 or bfloat16)
        continue
    export_check(name, ck_meta, whole, params, mp, not fp32, hf, fp32, version)
    if name == "llama2-mp1-fp32":  # the same model cut for 2 files: the same HF model
        whole2 = dict(whole)
        export_check(name, ck_meta, whole2, params, 2, False, hf, fp32, version)
# tensors trident refuses, naming the file and the tensor (torch.save'd edits of llama2-mp2-gqa-bf16's
# files): exit 2, nothing written
src = os.path.join(work, "llama2-mp2-gqa-bf16-meta")


def tensor_refused(what, rank, edit, cause):
    d = os.path.join(work, "bad-meta")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    path = os.path.join(d, f"consolidated.{rank:02d}.pth")
    sd = torch.load(path)
    edit(sd)
    torch.save(sd, path)
    out = os.path.join(work, "bad-ck")
    rc, so, se = tt.outputs([trident, "convert", "--from", "meta", "--input", d, "--output", out], timeout=120)
    tt.check(f"refused: {what}", rc == 2 and cause in se and path in se and not os.path.exists(out),
             f"exit {rc}: {se.strip()}")


def nan_at(sd, name):
    sd[name][1, 2] = float("nan")


tensor_refused("a tensor of no Llama", 1, lambda sd: sd.update({"layers.0.attention.wq.bias": torch.zeros(16)}),
               "tensor layers.0.attention.wq.bias is not part of the Llama params.json describes")
tensor_refused("an integer weight", 0, lambda sd: sd.update({"norm.weight": sd["norm.weight"].long()}),
               "tensor norm.weight is I64, not a F32, BF16 or F16 weight")
tensor_refused("one file's wo a column short", 1,
               lambda sd: sd.update({"layers.1.attention.wo.weight": sd["layers.1.attention.wo.weight"][:, 1:].clone()}),
               "tensor layers.1.attention.wo.weight is [32, 15], params.json makes it [32, 16] on each of 2")
tensor_refused("the second file without output.weight", 1, lambda sd: sd.pop("output.weight"),
               "tensor output.weight is missing")
tensor_refused("the second file's norm of another size", 1,
               lambda sd: sd.update({"norm.weight": torch.ones(31, dtype=torch.bfloat16)}),
               "tensor norm.weight is [31], params.json makes it [32]")
tensor_refused("a NaN in a weight", 1, lambda sd: nan_at(sd, "layers.0.feed_forward.w2.weight"),
               "layers.0.feed_forward.w2.weight")
tt.finish("PASSED")
