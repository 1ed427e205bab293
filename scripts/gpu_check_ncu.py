"""The kernels' hardware counters for scripts/gpu_check.py's 'kernels' step (Python's standard
library only). ncu (Nsight Compute) profiles the first launch of each kernel named in KERNELS,
one short benchmarks/gpu_step run each (2 layers, micro-batch 16: the per-layer kernels at
their real shapes), with the sections that say what bounds a kernel: its speed of light,
occupancy, launch figures and warp states. table() makes one Markdown row a kernel of what
they read: time, SM and memory throughput as a share of the GPU's peak, registers, achieved
occupancy, cycles between a warp's instructions (latency-bound kernels show low throughputs
and many cycles), the tensor pipe's busy share and the three reasons warps wait most."""
import csv
import glob
import os
import shutil

# (label, ncu's regular expression over the demangled name[, the environment it runs under])
KERNELS = (("attention forward", r"fm::forward<"),
           ("attention dK dV", r"fm::backward_kv<"),
           ("attention dQ", r"fm::backward_q<"),
           ("attention dK dV dQ (fused)", r"fm::backward_kv<.*true>",
            {"TRIDENT_CUDA_ATTENTION_BWD": "fused"}),
           ("cross-entropy (fused)", r"xent_fused16_kernel"),
           ("norm backward (fused)", r"norm_backward_fused_kernel"))
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats")
# the tensor pipe's busy share, and why warps wait: each reason's warps stalled per issue
# (their sum is the cycles between a warp's instructions), asked for by name (--metrics)
TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
STALLS = ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle",
          "wait", "not_selected", "lg_throttle", "dispatch_stall", "no_instruction",
          "branch_resolving", "tex_throttle", "drain", "membar", "sleeping", "imc_miss", "misc")


def stall_metric(reason):
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


EXTRA = (TENSOR,) + tuple(stall_metric(r) for r in STALLS)
# (column, ncu's metric name)
COLUMNS = (("time", "Duration"), ("SM %", "Compute (SM) Throughput"),
           ("memory %", "Memory Throughput"), ("DRAM %", "DRAM Throughput"),
           ("registers", "Registers Per Thread"), ("occupancy %", "Achieved Occupancy"),
           ("cycles / issue", "Warp Cycles Per Issued Instruction"), ("tensor pipe %", TENSOR))


def find_ncu():
    """ncu's path: on PATH, under /opt/nvidia/nsight-compute, or CUDA's bin; None if none."""
    found = [shutil.which("ncu")] + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    found += ["/usr/local/cuda/bin/ncu"]
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def command(ncu, gpu_step, pattern, extra=True):
    """ncu on gpu_step for the first launch whose demangled name matches pattern, CSV out;
    extra: the tensor pipe's and the stall reasons' metrics too."""
    cmd = [ncu, "--csv", "--page", "details", "--kernel-name-base", "demangled", "-k",
           f"regex:{pattern}", "--launch-count", "1"]
    for s in SECTIONS:
        cmd += ["--section", s]
    if extra:
        cmd += ["--metrics", ",".join(EXTRA)]
    return cmd + [gpu_step, "--micro-batch", "16", "--layers", "2", "--iters", "1", "--warmup", "0"]


def metrics(text):
    """{metric name: value text} of the first kernel in ncu's CSV details (other lines, the
    program's own and ncu's ==PROF== ones, are skipped); {} when none."""
    rows = [r for r in csv.reader(l for l in text.splitlines() if l.startswith('"'))]
    if len(rows) < 2 or "Metric Name" not in rows[0]:
        return {}
    head = rows[0]
    name, value, kernel = head.index("Metric Name"), head.index("Metric Value"), head.index("Kernel Name")
    unit = head.index("Metric Unit")
    out = {}
    for r in rows[1:]:
        if len(r) == len(head):
            out.setdefault("Kernel Name", r[kernel])
            out.setdefault(r[name], r[value] + (f" {r[unit]}" if r[name] == "Duration" else ""))
    return out


def top_stalls(m, n=3):
    """The n reasons warps wait most, 'reason warps' from the largest ('' without them)."""
    found = []
    for r in STALLS:
        try:
            found.append((float(m[stall_metric(r)]), r))
        except (KeyError, ValueError):
            pass
    found.sort(reverse=True)
    return ", ".join(f"{r} {v:.2f}" for v, r in found[:n])


def table(found):
    """A Markdown table of [(label, metrics dict or an error text)]."""
    lines = ["| kernel | " + " | ".join(c for c, _ in COLUMNS) + " | stalls (warps an issue) |",
             "|---|" + "---:|" * len(COLUMNS) + "---|"]
    for label, m in found:
        if isinstance(m, str):
            lines.append(f"| {label} | {m} |" + " |" * len(COLUMNS))
        else:
            lines.append(f"| {label} | " + " | ".join(m.get(k, "") for _, k in COLUMNS) +
                         f" | {top_stalls(m)} |")
    return "\n".join(lines)


def step(c):
    """gpu_check's 'kernels' step on its Check c: (status, summary, detail); the table goes to
    c.results['kernels']. SKIP without a GPU or ncu (the counters inform, they never fail)."""
    if c.status("probe") != "PASS":
        return "SKIP", c.no_gpu_reason or "the probe found no usable GPU", ""
    tool = find_ncu()
    if not tool:
        return "SKIP", "no ncu (Nsight Compute) on this machine", ""
    exe = os.path.join(c.a.build, "benchmarks", "gpu_step")
    found = []
    for label, pattern, *env in KERNELS:
        run_env = dict(c.env, **env[0]) if env else None
        if c.left() < 30:
            found.append((label, "not run: the time budget ran out"))
            continue
        m = {}
        for extra in (True, False):  # (an ncu that refuses a metric's name: the sections alone)
            if m or c.left() < 30:
                break
            rc, out = c.run("kernels", command(tool, exe, pattern, extra),
                            timeout=min(120, c.left() - 10), env=run_env)
            m = metrics(c.last_output(out)) if rc == 0 else {}
        found.append((label, m or f"ncu exit {rc}, no figures (logs/kernels.log)"))
    c.results["kernels"] = table(found)
    n = sum(1 for _, m in found if isinstance(m, dict))
    return ("PASS" if n else "SKIP"), f"ncu read {n} of {len(found)} kernels (the report's table)", ""
