#!/usr/bin/python3
"""The GPU checks of issue 15 through `trident train` (SKIP where no GPU is usable):
  fp32-vs-cpu        training.device cuda, fp32 (the "cuda-fp32" table) vs the CPU backend: the
                     losses of 10 iterations within 1e-4 (relative)
  bf16-vs-fp32-demo  the demo model (configs/tiny.yaml) on the demo corpus (the fortunes, from
                     $TRIDENT_DEMO_CORPUS, else /usr/share/games/fortunes), 50 iterations on the
                     GPU in bf16 and in fp32: the losses of iteration 50 within 2%
  staged-3d-fp32     (DP=2, TP=2, PP=2) as 8 ranks on ONE GPU (CUDA_VISIBLE_DEVICES pins them to
                     it, so every group stages through pinned host memory over UCX) vs one rank,
                     fp32: every iteration within 1e-4
  families           the Llama (RMSNorm, rope, SwiGLU, GQA, untied), Qwen2 (Llama with qkv's bias),
                     Bloom (ALiBi, embedding norm), GPT-NeoX (rope on a quarter of each head,
                     parallel residual, exact GELU, untied), Falcon (GQA, no biases, parallel
                     residual with one norm, exact GELU), Phi-2 (one norm, the output layer's
                     bias: the head in fp32) and Gemma (heads of kv_channels 16, GeGLU with the
                     exact GELU, norms scaling by 1 + weight, the embedding times 8) switches,
                     GPT-J's, GPT-BigCode's, MPT's and OPT's (GPT-2's with the MLP's ReLU), a
                     Mixtral-like mixture of experts, and hidden and attention dropout (0.1 each),
                     on the GPU vs the CPU: fp32 within 1e-4, bf16 within 2e-2 of the CPU's fp32
                     (the families' CUDA kernels: rope, RMSNorm, SwiGLU, GeGLU, GQA/ALiBi
                     attention, the exact GELU, ReLU, the MoE router, gather and scatter, dropout's
                     masks)
  cp                 context parallelism (kernels/cuda/attention_rows.cu): CP=2 as 2 ranks on ONE
                     GPU (staged, as staged-3d-fp32) vs the CPU's one rank: fp32 within 1e-4 and
                     bf16 within 2e-2, plain, with attention and hidden dropout 0.1 (the masks at
                     global coordinates) and with a Llama's groups and rope
  checkpoint         a checkpoint saved on the GPU (iteration 5) resumes on the CPU, and one
                     saved on the CPU resumes on the GPU: iterations 6-10 within 1e-4 of the
                     uninterrupted runs on both backends (fp32); a bf16 run's checkpoint resumes
                     on the CPU within 2e-2 of the CPU's own run; `trident eval` of the CPU's
                     checkpoint on the dataset (the cached forward, in chunks) gives the CPU's
                     nll within 1e-4 with --device cuda-fp32 (also as 2 data-parallel replicas
                     sharing the GPU: their sums all-reduced by NCCL through host staging) and
                     2e-2 with cuda (bf16)
usage: test_gpu_checks.py TRIDENT PROBE WORKDIR --check NAME [--emulate] [--quick]
--emulate: no GPU needed: the "GPU" runs are CPU runs (device cpu, fp32), so every comparison
holds by construction; this runs the checks' own logic (configs, commands, corpus, checkpoint
folders, comparisons) on any machine. --quick: fewer iterations, cp without its bf16 runs (with
--emulate)."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
import trident_test as tt  # noqa: E402

CHECKS = ("fp32-vs-cpu", "bf16-vs-fp32-demo", "staged-3d-fp32", "checkpoint", "families", "cp")
FAMILIES = {  # tests/layouts' family switches, for this check's 8-head model
    "llama": ["model.normalization=RMSNorm", "model.position_embedding_type=rope", "model.swiglu=true",
              "model.ffn_hidden_size=176", "model.num_query_groups=4",
              "model.untie_embeddings_and_output_weights=true", "model.add_bias_linear=false"],
    "bloom": ["model.position_embedding_type=alibi", "model.embedding_layernorm=true"],
}
FAMILIES["qwen2"] = FAMILIES["llama"] + ["model.add_qkv_bias=true"]  # qkv's bias before rope
FAMILIES["neox"] = ["model.position_embedding_type=rope", "model.rotary_percent=0.25",
                    "model.untie_embeddings_and_output_weights=true", "model.parallel_residual=true",
                    "model.gelu_approximate=none"]
FAMILIES["falcon"] = ["model.position_embedding_type=rope", "model.num_query_groups=2",
                      "model.add_bias_linear=false", "model.parallel_residual=true",
                      "model.parallel_shared_norm=true", "model.gelu_approximate=none"]
FAMILIES["phi"] = ["model.position_embedding_type=rope", "model.rotary_percent=0.5",
                   "model.untie_embeddings_and_output_weights=true", "model.output_layer_bias=true",
                   "model.parallel_residual=true", "model.parallel_shared_norm=true"]
FAMILIES["gemma"] = ["model.normalization=RMSNorm", "model.position_embedding_type=rope",
                     "model.kv_channels=16", "model.num_query_groups=4", "model.geglu=true",
                     "model.gelu_approximate=none", "model.apply_layernorm_1p=true",
                     "model.embedding_multiplier=8", "model.add_bias_linear=false"]
FAMILIES["gptj"] = ["model.position_embedding_type=rope", "model.rotary_percent=0.25",
                    "model.untie_embeddings_and_output_weights=true", "model.output_layer_bias=true",
                    "model.parallel_residual=true", "model.parallel_shared_norm=true",
                    "model.add_bias_linear=false", "model.add_mlp_bias=true"]
FAMILIES["bigcode"] = ["model.num_query_groups=1"]  # GPT-2's layer with one key/value head (MQA)
# MPT's: ALiBi, no linear biases, LayerNorms without biases (C zeros and a gradient sink), exact GELU
FAMILIES["mpt"] = ["model.position_embedding_type=alibi", "model.add_bias_linear=false",
                   "model.layernorm_bias=false", "model.gelu_approximate=none"]
# OPT's: GPT-2's (LayerNorm, learned positions, biases, tied) with the MLP's ReLU (relu_forward16 /
# relu_backward16 in bf16, beside fc's GEMMs: no epilogue)
FAMILIES["opt"] = ["model.relu=true"]
# a Mixtral-like mixture of experts (the Llama's layer, 4 experts, 2 a token, the balancing and z
# losses): kernels/cuda/moe.cu's router, gather and scatter, the routing copied to the host
FAMILIES["moe"] = FAMILIES["llama"] + ["model.num_experts=4", "model.moe_router_topk=2",
                                       "model.moe_aux_loss_coeff=0.01", "model.moe_z_loss_coeff=0.001",
                                       "model.init_method_std=0.06"]  # (as layouts-moe: no near-tie routing)
# hidden and attention dropout (GPT-2's layer, 4 heads of 16: bf16 on the tensor-core kernels' dropout
# variants, fp32 on flash.cu's): kernels/cuda/dropout.cu and the attention's masks, the CPU's bits
FAMILIES["dropout"] = ["model.hidden_dropout=0.1", "model.attention_dropout=0.1",
                       "model.num_attention_heads=4"]


def parse(argv):
    if len(argv) < 5 or "--check" not in argv:
        sys.exit(__doc__)
    check = argv[argv.index("--check") + 1]
    if check not in CHECKS:
        sys.exit(f"unknown check {check!r}: one of {', '.join(CHECKS)}")
    return argv[1], argv[2], argv[3], check, "--emulate" in argv, "--quick" in argv


def demo_corpus_files():
    """The fortune files of the demo corpus (scripts/demo.sh's choice: no .dat or .u8, no links)."""
    for d in (os.environ.get("TRIDENT_DEMO_CORPUS", ""), "/usr/share/games/fortunes"):
        if d and os.path.isdir(d):
            files = sorted(os.path.join(d, f) for f in os.listdir(d)
                           if not f.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(d, f))
                           and not os.path.islink(os.path.join(d, f)))
            if files:
                return d, files
    return None, []


