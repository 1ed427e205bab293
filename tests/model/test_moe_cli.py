#!/usr/bin/python3
"""A mixture of experts end to end through `trident train`: a small Mixtral-like model (Llama's
switches with 4 experts, top-2, load-balancing and z losses) trained 6 iterations with a save;
then
  - metrics.jsonl and TensorBoard carry load_balancing_loss (per layer about 1: balanced routing
    gives 1),
    the same on DP 2 x TP 2 (averaged over replicas, counted once over TP);
  - the same run twice: bit-identical losses (determinism);
  - a resume from iteration 3 continues bit-identically (the routing follows the parameters);
  - the manifest's family line carries the experts (" experts 4 2 0 1 0.01 0.001"), so
    `trident generate` runs the checkpoint without a config (each new token routed), the same
    greedy tokens on 1 and 2 tensor-parallel ranks, and `trident eval` the same nll on both;
  - precision bf16 (the CPU's emulated 16-bit storage) trains, finite and near fp32;
  - supervised fine-tuning (data.dataset_type sft) with experts: PP 2 gives one process's
    losses (the aux losses weigh 1 / micro-batches on every stage, as Megatron's);
  - `trident plan` of the model: its active parameters (2 of 4 experts a token) and the
    routing's part of the step;
  - refusals exit 2 naming the cause: resuming with other num_experts, a manifest whose
    experts field is malformed.
usage: test_moe_cli.py TRIDENT WORKDIR"""
import json
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
prefix = tt.make_corpus(trident, work, 7, ["expert", "router", "token", "gate", "up", "down"],
                        200, 4, 30)
MOE = ["model.normalization=RMSNorm", "model.position_embedding_type=rope", "model.swiglu=true",
       "model.ffn_hidden_size=64", "model.untie_embeddings_and_output_weights=true",
       "model.add_bias_linear=false", "model.num_experts=4", "model.moe_router_topk=2",
       "model.moe_aux_loss_coeff=1e-2", "model.moe_z_loss_coeff=1e-3"]
config = tt.write_config(os.path.join(work, "moe.yaml"),
    model=dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=16,
               max_position_embeddings=64, vocab_size=256),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=6, lr=3.0e-3),
    data=dict(data_path=prefix, split="100,0,0"))


def train(name, *extra, world=1, tp=None):
    out = os.path.join(work, name)
    r = tt.run(tt.train_cmd(trident, config, out, world, tp, None, (*MOE, *extra),
                            flags=["--quiet"]), timeout=300)
    return r, out


ckpt, board = os.path.join(work, "ckpt"), os.path.join(work, "board")
r, run_a = train("a", f"checkpoint.save={ckpt}", "checkpoint.save_interval=3",
                 f"logging.tensorboard_dir={board}")
if not check("the MoE model trains (exit 0)", r.returncode == 0, r.stderr[-2000:]):
    tt.finish()
ma = tt.metrics(run_a)
lb = [m.get("load_balancing_loss") for m in ma]
check("metrics.jsonl has load_balancing_loss every iteration: 2 layers of about 1 each",
      all(x is not None and 1.9 <= x <= 2.5 for x in lb), str(lb))
r, run_d = train("d2-t2", world=4, tp=2)
ld = [m.get("load_balancing_loss") for m in tt.metrics(run_d)] if r.returncode == 0 else []
check("DP 2 x TP 2: the same load_balancing_loss (averaged over replicas, TP counted once)",
      len(ld) == 6 and all(abs(x - y) <= 1e-5 * y for x, y in zip(ld, lb)), f"{ld} vs {lb}")
events = [os.path.join(board, f) for f in os.listdir(board)] if os.path.isdir(board) else []
check("TensorBoard's event file has the load_balancing_loss tag (Megatron's)",
      any(b"load_balancing_loss" in open(f, "rb").read() for f in events), str(events))
r, run_b = train("b")
check("the same run twice: bit-identical losses and balancing losses",
      r.returncode == 0 and [m["loss"] for m in tt.metrics(run_b)] == [m["loss"] for m in ma] and
      [m["load_balancing_loss"] for m in tt.metrics(run_b)] == lb, r.stderr[-800:])

# resume at iteration 3 (the save at 3 is kept: the tracker points at 6, so copy iteration 3)
resume = os.path.join(work, "ckpt3")
shutil.copytree(os.path.join(ckpt, "iter_0000003"), os.path.join(resume, "iter_0000003"))
tt.write(os.path.join(resume, "latest_checkpointed_iteration.txt"), "3")
r, run_c = train("c", f"checkpoint.load={resume}")
check("a resume from iteration 3 continues bit-identically",
      r.returncode == 0 and [m["loss"] for m in tt.metrics(run_c)] == [m["loss"] for m in ma[3:]],
      r.stderr[-800:])
manifest = open(os.path.join(ckpt, "iter_0000006", "manifest.txt")).read()
check("the manifest's family line carries the experts",
      " experts 4 2 0 1 0.01 0.001\n" in manifest,
      [x for x in manifest.splitlines() if x.startswith("family")][0])


