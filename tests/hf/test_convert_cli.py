#!/usr/bin/python3
"""`trident convert` end to end without PyTorch (it runs in the sanitizer build too): GPT-2
folders are written here with a small safetensors writer of our own.
  - import (F32, F16, BF16; prefixed and unprefixed names; buffers and a tied lm_head) and
    export round trip bit for bit in fp32; bf16 export rounds to nearest even; shards;
  - every malformed safetensors file, every unsupported config.json and every wrong tensor is
    refused with exit 2 naming the file and the cause, and nothing appears at the output (no
    temporary folder left either);
  - usage errors, an output that exists, exports from a missing or damaged checkpoint;
  - a Llama config of max_position_embeddings 2^26 imports and exports in little memory (peak RSS);
  - tr_hf_load_gpt2 straight from the HF folder into tensor-parallel shards (1, 2 and 4 ranks
    of `trident launch`) and into a last pipeline stage: each the slice of the whole model,
    the TP logits the whole model's (hf_probe load-check).
usage: test_convert_cli.py TRIDENT WORKDIR HF_PROBE"""
import json
import os
import random
import re
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

trident, work, probe = sys.argv[1], sys.argv[2], sys.argv[3]
work = tt.fresh_dir(work)
L, C, NH, P, V = 2, 32, 4, 16, 50
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8}


# ---------------------------------------------------------------- safetensors by hand
def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def to_bf16(bits):
    """Round-to-nearest-even of a float32's bits to bfloat16 (no NaNs here)."""
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    if dtype == "BF16":
        return struct.pack(f"<{len(values)}H", *(to_bf16(f32_bits(v)) for v in values))
    if dtype == "I64":
        return struct.pack(f"<{len(values)}q", *(int(v) for v in values))
    if dtype == "F64":
        return struct.pack(f"<{len(values)}d", *values)
    raise ValueError(dtype)


