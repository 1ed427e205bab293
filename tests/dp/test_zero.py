#!/usr/bin/python3
"""ZeRO stages (issue 19): parallel.zero_stage 0 | 1 | 2 | 3 through `trident train --nproc`.
  - config: a stage outside 0-3, and zero_stage contradicting use_distributed_optimizer (both
    written), are located config errors (exit 2); use_distributed_optimizer alone is stage 1;
  - equivalence: stages 2 and 3 (1: tests/layouts) give the single-process losses and gradient norms (relative
    <= 1e-5 over 10 iterations) in DP2, DP4, DP2xTP2xPP2 with sequence parallelism and DP2xPP2
    interleaved (v = 2), all with gradient accumulation; stage 3 with full recompute, with
    GPipe, and in evaluation (val_loss); stage 3's reduced gradient shard equals stage 0's
    gradient on the same elements;
  - checkpoints stay layout-free: a stage-3 DP2xPP2 checkpoint resumes at stage 0 in TP2 (and
    at stage 3 in DP2) and continues the single-process losses;
  - communication, from the DP communicator's counters of the last iteration (one micro-batch):
    stage 2 moves exactly the bytes stage 0 moves on the wire (ring reduce-scatter + all-gather
    = all-reduce), stage 1 the same; stage 3 gathers every forward unit, and again each layer
    in backward: its all-gather bytes are stage 2's plus every layer's parameters once more
    (plus the tied word embedding, gathered again for the head on a one-stage model), one
    all-gather per unit;
  - memory (summary.json): stage 2 keeps less gradient memory than stage 1, stage 3 fewer
    parameters than stage 2; on a model shaped like GPT-2 124M (a third of it the word
    embedding; h 256, 4 layers, V 8192) at DP4: optimizer 1/4 from stage 1, each part of
    every stage within 10% of `trident plan`'s prediction for the same config, the model
    state falling at every stage (gpt2-124m itself: benchmarks/zero_stages.py).
usage: test_zero.py TRIDENT WORKDIR [equivalence | counts]   (the config checks and
equivalence through the checkpoints, or the communication and memory counts; default both)"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, part = sys.argv[1], sys.argv[3] if len(sys.argv) > 3 else "all"
work = tt.fresh_dir(os.path.join(sys.argv[2], part))
prefix = tt.make_corpus(trident, work, 19, ["zero", "shard", "gather", "scatter", "stage", "layer"],
                        400, 3, 50)
H, LAYERS, V, POS = 64, 8, 256, 16
config = tt.write_config(os.path.join(work, "zero.yaml"),
    model=dict(num_layers=LAYERS, hidden_size=H, num_attention_heads=8, seq_length=16, vocab_size=V,
               make_vocab_size_divisible_by=16),
    training=dict(micro_batch_size=1, global_batch_size=8, train_iters=10, lr=2.0e-3,
                  lr_warmup_iters=2, weight_decay=0.1, clip_grad=0.3, seed=7),
    data=dict(data_path=prefix, split="95,5,0"),
    parallel=dict(comm_timeout_s=120))


def train(name, world, sets=(), flags=()):
    out = os.path.join(work, name)
    r = tt.run(tt.train_cmd(trident, config, out, world, sets=sets, flags=["--quiet", *flags]),
               timeout=600)
    if not check(f"{name}: exit 0", r.returncode == 0, r.stderr[-3000:]):
        return None, out
    return tt.metrics(out), out


def summary(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


if part in ("all", "equivalence"):
    # ---- config
    def plan_error(*sets):
        args = [trident, "plan", config, "--world-size", "2"]
        for s in sets:
            args += ["--set", s]
        return tt.run(args, timeout=60)


    r = plan_error("parallel.zero_stage=4")
    check("zero_stage 4: exit 2 naming the key", r.returncode == 2 and "parallel.zero_stage" in r.stderr, r.stderr)
    r = plan_error("parallel.zero_stage=0", "parallel.use_distributed_optimizer=true")
    check("zero_stage 0 with use_distributed_optimizer true: exit 2, located, says contradicts",
          r.returncode == 2 and "--set parallel.zero_stage" in r.stderr and "contradicts" in r.stderr, r.stderr)
    r = plan_error("parallel.zero_stage=2", "parallel.use_distributed_optimizer=false")
    check("zero_stage 2 with use_distributed_optimizer false: exit 2", r.returncode == 2, r.stderr)

    # ---- equivalence
    base, _ = train("single", 1)
    if base is None:
        tt.finish()
    LAYOUTS = [  # name, world, sets (every one accumulates 2-4 micro-batches)
        ("dp2", 2, ["training.micro_batch_size=2"]),
        ("dp4", 4, ["training.micro_batch_size=1"]),
        ("d2t2p2-sp", 8, ["training.micro_batch_size=2", "parallel.tensor_model_parallel_size=2",
                          "parallel.pipeline_model_parallel_size=2", "parallel.sequence_parallel=true"]),
        ("d2p2-interleaved", 4, ["training.micro_batch_size=1", "parallel.pipeline_model_parallel_size=2",
                                 "parallel.pipeline_schedule=interleaved",
                                 "parallel.virtual_pipeline_model_parallel_size=2"]),
    ]


    def same(name, got, ref, start=0):
        if got is None:
            return
        pairs = list(zip(got, ref[start:]))
        worst = max(max(abs(a["loss"] - b["loss"]) / abs(b["loss"]),
                        abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"])) for a, b in pairs)
        check(f"{name}: losses and gradient norms within {worst:.1e} of the single process over "
              f"{len(pairs)} iterations", len(got) == len(ref) - start and worst <= 1e-5)


    for lname, world, sets in LAYOUTS:
        for z in (2, 3):  # stage 1 in these layouts: tests/layouts (the *-zero1 cases)
            got, out = train(f"{lname}-z{z}", world, [*sets, f"parallel.zero_stage={z}"])
            same(f"{lname} stage {z}", got, base)
            if got is not None:
                check(f"{lname} stage {z}: summary.json says zero_stage {z}", summary(out)["zero_stage"] == z)
    got, _ = train("dp2-z3-recompute", 2, ["training.micro_batch_size=2", "parallel.zero_stage=3",
                                           "training.recompute=full"])
    same("dp2 stage 3 with full recompute", got, base)
    got, _ = train("d2p2-gpipe-z3", 4, ["training.micro_batch_size=1", "parallel.pipeline_model_parallel_size=2",
                                       "parallel.pipeline_schedule=gpipe", "parallel.zero_stage=3"])
    same("d2p2 gpipe stage 3", got, base)
    # evaluation (forward only) gathers the parameters too
    EVAL = ["training.eval_interval=5", "training.eval_iters=2", "training.train_iters=5"]
    ev1, _ = train("single-eval", 1, EVAL)
    ev3, _ = train("d2p2-interleaved-eval-z3", 4, [*EVAL, *LAYOUTS[3][2], "parallel.zero_stage=3"])
    if ev1 is not None and ev3 is not None:
        a, b = ev3[-1].get("val_loss"), ev1[-1].get("val_loss")
        check(f"stage 3 DP2xPP2 interleaved: val_loss {a} = the single process's {b}",
              a is not None and b is not None and abs(a - b) <= 1e-5 * abs(b))

    # stage 3's reduced shard = stage 0's gradient on the same elements (after iteration 1)
    ONE = ["training.train_iters=1", "training.micro_batch_size=2", "parallel.tensor_model_parallel_size=2",
           "parallel.pipeline_model_parallel_size=2"]
    dumps = {}
    for z in (0, 3):
        _, out = train(f"grads-z{z}", 8, [*ONE, f"parallel.zero_stage={z}"],
                       ["--dump-grads", os.path.join(work, f"grads-z{z}", "grads")])
        dumps[z] = os.path.join(out, "grads")
    worst, covered = 0.0, 0
    for rank in range(8):
        try:
            meta = json.load(open(os.path.join(dumps[3], f"grads.rank{rank}.json")))
            g3 = np.fromfile(os.path.join(dumps[3], f"grads.rank{rank}.bin"), dtype=np.float32)
            g0 = np.fromfile(os.path.join(dumps[0], f"grads.rank{rank}.bin"), dtype=np.float32)
        except OSError as e:
            check(f"gradient dump of rank {rank}", False, str(e))
            break
        for off, cnt in meta["owned"]:
            a, b = g3[off:off + cnt], g0[off:off + cnt]
            worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
            covered += cnt
    check(f"stage 3's gradient shards = stage 0's gradient (D2xT2xP2, {covered} elements, worst "
          f"{worst:.1e} of the largest)", covered > 0 and worst <= 1e-5)

    # ---- checkpoints: stage 3 in DP2xPP2 saves at 5; stage 0 in TP2 and stage 3 in DP2 resume
    ckpt = os.path.join(work, "ckpt")
    train("ckpt-z3", 4, ["training.micro_batch_size=2", "parallel.pipeline_model_parallel_size=2",
                         "parallel.zero_stage=3", "training.exit_interval=5", f"checkpoint.save={ckpt}"])
    for name, world, sets in (("resume-z0-tp2", 2, ["parallel.tensor_model_parallel_size=2"]),
                              ("resume-z3-dp2", 2, ["parallel.zero_stage=3"])):
        resumed, _ = train(name, world, ["training.micro_batch_size=2", f"checkpoint.load={ckpt}", *sets])
        if resumed is not None:
            check(f"{name}: iterations 6-10", [m["iteration"] for m in resumed] == list(range(6, 11)),
                  str([m["iteration"] for m in resumed]))
            if len(resumed) == 5:
                same(f"stage-3 DP2xPP2 checkpoint resumed by {name}", resumed, base, 5)

if part in ("all", "counts"):
    # ---- communication counts (one micro-batch: global batch 8 = D2 x micro-batch 4; buckets of
    # 0.05 MiB, about a quarter of a layer, so stage 2's gradient window is a fraction of the model)
    LAYER = 12 * H * H + 13 * H  # one layer's parameters
    WTE, WPE, LNF = V * H, POS * H, 2 * H


    def wire(z):
        """Bytes rank 0 sends on the wire in the last iteration over DP (ring algorithms on D = 2:
        all-reduce 2 (D-1)/D, reduce-scatter and all-gather (D-1)/D of the payload)."""
        c = z["zero_per_rank"][0]
        return c["dp_allreduce_bytes_last_iter"] + 0.5 * (c["dp_reduce_scatter_bytes_last_iter"] +
                                                          c["dp_allgather_bytes_last_iter"])


    for lname, world, sets, layers_per_rank, extra in (
            ("one-stage", 2, [], LAYERS, WTE),
            ("pp2", 4, ["parallel.pipeline_model_parallel_size=2"], LAYERS // 2, 0)):
        runs = {}
        for z in (0, 1, 2, 3):
            got, out = train(f"comm-{lname}-z{z}", world, ["training.micro_batch_size=4", "training.train_iters=2",
                                                          "parallel.ddp_bucket_size_mb=0.05", *sets,
                                                          f"parallel.zero_stage={z}"])
            runs[z] = summary(out) if got is not None else None
        if None in runs.values():
            continue
        check(f"{lname}: stage 2 sends no more DP bytes than stage 0 ({wire(runs[2]):.0f} vs {wire(runs[0]):.0f}), "
              f"stage 1 the same", wire(runs[2]) <= wire(runs[0]) and wire(runs[1]) == wire(runs[2]))
        c2, c3 = runs[2]["zero_per_rank"][0], runs[3]["zero_per_rank"][0]
        added = c3["dp_allgather_bytes_last_iter"] - c2["dp_allgather_bytes_last_iter"]
        check(f"{lname}: stage 3's all-gathers add every layer's parameters once (backward): "
              f"{added} bytes = 4 x ({layers_per_rank} x {LAYER} + {extra})",
              added == 4 * (layers_per_rank * LAYER + extra))
        # rank 0 holds the first stage: units wte, wpe and its layers, each in buckets of 0.05 MiB
        # (13107 elements): a layer in 4, wte in 2; the one-stage model adds lnf.weight, lnf.bias
        # and wte again for the head
        per_layer, per_wte = -(-LAYER // 13107), -(-WTE // 13107)
        fwd = per_wte + 1 + layers_per_rank * per_layer + (2 + per_wte if lname == "one-stage" else 0)
        check(f"{lname}: stage 3 issues one all-gather per bucket of every forward unit and of every "
              f"layer in backward ({c3['dp_allgathers_last_iter']} = {fwd} + {layers_per_rank} x {per_layer})",
              c3["dp_allgathers_last_iter"] == fwd + layers_per_rank * per_layer)
        check(f"{lname}: reduce-scatter bytes equal at stages 1-3 (the gradient once)",
              len({runs[z]["zero_per_rank"][0]["dp_reduce_scatter_bytes_last_iter"] for z in (1, 2, 3)}) == 1)
        mem = {z: runs[z]["memory_mb_per_rank"][0] for z in runs}
        # (parameters: on the one-stage model only; a pipeline stage of 4 small layers on D = 2 holds
        # half its parameters as a shard and two layers gathered at once, about what it had)
        check(f"{lname}: optimizer sharded from stage 1, gradients from stage 2"
              f"{', parameters at stage 3' if lname == 'one-stage' else ''} "
              f"({', '.join(f'{z}: {mem[z]}' for z in mem)})",
              mem[1]["optimizer"] < mem[0]["optimizer"] and mem[2]["gradients"] < mem[1]["gradients"] and
              (lname != "one-stage" or mem[3]["parameters"] < mem[2]["parameters"]))

    # ---- memory against the planner, DP4, one micro-batch per rank
    mid = tt.write_config(os.path.join(work, "mid.yaml"),
        model=dict(num_layers=4, hidden_size=256, num_attention_heads=4, seq_length=32,
                   max_position_embeddings=32, vocab_size=8192, make_vocab_size_divisible_by=128),
        training=dict(micro_batch_size=1, global_batch_size=4, train_iters=2, lr=1.0e-3),
        data=dict(data_path=prefix, split="100,0,0"), parallel=dict(ddp_bucket_size_mb=1, comm_timeout_s=120))
    state = {}
    for z in (0, 1, 2, 3):
        out = os.path.join(work, f"mid-z{z}")
        r = tt.run(tt.train_cmd(trident, mid, out, 4, sets=[f"parallel.zero_stage={z}"], flags=["--quiet"]),
                   timeout=300)
        p = tt.run([trident, "plan", mid, "--json", "--world-size", "4", "--set", "cluster.preset=cpu-host",
                    "--set", f"parallel.zero_stage={z}"], timeout=60)
        if not check(f"mid-z{z}: train and plan exit 0", r.returncode == 0 and p.returncode == 0,
                     r.stderr[-2000:] + p.stderr[-500:]):
            continue
        got = summary(out)["memory_mb_per_rank"][0]
        want = json.loads(p.stdout)["memory_breakdown"]
        parts = [(k, got[k], want[f"{q}_bytes"] / 2 ** 20) for k, q in
                 (("parameters", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer"))]
        check(f"stage {z} at DP4: " + ", ".join(f"{k} {a:.2f} MiB (plan {b:.2f})" for k, a, b in parts) +
              " each within 10%", all(abs(a - b) <= 0.1 * b for _, a, b in parts))
        state[z] = {k: a for k, a, _ in parts}
    if len(state) == 4:
        total = {z: sum(state[z].values()) for z in state}
        check(f"DP4: optimizer at stage 1 = 1/4 of stage 0's ({state[1]['optimizer']:.2f} vs "
              f"{state[0]['optimizer']:.2f}); model state falls stage by stage "
              f"({', '.join(f'{total[z]:.1f}' for z in range(4))} MiB)",
              abs(state[1]["optimizer"] - state[0]["optimizer"] / 4) <= 0.01 * state[0]["optimizer"] and
              total[0] > total[1] > total[2] > total[3])
tt.finish()