def generated(nproc):
    r = tt.run([trident, "generate", ckpt, "--json", "--prompt", "expert router ",
                "--max-new-tokens", "12", "--temperature", "0"] +
               (["--nproc", str(nproc)] if nproc > 1 else []), timeout=120)
    if r.returncode:
        return f"exit {r.returncode}: {r.stderr[-800:]}"
    line = [x for x in r.stdout.splitlines() if x.lstrip("[r0] ").startswith("{")]
    return json.loads(line[0][line[0].index("{"):])["generated_ids"] if line else r.stdout


g1, g2 = generated(1), generated(2)
check("trident generate runs the MoE checkpoint without a config, 12 tokens",
      isinstance(g1, list) and len(g1) == 12, str(g1))
check("the same greedy tokens on 2 tensor-parallel ranks", g1 == g2, f"{g1} vs {g2}")

text = os.path.join(work, "eval.txt")
tt.write(text, open(os.path.join(work, "corpus.txt")).read()[:1500])
ev = [tt.run([trident, "eval", ckpt, "--input", text] + (["--nproc", "2"] if n > 1 else []),
             timeout=120) for n in (1, 2)]
nll = [next((x.split("nll ")[1].split("/")[0] for x in r.stdout.splitlines() if "nll " in x), None)
       for r in ev]
check("trident eval of the checkpoint: the same nll on 1 and 2 tensor-parallel ranks",
      all(r.returncode == 0 for r in ev) and nll[0] is not None and nll[0] == nll[1],
      f"{nll} {ev[0].stderr[-400:]}")
r, run_bf16 = train("bf16", "training.precision=bf16")
mb = tt.metrics(run_bf16) if r.returncode == 0 else []
check("precision bf16 trains: finite losses within 5% of fp32's",
      len(mb) == 6 and all(math.isfinite(m["loss"]) and abs(m["loss"] - a["loss"]) < 0.05 * a["loss"]
                           for m, a in zip(mb, ma)), r.stderr[-800:])


# supervised fine-tuning (packed examples, the loss over the learned tokens): the aux losses
# weigh as Megatron's (1 / micro-batches per micro-batch) on every stage, so PP 2 = one process
jsonl = os.path.join(work, "sft.jsonl")
with open(jsonl, "w") as f:
    for i in range(120):
        p = " ".join(["expert", "router", "token", "gate"][(i * j) % 4] for j in range(2 + i % 7))
        f.write(json.dumps({"prompt": "say: " + p, "response": " " + p[::-1] + "\n"}) + "\n")
sft = os.path.join(work, "sft")
rp = tt.run([trident, "preprocess", "--input", jsonl, "--output-prefix", sft, "--json-keys",
             "prompt,response"], timeout=60)
SFT = ["data.dataset_type=sft", f"data.data_path=[{sft}]", "model.num_layers=4",
       "model.moe_aux_loss_coeff=0.5", "model.moe_z_loss_coeff=0.05", "training.train_iters=4",
       "model.seq_length=32", "model.max_position_embeddings=64"]
runs = [train(f"sft-p{p}", *SFT, f"parallel.pipeline_model_parallel_size={p}", world=p)
        for p in (1, 2)]
ls = [[m["loss"] for m in tt.metrics(o)] if r.returncode == 0 else [] for r, o in runs]
check("SFT with experts: PP 2 gives one process's losses (the aux losses weighed alike on every "
      "stage)", rp.returncode == 0 and len(ls[0]) == 4 and len(ls[1]) == 4 and
      all(abs(a - b) <= 1e-5 * a for a, b in zip(*ls)),
      f"{ls} {rp.stderr[-300:]} {runs[0][0].stderr[-500:]} {runs[1][0].stderr[-500:]}")


def refused(what, r, needle):
    check(f"{what}: exit 2 naming the cause", r.returncode == 2 and needle in r.stderr,
          f"exit {r.returncode}: {r.stderr[-600:]}")


r, _ = train("other", f"checkpoint.load={ckpt}", "model.num_experts=8")
refused("resuming with num_experts 8", r, "num_experts 8 top-2")
rp = tt.run([trident, "plan", config, "--world-size", "8", "--set", "cluster.preset=h100-80gb",
             "--set", "model.num_experts=4", "--explain"], timeout=60)
check("trident plan of a mixture of experts: the active parameters and the routing's time",
      rp.returncode == 0 and "active (2 of 4 experts a token" in rp.stdout and
      "MoE router, routing, host sync" in rp.stdout, f"exit {rp.returncode}: {rp.stderr[-600:]}")
bad = os.path.join(work, "bad")
shutil.copytree(ckpt, bad)
mpath = os.path.join(bad, "iter_0000006", "manifest.txt")
tt.write(mpath, open(mpath).read().replace(" experts 4 2 0 1", " experts 4 5 0 1"))
refused("a manifest with top-5 of 4 experts", tt.run([trident, "generate", bad, "--prompt", "a",
                                                      "--max-new-tokens", "2"], timeout=60),
        "expected the family line")
tt.finish()