def st_bytes(tensors, header_edit=None, meta=True):
    """tensors: list of (name, dtype, shape, values); returns the file's bytes."""
    header, data = {}, b""
    if meta:
        header["__metadata__"] = {"format": "pt"}
    for name, dtype, shape, values in tensors:
        raw = encode(values, dtype)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if header_edit:
        header = header_edit(header)
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def st_read(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file."""
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


rng = random.Random(16)


def rand(n, scale=0.5):
    # values exact in float16 so the F16 file holds the same numbers
    return [round(rng.uniform(-scale, scale) * 1024) / 1024 for _ in range(n)]


def gpt2_tensors(prefix="transformer.", dtype="F32", buffers=True, head=True, layers=L):
    t = [(f"{prefix}wte.weight", dtype, (V, C), rand(V * C)),
         (f"{prefix}wpe.weight", dtype, (P, C), rand(P * C))]
    for i in range(layers):
        h = f"{prefix}h.{i}."
        t += [(h + "ln_1.weight", dtype, (C,), rand(C, 2)), (h + "ln_1.bias", dtype, (C,), rand(C)),
              (h + "attn.c_attn.weight", dtype, (C, 3 * C), rand(C * 3 * C)),
              (h + "attn.c_attn.bias", dtype, (3 * C,), rand(3 * C)),
              (h + "attn.c_proj.weight", dtype, (C, C), rand(C * C)),
              (h + "attn.c_proj.bias", dtype, (C,), rand(C)),
              (h + "ln_2.weight", dtype, (C,), rand(C, 2)), (h + "ln_2.bias", dtype, (C,), rand(C)),
              (h + "mlp.c_fc.weight", dtype, (C, 4 * C), rand(C * 4 * C)),
              (h + "mlp.c_fc.bias", dtype, (4 * C,), rand(4 * C)),
              (h + "mlp.c_proj.weight", dtype, (4 * C, C), rand(4 * C * C)),
              (h + "mlp.c_proj.bias", dtype, (C,), rand(C))]
        if buffers:
            t.append((h + "attn.bias", dtype, (1, 1, P, P), [1.0] * (P * P)))
    t += [(f"{prefix}ln_f.weight", dtype, (C,), rand(C, 2)), (f"{prefix}ln_f.bias", dtype, (C,), rand(C))]
    if head:
        t.append(("lm_head.weight", dtype, (V, C), t[0][3]))
    return t


CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
          "n_layer": L, "n_embd": C, "n_head": NH, "n_positions": P, "vocab_size": V,
          "layer_norm_epsilon": 1e-05, "n_inner": None, "bos_token_id": V - 1, "eos_token_id": V - 1}


def hf_folder(name, tensors, config=None, raw=None):
    d = tt.fresh_dir(os.path.join(work, name))
    tt.write(os.path.join(d, "config.json"), json.dumps(config if config is not None else CONFIG))
    tt.write(os.path.join(d, "model.safetensors"), raw if raw is not None else st_bytes(tensors))
    return d


def convert(*args):
    return tt.outputs([trident, "convert", *args], timeout=120)


def leftovers(parent):
    return [n for n in os.listdir(parent) if ".tmp-" in n]


def refused(what, args, out, cause, names=None):
    """`trident convert ARGS` must exit 2 naming `names` (default: nothing) and `cause`, with
    nothing at `out` and no temporary folder beside it."""
    rc, so, se = convert(*args)
    ok = rc == 2 and cause in se and all(n in se for n in (names or [])) and not os.path.exists(out)
    ok = ok and not leftovers(os.path.dirname(out))
    tt.check(f"refused: {what}", ok, f"exit {rc}, stderr {se.strip()!r}, output exists: {os.path.exists(out)}")
    if os.path.isdir(out) and out != ck:  # a wrong acceptance must not fail the checks after it
        shutil.rmtree(out)


# ---------------------------------------------------------------- import and export
base = gpt2_tensors()
src = hf_folder("hf-f32", base)
ck = os.path.join(work, "out", "ck")  # the parent 'out' is made by convert
rc, so, se = convert("--from", "hf", "--input", src, "--output", ck)
tt.check("import of an F32 GPT-2 (prefixed names, attn.bias buffers, tied lm_head)", rc == 0, f"exit {rc}: {se}")
tt.check("the import is a release checkpoint",
         open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read() == "release\n"
         and os.path.exists(os.path.join(ck, "release", "manifest.txt")))
tt.check("the import prints the model section",
         f"num_layers: {L}" in so and f"vocab_size: {V}" in so and f"max_position_embeddings: {P}" in so, so)
tt.check("no temporary folder left", not leftovers(os.path.dirname(ck)))

exp = os.path.join(work, "exp-f32")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", exp, "--eos-id", str(V - 1))
tt.check("export fp32", rc == 0 and "iteration 0" in so, f"exit {rc}: {se}")
back = st_read(os.path.join(exp, "model.safetensors"))
want = {n: (d, list(s), encode(v, d)) for n, d, s, v in base if not n.endswith(".attn.bias") and n != "lm_head.weight"}
tt.check("round trip HF -> trident -> HF is bit-exact (fp32)", back == want,
         f"differ: {sorted(k for k in set(back) | set(want) if back.get(k) != want.get(k))[:5]}")
cfg = json.load(open(os.path.join(exp, "config.json")))
tt.check("config.json", all(cfg[k] == CONFIG[k] for k in ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size",
                                                          "activation_function", "eos_token_id"))
         and cfg["torch_dtype"] == "float32" and cfg["architectures"] == ["GPT2LMHeadModel"], cfg)
gen = json.load(open(os.path.join(exp, "generation_config.json")))
tt.check("generation_config.json", gen.get("eos_token_id") == V - 1, gen)
meta = json.loads(open(os.path.join(exp, "model.safetensors"), "rb").read()[8:][:struct.unpack(
    "<Q", open(os.path.join(exp, "model.safetensors"), "rb").read(8))[0]])["__metadata__"]
tt.check("metadata format pt (transformers checks it)", meta == {"format": "pt"}, meta)

exp16 = os.path.join(work, "exp-bf16")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", exp16, "--dtype", "bf16")
back = st_read(os.path.join(exp16, "model.safetensors")) if rc == 0 else {}
want16 = {n: ("BF16", list(s), encode(v, "BF16")) for n, d, s, v in base if n in want}
tt.check("export bf16: each weight rounded to nearest even", rc == 0 and back == want16, f"exit {rc}: {se}")
tt.check("bf16 config", rc == 0 and json.load(open(os.path.join(exp16, "config.json")))["torch_dtype"] == "bfloat16")

shard = os.path.join(work, "exp-sharded")
rc, so, se = convert("--to", "hf", "--input", ck, "--output", shard, "--max-shard-size", "20KB")
files = sorted(os.listdir(shard)) if rc == 0 else []
index = json.load(open(os.path.join(shard, "model.safetensors.index.json"))) if rc == 0 else {}
got = {}
for f in files:
    if f.endswith(".safetensors"):
        got.update(st_read(os.path.join(shard, f)))
tt.check("export in shards of 20 KB: index and shards hold every tensor",
         rc == 0 and len([f for f in files if f.startswith("model-")]) > 2 and got == want
         and set(index["weight_map"]) == set(want)
         and index["metadata"]["total_size"] == sum(len(v[2]) for v in want.values()), f"exit {rc}: {se} {files}")
def same_checkpoint(a, b):
    """Two checkpoints' release folders hold the same files with the same bytes."""
    ra, rb = os.path.join(a, "release"), os.path.join(b, "release")
    return os.path.isdir(ra) and os.path.isdir(rb) and sorted(os.listdir(ra)) == sorted(os.listdir(rb)) and all(
        open(os.path.join(ra, f), "rb").read() == open(os.path.join(rb, f), "rb").read() for f in os.listdir(ra))


ck2 = os.path.join(work, "ck-from-shards")
rc, so, se = convert("--from", "hf", "--input", shard, "--output", ck2)
same = rc == 0 and same_checkpoint(ck, ck2)
tt.check("import of the shards = import of the single file (every file of the checkpoint)", same, f"exit {rc}: {se}")

def decoded(values, dtype):
    """The float32 values a dtype's encoding of `values` holds."""
    raw = encode(values, dtype)
    if dtype == "F16":
        return list(struct.unpack(f"<{len(values)}e", raw))
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack(f"<{len(values)}H", raw)]


