#!/usr/bin/python3
"""`trident convert --from megatron` / `--to megatron` of a mixture of experts against megatron-core 0.8.0
(its own venv, Debian's torch): megatron_moe_ref.py's Llama-like GPTModel with 4 experts, top-2 (its MoE
layer: TopKRouter, the allgather dispatcher, SequentialMLP), saved as Megatron-LM's save_checkpoint
saves it at TP 1 (one process) and at TP 2 with sequence parallelism (two gloo ranks). The routers'
margins: every token's 2nd-largest gate logit at least 1e-4 above its 3rd. Each imported: the expert
keys printed (num_experts, moe_router_topk, moe_router_pre_softmax false, moe_aux_loss_coeff); trident's
logits (hf_probe logits-config of the printed model section) equal megatron-core's within 1e-5 of the
largest. The TP 1 import exported (--to megatron) at TP 1 and TP 2: megatron-core's GPTModel of the
exported args loads each rank's file with load_state_dict(strict=True), its logits equal trident's
within 1e-5; at PP 2: imported back, the same checkpoint bit for bit. Refused with exit 2 naming the key
(args edited with torch): expert_model_parallel_size 2, moe_grouped_gemm, moe_expert_capacity_factor,
moe_shared_expert_intermediate_size, moe_input_jitter_eps, moe_layer_freq 2, moe_router_topk 5 of 4,
top-1 without pre_softmax, moe_router_load_balancing_type sinkhorn, a negative moe_aux_loss_coeff;
and the files: an expert's tensor missing, an extra expert, a router of another shape.
usage: test_megatron_moe_oracle.py TRIDENT HF_PROBE WORKDIR VENV"""
import json
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

ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_moe_ref.py")
env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
V, B, T = 128, 2, 16
tokens = os.path.join(work, "tokens.i32")
np.random.RandomState(5).randint(0, V, (B, T)).astype(np.int32).tofile(tokens)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run_ref(world, *extra):
    """megatron_moe_ref.py on world gloo ranks: (the worst exit status, the output of each)"""
    port = free_port()
    procs = [subprocess.Popen([py, ref, work, str(r), str(world), port, *extra], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    logs = [p.communicate(timeout=240)[0][-2500:] for p in procs]
    return max(p.returncode for p in procs), "\n".join(logs)


def convert(*args):
    return tt.outputs([trident, "convert", *args], timeout=120)


rc, log = run_ref(1)
rc2, log2 = run_ref(2)
if not tt.check("megatron_moe_ref.py: megatron-core's MoE model saved at TP 1 and TP 2", rc == 0 and rc2 == 0,
                log + log2):
    tt.finish()
cks = {}
for tp in (1, 2):
    margin = float(open(os.path.join(work, f"moe-tp{tp}", "margin.txt")).read())
    tt.check(f"TP {tp}: routing margins: every token's 2nd-largest gate logit at least 1e-4 above its 3rd",
             margin >= 1e-4, f"smallest {margin:.2e}", show=True)
    save, ck = os.path.join(work, f"moe-tp{tp}", "save"), os.path.join(work, f"moe-tp{tp}-ck")
    rc, out, err = convert("--from", "megatron", "--input", save, "--output", ck)
    if not tt.check(f"TP {tp}: trident convert --from megatron of the MoE save", rc == 0, err):
        continue
    tt.check(f"TP {tp}: the expert keys printed", all(w in out for w in (
        "num_experts: 4", "moe_router_topk: 2", "moe_router_pre_softmax: false", "moe_aux_loss_coeff: 0.01")), out)
    cfg = tt.write(os.path.join(work, f"moe-tp{tp}.yaml"), out[out.index("model:\n"):] +
                   "training:\n  micro_batch_size: 2\n  train_iters: 1\n  lr: 0.001\n"
                   f"data:\n  data_path: unused\ncheckpoint:\n  load: {ck}\n")
    lfile = os.path.join(work, f"moe-tp{tp}.logits")
    p = subprocess.run([probe, "logits-config", cfg, tokens, str(B), lfile], capture_output=True, text=True)
    theirs = np.fromfile(os.path.join(work, f"moe-tp{tp}", "logits.f32"), "<f4")
    if tt.check(f"TP {tp}: hf_probe logits-config of the import", p.returncode == 0, p.stderr):
        ours = cks[tp] = np.fromfile(lfile, "<f4")
        rel = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        tt.check(f"TP {tp}: trident's logits = megatron-core's", ours.shape == theirs.shape and rel <= 1e-5,
                 f"max |diff| / max |logit| = {rel:.1e}", show=True)
save, ck = os.path.join(work, "moe-tp1", "save"), os.path.join(work, "moe-tp1-ck")
ours = cks.get(1)
# export: TP 1 and TP 2 load into megatron-core; PP 2 imports back the same
for tp in (1, 2):
    exp = os.path.join(work, f"moe-export-tp{tp}")
    rc, out, err = convert("--to", "megatron", "--input", ck, "--output", exp, "--tp", str(tp))
    if not tt.check(f"trident convert --to megatron --tp {tp}", rc == 0, err):
        continue
    lfile = os.path.join(work, f"export-tp{tp}.logits")
    rc, log = run_ref(tp, exp, lfile)
    if tt.check(f"TP {tp}: megatron-core's GPTModel of the exported args loads each rank's file strictly",
                rc == 0, log) and ours is not None:
        theirs = np.fromfile(lfile, "<f4").reshape(B, T, -1)[:, :, :V].ravel()  # (TP 2 pads V to 256)
        rel = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        tt.check(f"TP {tp}: its logits = trident's", rel <= 1e-5, f"max |diff| / max |logit| = {rel:.1e}",
                 show=True)
exp2, back = os.path.join(work, "moe-pp2"), os.path.join(work, "moe-pp2-ck")
rc, _, err = convert("--to", "megatron", "--input", ck, "--output", exp2, "--pp", "2")
rc2, _, err2 = convert("--from", "megatron", "--input", exp2, "--output", back) if rc == 0 else (1, "", "")
tt.check("exported at PP 2, imported back: the same checkpoint bit for bit",
         rc2 == 0 and hff.same_checkpoint(ck, back), err + err2)

# refusals: the save's args or model edited with torch
rank_file = os.path.join(save, "iter_0000010", "mp_rank_00", "model_optim_rng.pt")
EDIT = """import json, shutil, sys, torch
path, jobs = sys.argv[1], json.load(open(sys.argv[2]))
for out, what in jobs:
    sd = torch.load(path)
    m = sd["model"]
    exec(what)
    torch.save(sd, out)
"""
edit_py = tt.write(os.path.join(work, "edit.py"), EDIT)
router = "decoder.layers.1.mlp.router.weight"
expert = "decoder.layers.0.mlp.experts.local_experts.{}.linear_fc{}.weight"
cases = (
    ("expert_model_parallel_size 2", "sd['args'].expert_model_parallel_size = 2",
     "args.expert_model_parallel_size is above 1"),
    ("moe_grouped_gemm", "sd['args'].moe_grouped_gemm = True", "args.moe_grouped_gemm is set: GroupedMLP"),
    ("moe_expert_capacity_factor 1.0", "sd['args'].moe_expert_capacity_factor = 1.0",
     "args.moe_expert_capacity_factor is set: token dropping"),
    ("shared experts", "sd['args'].moe_shared_expert_intermediate_size = 96",
     "args.moe_shared_expert_intermediate_size is set"),
    ("input jitter", "sd['args'].moe_input_jitter_eps = 0.01", "args.moe_input_jitter_eps is set"),
    ("moe_layer_freq 2", "sd['args'].moe_layer_freq = 2", "args.moe_layer_freq is above 1"),
    ("moe_router_topk 5 of 4", "sd['args'].moe_router_topk = 5", "args.moe_router_topk 5 is above args.num_experts 4"),
    ("top-1 without pre_softmax", "sd['args'].moe_router_topk = 1", "args.moe_router_topk is 1 without"),
    ("sinkhorn", "sd['args'].moe_router_load_balancing_type = 'sinkhorn'",
     "args.moe_router_load_balancing_type is not aux_loss or none: sinkhorn"),
    ("a negative moe_aux_loss_coeff", "sd['args'].moe_aux_loss_coeff = -1.0",
     "args.moe_aux_loss_coeff is -1, not a number >= 0"),
    ("an expert's tensor missing", f"del m['{expert.format(3, 2)}']", f"tensor {expert.format(3, 2)} is missing"),
    ("an extra expert (num_experts 4, 5 saved)", f"m['{expert.format(4, 1)}'] = m['{expert.format(0, 1)}'].clone()",
     f"tensor {expert.format(4, 1)} is not part of the model"),
    ("a router of another shape", f"m['{router}'] = m['{router}'][:3].clone()", f"tensor {router} is [3, 64]"))
rank_file = os.path.join(save, "iter_0000010", "mp_rank_00", "model_optim_rng.pt")
jobs = []
for i, (what, code, cause) in enumerate(cases):
    bad_save = os.path.join(work, f"bad-save-{i}")
    shutil.copytree(save, bad_save)
    jobs.append((rank_file.replace(save, bad_save), code))
jobs_file = tt.write(os.path.join(work, "edits.json"), json.dumps(jobs))
p = subprocess.run([py, edit_py, rank_file, jobs_file], env=env, capture_output=True, text=True)
tt.check("the bad saves written (torch)", p.returncode == 0, p.stderr[-1500:])
for i, (what, code, cause) in enumerate(cases):
    bad_out = os.path.join(work, f"bad-out-{i}")
    rc, _, err = convert("--from", "megatron", "--input", os.path.join(work, f"bad-save-{i}"), "--output", bad_out)
    tt.check(f"refused: {what}", rc == 2 and cause in err and not os.path.exists(bad_out), f"exit {rc}: {err.strip()}")
tt.finish("PASSED")
