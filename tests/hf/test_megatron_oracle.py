#!/usr/bin/python3
"""`trident convert --from megatron` against megatron-core 0.8.0 (its own venv, Debian's torch): the
models of megatron_ref.py (a GPT-2-like one with the exact GELU at TP 1 and the fused bias-GELU at TP 2,
a Llama-like one (RMSNorm, rope, SwiGLU, GQA, untied, no biases) at TP 1, TP 2 and PP 2 x 2 virtual
chunks, llama-kv-tp1 (kv_channels 24 != 64 / 4, rotary_percent 0.5, rotary_base 500000, the tracker
'release'), gpt-pp2 (the tied GPT-2-like one at PP 2: the head's copy on the last stage), the
GPT-2-like ones also under the legacy model's nested names), saved as Megatron-LM's
save_checkpoint saves them, imported; trident's logits (hf_probe logits-config of the printed model
section) equal megatron-core's within 1e-5 of the largest; the legacy names give the same checkpoint,
byte for byte. Refused with exit 2 naming the file: a missing rank file, an extra rank folder, args
that disagree, num_experts over a dense model's tensors, a truncated file, a pickle calling os.system (not run), a missing, an extra and a
misshapen tensor, a bad tracker, a missing iteration.
Export (`--to megatron`) of the imports gpt-tp1 (exact GELU), gpt-tp2 (bias-GELU) and llama-tp1 at
TP 1, TP 2 (and llama at TP 2 x PP 2), llama-kv-tp1 at TP 1, gpt-pp2 at PP 2: imported back, the same
checkpoint bit for bit; megatron-core's GPTModel of the exported args loads each rank's model
strictly (TP 2: two gloo ranks; PP 2: both stages in one process, chained) and its logits
equal trident's within 1e-5 of the largest. llama-tp1 at TP 2 with --dtype bf16: BF16 tensors (the
fp32 export's rounded to nearest even), args.bf16 and params_dtype bfloat16; megatron-core's GPTModel
of bfloat16 parameters loads it strictly and, cast to float32, its logits equal trident's of the
import of it (the bf16-rounded checkpoint, which exports to the same tensors) within 1e-5.
gpt-tp1 exported with TRIDENT_TEST_FORCE_ZIP64=1 (every ZIP64 record): torch.load reads the same
objects as the plain export's and the import is the same checkpoint bit for bit. Refused with exit 2 and no output: --tp 3, --pp 3, a
parallel_residual and an alibi model.
usage: test_megatron_oracle.py TRIDENT HF_PROBE WORKDIR VENV"""
import os
import shutil
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, venv = sys.argv[1:5]
work = tt.fresh_dir(work)
py = tt.venv_python(venv, ["megatron-core==0.8.0"], "megatron.core")
import numpy as np  # noqa: E402
import torch  # noqa: E402

ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_ref.py")
env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


# the references: TP 1 (and PP 2 x 2 chunks) in one process, TP 2 as two gloo ranks
port1, port2 = free_port(), free_port()
procs = [subprocess.Popen([py, ref, work, "0", "1", port1], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)]
procs += [subprocess.Popen([py, ref, work, str(r), "2", port2], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True) for r in range(2)]
for p in procs:
    out = p.communicate(timeout=240)[0]
    if not tt.check(f"megatron_ref.py {' '.join(p.args[3:5])}", p.returncode == 0, out[-2000:]):
        tt.finish()
tokens = os.path.join(work, "tokens.i32")


def convert(save, ck, *extra):
    return tt.outputs([trident, "convert", "--from", "megatron", "--input", save, "--output", ck, *extra],
                      timeout=120)


def section(out):
    """the printed model section's keys"""
    keys = {}
    for line in out[out.index("model:\n") + 7:].splitlines():
        if line.startswith("  ") and ": " in line:
            k, v = line.strip().split(": ", 1)
            keys[k] = v
    return keys


def logits_of(name, out, ck):
    cfg = tt.write(os.path.join(work, name + ".yaml"), out[out.index("model:\n"):] +
                   "training:\n  micro_batch_size: 2\n  train_iters: 1\n  lr: 0.001\n"
                   f"data:\n  data_path: unused\ncheckpoint:\n  load: {ck}\n")
    lfile = os.path.join(work, name + ".logits")
    p = subprocess.run([probe, "logits-config", cfg, tokens, "2", lfile], capture_output=True, text=True)
    return np.fromfile(lfile, "<f4") if p.returncode == 0 else p.stderr


