"""`trident convert --from megatron` of Megatron-LM --ckpt-format torch_dist saves: the fixtures of
make_torch_dist_fixtures.py (megatron-core 0.8.0, torch 2.4.1; no torch runs here): a GPT-2-like
model at TP 1 (its save also holds rng_state and optimizer-like tensors, ignored), a Llama-like
one (SwiGLU, GQA) saved from TP 2, from PP 2, at TP 2 with --bf16 (BF16 chunks) and over PP 2 x
2 virtual chunks. Each imported: trident's logits (hf_probe logits-config of the printed model
section) equal megatron-core's within 1e-5 of the largest, and the checkpoint is byte for byte
the import of the same weights saved --ckpt-format torch (all but the virtual-chunk one).
Refused with exit 2, the message naming the cause, no output: another sharded_backend (zarr),
a metadata.json without it, a missing common.pt, .metadata or .distcp file, a truncated
.metadata, one calling os.system (not run), chunks that overlap, leave a gap or run outside the
global shape, an optimizer-only save, a chunk without storage, a storage path outside the
folder, one past its file's end, a chunk stored in fewer bytes than 2 per element, a global
shape not the args', a missing and an extra model tensor, a mixture of experts (args.num_experts),
a broken chunk archive.
usage: test_torch_dist.py TRIDENT HF_PROBE WORKDIR"""
import array
import json
import os
import shutil
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work = sys.argv[1:4]
work = tt.fresh_dir(work)
fixtures = os.path.join(here, "fixtures", "torch_dist")
tokens = os.path.join(fixtures, "tokens.i32")
s = hff.Session(trident, work)


def convert(save, ck):
    return s.convert("--from", "megatron", "--input", save, "--output", ck)


def logits_of(name, out, ck):
    """hf_probe's logits of checkpoint ck, the model section printed by the import"""
    cfg = tt.write(os.path.join(work, name + ".yaml"), out[out.index("model:\n"):] +
                   "training:\n  micro_batch_size: 2\n  train_iters: 1\n  lr: 0.001\n"
                   f"data:\n  data_path: unused\ncheckpoint:\n  load: {ck}\n")
    lfile = os.path.join(work, name + ".logits")
    p = subprocess.run([probe, "logits-config", cfg, tokens, "2", lfile], capture_output=True,
                       text=True)
    if p.returncode:
        return p.stderr
    a = array.array("f")
    with open(lfile, "rb") as f:
        a.frombytes(f.read())
    return a


for name in ("gpt-tp1", "llama-tp2", "llama-pp2", "llama-tp2-bf16", "llama-pp2-vp2"):
    ck, ckt = os.path.join(work, name + "-ck"), os.path.join(work, name + "-torch-ck")
    rc, out, err = convert(os.path.join(fixtures, name, "dist"), ck)
    if not tt.check(f"{name}: torch_dist imported", rc == 0, err[-800:]):
        continue
    tt.check(f"{name}: the import says --ckpt-format torch_dist",
             "(Megatron-LM iteration 10, --ckpt-format torch_dist," in out, out[:300])
    ours = logits_of(name, out, ck)
    theirs = array.array("f")
    with open(os.path.join(fixtures, name, "logits.f32"), "rb") as f:
        theirs.frombytes(f.read())
    if tt.check(f"{name}: hf_probe logits-config", not isinstance(ours, str), ours):
        rel = max(abs(a - b) for a, b in zip(ours, theirs)) / max(abs(b) for b in theirs)
        tt.check(f"{name}: trident's logits = megatron-core's",
                 len(ours) == len(theirs) and rel <= 1e-5, f"max |diff| / max |logit| = {rel:.1e}",
                 show=True)
    if not os.path.isdir(os.path.join(fixtures, name, "torch")):
        continue
    rc, out, err = convert(os.path.join(fixtures, name, "torch"), ckt)
    tt.check(f"{name}: the torch_dist import = the --ckpt-format torch import, byte for byte",
             rc == 0 and hff.same_checkpoint(ck, ckt) and "--ckpt-format torch_dist" not in out,
             err[-800:])

