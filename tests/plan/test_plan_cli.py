#!/usr/bin/python3
"""`trident plan`: Bloom-176B in JSON and text (published numbers within 20%), Mixtral-8x7B (a
mixture of experts: its total and active parameters, fits an H100; expert parallelism on
runtime trident's GPUs and shared experts refused as training refuses them), Bloom's TP=1 PP=1
variant (does not fit, and why), --search (under 10 s, published layout ranked), --tokens,
--calibrate from a metrics.jsonl, --explain (text, JSON adding up, SVG), --gemm-table,
--references, --dropout, cluster.runtime, context and expert parallelism, and exit code 2 with a
message for every bad argument.
usage: test_plan_cli.py TRIDENT SOURCE_ROOT"""
import json
import os
import resource
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import expect  # noqa: E402

trident, root = sys.argv[1], sys.argv[2]
bloom = os.path.join(root, "configs", "bloom-176b.yaml")


def run(*args):
    return tt.outputs([trident, "plan", *args])


def plan_json(*args):
    return tt.json_output([trident, "plan", *args, "--json"])


# Bloom as published.
d = plan_json(bloom)
for key in ["step_time_s", "tokens_per_s", "tflops_per_gpu", "model_tflops_per_gpu", "mfu",
            "memory_per_gpu_bytes", "memory_breakdown", "fits", "time_to_train_s"]:
    expect(key in d, f"JSON key {key}")
expect(d["fits"] is True, "Bloom fits")
expect(d["memory_per_gpu_bytes"] < 80 * 2**30, "Bloom under 80 GiB")
expect(abs(d["tflops_per_gpu"] / 150 - 1) <= 0.2, f"TFLOP/s {d['tflops_per_gpu']} vs 150")
expect(abs(d["time_to_train_days"] / 30.44 / 3.5 - 1) <= 0.2,
       f"{d['time_to_train_days']} days vs 3.5 months")
b = d["memory_breakdown"]
parts = sum(b[k] for k in ["weights_bytes", "gradients_bytes", "optimizer_bytes",
                           "activations_bytes", "recompute_bytes", "embedding_bytes",
                           "loss_bytes", "reserved_bytes"])
expect(abs(parts / d["memory_per_gpu_bytes"] - 1) < 1e-9, "breakdown adds up")
expect(d["layout"]["tp"] == 4 and d["layout"]["pp"] == 12 and d["layout"]["dp"] == 8, "layout")
expect(len(d["memory_per_stage_bytes"]) == 12, "12 stages")
expect(d["problem"] is None, "no problem")

rc, out, err = run(bloom)
expect(rc == 0 and "-> fits" in out and "TFLOP/s per GPU" in out and "time to train 366B" in out,
       f"text report: {out!r}")

# Mixtral-8x7B: a mixture of experts, its parameters and active parameters exact, fits an H100.
mixtral = os.path.join(root, "configs", "mixtral-8x7b.yaml")
d = plan_json(mixtral)
expect(d["parameters"] == 46702792704 and d["active_parameters"] == 12879925248 and d["fits"],
       f"Mixtral: {d['parameters']} parameters, {d['active_parameters']} active, fits {d['fits']}")
dense = plan_json(bloom)
expect(dense["active_parameters"] == dense["parameters"],
       "a dense model's active parameters are all of them")
rc, out, err = run(mixtral)
expect(rc == 0 and "46.7B parameters, 12.88B active (2 of 8 experts a token" in out and
       "-> fits" in out and "MFU" in out, f"Mixtral text report: {out!r} {err!r}")

# TP=1, PP=1: does not fit, and says why.
args = [bloom, "--set", "parallel.tensor_model_parallel_size=1",
        "--set", "parallel.pipeline_model_parallel_size=1"]
d = plan_json(*args)
expect(d["fits"] is False, "TP1 PP1 does not fit")
expect("model state alone" in (d["problem"] or ""), f"why: {d['problem']}")
rc, out, err = run(*args)
expect(rc == 0 and "DOES NOT FIT" in out and "problem: needs" in out, f"text: {out!r}")

