#!/usr/bin/python3
"""`trident convert` end to end without PyTorch (it runs in the sanitizer build too): GPT-2
folders are written here with a small safetensors writer of our own.
  - import (F32, F16, BF16; prefixed and unprefixed names; buffers and a tied lm_head) and
    export round trip bit for bit in fp32; bf16 export rounds to nearest even; shards;
  - every malformed safetensors file, every unsupported config.json and every wrong tensor is
    refused with exit 2 naming the file and the cause, and nothing appears at the output (no
    temporary folder left either);
  - usage errors, an output that exists, exports from a missing or damaged checkpoint;
  - tr_hf_load_gpt2 straight from the HF folder into tensor-parallel shards (1, 2 and 4 ranks
    of `trident launch`) and into a last pipeline stage: each the slice of the whole model,
    the TP logits the whole model's (hf_probe load-check).
usage: test_convert_cli.py TRIDENT WORKDIR HF_PROBE
(Llama and Bloom folders: test_convert_families_cli.py; the folders' writer: hf_files.py)"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import (C, CONFIG, L, P, V, Session, encode, gpt2_tensors, leftovers, rand,  # noqa: E402
                      same_checkpoint, st_bytes, st_read)

trident, work, probe = sys.argv[1], sys.argv[2], sys.argv[3]
work = tt.fresh_dir(work)
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused


# ---------------------------------------------------------------- import and export
base = gpt2_tensors()
src = hf_folder("hf-f32", base)
ck = os.path.join(work, "out", "ck")  # the parent 'out' is made by convert
session.keep.add(ck)  # (refused() never removes it)
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
    ("a gemma (a family: its keys)", base, dict(CONFIG, model_type="gemma"), "num_hidden_layers is missing"),
    ("a gemma2", base, dict(CONFIG, model_type="gemma2"), "model_type"),
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
        os.path.join(work, "bad-out"), "pytorch_model.bin: neither a ZIP archive")
tt.write(os.path.join(d, "model.safetensors.index.json"), json.dumps({"weight_map": {first: "model-1.safetensors"}}))
refused("an index naming a missing shard", ["--from", "hf", "--input", d, "--output", os.path.join(work, "bad-out")],
        os.path.join(work, "bad-out"), "model-1.safetensors")

# ---------------------------------------------------------------- usage and outputs
bad_out = os.path.join(work, "bad-out")
for what, args, cause in [
        ("no arguments", [], "give the direction once"),
        ("both directions", ["--from", "hf", "--to", "hf", "--input", src, "--output", bad_out], "give the direction once"),
        ("another format", ["--from", "nemo", "--input", src, "--output", bad_out], "--from needs 'hf', 'megatron'"),
        ("another format written", ["--to", "nemo", "--input", src, "--output", bad_out],
         "--to needs 'hf', 'megatron'"),
        ("--tp without --to megatron", ["--to", "hf", "--input", src, "--output", bad_out, "--tp", "2"],
         "--tp and --pp apply to --to megatron"),
        ("--max-shard-size with --to megatron", ["--to", "megatron", "--input", src, "--output", bad_out,
                                                 "--max-shard-size", "1GB"], "--to megatron takes --config, --dtype"),
        ("a bad dtype for megatron", ["--to", "megatron", "--input", ck, "--output", bad_out, "--dtype", "fp16"],
         "--dtype needs fp32 or bf16"),
        ("--iteration without megatron", ["--from", "hf", "--input", src, "--output", bad_out, "--iteration", "3"],
         "--iteration N applies to --from megatron"),
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

# a finite weight beyond BF16's largest (3.3895e38) would be written as infinity: both bf16
# exports refuse it, naming the tensor, and write nothing (--to megatron used to write inf)
huge = [(n, d, s, [3.4e38] + list(v[1:]) if n == "transformer.h.1.mlp.c_fc.weight" else v) for n, d, s, v in base]
ck_huge = os.path.join(work, "ck-huge")
rc, so, se = convert("--from", "hf", "--input", hf_folder("hf-huge", huge), "--output", ck_huge)
tt.check("import of a weight of 3.4e38 (finite in F32)", rc == 0, f"exit {rc}: {se}")
refused("--to megatron --dtype bf16 of a weight beyond BF16's range",
        ["--to", "megatron", "--input", ck_huge, "--output", bad_out, "--dtype", "bf16"], bad_out,
        "'decoder.layers.1.mlp.linear_fc1.weight' holds 3.4e+38 at element 0, beyond BF16's range")
refused("--to hf --dtype bf16 of a weight beyond BF16's range",
        ["--to", "hf", "--input", ck_huge, "--output", bad_out, "--dtype", "bf16"], bad_out,
        "holds 3.4e+38 at element 0, beyond BF16's range")
rc, so, se = convert("--to", "megatron", "--input", ck_huge, "--output", os.path.join(work, "mlm-huge-f32"))
tt.check("the same checkpoint exports as fp32", rc == 0, f"exit {rc}: {se}")

tt.finish("convert-cli: all checks passed")
