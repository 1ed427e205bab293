#!/usr/bin/python3
"""scripts/gpu-check.sh's report pieces that need no GPU (Python's standard library only):
gpu_check_ncu.py reads ncu's CSV details (its own ==PROF== lines and the program's output mixed
in) into the figures of the first kernel, and its table has one row a kernel (a failed one
says why); gpu_check_report.py puts that table into report.md beside the steps.
usage: test_gpu_check_report.py SOURCE_ROOT"""
import os
import sys

sys.path.insert(0, os.path.join(sys.argv[1], "scripts"))
import gpu_check_ncu as ncu  # noqa: E402
import gpu_check_report as report  # noqa: E402

failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    failures += 0 if ok else 1


HEAD = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",' \
       '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
K = '"0","7","gpu_step","host","void fm::backward_kv<64, unsigned short, 32>(fm::args)","1","13",' \
    '"(128, 1, 1)","(16, 192, 1)","0","9.0",'
text = "\n".join([
    "==PROF== Connected to process 7", "micro-batch 16: fits", HEAD,
    K + '"GPU Speed Of Light Throughput","Duration","us","422.02"',
    K + '"GPU Speed Of Light Throughput","Compute (SM) Throughput","%","35.26"',
    K + '"GPU Speed Of Light Throughput","Memory Throughput","%","50.68"',
    K + '"Launch Statistics","Registers Per Thread","register/thread","165"',
    K + '"Occupancy","Achieved Occupancy","%","18.21"',
    K + '"Warp State Statistics","Warp Cycles Per Issued Instruction","cycle","5.16"',
    K + '"Command line profiler metrics","' + ncu.TENSOR + '","%","31.40"',
    K + '"Command line profiler metrics","' + ncu.stall_metric("barrier") + '","","1.20"',
    K + '"Command line profiler metrics","' + ncu.stall_metric("long_scoreboard") + '","","0.35"',
    K + '"Command line profiler metrics","' + ncu.stall_metric("math_pipe_throttle") + '","","1.75"',
    K + '"Command line profiler metrics","' + ncu.stall_metric("wait") + '","","0.80"',
    K + '"Command line profiler metrics","' + ncu.stall_metric("drain") + '","","n/a"',
    "==PROF== Disconnected from process 7"])
m = ncu.metrics(text)
check("the kernel's name", m.get("Kernel Name") == "void fm::backward_kv<64, unsigned short, 32>(fm::args)", m)
check("its time with the unit", m.get("Duration") == "422.02 us", m.get("Duration"))
check("SM throughput, registers, occupancy, cycles",
      (m.get("Compute (SM) Throughput"), m.get("Registers Per Thread"), m.get("Achieved Occupancy"),
       m.get("Warp Cycles Per Issued Instruction")) == ("35.26", "165", "18.21", "5.16"), m)
check("no CSV: no figures", ncu.metrics("==PROF== No kernels were profiled.\n") == {})
t = ncu.table([("attention dK dV", m), ("attention dQ", "ncu exit 1, no figures")])
rows = t.splitlines()
check("a header, a rule, a row a kernel", len(rows) == 4, t)
check("the figures' row: the tensor pipe, the three largest stalls (a figure that is no number skipped)",
      rows[2] == "| attention dK dV | 422.02 us | 35.26 | 50.68 |  | 165 | 18.21 | 5.16 | 31.40 | "
                 "math_pipe_throttle 1.75, barrier 1.20, wait 0.80 |", rows[2])
check("the header names every column", rows[0].count("|") == rows[2].count("|") and
      "tensor pipe %" in rows[0] and "stalls" in rows[0], rows[0])
check("a failed kernel's row says why, as wide as the others",
      rows[3].startswith("| attention dQ | ncu exit 1") and rows[3].count("|") == rows[2].count("|"), rows[3])
cmd = ncu.command("ncu", "build/benchmarks/gpu_step", r"fm::forward<")
check("ncu's command: demangled names, one launch, CSV, a short gpu_step",
      cmd[:2] == ["ncu", "--csv"] and "regex:fm::forward<" in cmd and cmd[cmd.index("--launch-count") + 1] == "1"
      and cmd[cmd.index("build/benchmarks/gpu_step") + 1:] == ["--micro-batch", "16", "--layers", "2", "--iters",
                                                               "1", "--warmup", "0"], cmd)
check("ncu's command asks for the tensor pipe and every stall reason by name",
      ncu.TENSOR in cmd[cmd.index("--metrics") + 1] and
      all(ncu.stall_metric(r) in cmd[cmd.index("--metrics") + 1].split(",") for r in ncu.STALLS), cmd)
