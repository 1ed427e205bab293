#!/usr/bin/python3
"""`trident convert --from meta` / `--to meta` (Meta's own Llama checkpoints, hf/meta.h) end to end
without PyTorch (it runs in the sanitizer build too): Meta folders are written by trident's own
export of a Llama HF folder (hf_files.py's writer) and then broken by hand.
  - HF -> trident -> Meta (MP 1, MP 2, BF16) -> trident: the same checkpoint; a tied Llama's
    export carries output.weight, its import the same model untied (and 4096 positions where the
    model had 2048: the export says so); tokenizer.model copied both
    ways, its type (sentencepiece's, Llama 3's tiktoken) named for generate / eval; params.json's
    FFN keys give the width; the positions without max_seq_len (Meta's defaults by rope) or with;
  - every bad input refused with exit 2 naming the key, the file or the tensor, nothing written:
    params.json's (missing, a missing or bad key, MoE / vision / unknown keys, sizes the tensors
    disagree with), the files' (a gap, a missing or foreign name, one that is not torch.save's,
    one rank's shards for two, n_kv_heads below MP), the export's (GPT-2, --mp not dividing,
    options of other directions).
usage: test_convert_meta_cli.py TRIDENT WORKDIR"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import Session, gpt2_tensors, same_checkpoint  # noqa: E402
from hf_files import llama_tensors as hf_llama_tensors  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
convert, refused = session.convert, session.refused
bad_out = os.path.join(work, "bad-out")

C, L, NH, NKV, F, V, P = 32, 2, 4, 2, 64, 64, 4096  # F < int(8 C / 3) = 85: ffn_dim_multiplier
CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": F,
       "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
       "max_position_embeddings": P, "vocab_size": V, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
       "hidden_act": "silu"}


def llama_tensors(head=True):
    return hf_llama_tensors(C, L, NH, NKV, F, V, head)


def read(path):
    return open(path, "rb").read() if os.path.exists(path) else None


def run(what, *args):
    rc, so, se = convert(*args)
    tt.check(what, rc == 0, se)
    return so


ck = os.path.join(work, "ck")
run("Llama HF folder imported", "--from", "hf", "--input", session.hf_folder("llama", llama_tensors(), CFG),
    "--output", ck)
tok = b"\x0a\x05hello not a real model\x00\xff"
tt.write(os.path.join(ck, "tokenizer.model"), tok)  # (an import of Meta's folder puts it here)
meta = {}
for mp in (1, 2):
    meta[mp] = os.path.join(work, f"meta-mp{mp}")
    so = run(f"--to meta --mp {mp}", "--to", "meta", "--input", ck, "--output", meta[mp], "--mp", str(mp))
    files = sorted(os.listdir(meta[mp]))
    tt.check(f"--to meta --mp {mp}: params.json, {mp} consolidated files, tokenizer.model",
             files == [f"consolidated.{s:02d}.pth" for s in range(mp)] + ["params.json", "tokenizer.model"] and
             read(os.path.join(meta[mp], "tokenizer.model")) == tok, f"{files}\n{so}")
    back = os.path.join(work, f"ck-mp{mp}")
    so = run(f"--from meta of the MP {mp} export", "--from", "meta", "--input", meta[mp], "--output", back)
    tt.check(f"MP {mp}: HF -> trident -> Meta -> trident is the same checkpoint; tokenizer.model copied",
             same_checkpoint(ck, back) and read(os.path.join(back, "tokenizer.model")) == tok and
             f"{mp} model-parallel file" in so and "tokenizer.model copied" in so, so)
    if mp == 1:
        tt.check("the import names the tokenizer's type for generate / eval (sentencepiece's protobuf)",
                 "--tokenizer-type Llama2Tokenizer --tokenizer-model " + os.path.join(back, "tokenizer.model") in so,
                 so)
tiktoken = os.path.join(work, "meta-tiktoken")
shutil.copytree(meta[1], tiktoken)
tt.write(os.path.join(tiktoken, "tokenizer.model"), "IQ== 0\nIg== 1\nIw== 2\n")  # Llama 3's base64-rank lines
so = run("--from meta with Llama 3's tiktoken file", "--from", "meta", "--input", tiktoken, "--output",
         os.path.join(work, "ck-tiktoken"))
tt.check("... named Llama3Tokenizer for generate / eval", "--tokenizer-type Llama3Tokenizer" in so, so)
tt.check("... with params.json beside it (the Llama 3 version names the special tokens)",
         read(os.path.join(work, "ck-tiktoken", "params.json")) == read(os.path.join(tiktoken, "params.json")))
params = json.load(open(os.path.join(meta[1], "params.json")))
h = int(2 * 4 * C / 3)
tt.check("params.json: Meta's keys; multiple_of and ffn_dim_multiplier give the FFN width",
         params["dim"] == C and params["n_layers"] == L and params["n_heads"] == NH and
         params["n_kv_heads"] == NKV and params["vocab_size"] == V and params["norm_eps"] == 1e-5 and
         params["rope_theta"] == 10000 and "max_seq_len" not in params and
         params["multiple_of"] * -(-int(params["ffn_dim_multiplier"] * h) // params["multiple_of"]) == F,
         json.dumps(params))
meta_bf16 = os.path.join(work, "meta-bf16")
run("--to meta --dtype bf16", "--to", "meta", "--input", ck, "--output", meta_bf16, "--dtype", "bf16")
ck_bf16 = os.path.join(work, "ck-bf16")
so = run("--from meta of the BF16 export", "--from", "meta", "--input", meta_bf16, "--output", ck_bf16)
meta_bf16_2 = os.path.join(work, "meta-bf16-again")
run("... and --to meta --dtype bf16 again", "--to", "meta", "--input", ck_bf16, "--output", meta_bf16_2,
    "--dtype", "bf16", "--mp", "2")
ck_bf16_2 = os.path.join(work, "ck-bf16-again")
run("... imported again", "--from", "meta", "--input", meta_bf16_2, "--output", ck_bf16_2)
tt.check("BF16: the export's import exports (at MP 2) and imports to the same checkpoint; BF16 weights said",
         same_checkpoint(ck_bf16, ck_bf16_2) and "BF16 weights" in so, so)

# a tied Llama: output.weight is the embedding's copy; its import computes the same (untied)
tied = os.path.join(work, "ck-tied")
run("tied Llama imported", "--from", "hf", "--input",
    session.hf_folder("llama-tied", llama_tensors(head=False),
                      dict(CFG, tie_word_embeddings=True, max_position_embeddings=2048)),
    "--output", tied)
meta_tied = os.path.join(work, "meta-tied")
so = run("--to meta of a tied Llama", "--to", "meta", "--input", tied, "--output", meta_tied)
so2 = run("... imported", "--from", "meta", "--input", meta_tied, "--output", os.path.join(work, "ck-tied-back"))
tt.check("tied: the export says output.weight is the embedding's copy; the import is untied",
         "output.weight: the embedding's copy" in so and "untie_embeddings_and_output_weights: true" in so2,
         so + so2)
tt.check("2048 positions: the export says its import takes 4096 (no max_seq_len); the import does",
         f"the model has 2048 positions; an import of {meta_tied} takes 4096" in so and
         "max_position_embeddings: 4096" in so2 and "takes" not in run("an export of 4096 positions", "--to", "meta",
                                                                      "--input", ck, "--output",
                                                                      os.path.join(work, "meta-4096")),
         so + so2)

# ---------------------------------------------------------------- bad Meta folders


def bad_folder(name, src=meta[1], params_edit=None, drop=(), rename=(), files=None):
    """WORK/bad-NAME: a copy of src with params.json edited (dict: keys set, None: removed),
    files dropped or renamed (from, to), files written {name: bytes}."""
    d = os.path.join(work, "bad-" + name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    if params_edit is not None:
        p = json.load(open(os.path.join(d, "params.json")))
        for k, v in params_edit.items():
            if v is None:
                p.pop(k, None)
            else:
                p[k] = v
        tt.write(os.path.join(d, "params.json"), json.dumps(p))
    for f in drop:
        os.remove(os.path.join(d, f))
    for a, b in rename:
        os.rename(os.path.join(d, a), os.path.join(d, b))
    for f, data in (files or {}).items():
        tt.write(os.path.join(d, f), data)
    return d


# the positions without max_seq_len: Meta's defaults by rope (Llama 3, Code Llama, 3.1), else max_seq_len
for what, edit, want in (("rope_theta 500000 (Llama 3)", {"rope_theta": 500000.0}, 8192),
                         ("rope_theta 1e6 (Code Llama)", {"rope_theta": 1000000}, 16384),
                         ("use_scaled_rope (Llama 3.1)", {"rope_theta": 500000.0, "use_scaled_rope": True}, 131072),
                         ("max_seq_len 1000", {"max_seq_len": 1000}, 1000)):
    out = os.path.join(work, "ck-positions")
    shutil.rmtree(out, ignore_errors=True)
    so = run(f"--from meta with {what}", "--from", "meta", "--input", bad_folder("positions", params_edit=edit),
             "--output", out)
    tt.check(f"{what}: max_position_embeddings {want}", f"max_position_embeddings: {want}\n" in so, so)


def meta_refused(what, d, cause, names=()):
    refused(what, ["--from", "meta", "--input", d, "--output", bad_out], bad_out, cause,
            [os.path.basename(d)] + list(names))


meta_refused("no params.json", bad_folder("no-params", drop=["params.json"]), "params.json: missing")
meta_refused("params.json not JSON", bad_folder("params-text", files={"params.json": "{dim: 32"}),
             "params.json:1:")
for key in ("dim", "n_layers", "n_heads", "norm_eps"):
    meta_refused(f"params.json without {key}", bad_folder("no-" + key, params_edit={key: None}),
                 f"params.json: {key} is missing")
meta_refused("params.json: dim 0", bad_folder("dim0", params_edit={"dim": 0}),
             "dim must be an integer in [1, 67108864]")
meta_refused("params.json: use_scaled_rope \"yes\"", bad_folder("scaled-str", params_edit={"use_scaled_rope": "yes"}),
             "use_scaled_rope must be true or false")
meta_refused("params.json: n_kv_heads 3 of 4 heads", bad_folder("kv3", params_edit={"n_kv_heads": 3}),
             "n_heads 4 (n_kv_heads 3) do not divide dim 32")
meta_refused("params.json: MoE (moe_args)", bad_folder("moe", params_edit={"moe_args": {"num_experts": 16}}),
             "moe_args is not supported: a mixture of experts")
meta_refused("params.json: a vision model", bad_folder("vision", params_edit={"vision_chunk_size": 560}),
             "vision_chunk_size is not supported: a vision model")
meta_refused("params.json: an unknown key", bad_folder("unknown", params_edit={"qk_norm_eps": 1e-6}),
             "qk_norm_eps is not a key trident reads")
meta_refused("params.json: a multiple_of giving another FFN width",
             bad_folder("ffn", params_edit={"multiple_of": 256, "ffn_dim_multiplier": None}),
             "tensor layers.0.feed_forward.w1.weight is [64, 32], params.json makes it [256, 32]",
             ["FFN width 256"])
meta_refused("params.json: a vocab_size the tensors disagree with", bad_folder("vocab", params_edit={"vocab_size": 100}),
             "tensor tok_embeddings.weight is [64, 32], params.json makes it [100, 32]")
meta_refused("params.json: more layers than the files", bad_folder("layers3", params_edit={"n_layers": 3}),
             "tensor layers.2.attention_norm.weight is missing")
meta_refused("params.json: fewer layers than the files", bad_folder("layers1", params_edit={"n_layers": 1}),
             "tensor layers.1.attention.wq.weight is not part of the Llama params.json describes")
meta_refused("no consolidated files", bad_folder("no-files", drop=["consolidated.00.pth"]),
             "has no consolidated.00.pth")
meta_refused("a gap in the files", bad_folder("gap", src=meta[2], rename=[("consolidated.01.pth", "consolidated.02.pth")]),
             "consolidated.01.pth is missing (the folder has consolidated.02.pth: 3 model-parallel ranks)")
meta_refused("a file name not Meta's", bad_folder("name", rename=[("consolidated.00.pth", "consolidated.0.pth")]),
             "consolidated.0.pth: not a model-parallel rank's file name")
meta_refused("one rank's file of two", bad_folder("half", src=meta[2], drop=["consolidated.01.pth"]),
             "tensor tok_embeddings.weight is [64, 16], params.json makes it [64, 32] on each of 1")
meta_refused("n_kv_heads 1 over 2 files", bad_folder("kv-below-mp", src=meta[2], params_edit={"n_kv_heads": 1}),
             "n_kv_heads 1 is not divisible by the 2 model-parallel files")
meta_refused("a file that is not torch.save's",
             bad_folder("garbage", files={"consolidated.00.pth": b"PK\x03\x04 not a zip" + b"\x00" * 64}),
             "consolidated.00.pth")

# ---------------------------------------------------------------- bad exports
ck_gpt2 = os.path.join(work, "ck-gpt2")
run("GPT-2 HF folder imported", "--from", "hf", "--input", session.hf_folder("gpt2", gpt2_tensors()), "--output", ck_gpt2)
refused("--to meta of a GPT-2", ["--to", "meta", "--input", ck_gpt2, "--output", bad_out], bad_out,
        "the checkpoint's model is GPT-2: Meta's Llama format holds a Llama")
refused("--to meta --mp 3 (heads 4)", ["--to", "meta", "--input", ck, "--output", bad_out, "--mp", "3"], bad_out,
        "num_attention_heads 4 is not divisible by --mp 3")
refused("--mp with --from meta", ["--from", "meta", "--input", meta[1], "--output", bad_out, "--mp", "2"], bad_out,
        "--mp applies to --to meta")
refused("--to meta --config", ["--to", "meta", "--input", ck, "--output", bad_out, "--config", "x.yaml"], bad_out,
        "--to meta takes --dtype and --mp")
refused("--from meta --dtype", ["--from", "meta", "--input", meta[1], "--output", bad_out, "--dtype", "bf16"],
        bad_out, "apply to --to hf")
tt.finish("PASSED")