for dtype in ("F16", "BF16"):
    t = [(n, dtype, s, v) for n, d, s, v in gpt2_tensors(prefix="", buffers=False, head=False)]
    d = hf_folder(f"hf-{dtype}", t)
    out = os.path.join(work, f"ck-{dtype}")
    rc, so, se = convert("--from", "hf", "--input", d, "--output", out)
    exp2 = os.path.join(work, f"exp-{dtype}")
    rc2, so2, se2 = convert("--to", "hf", "--input", out, "--output", exp2) if rc == 0 else (1, "", "")
    back = st_read(os.path.join(exp2, "model.safetensors")) if rc2 == 0 else {}
    ok = all(back.get("transformer." + n, (0, 0, b""))[2] == encode(decoded(v, dtype), "F32") for n, dd, s, v in t)
    tt.check(f"import of {dtype} weights without the 'transformer.' prefix, exported as their F32 values",
             rc == 0 and rc2 == 0 and ok, f"exit {rc}/{rc2}: {se}{se2}")

empty_out = tt.fresh_dir(os.path.join(work, "empty-out"))
rc, so, se = convert("--from", "hf", "--input", src, "--output", empty_out)
tt.check("an empty output folder is replaced", rc == 0 and os.path.exists(os.path.join(empty_out, "release")), se)

for n in (1, 2, 4):
    rc, so, se = tt.outputs([trident, "launch", "--nproc", str(n), "--", probe, "load-check", src], timeout=120)
    tt.check(f"tr_hf_load_gpt2 into {n} tensor-parallel shard(s) and a pipeline stage", rc == 0,
             f"exit {rc}\n{so[-1500:]}{se[-1500:]}")

# ---------------------------------------------------------------- malformed safetensors
good = st_bytes(base)
n_head = struct.unpack("<Q", good[:8])[0]


def edit(fn):
    return st_bytes(base, header_edit=fn)


def set_offsets(name, b, e):
    def f(h):
        h[name]["data_offsets"] = [b, e]
        return h
    return f


first = "transformer.wte.weight"
second = "transformer.wpe.weight"
wte_bytes = V * C * 4
cases = [
    ("shorter than 8 bytes", good[:5], "shorter than the 8-byte header length"),
    ("header length past the file", struct.pack("<Q", len(good)) + good[8:], "runs past the end of the file"),
    ("a header over 100 MB", struct.pack("<Q", 100_000_001) + good[8:], "over the limit of 100000000"),
    ("a header that is not UTF-8", good[:9] + b"\xfe" + good[10:], "not UTF-8"),
    ("a header that is not JSON", good[:8] + b"{" + b" " * (n_head - 1) + good[8 + n_head:], "not valid JSON"),
    ("a repeated name", st_bytes(base, header_edit=lambda h: json.dumps(h, separators=(",", ":")).replace(
        '"transformer.wpe.weight"', '"transformer.wte.weight"', 1).encode()), "a name appears twice"),
    ("overlapping offsets", edit(set_offsets(second, wte_bytes - 4, wte_bytes - 4 + P * C * 4)), "overlap"),
    ("offsets past the data", good[:-4], "run past the end of the data"),
    ("shape and byte count disagree", edit(lambda h: (h[first].update(shape=[V, C + 1]), h)[1]), "data_offsets hold"),
    ("dtype and byte count disagree", edit(lambda h: (h[first].update(dtype="F16"), h)[1]), "data_offsets hold"),
    ("an unknown dtype", edit(lambda h: (h[first].update(dtype="Q4"), h)[1]), "unknown dtype 'Q4'"),
    ("a negative size", edit(lambda h: (h[first].update(shape=[-V, -C]), h)[1]), "is not an integer"),
    ("bytes that belong to no tensor", good + b"\0" * 4, "belong to no tensor"),
    ("an entry with an extra key", edit(lambda h: (h[first].update(extra=1), h)[1]), "exactly the keys"),
    ("metadata that is not strings", edit(lambda h: (h.update(__metadata__={"format": 1}), h)[1]), "is not a string"),
]
for what, raw, cause in cases:
    d = hf_folder("bad-st", base, raw=raw)
    out = os.path.join(work, "bad-out")
    refused(f"safetensors: {what}", ["--from", "hf", "--input", d, "--output", out], out, cause,
            [os.path.join(d, "model.safetensors")])

# ---------------------------------------------------------------- wrong models
def without(name):
    return [t for t in base if t[0] != name]