# --search: its CPU time (the child's user + system), not wall time, which a busy 2-core
# machine stretches
def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


t0 = children_cpu_s()
d = plan_json(bloom, "--search", "--top", "5")
dt = children_cpu_s() - t0
with open(trident, "rb") as f:
    sanitized = b"__asan_init" in f.read()  # sanitizer builds run several times slower
expect(dt < 10 or sanitized, f"search took {dt:.1f} s of CPU")
expect(len(d["top"]) == 5, "5 layouts listed")
expect(d["config_rank"] >= 1, "published layout ranked")
expect(all(r["fits"] for r in d["top"]), "top layouts fit")
expect(all(d["top"][i]["tokens_per_s"] >= d["top"][i + 1]["tokens_per_s"] for i in range(4)),
       "sorted by tokens/s")
expect(any("global batch 2048 is not a multiple of DP 384" in r["reason"] for r in d["rejected"]),
       "rejections have reasons")
rc, out, err = run(bloom, "--search")
expect(rc == 0 and "the config's layout (TP4 PP12 DP8 mb2 full zero1) ranks #" in out, "rank line")
expect("why #1" in out or "ranks #1\n" in out, "explains the ranking")

# --tokens, --world-size
d = plan_json(bloom, "--tokens", "1T")
expect(d["train_tokens"] == 1e12, "--tokens 1T")
d = plan_json(bloom, "--world-size", "192")
expect(d["layout"]["dp"] == 4 and d["world_size"] == 192, "--world-size 192 -> DP 4")

# --calibrate: a measured run on this machine's preset.
tiny = """model: {num_layers: 4, hidden_size: 128, num_attention_heads: 4, seq_length: 128}
parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2}
training: {micro_batch_size: 8, global_batch_size: 16, train_iters: 20, lr: 1.0e-3}
data: {data_path: x}
cluster: {preset: cpu-host}
"""
with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "tiny.yaml")
    with open(cfg, "w") as f:
        f.write(tiny)
    metrics = os.path.join(tmp, "metrics.jsonl")
    with open(metrics, "w") as f:
        for i, ms in enumerate([900, 210, 200, 190]):
            f.write(json.dumps({"iteration": i + 1, "loss": 5.0, "ms_per_iter": ms}) + "\n")
    rc, out, err = run(cfg, "--world-size", "8", "--calibrate", metrics, "--json")
    expect(rc == 0, f"calibrate: {rc} {err!r}")
    if rc == 0:
        d = json.loads(out)
        expect(abs(d["step_time_s"] - 0.2) < 1e-6, f"calibrated step {d['step_time_s']}")
        expect("gemm_efficiency" in err, "calibration line on stderr with --json")
    rc, out, err = run(cfg, "--world-size", "8", "--calibrate", metrics)
    expect(rc == 0 and out.startswith("calibrated: measured 200 ms per iteration (median of 3)"),
           f"calibrate text: {out[:120]!r}")
    with open(metrics, "w") as f:
        f.write("{\"loss\": 1}\n")
    rc, out, err = run(cfg, "--calibrate", metrics)
    expect(rc == 2 and "metrics.jsonl:1: no \"ms_per_iter\"" in err, f"bad metrics: {err!r}")
    nocluster = os.path.join(tmp, "nocluster.yaml")
    with open(nocluster, "w") as f:
        f.write(tiny.replace("cluster: {preset: cpu-host}\n", ""))
    rc, out, err = run(nocluster)
    expect(rc == 2 and "cluster.gpus_per_node is not set and no preset gives it" in err,
           f"no cluster: {err!r}")

