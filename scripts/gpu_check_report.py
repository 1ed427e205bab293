"""scripts/gpu_check.py's report.md: the results (results.json's object) as Markdown: the steps,
the failures' tails, the benchmark, the variants, the kernels' counters, the roofline
(Python's standard library only)."""


def markdown(res):
    i = res["info"]
    c = res["counts"]
    L = [f"# trident GPU check: {'PASS' if res['ok'] else 'FAIL'} "
         f"({c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped)", "",
         f"- date: {i['date']}, {i['seconds']:.0f} s of a {i['budget_s']} s budget",
         f"- machine: {i['host']}, {i['platform']}, {i['cpus']} CPUs"
         + (f", {i['device']}" if i.get("device") else ", no GPU"),
         f"- commit: {i['commit'] or 'unknown'}{' (with uncommitted changes)' if i['dirty'] else ''}"]
    if "toolkit" in res:
        tk = res["toolkit"]
        L.append(f"- CUDA: {tk['nvcc_version']} ({tk['nvcc']}); NCCL {tk['nccl_version']} ({tk['nccl']}); "
                 f"cuBLASLt {tk['cublasLt']}")
    if "bundle" in res:
        L.append(f"- bundle: {res['bundle']['manifest'][0]}")
    L += ["", "| step | status | seconds | summary |", "|---|---|---:|---|"]
    for s in res["steps"]:
        L.append(f"| {s['name']} | {s['status']} | {s['seconds']:.0f} | {s['summary'].replace('|', '/')} |")
    fails = [s for s in res["steps"] if s["status"] == "FAIL" and s["tail"]]
    if fails:
        L += ["", "## Failures"]
        for s in fails:
            L += ["", f"### {s['name']}", "", "```", s["tail"], "```"]
    if "bench" in res:
        L += ["", "## Benchmark (benchmarks/gpu_step.sh)", "", res["bench"]["markdown"]]
    if res.get("bench_variants"):
        L += ["", "trident's step with one setting changed (the same micro-batch, 10 iterations):", "",
              res["bench_variants"]]
    if res.get("gemm_choose"):
        L += ["", "## cuBLASLt's candidates for the benchmark's GEMMs (benchmarks/gemm_choose)", "",
              "Each GEMM key of the step (one call each; the recorded choices, gemm_choices.txt and "
              ".inc beside this report, are the variant TRIDENT_CUDA_GEMM_CHOICES above):", "",
              res["gemm_choose"]]
    if res.get("kernels"):
        L += ["", "## Kernels' hardware counters (ncu, gpu_step at micro-batch 16, 2 layers)", "",
              res["kernels"]]
    if res.get("roofline"):
        L += ["", "## Beside the roofline of the design (benchmarks/gpu_roofline.py)", "", "```",
              res["roofline"], "```"]
    L += ["", "Logs of every step: logs.tar.gz. Re-run: `scripts/gpu-check.sh --out DIR` "
          "(`--only tests`, `--only bench` for one part)."]
    return "\n".join(L) + "\n"