wrong = [
    ("a missing tensor", without("transformer.h.1.mlp.c_fc.bias"), None, "no tensor 'transformer.h.1.mlp.c_fc.bias'"),
    ("a tensor of the wrong shape", [(n, d, (C, C) if n.endswith("h.0.attn.c_attn.weight") else s,
                                      v[:C * C] if n.endswith("h.0.attn.c_attn.weight") else v) for n, d, s, v in base],
     None, "is [32, 32]; a GPT-2 of this config.json has [32, 96]"),
    ("a layer beyond n_layer", base + [("transformer.h.2.ln_1.weight", "F32", (C,), rand(C))], None,
     "'transformer.h.2.ln_1.weight' is not part of a GPT-2"),
    ("an unknown tensor", base + [("score.weight", "F32", (2, C), rand(2 * C))], None, "'score.weight' is not part"),
    ("an untied lm_head", without("lm_head.weight") + [("lm_head.weight", "F32", (V, C), rand(V * C))], None,
     "lm_head.weight differs from wte"),
    ("integer weights", [(n, "I64" if n.endswith("ln_f.bias") else d, s, v) for n, d, s, v in base], None,
     "is I64; GPT-2 weights are F32"),
    ("both prefixed and bare names", base + [("wpe.weight", "F32", (P, C), rand(P * C))], None, "holds both"),
    ("activation relu", base, dict(CONFIG, activation_function="relu"), "activation_function"),
    ("n_inner 3C", base, dict(CONFIG, n_inner=3 * C), "n_inner"),
    ("another epsilon", base, dict(CONFIG, layer_norm_epsilon=1e-6), "layer_norm_epsilon"),
    ("no n_layer", base, {k: v for k, v in CONFIG.items() if k != "n_layer"}, "n_layer is missing"),
    ("a llama", base, dict(CONFIG, model_type="llama"), "num_hidden_layers is missing"),
    ("a mistral", base, dict(CONFIG, model_type="mistral"), "model_type"),
    ("scale by layer", base, dict(CONFIG, scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
    ("untied embeddings in the config", base, dict(CONFIG, tie_word_embeddings=False), "tie_word_embeddings"),
    ("heads that do not divide n_embd", base, dict(CONFIG, n_head=5), "not a multiple of n_head"),
    ("config sizes that disagree with the weights", base, dict(CONFIG, vocab_size=V + 1), "a GPT-2 of this config.json has"),
    ("a config.json of a far larger model (refused before any allocation)", base,
     dict(CONFIG, n_embd=1 << 24, n_head=16, n_layer=2), "describes a GPT-2 of"),
    ("n_embd past trident's limit", base, dict(CONFIG, n_embd=1 << 27, n_head=16), "n_embd is above"),
]
for what, tensors, config, cause in wrong:
    d = hf_folder("bad-model", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"model: {what}", ["--from", "hf", "--input", d, "--output", out], out, cause)
d = hf_folder("bad-json", base)
tt.write(os.path.join(d, "config.json"), "{\"n_layer\": 2,")
refused("config.json that is not JSON", ["--from", "hf", "--input", d, "--output", os.path.join(work, "bad-out")],
        os.path.join(work, "bad-out"), "config.json:1:", [])
os.remove(os.path.join(d, "model.safetensors"))
tt.write(os.path.join(d, "config.json"), json.dumps(CONFIG))
tt.write(os.path.join(d, "pytorch_model.bin"), b"PK")
refused("a folder with pytorch_model.bin only", ["--from", "hf", "--input", d, "--output", os.path.join(work, "bad-out")],
        os.path.join(work, "bad-out"), "pytorch_model.bin is not read")
tt.write(os.path.join(d, "model.safetensors.index.json"), json.dumps({"weight_map": {first: "model-1.safetensors"}}))
refused("an index naming a missing shard", ["--from", "hf", "--input", d, "--output", os.path.join(work, "bad-out")],
        os.path.join(work, "bad-out"), "model-1.safetensors")

# ---------------------------------------------------------------- usage and outputs
bad_out = os.path.join(work, "bad-out")
for what, args, cause in [
        ("no arguments", [], "give the direction once"),
        ("both directions", ["--from", "hf", "--to", "hf", "--input", src, "--output", bad_out], "give the direction once"),
        ("another format", ["--from", "megatron", "--input", src, "--output", bad_out], "--from needs 'hf'"),
        ("no output", ["--from", "hf", "--input", src], "--input and --output are both needed"),
        ("a bad dtype", ["--to", "hf", "--input", ck, "--output", bad_out, "--dtype", "fp16"], "--dtype needs fp32 or bf16"),
        ("an export option on import", ["--from", "hf", "--input", src, "--output", bad_out, "--dtype", "bf16"], "apply to --to hf"),
        ("a bad shard size", ["--to", "hf", "--input", ck, "--output", bad_out, "--max-shard-size", "lots"], "--max-shard-size needs"),
        ("a stray argument", ["--from", "hf", src, bad_out], "unexpected argument"),
        ("a missing input", ["--from", "hf", "--input", os.path.join(work, "nowhere"), "--output", bad_out], "config.json"),
        ("an export of a folder without checkpoint", ["--to", "hf", "--input", src, "--output", bad_out], "holds no checkpoint"),
]:
    refused(f"usage: {what}", args, bad_out, cause)
rc, so, se = convert("--help")
tt.check("--help", rc == 0 and "--from hf" in so and "--max-shard-size" in so, se)
rc, so, se = convert("--from", "hf", "--input", src, "--output", ck)
tt.check("an existing checkpoint folder is not overwritten", rc == 2 and "exists and is not an empty folder" in se
         and open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read() == "release\n", se)

damaged = os.path.join(work, "ck-damaged")
convert("--from", "hf", "--input", src, "--output", damaged)
victim = os.path.join(damaged, "release", "layers.1.fc.weight")
blob = bytearray(open(victim, "rb").read())
blob[100] ^= 0x40
tt.write(victim, bytes(blob))
refused("an export of a damaged checkpoint", ["--to", "hf", "--input", damaged, "--output", bad_out], bad_out,
        "checksum", [victim])
# ---------------------------------------------------------------- Llama folders (issue 17)
LC = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": 48,
      "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": 2, "max_position_embeddings": P,
      "vocab_size": V, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu"}


def llama_tensors():
    HS = C // NH
    t = [("model.embed_tokens.weight", "F32", (V, C), rand(V * C))]
    for i in range(L):
        h = f"model.layers.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "self_attn.q_proj.weight", "F32", (C, C), rand(C * C)),
              (h + "self_attn.k_proj.weight", "F32", (2 * HS, C), rand(2 * HS * C)),
              (h + "self_attn.v_proj.weight", "F32", (2 * HS, C), rand(2 * HS * C)),
              (h + "self_attn.o_proj.weight", "F32", (C, C), rand(C * C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "mlp.gate_proj.weight", "F32", (48, C), rand(48 * C)),
              (h + "mlp.up_proj.weight", "F32", (48, C), rand(48 * C)),
              (h + "mlp.down_proj.weight", "F32", (C, 48), rand(48 * C))]
    return t + [("model.norm.weight", "F32", (C,), rand(C, 2)), ("lm_head.weight", "F32", (V, C), rand(V * C))]


lt = llama_tensors()
d = hf_folder("llama", lt, LC)
ck_llama = os.path.join(work, "ck-llama")
rc, so, se = convert("--from", "hf", "--input", d, "--output", ck_llama)
tt.check("Llama (GQA 4/2, untied): imported, the model section printed", rc == 0 and "rope" in so and
         "num_query_groups: 2" in so, se)
lcfg = tt.write_config(os.path.join(work, "llama.yaml"),
    model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH, num_query_groups=2, seq_length=P,
               max_position_embeddings=P, vocab_size=V, normalization="RMSNorm", position_embedding_type="rope",
               swiglu=True, ffn_hidden_size=48, untie_embeddings_and_output_weights=True, add_bias_linear=False,
               layernorm_epsilon=1e-6),
    training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))