# --explain (issue 22): where the step goes, per stage, adding up to the step; the SVG beside it.
with tempfile.TemporaryDirectory() as tmp:
    svg = os.path.join(tmp, "explain.svg")
    rc, out, err = run(bloom, "--explain", "--svg", svg)
    expect(rc == 0 and "where the step goes" in out and "where the memory goes" in out
           and f"chart: {svg}" in out, f"--explain text: {rc} {err!r}")
    import xml.etree.ElementTree as ET
    try:
        svg_root = ET.parse(svg).getroot()
        expect(svg_root.tag.endswith("svg") and len(svg_root) > 50, "--svg: an SVG with the bars")
    except (OSError, ET.ParseError) as e:
        expect(False, f"--svg: {e}")
    d = plan_json(bloom, "--explain")
    expect(len(d["stages"]) == 12, "12 stages explained")
    for st in d["stages"]:
        total = sum(st["time_s"].values())
        expect(abs(total / d["step_time_s"] - 1) < 0.01, f"stage {st['stage']}: {total} vs {d['step_time_s']}")
    expect(d["stages"][11]["time_s"]["output_layer"] > 0 and d["stages"][0]["time_s"]["embedding"] > 0,
           "output layer on the last stage, embedding on the first")
    # a measured GEMM table changes the prediction; a bad one is refused
    table = os.path.join(tmp, "gemm.inc")
    with open(table, "w") as f:
        f.write("/* test */\n{4096, 10752, 14336, 1, 1.0e-2},\n")
    plain = plan_json(bloom)["step_time_s"]
    slower = plan_json(bloom, "--gemm-table", table)["step_time_s"]
    expect(slower > 1.2 * plain, f"--gemm-table: {slower} vs {plain}")
    with open(table, "w") as f:
        f.write("{1, 2}\n")
    rc, out, err = run(bloom, "--gemm-table", table)
    expect(rc == 2 and "gemm.inc:1: expected a row" in err, f"bad --gemm-table: {err!r}")

# --references: the published runs and the acceptance
rc, out, err = run("--references")
expect(rc == 0 and "BLOOM-176B" in out and "median |error|" in out, f"--references: {rc} {err!r}")
# --dropout costs time; cluster.runtime changes the P2P and gradient accumulation
expect(plan_json(bloom, "--dropout")["step_time_s"] > plain, "--dropout is slower")
megatron = plan_json(bloom, "--set", "cluster.runtime=megatron")["step_time_s"]
expect(megatron < plain, f"Megatron's runtime beats DeepSpeed's on Bloom: {megatron} vs {plain}")

# Bad usage: exit 2 with a message.
for args, msg in [
    ([], "usage: trident plan"),
    ([bloom, "--frobnicate"], "unknown option or missing value: '--frobnicate'"),
    ([bloom, "--tokens", "lots"], "--tokens needs a positive number"),
    ([bloom, "--tokens", "-5"], "--tokens needs a positive number"),
    ([bloom, "--world-size", "0"], "--world-size needs an integer >= 1, got '0'"),
    ([bloom, "--top", "x"], "--top needs an integer >= 1, got 'x'"),
    ([bloom, "--world-size", "100"], "world size 100 is not a multiple of"),
    ([bloom, bloom], "one config file only"),
    ([bloom, "--set", "cluster.preset=tpu"], "cluster.preset"),
    ([bloom, "--set", "training.recompute=sometimes"], "none, selective, full"),
    ([os.path.join(root, "no-such.yaml")], "no-such.yaml"),
    ([bloom, "--calibrate", "/nonexistent/metrics.jsonl"], "cannot open /nonexistent"),
    ([bloom, "--svg", "x.svg"], "--svg needs --explain"),
    ([bloom, "--explain", "--search"], "--explain and --search do not go together"),
    ([bloom, "--references"], "--references takes no config"),
    ([bloom, "--gemm-table", "/nonexistent/g.inc"], "cannot open /nonexistent"),
    ([bloom, "--set", "cluster.runtime=jax"], "cluster.runtime"),
    # what trident does not train is not planned either
    # (EP on runtime trident: the CPU backend alone; the config refused it before the engine)
    ([mixtral, "--set", "parallel.expert_model_parallel_size=2"],
     "parallel.expert_model_parallel_size = 2"),
    ([mixtral, "--set", "model.moe_shared_expert_intermediate_size=1024"],
     "shared experts are not built"),
]:
    rc, out, err = run(*args)
    expect(rc == 2 and msg in err, f"{args}: exit {rc}, stderr {err!r}")