# ------------------------------------------------------------------ refusals (gpt-tp1 edited)
good = os.path.join(fixtures, "gpt-tp1", "dist")
os.makedirs(os.path.join(work, "bad"))


def bad_save(edit):
    """a copy of gpt-tp1's save with edit(iteration folder) applied (a numbered folder: its path
    names no cause)"""
    d = os.path.join(work, "bad", str(len(os.listdir(os.path.join(work, "bad")))))
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(good, d)
    edit(os.path.join(d, "iter_0000010"))
    return d


def refused(what, edit, cause):
    save = bad_save(edit)
    s.refused(what, ["--from", "megatron", "--input", save, "--output", save + "-ck"], save + "-ck",
              cause)


def put(name, data):
    return lambda it: tt.write(os.path.join(it, name), data)


def metadata_of(bad):
    return lambda it: shutil.copy(os.path.join(fixtures, "bad", bad + ".metadata"),
                                  os.path.join(it, ".metadata"))


def truncate(name, keep):
    def edit(it):
        with open(os.path.join(it, name), "rb") as f:
            data = f.read()
        tt.write(os.path.join(it, name), data[:keep(len(data))])
    return edit


def zeros(name):
    return lambda it: tt.write(os.path.join(it, name),
                               bytes(os.path.getsize(os.path.join(it, name))))


backend = {"sharded_backend": "zarr", "sharded_backend_version": 1, "common_backend": "torch",
           "common_backend_version": 1}
refused("zarr", put("metadata.json", json.dumps(backend)), 'sharded_backend "zarr" is not read')
refused("no sharded_backend", put("metadata.json", "{}"), "sharded_backend is missing")
refused("no common.pt", lambda it: os.remove(os.path.join(it, "common.pt")), "common.pt")
refused("no .metadata", lambda it: os.remove(os.path.join(it, ".metadata")), "an unfinished save?")
refused("no .distcp", lambda it: os.remove(os.path.join(it, "__0_1.distcp")),
        "__0_1.distcp: No such file")
refused("truncated .metadata", truncate(".metadata", lambda n: n // 2),
        "the Metadata pickle byte 2: a FRAME of")
refused(".metadata calls os.system", put(".metadata", b"\x80\x04cos\nsystem\n(S'touch pwned'\ntR."),
        "GLOBAL 'os.system'")
for bad, cause in (("overlap", "(0+1, 0+48, 0+16) and (0+1, 0+48, 0+16) overlap"),
                   ("gap", "its chunks hold 256 of its 512 elements (a gap"),
                   ("outside", "runs outside its global shape"),
                   ("optimizer-only", "an optimizer-only save?"),
                   ("no-storage", "has no storage_data entry"),
                   ("bad-path", "not (a file name of the folder"),
                   ("past-end", "runs past the end of"),
                   ("missing", "tensor decoder.layers.mlp.linear_fc2.weight is missing"),
                   ("extra", "linear_extra.weight is not part of the model"),
                   ("short", "of 512 elements is stored in 8 bytes"),
                   ("shape", "embedding.word_embeddings.weight has the global shape [64, 16], the "
                             "args make it [32, 16]")):
    refused(f".metadata: {bad}", metadata_of(bad), cause)
refused("a mixture of experts", lambda it: shutil.copy(
    os.path.join(fixtures, "bad", "moe-common.pt"), os.path.join(it, "common.pt")),
    "args.num_experts 4: a mixture of experts in a torch_dist save is not read")
refused("broken chunk archives", zeros("__0_1.distcp"),
        "__0_1.distcp: no ZIP end of central directory")
tt.check("os.system's command not run", not os.path.exists("pwned") and
         not os.path.exists(os.path.join(work, "pwned")))
tt.finish()