check("... and, as the fallback, the sections alone",
      "--metrics" not in ncu.command("ncu", "build/benchmarks/gpu_step", r"fm::forward<", extra=False))
res = {"info": {"date": "2026-11-27", "seconds": 10, "budget_s": 60, "host": "h", "platform": "p", "cpus": 2,
                "device": "NVIDIA H200", "commit": "abc", "dirty": False},
       "counts": {"PASS": 1, "FAIL": 0, "SKIP": 0}, "ok": True,
       "steps": [{"name": "kernels", "status": "PASS", "seconds": 9, "summary": "ncu read 1 of 2 kernels",
                  "tail": ""}], "kernels": t}
md = report.markdown(res)
check("report.md: the verdict, the step, the kernels' table",
      md.startswith("# trident GPU check: PASS (1 passed, 0 failed, 0 skipped)") and
      "| kernels | PASS | 9 | ncu read 1 of 2 kernels |" in md and "## Kernels' hardware counters" in md and
      rows[2] in md, md)

# the benchmark's variants: each ';'-separated entry one run, its NAME=VALUE settings (','-separated)
# set at once over the check's environment, its time beside the default's
import gpu_check  # noqa: E402

c = gpu_check.Check.__new__(gpu_check.Check)
c.a = type("args", (), {"variants": "X=1;X=2,Y=3;bad", "build": "b", "skip": [], "only": []})()
c.env, c.results, c.left = {"BASE": "1"}, {}, lambda: 1000
envs = []


def fake_run(name, cmd, timeout=None, env=None):
    envs.append(dict(env))
    ms = 120.0 if env.get("Y") else 100.0  # (X=2,Y=3 slower than the default, the others faster)
    rec = ', "gemm_choices": 3, "gemm_choices_refused": 0' if "C" in env else ""
    rec += ', "cudnn_attention": 24, "cudnn_attention_refused": 0' if "D" in env else ""
    return 0, '$ gpu_step\n{"ms_per_iter": %.1f, "tokens_per_s": 5%s}' % (ms, rec)


BENCH = {"rows": [{"impl": "trident", "micro_batch": 8, "ms_per_iter": 110.0, "tokens_per_s": 4, "mfu": 0.40},
                  {"impl": "pytorch-eager", "tokens_per_s": 3.0},
                  {"impl": "pytorch-compile", "tokens_per_s": 4.5}]}
c.run = fake_run
writes = []  # the report as each row came (the rows written so far)
c.write = lambda: writes.append(c.results.get("bench_variants", "").count("\n"))
c.bench_variants(BENCH)
check("variants: the report written after each row, not only at the end", writes == [3, 4], writes)
check("variants: a run each, settings joined by ',' set at once, over the check's environment",
      envs == [{"BASE": "1", "X": "1"}, {"BASE": "1", "X": "2", "Y": "3"}], envs)
check("variants: a row each beside the default, with its MFU and its speed beside torch.compile's",
      "| X=1 | 100.00 | 5 | 44.0% | 1.11x | 1.10x |" in c.results.get("bench_variants", "") and
      "| X=2,Y=3 | 120.00 | 5 | 36.7% | 1.11x | 0.92x |" in c.results.get("bench_variants", "") and
      "| (the default) | 110.00 | 4 | 40.0% | 0.89x | 1.00x |" in c.results.get("bench_variants", ""), c.results)
check("variants: one faster entry, no combined run", "at once" not in c.results["bench_variants"], c.results)

# the recorded cuBLASLt choices (gpu_check_gemm.py): gemm_choose on the bench run's keys, its
# table into the report, its choices the first variant (with the plans that used them)
import tempfile  # noqa: E402
import gpu_check_gemm as gemm_choice  # noqa: E402