# context parallelism: a tiny CP 2 config on the CPU (text and JSON); on a GPU preset runtime
# trident has no CP kernels: refused naming why
tiny = os.path.join(root, "configs", "tiny.yaml")
cp2 = ["--set", "parallel.context_parallel_size=2", "--set", "cluster.preset=cpu-host",
       "--world-size", "4"]
rc, out, err = run(tiny, *cp2)
expect(rc == 0 and "layout: TP 1 x CP 2 x PP 1 x DP 2" in out and "context parallel: CP 2" in out,
       f"CP 2 text: {rc} {err!r} {out[:400]!r}")
d = plan_json(tiny, *cp2)
expect(d["layout"]["cp"] == 2 and d["time_breakdown"]["cp_link"] == "intra-node" and
       d["time_breakdown"]["cp_comm_per_micro_batch_s"] > 0, f"CP 2 JSON: {d.get('layout')}")
rc, out, err = run(tiny, "--set", "parallel.context_parallel_size=2", "--set",
                   "cluster.preset=h100-80gb", "--set", "training.precision=bf16", "--world-size", "4")
expect(rc == 0 and "context parallel: CP 2" in out, f"CP 2 on a GPU in bf16, runtime trident: {rc} {err!r}")
rc, out, err = run(tiny, "--set", "parallel.context_parallel_size=2", "--set", "model.num_experts=4",
                   "--set", "cluster.preset=h100-80gb", "--world-size", "4")
expect(rc == 2 and "context_parallel_size = 2 with mixture of experts is not supported" in err,
       f"CP with experts, runtime trident: {rc} {err!r}")

# expert parallelism on the CPU (trident's engine): the plan's line and JSON; an EP that does
# not divide DP refused naming the key; --search keeps the config's EP; on a GPU runtime
# trident has none
ep = ["--set", "model.num_experts=4", "--set", "cluster.preset=cpu-host"]
ep2 = [*ep, "--set", "parallel.expert_model_parallel_size=2", "--world-size", "4"]
rc, out, err = run(tiny, *ep2)
expect(rc == 0 and "expert parallel: EP 2 (2 of 4 experts run on a rank), intra-node" in out
       and "every rank keeps every expert's parameters" in out, f"EP 2 text: {rc} {err!r}")
d = plan_json(tiny, *ep2)
expect(d["layout"]["ep"] == 2 and d["time_breakdown"]["ep_link"] == "intra-node" and
       d["time_breakdown"]["ep_comm_per_micro_batch_s"] > 0, f"EP 2 JSON: {d.get('layout')}")
d = tt.json_output([trident, "plan", tiny, *ep2, "--search", "--json"])
expect(d["fit"] > 0 and all(t["layout"].get("ep") == 2 for t in d["top"]),
       "--search keeps the config's EP")
rc, out, err = run(tiny, *ep, "--set", "parallel.expert_model_parallel_size=4", "--world-size", "2")
expect(rc == 2 and "parallel.expert_model_parallel_size = 4 must divide DP 2" in err,
       f"EP 4 on DP 2: {rc} {err!r}")
rc, out, err = run(tiny, "--set", "model.num_experts=4", "--set", "cluster.preset=h100-80gb",
                   "--set", "parallel.expert_model_parallel_size=2", "--world-size", "4")
expect(rc == 2 and "trident's expert parallelism exchanges the routed rows in host memory" in err,
       f"EP on a GPU, runtime trident: {rc} {err!r}")

rc, out, err = run("--help")
expect(rc == 0 and "--search" in out and "--calibrate" in out and "--explain" in out, "--help")

tt.finish("all plan CLI checks passed")