back = os.path.join(work, "llama-back")
rc, so, se = convert("--to", "hf", "--input", ck_llama, "--output", back, "--config", lcfg)
ok = rc == 0 and st_read(os.path.join(back, "model.safetensors")) == st_read(os.path.join(d, "model.safetensors"))
tt.check("Llama: HF -> trident -> HF (--config) is bit-exact", ok, se)
# the manifest's family line says Llama: no --config needed, the same files
back2 = os.path.join(work, "llama-back-manifest")
rc, so, se = convert("--to", "hf", "--input", ck_llama, "--output", back2)
same = rc == 0 and all(open(os.path.join(back, f), "rb").read() == open(os.path.join(back2, f), "rb").read()
                       for f in ("model.safetensors", "config.json"))
tt.check("Llama: HF -> trident -> HF without --config (the manifest's family line) gives the same files",
         same, se)
# the manifest keeps rms_norm_eps (the import once recorded 1e-05 whatever the source said, and
# an export without --config wrote that)
eps = json.load(open(os.path.join(back2, "config.json"))).get("rms_norm_eps") if rc == 0 else None
tt.check(f"Llama: rms_norm_eps 1e-6 imported and exported as such (exported {eps})", eps == 1e-6,
         open(os.path.join(ck_llama, "release", "manifest.txt")).read()[:600])
rc, so, se = tt.outputs([trident, "generate", ck_llama, "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
                         "--temperature", "0"])