with tempfile.TemporaryDirectory() as d:
    c.logdir, c.out, c.results, envs = d, d, {}, []
    check("choose: no keys listed, nothing run", gemm_choice.choose(c) == "" and
          "listed no GEMM keys" in c.results["gemm_choose"], c.results)
    with open(gemm_choice.keys_path(c), "w") as f:
        f.write("key 1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0 0\n")
    ran = []

    def fake_choose(name, cmd, timeout=None, env=None, rows=("choice 1 2 3",)):
        ran.append(cmd)
        out = cmd[cmd.index("--out") + 1]
        with open(out, "w") as f:
            f.write("device 132 H200\ncublaslt 1\n" + "".join(r + "\n" for r in rows))
        return 0, ("$ gemm_choose\n| GEMM | beta |\n|---|---:|\n| 8 x 8 x 8; none, NT | 0 |\n\n"
                   "1 keys, 1 recorded, 0 failed; one call of each: ...\n")

    c.run = fake_choose
    v = gemm_choice.choose(c)
    check("choose: gemm_choose on the keys, its table kept, its file the variant",
          v == "TRIDENT_CUDA_GEMM_CHOICES=" + os.path.join(d, "gemm_choices.txt") and
          ran[0][ran[0].index("--keys") + 1] == gemm_choice.keys_path(c) and
          c.results["gemm_choose"].startswith("| GEMM | beta |") and "1 keys, 1 recorded" in c.results["gemm_choose"],
          (v, ran, c.results))
    c.run = lambda *a, **k: fake_choose(*a, rows=(), **k)
    check("choose: nothing recorded, no variant", gemm_choice.choose(c) == "", c.results)
    c.left = lambda: 100
    check("choose: too little time left, not run", gemm_choice.choose(c) == "" and
          "time budget" in c.results["gemm_choose"], c.results)
    c.left = lambda: 1000


c.run, envs = fake_run, []
c.bench_variants(BENCH, "C=choices.txt")
check("variants: the choices' run first, its row with the plans that used them",
      envs[0] == {"BASE": "1", "C": "choices.txt"} and
      "| C=choices.txt (3 plans recorded, 0 refused) | 100.00 | 5 | 44.0% | 1.11x | 1.10x |" in c.results["bench_variants"],
      (envs, c.results))
check("variants: the faster entries again at once, last (not the slower one)",
      len(envs) == 4 and envs[3] == {"BASE": "1", "C": "choices.txt", "X": "1"} and
      "| all the faster ones at once: C=choices.txt,X=1 (3 plans recorded" in c.results["bench_variants"],
      (envs, c.results))
c.a.variants, envs = "D=1", []
c.bench_variants(BENCH)
check("variants: a cuDNN run's row says how many attention calls cuDNN ran (gpu_step's counts)",
      "| D=1 (cuDNN ran 24 attention calls, fell back on 0) | 100.00 |" in c.results["bench_variants"],
      c.results)
c.a.variants, envs = "A=1;B=2;COMBINE;Z=3", []
c.bench_variants(BENCH)
check("variants: COMBINE runs the faster entries so far at once, there, before the later ones",
      [e.get("A", "") + e.get("B", "") + e.get("Z", "") for e in envs] == ["1", "2", "12", "3"], envs)


def fake_run3(name, cmd, timeout=None, env=None):
    envs.append(dict(env))
    ms = {("f", ""): 95.0, ("f", "64"): 99.0, ("", ""): 105.0}.get((env.get("A", ""), env.get("K", "")), 90.0)
    return 0, '$ gpu_step\n{"ms_per_iter": %.1f, "tokens_per_s": 5}' % ms


c.run, c.a.variants, envs = fake_run3, "A=f;A=f,K=64;COMBINE", []
c.bench_variants(BENCH)
check("variants: rivals (fused, fused with 64 rows) are not combined: the faster alone, no combined run",
      len(envs) == 2 and "at once" not in c.results["bench_variants"], (envs, c.results))
c.a.variants, envs = "A=f;A=f,K=64;Z=1;COMBINE", []
c.bench_variants(BENCH)
check("variants: the combined run takes the fastest of rivals and the others",
      len(envs) == 4 and envs[3] == {"BASE": "1", "A": "f", "Z": "1"}, envs)
c.run = fake_run
c.run, c.a.variants, envs = fake_run, "A=1;COMBINE;Z=1;Y=1", []
c.left = lambda: 100
c.bench_variants(BENCH)
check("variants: after COMBINE, the entries leave the kernels step its time (before it, not)",
      len(envs) == 1 and c.results["bench_variants"].count("not run: the time budget") == 2, (envs, c.results))
c.a.skip = ["kernels"]
envs = []
c.bench_variants(BENCH)
check("variants: ... unless the kernels step is skipped", len(envs) == 3, envs)
c.a.skip = []
c.left = lambda: 1000
c.a.variants = "X=1;X=2,Y=3;bad"
c.left = lambda: 30
c.bench_variants(BENCH, "C=choices.txt")
check("variants: no time left, each row says so", c.results["bench_variants"].count("not run: the time budget") == 3,
      c.results)
c.left = lambda: 1000
res["gemm_choose"] = "| GEMM | beta |"
check("report.md: the candidates' table", "## cuBLASLt's candidates" in report.markdown(res) and
      "| GEMM | beta |" in report.markdown(res), report.markdown(res))
print(f"{'FAIL' if failures else 'ok'}: {failures} failures")
sys.exit(1 if failures else 0)
