#!/usr/bin/python3
"""`trident convert --from llmc` / `--to llmc`: llm.c's GPT-2 model file (gpt2_124M.bin) both ways,
without PyTorch (both builds). The llm.c files are written here from the format (train_gpt2.py's
write_model: a header of 256 int32, the 16 tensors with every layer's stacked, nn.Linear weights,
wte padded to a multiple of 128 rows) from the same values as a hand-written HF folder (hf_files.py):
  - import, fp32 and bf16: the checkpoint is the HF import's of the same values byte for byte;
  - export of that checkpoint, fp32 and bf16 (V 50: 78 padding rows): the test's own file byte for byte;
  - a GPT-2 trained 3 iterations by trident at TP 2 exports, imports and exports again bit for bit
    (and its --to hf export is the re-import's);
  - every bad file refused with exit 2 naming the cause, nothing written; a Llama checkpoint, a
    GPT-2 of another epsilon, a weight beyond BF16's range at --dtype bf16, an output that exists.
usage: test_convert_llmc_cli.py TRIDENT WORKDIR
(transformers as the oracle of the same: test_llmc_oracle.py)"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trident_test as tt  # noqa: E402
from hf_files import CONFIG, C, L, NH, P, V, Session, encode, gpt2_tensors, leftovers, same_checkpoint  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
session = Session(trident, work)
hf_folder, convert, refused = session.hf_folder, session.convert, session.refused


def path(name):
    return os.path.join(work, name)


def transpose(values, rows, cols):
    """values (rows x cols, row-major) transposed"""
    return [values[r * cols + c] for c in range(cols) for r in range(rows)]


def llmc_bytes(tensors, version=3, header=None, n_layer=L):
    """llm.c's model file of HF GPT-2 tensors (name -> values; Conv1D [in, out] weights):
    train_gpt2.py's write_model of that model (its nn.Linear weights are the Conv1D's transposed).
    header: {index: value} set over the header's."""
    t = {n.removeprefix("transformer."): v for n, _, _, v in tensors}
    Vp = (V + 127) // 128 * 128
    h = [20240326, version, P, V, n_layer, NH, C, Vp] + [0] * 248
    for i, x in (header or {}).items():
        h[i] = x
    conv = {"attn.c_attn.weight": (C, 3 * C), "attn.c_proj.weight": (C, C), "mlp.c_fc.weight": (C, 4 * C),
            "mlp.c_proj.weight": (4 * C, C)}
    order = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
             "mlp.c_proj.weight", "mlp.c_proj.bias"]
    values = t["wte.weight"] + [0.0] * ((Vp - V) * C) + t["wpe.weight"]
    for name in order:
        for i in range(n_layer):
            v = t[f"h.{i}.{name}"]
            values += transpose(v, *conv[name]) if name in conv else v
    values += t["ln_f.weight"] + t["ln_f.bias"]
    return struct.pack("<256i", *h) + encode(values, "F32" if version == 3 else "BF16")


def write(name, blob):
    p = path(name)
    with open(p, "wb") as f:
        f.write(blob)
    return p