def rel(a, b):
    return abs(a - b) / abs(b) if b else abs(a - b)


class Runner:
    def __init__(self, trident, work, config, emulate):
        self.trident, self.work, self.config, self.emulate = trident, work, config, emulate

    def sets(self, device, precision):
        """--set values of a run on DEVICE (cpu | gpu) in PRECISION; emulated GPU runs are CPU
        fp32 runs."""
        if device == "cpu" or self.emulate:
            return ["training.device=cpu", "training.precision=fp32"]
        return ["training.device=cuda", f"training.precision={precision}"]

    def run(self, name, device, precision, world=1, tp=1, pp=1, sets=(), env=None, timeout=900):
        """{iteration: loss} of a run, or None (printed: FAIL with the output's tail)."""
        out = os.path.join(self.work, name)
        cmd = tt.train_cmd(self.trident, self.config, out, world, tp, pp,
                           self.sets(device, precision) + list(sets), flags=["--quiet"])
        r = tt.run(cmd, timeout=timeout, env=dict(os.environ, **(env or {})))
        if r.returncode != 0:
            tt.check(f"{name}: trident train exits 0", False,
                     f"exit {r.returncode}: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            return None
        return {m["iteration"]: m["loss"] for m in tt.metrics(out) if "loss" in m}


def compare(what, got, ref, tol, iterations=None):
    """Every iteration of `iterations` (default: ref's) within tol, relative; one check."""
    if got is None or ref is None:
        return tt.check(what, False, "a run failed (above)")
    its = sorted(iterations if iterations is not None else ref)
    missing = [i for i in its if i not in got or i not in ref]
    if missing:
        return tt.check(what, False, f"iterations missing: {missing}; got {sorted(got)}, ref {sorted(ref)}")
    worst, at = max((rel(got[i], ref[i]), i) for i in its)
    return tt.check(f"{what}: iterations {its[0]}-{its[-1]}, largest relative difference {worst:.2e} "
                    f"at {at} (tolerance {tol:.0e})", worst <= tol,
                    "\n     ".join(f"{i}: {got[i]:.7f} vs {ref[i]:.7f}" for i in its), show=worst > tol)


def small_config(trident, work, iters):
    """The config and its dataset's prefix."""
    prefix = tt.make_corpus(trident, work, 11, ["kernel", "stream", "warp", "tensor", "pipe", "shard",
                                                "bf16", "grad", "host", "stage"], 400, 3, 50)
    return prefix, tt.write_config(os.path.join(work, "gpu.yaml"),
        model=dict(num_layers=4, hidden_size=64, num_attention_heads=8, seq_length=32,
                   vocab_size=256, make_vocab_size_divisible_by=16),
        training=dict(micro_batch_size=2, global_batch_size=8, train_iters=iters, lr=2.0e-3,
                      lr_warmup_iters=2, weight_decay=0.1, clip_grad=1.0, seed=5),
        data=dict(data_path=prefix, split="95,5,0"),
        parallel=dict(comm_timeout_s=60))  # a stuck rank fails in a minute, not the GPU's half hour


def main():
    trident, probe, work, check, emulate, quick = parse(sys.argv)
    if not emulate:
        p = subprocess.run([probe], capture_output=True, text=True, timeout=120)
        print(p.stdout.strip())
        if p.returncode == 77:
            sys.exit(77)
        if p.returncode != 0:
            sys.exit(f"probe failed ({p.returncode}): {p.stderr.strip()}")
    work = tt.fresh_dir(os.path.join(work, "gpu_checks_" + check + ("_emulated" if emulate else "")))
    if emulate:
        print("emulated: the GPU runs are CPU runs; this checks the harness, not the GPU")

    if check == "bf16-vs-fp32-demo":
        where, files = demo_corpus_files()
        if not files:
            print("SKIP: no demo corpus: set TRIDENT_DEMO_CORPUS to the fortunes folder "
                  "(scripts/gpu-bundle.sh carries it in .gpu/prefix/share/fortunes) or install fortunes")
            sys.exit(77)
        iters = 10 if quick else 50
        prefix = tt.preprocess(trident, files, os.path.join(work, "fortunes"), timeout=300)
        print(f"demo corpus: {len(files)} files from {where}")
        config = os.path.join(here, "..", "..", "configs", "tiny.yaml")
        r = Runner(trident, work, config, emulate)
        sets = [f"data.data_path={prefix}", f"training.train_iters={iters}",
                "training.eval_interval=0", "training.lr_warmup_iters=5"]
        fp32 = r.run("demo-fp32", "gpu", "fp32", sets=sets)
        bf16 = r.run("demo-bf16", "gpu", "bf16", sets=sets)
        if fp32 and bf16:
            last = max(fp32)
            tt.check(f"demo corpus, {iters} iterations: loss fell in fp32 ({fp32[1]:.4f} -> {fp32[last]:.4f})",
                     fp32[last] < 0.8 * fp32[1])
            compare(f"bf16 vs fp32 at iteration {last}", bf16, fp32, 2e-2, [last])
            worst = max(rel(bf16[i], fp32[i]) for i in fp32 if i in bf16)
            print(f"     (over all {len(fp32)} iterations the largest relative difference is {worst:.2e})")
        else:
            tt.check("demo runs", False, "a run failed (above)")
        tt.finish()

    iters = 10
    prefix, config = small_config(trident, work, iters)
    r = Runner(trident, work, config, emulate)
    if check == "fp32-vs-cpu":
        cpu = r.run("cpu", "cpu", "fp32")
        gpu = r.run("gpu-fp32", "gpu", "fp32")
        compare("GPU fp32 vs CPU", gpu, cpu, 1e-4)
    elif check == "staged-3d-fp32":
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        one = r.run("gpu1-fp32", "gpu", "fp32")
        eight = r.run("gpu8-fp32", "gpu", "fp32", world=8, tp=2, pp=2,
                      env={"CUDA_VISIBLE_DEVICES": first})
        compare("(DP=2, TP=2, PP=2) on one GPU, staged, vs one rank, fp32", eight, one, 1e-4)
    elif check == "cp":
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        for name, sets in (("plain", []),
                           ("dropout", ["model.attention_dropout=0.1", "model.hidden_dropout=0.1"]),
                           ("llama", FAMILIES["llama"])):
            cpu = r.run(f"cp-{name}-cpu", "cpu", "fp32", sets=sets)
            for precision, tol in (("fp32", 1e-4), ("bf16", 2e-2))[:1 if quick else 2]:
                cp2 = r.run(f"cp-{name}-gpu2-{precision}", "gpu", precision, world=2,
                            sets=sets + ["parallel.context_parallel_size=2"],
                            env={"CUDA_VISIBLE_DEVICES": first})
                compare(f"CP=2 ({name}) on one GPU, staged, {precision}, vs one CPU rank, fp32",
                        cp2, cpu, tol)
    elif check == "families":
        for fam, sets in FAMILIES.items():
            cpu = r.run(f"{fam}-cpu", "cpu", "fp32", sets=sets)
            gpu = r.run(f"{fam}-gpu-fp32", "gpu", "fp32", sets=sets)
            compare(f"{fam}: GPU fp32 vs CPU", gpu, cpu, 1e-4)
            bf16 = r.run(f"{fam}-gpu-bf16", "gpu", "bf16", sets=sets)
            compare(f"{fam}: GPU bf16 vs CPU fp32", bf16, cpu, 2e-2)
    elif check == "checkpoint":
        ck = lambda name: os.path.join(work, name)  # noqa: E731
        half = ["training.exit_interval=5"]
        gpu_full = r.run("gpu-full", "gpu", "fp32")
        cpu_full = r.run("cpu-full", "cpu", "fp32")
        late = range(6, iters + 1)
        # GPU -> CPU
        saved = r.run("gpu-half", "gpu", "fp32", sets=half + [f"checkpoint.save={ck('ck-gpu')}"])
        tt.check("the GPU run saved at iteration 5", saved is not None and max(saved) == 5 and
                 os.path.isfile(os.path.join(ck("ck-gpu"), "iter_0000005", "manifest.txt")))
        resumed = r.run("cpu-from-gpu", "cpu", "fp32", sets=[f"checkpoint.load={ck('ck-gpu')}"])
        tt.check("the CPU run resumed from the GPU checkpoint (its first iteration is 6)",
                 resumed is not None and min(resumed) == 6)
        compare("GPU checkpoint resumed on the CPU vs the CPU's uninterrupted run", resumed, cpu_full, 1e-4, late)
        compare("GPU checkpoint resumed on the CPU vs the GPU's uninterrupted run", resumed, gpu_full, 1e-4, late)
        # CPU -> GPU
        saved = r.run("cpu-half", "cpu", "fp32", sets=half + [f"checkpoint.save={ck('ck-cpu')}"])
        tt.check("the CPU run saved at iteration 5", saved is not None and max(saved) == 5)
        resumed = r.run("gpu-from-cpu", "gpu", "fp32", sets=[f"checkpoint.load={ck('ck-cpu')}"])
        tt.check("the GPU run resumed from the CPU checkpoint (its first iteration is 6)",
                 resumed is not None and min(resumed) == 6)
        compare("CPU checkpoint resumed on the GPU vs the GPU's uninterrupted run", resumed, gpu_full, 1e-4, late)
        compare("CPU checkpoint resumed on the GPU vs the CPU's uninterrupted run", resumed, cpu_full, 1e-4, late)
        # a bf16 run's checkpoint (fp32 master weights and moments) on the CPU
        r.run("gpu-bf16-half", "gpu", "bf16", sets=half + [f"checkpoint.save={ck('ck-bf16')}"])
        resumed = r.run("cpu-from-bf16", "cpu", "fp32", sets=[f"checkpoint.load={ck('ck-bf16')}"])
        compare("bf16 GPU checkpoint resumed on the CPU vs the CPU's uninterrupted run", resumed, cpu_full,
                2e-2, late)
        # trident eval of a checkpoint: the cached forward on each backend
        nll = {}
        for device, extra in (("cpu", []), ("cuda-fp32", []), ("cuda", []),
                              ("cuda-fp32 2 replicas", ["--nproc", "2", "--data-parallel", "2"])):
            cmd = [trident, "eval", ck("ck-cpu"), "--data-path", prefix, "--context", "32", "--limit", "64",
                   "--json", "--device", "cpu" if emulate else device.split()[0], *extra]
            e = tt.run(cmd, timeout=300)
            line = [x[x.index("{"):] for x in e.stdout.splitlines() if "{" in x]
            if tt.check(f"trident eval --device {device} exits 0", e.returncode == 0 and line,
                        f"exit {e.returncode}: {' '.join(cmd)}\n{e.stderr[-2000:]}"):
                p = json.loads(line[0])["perplexity"]
                nll[device] = p["nll_mean"]
                print(f"     eval --device {device}: {p['tokens']} tokens, nll {p['nll_mean']:.6f}")
        for device, tol in (("cuda-fp32", 1e-4), ("cuda", 2e-2), ("cuda-fp32 2 replicas", 1e-4)):
            if device in nll and "cpu" in nll:
                tt.check(f"eval --device {device} vs cpu: relative difference {rel(nll[device], nll['cpu']):.2e} "
                         f"(tolerance {tol:.0e})", rel(nll[device], nll["cpu"]) <= tol)
    tt.finish()


if __name__ == "__main__":
    main()