want = {"gpt-tp1": {"gelu_approximate": "none", "untie_embeddings_and_output_weights": "false",
                    "add_bias_linear": "true", "normalization": "LayerNorm"},
        "gpt-tp2": {"untie_embeddings_and_output_weights": "false", "add_bias_linear": "true"},
        "llama-tp1": {"normalization": "RMSNorm", "position_embedding_type": "rope", "swiglu": "true",
                      "ffn_hidden_size": "96", "num_query_groups": "2", "num_layers": "4",
                      "untie_embeddings_and_output_weights": "true", "add_bias_linear": "false",
                      "rotary_base": "10000"}}
want["gpt-tp1-legacy"], want["gpt-tp2-legacy"] = want["gpt-tp1"], want["gpt-tp2"]
want["llama-tp2"] = want["llama-pp2-vp2"] = want["llama-tp1"]
want["llama-kv-tp1"] = dict(want["llama-tp1"], kv_channels="24", rotary_percent="0.5", rotary_base="500000")
want["gpt-pp2"] = want["gpt-tp1"]
cks = {}
for name, keys in want.items():
    ck = cks[name] = os.path.join(work, name + "-ck")
    rc, out, err = convert(os.path.join(work, name, "save"), ck)
    if not tt.check(f"{name}: trident convert --from megatron", rc == 0, err[-800:]):
        continue
    got = section(out)
    bad = {k: (v, got.get(k)) for k, v in keys.items() if got.get(k) != v}
    if "gpt-tp2" in name and "gelu_approximate" in got:
        bad["gelu_approximate"] = ("absent (tanh)", got["gelu_approximate"])
    tt.check(f"{name}: the printed model section", not bad, f"(want, got): {bad}\n{out}")
    ours, theirs = logits_of(name, out, ck), np.fromfile(os.path.join(work, name, "logits.f32"), "<f4")
    if tt.check(f"{name}: hf_probe logits-config", not isinstance(ours, str), ours):
        rel = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        tt.check(f"{name}: trident's logits = megatron-core's", ours.shape == theirs.shape and rel <= 1e-5,
                 f"max |diff| / max |logit| = {rel:.1e}", show=True)
for tp in (1, 2):
    a, b = cks[f"gpt-tp{tp}"], cks[f"gpt-tp{tp}-legacy"]
    tt.check(f"gpt-tp{tp}: the legacy model's names give megatron-core's checkpoint, byte for byte",
             os.path.isdir(a) and os.path.isdir(b) and hff.same_checkpoint(a, b))
rc, out, err = convert(os.path.join(work, "llama-tp1", "save"), os.path.join(work, "it10"), "--iteration", "10")
tt.check("--iteration 10: the same checkpoint as the tracker's",
         rc == 0 and hff.same_checkpoint(cks["llama-tp1"], os.path.join(work, "it10")), err)


# ------------------------------------------------------------------ export (--to megatron)
def export(name, save, *extra):
    return tt.outputs([trident, "convert", "--to", "megatron", "--input", cks[name], "--output", save,
                       *extra], timeout=120)