def read(p):
    with open(p, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- import: the HF import's checkpoint
base = gpt2_tensors()
ck_hf = path("ck-hf")
# (an llm.c file records no dropout: the folder's rates are 0 too, else transformers' 0.1 defaults
# would be recorded in the HF import's manifest alone)
NO_DROPOUT = dict(CONFIG, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
rc, so, se = convert("--from", "hf", "--input", hf_folder("hf", base, NO_DROPOUT), "--output", ck_hf)
tt.check("the HF folder imports", rc == 0, se)
session.keep.add(ck_hf)
f32 = write("model.bin", llmc_bytes(base))
ck = path("ck-llmc")
rc, so, se = convert("--from", "llmc", "--input", f32, "--output", ck)
tt.check("llm.c fp32 file (V 50 padded to 128): the HF import's checkpoint byte for byte, the model section printed",
         rc == 0 and same_checkpoint(ck, ck_hf) and f"num_layers: {L}" in so and f"vocab_size: {V}" in so
         and "version 3: fp32, padded vocabulary 128" in so, f"exit {rc}: {se}{so}")

base16 = gpt2_tensors(dtype="BF16")
ck_hf16 = path("ck-hf-bf16")
rc1, so, se1 = convert("--from", "hf", "--input", hf_folder("hf-bf16", base16, NO_DROPOUT), "--output", ck_hf16)
session.keep.add(ck_hf16)
ck16 = path("ck-llmc-bf16")
rc, so, se = convert("--from", "llmc", "--input", write("model-bf16.bin", llmc_bytes(base16, 5)), "--output", ck16)
tt.check("llm.c bf16 file (version 5): the HF import of the same BF16 tensors byte for byte",
         rc1 == rc == 0 and same_checkpoint(ck16, ck_hf16) and "version 5: bf16" in so, f"exit {rc1}/{rc}: {se1}{se}")

# ---------------------------------------------------------------- export: the test's own file
for dtype, version in (("fp32", 3), ("bf16", 5)):
    out = path(f"export-{dtype}.bin")
    rc, so, se = convert("--to", "llmc", "--input", ck_hf, "--output", out, "--dtype", dtype)
    tt.check(f"--to llmc --dtype {dtype}: the test's writer's file byte for byte (version {version}, 78 zero rows)",
             rc == 0 and read(out) == llmc_bytes(base, version) and not leftovers(work), f"exit {rc}: {se}")

# ---------------------------------------------------------------- a model trained by trident
corpus = tt.make_corpus(trident, work, 5, ["llm", "checkpoint", "karpathy", "tensor"], 60, 3, 30)


def train(name, iters, world=1, tp=None, **model):
    cfg = tt.write_config(path(name + ".yaml"),
                          model=dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=16,
                                     max_position_embeddings=16, vocab_size=300, **model),
                          training=dict(micro_batch_size=2, global_batch_size=4, train_iters=iters, lr=1e-2),
                          data=dict(data_path=corpus, split="100,0,0"), checkpoint=dict(save=path(name)))
    p = tt.run(tt.train_cmd(trident, cfg, path(name + "-run"), world, tp, flags=["--quiet"]), timeout=300)
    tt.check(f"trident train {name}", p.returncode == 0, p.stderr[-800:])
    return path(name)


trained = train("trained", 3, 2, 2)
a, b = path("trained.bin"), path("trained-again.bin")
rc1, so, se1 = convert("--to", "llmc", "--input", trained, "--output", a)
rc2, so, se2 = convert("--from", "llmc", "--input", a, "--output", path("ck-trained"))
rc3, so, se3 = convert("--to", "llmc", "--input", path("ck-trained"), "--output", b)
rc4, so, se4 = convert("--to", "hf", "--input", trained, "--output", path("trained-hf"))
rc5, so, se5 = convert("--to", "hf", "--input", path("ck-trained"), "--output", path("trained-back-hf"))
ok = rc1 == rc2 == rc3 == rc4 == rc5 == 0
tt.check("a GPT-2 trained 3 iterations at TP 2: export, import, export bit for bit; its HF export the re-import's",
         ok and read(a) == read(b) and read(path("trained-hf/model.safetensors")) ==
         read(path("trained-back-hf/model.safetensors")), se1 + se2 + se3 + se4 + se5)

# ---------------------------------------------------------------- refusals
out = path("bad-out")
good = llmc_bytes(base)
hs = 1024 + (128 * C + P * C) * 4  # where the layers' tensors begin: ln1w, ln1b, then qkvw
qkvw1 = hs + (2 * L * C + 3 * C * C) * 4  # qkvw of layer 1
bad = [("a file shorter than the header", good[:100], "shorter than llm.c's model header"),
       ("llm.c's token shard", struct.pack("<256i", 20240520, 1, 10, *[0] * 253) + b"\0" * 20,
        "magic 20240520 is llm.c's token shard"),
       ("another magic", struct.pack("<i", 12345) + good[4:], "magic 12345: not an llm.c model checkpoint"),
       ("version 4", llmc_bytes(base, header={1: 4}), "version 4: llm.c's model checkpoints are version 3"),
       ("no layers", llmc_bytes(base, header={4: 0}), "L (header[4], layers) is 0"),
       ("negative heads", llmc_bytes(base, header={5: -4}), "NH (header[5], heads) is -4"),
       ("huge channels", llmc_bytes(base, header={6: 1 << 24}), "C (header[6], channels) is 16777216"),
       ("channels not a multiple of the heads", llmc_bytes(base, header={5: 5}),
        "C (channels) 32 is not a multiple of NH (heads) 5"),
       ("V above Vp", llmc_bytes(base, header={7: 48}), "V (vocabulary) 50 is above Vp (padded vocabulary) 48"),
       ("a truncated file", good[:-4], "truncated"),
       ("bytes after the last tensor", good + b"\0" * 4, "bytes after the last tensor"),
       ("a header of more layers than the file holds", llmc_bytes(base, header={4: 3}), "truncated"),
       ("a NaN in qkvw of layer 1", good[:qkvw1 + 8] + struct.pack("<f", float("nan")) + good[qkvw1 + 12:],
        "qkvw of layer 1 holds nan at element 2: weights must be finite"),
       ("an infinity in a bf16 file's wpe",
        (lambda x: x[:1024 + 128 * C * 2] + b"\x80\x7f" + x[1024 + 128 * C * 2 + 2:])(llmc_bytes(base16, 5)),
        "wpe holds inf at element 0")]
for what, blob, cause in bad:
    refused(what, ["--from", "llmc", "--input", write("bad.bin", blob), "--output", out], out, cause, [path("bad.bin")])
refused("a folder as the input", ["--from", "llmc", "--input", ck, "--output", out], out, "is not a file")
refused("a missing file", ["--from", "llmc", "--input", path("missing.bin"), "--output", out], out,
        "cannot open " + path("missing.bin"))
refused("--from llmc --dtype bf16", ["--from", "llmc", "--dtype", "bf16", "--input", f32, "--output", out], out,
        "--dtype, --max-shard-size, --eos-id and --config apply to --to hf")
refused("--to llmc --eos-id", ["--to", "llmc", "--eos-id", "3", "--input", ck, "--output", out], out,
        "--to llmc takes --dtype")

exists = write("exists.bin", b"x")
rc, so, se = convert("--to", "llmc", "--input", ck, "--output", exists)
tt.check("refused: --to llmc onto a file that exists (left as it was)", rc == 2 and "exists" in se
         and read(exists) == b"x", f"exit {rc}: {se}")
llama = train("llama", 1, normalization="RMSNorm", position_embedding_type="rope", swiglu=True,
              ffn_hidden_size=48, add_bias_linear=False, untie_embeddings_and_output_weights=True)
refused("--to llmc of a Llama checkpoint", ["--to", "llmc", "--input", llama, "--output", out + "-llama.bin"],
        out + "-llama.bin",
        "the checkpoint's model is Llama: llm.c's file holds a GPT-2", [llama])
eps = train("eps", 1, layernorm_epsilon=1e-6)
refused("--to llmc of a GPT-2 of epsilon 1e-6", ["--to", "llmc", "--input", eps, "--output", out + "-eps.bin"],
        out + "-eps.bin", "model.layernorm_epsilon is 1e-06: llm.c's GPT-2 LayerNorm uses 1e-5")
big = base.copy()
big[1] = (big[1][0], "F32", big[1][2], [3.4e38] + big[1][3][1:])  # wpe[0, 0]
ck_big = path("ck-big")
rc, so, se = convert("--from", "llmc", "--input", write("big.bin", llmc_bytes(big)), "--output", ck_big)
tt.check("a weight of 3.4e38 imports", rc == 0, se)
refused("--to llmc --dtype bf16 of a weight beyond BF16's range",
        ["--to", "llmc", "--dtype", "bf16", "--input", ck_big, "--output", out + "-big.bin"], out + "-big.bin",
        "tensor 'wpe' holds 3.4e+38 at element 0, beyond BF16's range")
tt.finish()