tt.check("generate from the Llama checkpoint without --config: exit 0", rc == 0, se)
for what, tensors, config, cause in [
    ("rope scaling", lt, dict(LC, rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling"),
    ("attention biases", lt, dict(LC, attention_bias=True), "attention_bias"),
    ("a gelu MLP", lt, dict(LC, hidden_act="gelu"), "hidden_act"),
    ("key/value heads that do not divide the heads", lt, dict(LC, num_key_value_heads=3), "do not divide"),
    ("no num_hidden_layers", lt, {k: v for k, v in LC.items() if k != "num_hidden_layers"},
     "num_hidden_layers is missing"),
    ("a missing k_proj", [t for t in lt if t[0] != "model.layers.1.self_attn.k_proj.weight"], LC,
     "no tensor 'model.layers.1.self_attn.k_proj.weight'"),
    ("a k_proj of the heads' size (config says 2 groups)",
     [(n, dt, (C, C), rand(C * C)) if n.endswith("0.self_attn.k_proj.weight") else (n, dt, sh, v) for n, dt, sh, v in lt],
     LC, "model.layers.0.self_attn.k_proj.weight' is [32, 32]"),
    ("a foreign tensor", lt + [("model.layers.0.mlp.extra.weight", "F32", (2,), [0.0, 1.0])], LC,
     "'model.layers.0.mlp.extra.weight' is not part of the Llama model"),
]:
    d = hf_folder("bad-llama", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"Llama: {what}", ["--from", "hf", "--input", d, "--output", out], out, cause)
refused("an export with --config of a model transformers lacks",
        ["--to", "hf", "--input", ck_llama, "--output", bad_out, "--config", tt.write_config(
            os.path.join(work, "odd.yaml"), model=dict(num_layers=L, hidden_size=C, num_attention_heads=NH,
            num_query_groups=2, seq_length=P, max_position_embeddings=P, vocab_size=V, normalization="RMSNorm",
            position_embedding_type="alibi", swiglu=True, ffn_hidden_size=48,
            untie_embeddings_and_output_weights=True, add_bias_linear=False),
            training=dict(micro_batch_size=1, train_iters=1, lr=1e-3), data=dict(data_path="unused"))],
        bad_out, "neither GPT-2, Llama nor Bloom")

# ---------------------------------------------------------------- Llama and Bloom: bad inputs a fuzzer found
BC = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": C, "n_layer": L, "n_head": NH,
      "vocab_size": V, "seq_length": P, "layer_norm_epsilon": 1e-5}


def bloom_tensors():
    t = [("transformer.word_embeddings.weight", "F32", (V, C), rand(V * C)),
         ("transformer.word_embeddings_layernorm.weight", "F32", (C,), rand(C, 2)),
         ("transformer.word_embeddings_layernorm.bias", "F32", (C,), rand(C))]
    for i in range(L):
        h = f"transformer.h.{i}."
        t += [(h + "input_layernorm.weight", "F32", (C,), rand(C, 2)), (h + "input_layernorm.bias", "F32", (C,), rand(C)),
              (h + "self_attention.query_key_value.weight", "F32", (3 * C, C), rand(3 * C * C)),
              (h + "self_attention.query_key_value.bias", "F32", (3 * C,), rand(3 * C)),
              (h + "self_attention.dense.weight", "F32", (C, C), rand(C * C)),
              (h + "self_attention.dense.bias", "F32", (C,), rand(C)),
              (h + "post_attention_layernorm.weight", "F32", (C,), rand(C, 2)),
              (h + "post_attention_layernorm.bias", "F32", (C,), rand(C)),
              (h + "mlp.dense_h_to_4h.weight", "F32", (4 * C, C), rand(4 * C * C)),
              (h + "mlp.dense_h_to_4h.bias", "F32", (4 * C,), rand(4 * C)),
              (h + "mlp.dense_4h_to_h.weight", "F32", (C, 4 * C), rand(4 * C * C)),
              (h + "mlp.dense_4h_to_h.bias", "F32", (C,), rand(C))]
    return t + [("transformer.ln_f.weight", "F32", (C,), rand(C, 2)), ("transformer.ln_f.bias", "F32", (C,), rand(C))]


bt = bloom_tensors()
emb = bt[0][3]
ck_bloom = os.path.join(work, "ck-bloom")
rc, so, se = convert("--from", "hf", "--input", hf_folder("bloom", bt, BC), "--output", ck_bloom)
tt.check("Bloom without lm_head.weight: imported", rc == 0 and "alibi" in so, se)
ck_bloom_head = os.path.join(work, "ck-bloom-head")
rc, so, se = convert("--from", "hf", "--input", hf_folder("bloom-head", bt + [("lm_head.weight", "F32", (V, C), emb)], BC),
                     "--output", ck_bloom_head)
tt.check("Bloom with lm_head.weight equal to the word embedding: imported, the same checkpoint",
         rc == 0 and same_checkpoint(ck_bloom, ck_bloom_head), se)
# the head is tied: one that is not the embedding cannot be represented (it used to be dropped)
head_cases = [
    ("Bloom: an lm_head.weight of other values", bt, BC, ("lm_head.weight", "F32", (V, C), rand(V * C)),
     "lm_head.weight differs from transformer.word_embeddings.weight"),
    ("Bloom: an lm_head.weight one value off", bt, BC,
     ("lm_head.weight", "F32", (V, C), emb[:-1] + [emb[-1] + 1 / 1024]), "lm_head.weight differs"),
    ("Bloom: an lm_head.weight of shape [3]", bt, BC, ("lm_head.weight", "F32", (3,), [0.0, 1.0, 2.0]),
     "lm_head.weight is [3], transformer.word_embeddings.weight [50, 32]"),
    ("Bloom: an lm_head.weight of the transposed shape", bt, BC, ("lm_head.weight", "F32", (C, V), emb),
     "lm_head.weight is [32, 50]"),
    ("Bloom: an integer lm_head.weight", bt, BC, ("lm_head.weight", "I64", (V, C), [0] * (V * C)),
     "'lm_head.weight' is I64"),
]
lt_tied = [t for t in lt if t[0] != "lm_head.weight"]
LC_tied = dict(LC, tie_word_embeddings=True)
ck_lt = os.path.join(work, "ck-llama-tied")
rc, so, se = convert("--from", "hf", "--input", hf_folder("llama-tied", lt_tied, LC_tied), "--output", ck_lt)
tt.check("Llama with tie_word_embeddings, no lm_head.weight: imported", rc == 0, se)
ck_lt2 = os.path.join(work, "ck-llama-tied-head")
rc, so, se = convert("--from", "hf", "--input",
                     hf_folder("llama-tied-head", lt_tied + [("lm_head.weight", "F32", (V, C), lt[0][3])], LC_tied),
                     "--output", ck_lt2)
tt.check("Llama with tie_word_embeddings and lm_head.weight equal to embed_tokens: imported, the same checkpoint",
         rc == 0 and same_checkpoint(ck_lt, ck_lt2), se)
head_cases.append(("Llama tied: an lm_head.weight of other values", lt_tied, LC_tied,
                   ("lm_head.weight", "F32", (V, C), rand(V * C)), "lm_head.weight differs from model.embed_tokens.weight"))
for what, tensors, config, head, cause in head_cases:
    d = hf_folder("bad-head", tensors + [head], config)
    out = os.path.join(work, "bad-out")
    refused(what, ["--from", "hf", "--input", d, "--output", out], out, cause, [os.path.join(d, "model.safetensors")])

# a weight that is not finite (NaN or infinity in the file; an F64 beyond float32) used to be
# imported into a checkpoint that every reader then refused ("holds nan ... corrupt data"): the
# import exited 0 and the export of its checkpoint failed. Now refused naming the tensor.
def with_value(tensors, name, value, dtype=None):
    return [(n, dtype or dt, sh, v[:3] + [value] + v[4:]) if n == name else (n, dt, sh, v)
            for n, dt, sh, v in tensors]


for what, tensors, config, name in [
    ("Llama: a NaN in q_proj", with_value(lt, "model.layers.1.self_attn.q_proj.weight", float("nan")), LC,
     "model.layers.1.self_attn.q_proj.weight"),
    ("Llama: an infinity in gate_proj", with_value(lt, "model.layers.0.mlp.gate_proj.weight", float("inf")), LC,
     "model.layers.0.mlp.gate_proj.weight"),
    ("Bloom: an F64 dense weight beyond float32", with_value(bt, "transformer.h.0.self_attention.dense.weight",
                                                            1e300, "F64"), BC,
     "transformer.h.0.self_attention.dense.weight"),
    ("GPT-2: a NaN in c_attn", with_value(gpt2_tensors(), "transformer.h.0.attn.c_attn.weight", float("nan")),
     None, "transformer.h.0.attn.c_attn.weight"),
]:
    d = hf_folder("bad-value", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"{what} (weights must be finite)", ["--from", "hf", "--input", d, "--output", out], out,
            "weights must be finite", [name, "at element 3"])

# a checkpoint manifest whose family line gives rotary positions a rotary_base of 0 (no
# config allows it: model.rotary_base > 0) was exported as "rope_theta": 0.0 (NaN rotations in
# transformers; trident's own import refuses it); refused as a corrupt manifest
ck_rope0 = os.path.join(work, "ck-llama-rope0")
shutil.rmtree(ck_rope0, ignore_errors=True)
shutil.copytree(ck_llama, ck_rope0)
mpath = os.path.join(ck_rope0, "release", "manifest.txt")
mtext = open(mpath).read()
tt.write(mpath, re.sub(r"rotary_base \S+ ", "rotary_base 0 ", mtext))
refused("a Llama checkpoint whose manifest says rotary_base 0",
        ["--to", "hf", "--input", ck_rope0, "--output", os.path.join(work, "rope0-out")],
        os.path.join(work, "rope0-out"), "rotary_base > 0", [mpath])

# a config.json of a far larger model than its weights is refused before anything is allocated
# (4,194,304 layers of a 150-byte config used to cost 7.7 GB and 47 s; 2^26 layers 109 GB)
big = [("Llama of 4194304 layers", lt, dict(LC, num_hidden_layers=1 << 22)),
       ("Llama of 2^26 layers and hidden size 2^26", lt,
        dict(LC, num_hidden_layers=1 << 26, hidden_size=1 << 26, num_attention_heads=1, num_key_value_heads=1,
             intermediate_size=1 << 26, vocab_size=1 << 26)),
       ("Llama of 2^26 vocabulary", lt, dict(LC, vocab_size=1 << 26)),
       ("Bloom of 4194304 layers", bt, dict(BC, n_layer=1 << 22)),
       ("Bloom of hidden size 2^20", bt, dict(BC, hidden_size=1 << 20))]
for what, tensors, config in big:
    d = hf_folder("bad-big", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"config.json of a {what} with small weights", ["--from", "hf", "--input", d, "--output", out], out,
            "config.json describes a", [os.path.join(d, "config.json"), "safetensors weights hold"])
# the check counts every shard of an index: a sharded export imports again
shards = os.path.join(work, "llama-shards")
rc, so, se = convert("--to", "hf", "--input", ck_llama, "--output", shards, "--config", lcfg, "--max-shard-size", "8KB")
n_shards = len([f for f in os.listdir(shards) if f.startswith("model-")]) if rc == 0 else 0
ck_shards = os.path.join(work, "ck-llama-shards")
rc2, so2, se2 = convert("--from", "hf", "--input", shards, "--output", ck_shards) if rc == 0 else (1, "", "")
tt.check("Llama in shards: imported, the same checkpoint", rc2 == 0 and n_shards > 2 and same_checkpoint(ck_llama, ck_shards),
         f"exit {rc}/{rc2} ({n_shards} shards): {se}{se2}")
tt.write(os.path.join(shards, "config.json"), json.dumps(dict(LC, num_hidden_layers=64)))
refused("config.json of 64 layers beside the shards of 2", ["--from", "hf", "--input", shards, "--output", bad_out], bad_out,
        "config.json describes a Llama model", [os.path.join(shards, "config.json")])

# float fields are float32 in trident: a value float32 makes infinite (or 0) is refused by name
for what, tensors, config, key in [
        ("rms_norm_eps 1e39", lt, dict(LC, rms_norm_eps=1e39), "rms_norm_eps"),
        ("rms_norm_eps 3.5e38 (past FLT_MAX)", lt, dict(LC, rms_norm_eps=3.5e38), "rms_norm_eps"),
        ("rms_norm_eps 1e-50 (0 as float32)", lt, dict(LC, rms_norm_eps=1e-50), "rms_norm_eps"),
        ("rope_theta 1e300", lt, dict(LC, rope_theta=1e300), "rope_theta"),
        ("rope_theta a string", lt, dict(LC, rope_theta="1e4"), "rope_theta"),
        ("Bloom layer_norm_epsilon 1e39", bt, dict(BC, layer_norm_epsilon=1e39), "layer_norm_epsilon"),
        ("Bloom layer_norm_epsilon -1e-5", bt, dict(BC, layer_norm_epsilon=-1e-5), "layer_norm_epsilon"),
        ("GPT-2 layer_norm_epsilon 1e39", base, dict(CONFIG, layer_norm_epsilon=1e39), "layer_norm_epsilon")]:
    d = hf_folder("bad-float", tensors, config)
    out = os.path.join(work, "bad-out")
    refused(f"config.json: {what}", ["--from", "hf", "--input", d, "--output", out], out, key,
            [os.path.join(d, "config.json")])
d = hf_folder("bad-float", lt, LC)
tt.write(os.path.join(d, "config.json"), json.dumps(dict(LC, rope_theta=float("inf"))))  # "Infinity": not JSON
refused("config.json: rope_theta Infinity", ["--from", "hf", "--input", d, "--output", bad_out], bad_out, "config.json:1:")
rc, so, se = convert("--from", "hf", "--input", hf_folder("llama-float-max", lt, dict(LC, rope_theta=3.0e38)),
                     "--output", os.path.join(work, "ck-llama-float-max"))
tt.check("rope_theta 3e38 (below FLT_MAX) is still imported", rc == 0, se)

# a conversion sizes nothing by max_position_embeddings where no parameter depends on it: the rope
# tables of 2^26 positions cost 2 GiB on the host plus 2 GiB of kernel copies (they were made for
# max_position_embeddings positions; a conversion runs no forward)
PEAK = "import resource, subprocess, sys\n" \
       "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n" \
       "sys.stderr.write(p.stderr)\n" \
       "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"


def peak_rss(*args):
    """(exit status, peak RSS in MB, stderr) of `trident convert ARGS` alone in a fresh process
    (ru_maxrss of RUSAGE_CHILDREN is the largest of all children ever waited for)."""
    p = tt.run([sys.executable, "-c", PEAK, trident, "convert", *args], timeout=300)
    words = p.stdout.split()
    return (int(words[0]), int(words[1]) / 1024, p.stderr) if len(words) == 2 else (-1, 0, p.stderr)


long_ctx = hf_folder("llama-2p26-positions", lt, dict(LC, max_position_embeddings=1 << 26))
ck_long = os.path.join(work, "ck-llama-2p26-positions")
rc, mb, se = peak_rss("--from", "hf", "--input", long_ctx, "--output", ck_long)
tt.check(f"Llama with max_position_embeddings 2^26: imported in {mb:.0f} MB peak RSS (< 400)",
         rc == 0 and 0 < mb < 400, f"exit {rc}, {mb:.0f} MB: {se}")
back_long = os.path.join(work, "llama-2p26-positions-back")
rc, mb, se = peak_rss("--to", "hf", "--input", ck_long, "--output", back_long) if rc == 0 else (1, 0, "")
ok = rc == 0 and 0 < mb < 400 and \
    json.load(open(os.path.join(back_long, "config.json")))["max_position_embeddings"] == 1 << 26 and \
    st_read(os.path.join(back_long, "model.safetensors")) == st_read(os.path.join(long_ctx, "model.safetensors"))
tt.check(f"... and exported back in {mb:.0f} MB peak RSS, max_position_embeddings and the weights kept", ok,
         f"exit {rc}, {mb:.0f} MB: {se}")
tt.finish("convert-cli: all checks passed")