loads = []
for name, layouts in (("gpt-tp1", ((1, 1),)), ("gpt-tp2", ((2, 1),)),
                      ("llama-tp1", ((1, 1), (2, 1), (2, 2))), ("llama-kv-tp1", ((1, 1),)),
                      ("gpt-pp2", ((1, 2),))):
    for tp, pp in layouts:
        what = f"{name} --to megatron --tp {tp} --pp {pp}"
        save = os.path.join(work, "export", f"{name}-tp{tp}-pp{pp}")
        rc, out, err = export(name, save, "--tp", str(tp), "--pp", str(pp), "--config",
                              os.path.join(work, name + ".yaml"))
        if not tt.check(what, rc == 0, err[-800:]):
            continue
        rc, out, err = convert(save, save + "-back")
        tt.check(f"{what}, --from megatron: the same checkpoint, bit for bit",
                 rc == 0 and hff.same_checkpoint(cks[name], save + "-back"), err[-800:])
        if pp == 1 or tp == 1:  # megatron-core loads it (one process per TP rank)
            port = free_port()
            loads.append((what, name, name, save, [subprocess.Popen(
                [py, ref, os.path.join(work, "export"), str(r), str(tp), port, save, save + ".logits"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(tp)]))


def pt_load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def rank_tensors(save, rank):
    return pt_load(os.path.join(save, "release", rank, "model_optim_rng.pt"))["model"]


# bf16: llama-tp1 at TP 2
what, save = "llama-tp1 --to megatron --tp 2 --dtype bf16", os.path.join(work, "export", "llama-bf16")
rc, out, err = export("llama-tp1", save, "--tp", "2", "--dtype", "bf16", "--config",
                      os.path.join(work, "llama-tp1.yaml"))
if tt.check(what, rc == 0 and "bf16" in out, err[-800:]):
    f32 = os.path.join(work, "export", "llama-tp1-tp2-pp1")
    for rank in ("mp_rank_00", "mp_rank_01"):
        sd = pt_load(os.path.join(save, "release", rank, "model_optim_rng.pt"))
        want = rank_tensors(f32, rank)
        bad = [k for k, v in sd["model"].items() if v is not None and not (
            v.dtype == torch.bfloat16 and torch.equal(v.view(torch.int16), want[k].bfloat16().view(torch.int16)))]
        a = sd["args"]
        tt.check(f"{what}: {rank}'s tensors are BF16, the fp32 export's rounded; args.bf16, params_dtype",
                 not bad and a.bf16 is True and a.fp16 is False and a.params_dtype == torch.bfloat16,
                 f"bad tensors {bad[:5]}, bf16 {a.bf16}, fp16 {a.fp16}, params_dtype {a.params_dtype}")
    rc, iout, err = convert(save, save + "-back")
    if tt.check(f"{what}, --from megatron", rc == 0, err[-800:]):
        cks["llama-bf16"] = save + "-back"
        rc, out, err = export("llama-bf16", save + "-again", "--tp", "2", "--dtype", "bf16", "--config",
                              os.path.join(work, "llama-tp1.yaml"))
        same = rc == 0 and all(torch.equal(v.view(torch.int16), rank_tensors(save, r)[k].view(torch.int16))
                               for r in ("mp_rank_00", "mp_rank_01")
                               for k, v in rank_tensors(save + "-again", r).items() if v is not None)
        tt.check(f"{what}: the import is the bf16-rounded checkpoint (exported again: the same tensors)",
                 same, err[-800:])
        logits_of("llama-bf16", iout, save + "-back")
        port = free_port()
        loads.append((what, "llama-tp1", "llama-bf16", save, [subprocess.Popen(
            [py, ref, os.path.join(work, "export"), str(r), "2", port, save, save + ".logits"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]))

# ZIP64: every record forced on a small export
what, save = "gpt-tp1 --to megatron, ZIP64 forced", os.path.join(work, "export", "gpt-zip64")
rc, out, err = tt.outputs([trident, "convert", "--to", "megatron", "--input", cks["gpt-tp1"], "--output", save,
                           "--config", os.path.join(work, "gpt-tp1.yaml")], timeout=120,
                          env=dict(os.environ, TRIDENT_TEST_FORCE_ZIP64="1"))
if tt.check(what, rc == 0, err[-800:]):
    path = os.path.join(save, "release", "mp_rank_00", "model_optim_rng.pt")
    with open(path, "rb") as f:
        raw = f.read()
    plain = pt_load(os.path.join(work, "export", "gpt-tp1-tp1-pp1", "release", "mp_rank_00", "model_optim_rng.pt"))
    try:
        z = pt_load(path)
    except RuntimeError as e:
        z = {"args": str(e), "model": {}}
    same = isinstance(z["args"], type(plain["args"])) and vars(z["args"]) == vars(plain["args"]) and z["model"].keys() == plain["model"].keys() and all(
        (v is None and plain["model"][k] is None) or torch.equal(v, plain["model"][k]) for k, v in z["model"].items())
    tt.check(f"{what}: torch.load reads the plain export's objects (ZIP64 end record, locator)",
             same and raw.count(b"PK\x06\x06") == 1 and raw.count(b"PK\x06\x07") == 1, z["args"])
    rc, out, err = convert(save, save + "-back")
    tt.check(f"{what}, --from megatron: the same checkpoint, bit for bit",
             rc == 0 and hff.same_checkpoint(cks["gpt-tp1"], save + "-back"), err[-800:])

for what, name, ours_name, save, ps in loads:
    outs = [p.communicate(timeout=240)[0] for p in ps]
    if not tt.check(f"{what}: megatron-core's GPTModel loads it (strict)", all(p.returncode == 0 for p in ps),
                    "".join(o[-1500:] for o in outs)):
        continue
    theirs = np.fromfile(save + ".logits", "<f4")
    ours = np.fromfile(os.path.join(work, ours_name + ".logits"), "<f4")
    rel = float(np.abs(ours - theirs).max() / np.abs(ours).max()) if ours.shape == theirs.shape else 1.0
    tt.check(f"{what}: megatron-core's logits = trident's", rel <= 1e-5,
             f"max |diff| / max |logit| = {rel:.1e}", show=True)


def export_refused(what, name, needles, *extra, yaml_edit=None):
    cfg = os.path.join(work, name + ".yaml")
    if yaml_edit:
        with open(cfg) as f:
            cfg = tt.write(os.path.join(work, "bad", what.split()[0] + ".yaml"), yaml_edit(f.read()))
    save = os.path.join(work, "bad", "export-" + what.split()[0])
    rc, out, err = export(name, save, "--config", cfg, *extra)
    tt.check(f"--to megatron refused: {what}", rc == 2 and all(n in err for n in needles) and
             not os.path.exists(save), f"exit {rc}: {err[-600:]}", show=True)


os.makedirs(os.path.join(work, "bad"), exist_ok=True)
export_refused("tp3 (4 heads)", "llama-tp1", ["num_attention_heads 4", "--tp 3"], "--tp", "3")
export_refused("pp3 (4 layers)", "llama-tp1", ["num_layers 4", "--pp 3"], "--pp", "3")
export_refused("parallel_residual", "gpt-tp1", ["parallel_residual", "GPTModel cannot hold it"],
               yaml_edit=lambda y: y.replace("model:\n", "model:\n  parallel_residual: true\n", 1))
export_refused("alibi", "gpt-tp1", ["position_embedding_type alibi", "GPTModel cannot hold it"],
               yaml_edit=lambda y: y.replace("learned_absolute", "alibi", 1))


# ------------------------------------------------------------------ refusals
def variant(src, name):
    dst = os.path.join(work, "bad", name)
    shutil.copytree(os.path.join(work, src, "save"), dst)
    return dst


def rank_file(save, rank="mp_rank_00"):
    return os.path.join(save, "iter_0000010", rank, "model_optim_rng.pt")


def edit(path, change):
    sd = torch.load(path)
    change(sd)
    torch.save(sd, path)


def refused(what, save, *needles, extra=()):
    rc, out, err = convert(save, os.path.join(work, "bad", "out-" + os.path.basename(save)), *extra)
    tt.check(f"refused: {what}", rc == 2 and all(n in err for n in needles),
             f"exit {rc}: {err[-600:]}", show=True)


s = variant("gpt-tp2", "missing-rank")
shutil.rmtree(os.path.join(s, "iter_0000010", "mp_rank_01"))
refused("a missing rank file", s, "mp_rank_01/model_optim_rng.pt", "missing")
s = variant("gpt-tp1", "extra-rank")
shutil.copytree(os.path.join(s, "iter_0000010", "mp_rank_00"), os.path.join(s, "iter_0000010", "mp_rank_01"))
refused("an extra rank folder", s, "mp_rank_01", "rank folder")
s = variant("gpt-tp2", "args-differ")
edit(rank_file(s, "mp_rank_01"), lambda sd: setattr(sd["args"], "hidden_size", 128))
refused("args that disagree", s, "mp_rank_01/model_optim_rng.pt", "args.hidden_size", "mp_rank_00")
s = variant("llama-tp1", "moe")
edit(rank_file(s), lambda sd: setattr(sd["args"], "num_experts", 8))
refused("num_experts 8 over a dense model's tensors", s, rank_file(s),
        "tensor decoder.layers.0.mlp.router.weight is missing")
s = variant("llama-tp1", "truncated")
with open(rank_file(s), "r+b") as f:
    f.truncate(os.path.getsize(rank_file(s)) // 2)
refused("a truncated file", s, rank_file(s))
mark = os.path.join(work, "bad", "pwned")


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {mark}",))


s = variant("llama-tp1", "hostile")
edit(rank_file(s), lambda sd: sd["rng_state"].append(Evil()))
refused("a pickle calling os.system", s, rank_file(s), "GLOBAL 'posix.system'")
tt.check("the os.system pickle's command did not run", not os.path.exists(mark))
s = variant("llama-tp1", "missing-tensor")
edit(rank_file(s), lambda sd: sd["model"].pop("decoder.layers.1.mlp.linear_fc2.weight"))
refused("a missing tensor", s, rank_file(s), "decoder.layers.1.mlp.linear_fc2.weight", "missing")
s = variant("llama-tp1", "extra-tensor")
edit(rank_file(s), lambda sd: sd["model"].__setitem__("decoder.layers.0.mlp.extra.weight", torch.zeros(2)))
refused("an extra tensor", s, rank_file(s), "decoder.layers.0.mlp.extra.weight", "not part of the model")
s = variant("llama-tp1", "shape")
edit(rank_file(s), lambda sd: sd["model"].__setitem__("decoder.layers.0.mlp.linear_fc2.weight",
                                                      torch.zeros(64, 95)))
refused("a misshapen tensor", s, rank_file(s), "decoder.layers.0.mlp.linear_fc2.weight", "[64, 95]",
        "[64, 96]")
s = variant("llama-tp1", "tracker")
tt.write(os.path.join(s, "latest_checkpointed_iteration.txt"), "ten\n")
refused("a tracker that is neither an iteration nor release", s, "latest_checkpointed_iteration.txt")
refused("a missing iteration", os.path.join(work, "llama-tp1", "save"), "iter_0000011", extra=("--iteration", "11"))
tt.finish("megatron-oracle: passed")
