#!/usr/bin/env python3
"""The GPU verification in one command (scripts/gpu-check.sh runs this; stdlib only).

From the repository root of a GPU machine, with the bundle of scripts/gpu-bundle.sh beside it
(.gpu/carry/trident-gpu-bundle.tar.gz, unpacked here into .gpu/prefix): finds nvcc, cuBLASLt
and NCCL (a CUDA toolkit, or the pip wheels' headers and libraries), builds trident with CUDA
against the bundle alone (no apt, no pip, no network), runs every test of the 'cuda' suite
(tests/cuda: op parity, GPT loss, NCCL, training, issue 15's checks), then
benchmarks/gpu_step.sh (and benchmarks/gemm_choose on its GEMMs: gpu_check_gemm.py), then ncu on the main kernels (gpu_check_ncu.py), then
benchmarks/gemm_shapes.sh (the planner's GEMM table, gemm_shapes.inc in --out). Each step is
PASS, FAIL (with the failing output's tail) or SKIP (with the reason); a failure never stops
the steps after it. The report (report.md),
every figure (results.json) and the logs (logs.tar.gz) go to --out (default gpu-results/),
rewritten after every step, so a run cut short still leaves its report. Here: the steps, the
report's data and the command line; the search for the CUDA pieces is gpu_check_cuda.py's, the
report's Markdown gpu_check_report.py's.

usage: scripts/gpu-check.sh [--out DIR] [--bundle DIR] [--build DIR] [--budget SECONDS]
                            [--skip STEP,...] [--only STEP,...] [--jobs N] [--commit HASH]
                            [--targets NINJA_TARGET,...] [--buildtype release|plain]
  --bundle  the bundle folder (default .gpu); --build the build folder (default build-gpu)
  --budget  seconds for the whole run (default 1200); steps that would not fit are SKIPped
            and a running one is stopped at the end of the budget
  --only    among configure, build, tests, bench, kernels, gemm (bundle, cuda-toolkit, gpu and
            probe always run: they set up and find what the others need), e.g. --only bench
            after a full run
  --skip    any step names: bundle, cuda-toolkit, gpu, configure, build, probe, tests, bench,
            kernels, gemm
Exit 0 when no step FAILed (SKIPs included: a machine without a GPU SKIPs every GPU step), 1
otherwise."""
import argparse
import datetime
import io
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # scripts/, however this is run
import gpu_check_cuda as cuda  # noqa: E402  (where nvcc, cudart, cuBLASLt and NCCL are)
import gpu_check_gemm as gemm_choice  # noqa: E402  (the recorded cuBLASLt choices)
import gpu_check_variants as variants  # noqa: E402  (the benchmark's variants)
import gpu_check_ncu as ncu  # noqa: E402  (the kernels' hardware counters)
import gpu_check_report as report  # noqa: E402  (report.md)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("bundle", "cuda-toolkit", "gpu", "configure", "build", "probe", "tests", "bench", "kernels", "gemm")
def meson_test_name(line):
    """A test's own name from meson's listing or JSON log, whatever the meson version writes:
    'trident:cuda / cuda-ops' (older), 'cuda - trident:cuda-ops' (newer) or 'cuda-ops'; None for
    a line that names no test."""
    s = line.strip()
    if not s or " " in s.replace(" / ", "\0").replace(" - ", "\0"):
        return None
    s = re.split(r" / | - ", s)[-1]
    return s.split(":")[-1] or None


SELECTABLE = ("configure", "build", "tests", "bench", "kernels", "gemm")  # what --only chooses among
# The tests of the cuda suite this check expects to find (tests/cuda/meson.build); one that
# is missing from the build is a FAIL ("not registered"): e.g. no python3 at configure time.
EXPECTED_TESTS = ("cuda-host-logic", "cuda-nccl-host-logic", "cuda-ops", "cuda-gpt-loss",
                  "cuda-nccl-2", "cuda-nccl-4-staged", "cuda-nccl-8", "cuda-nccl-hang", "cuda-train", "cuda-check-fp32-vs-cpu",
                  "cuda-check-bf16-vs-fp32-demo", "cuda-check-staged-3d-fp32", "cuda-check-checkpoint",
                  "cuda-check-families", "cuda-nccl-ordered-2", "cuda-fused-ops",
                  "cuda-fused-ops-blocked", "cuda-ops-fused-backward", "cuda-gpt-loss-fused-backward",
                  "cuda-gemm-choose", "cuda-attention-cudnn", "cuda-gpt-loss-cudnn",
                  "cuda-ops-moe-refusal", "cuda-ops-dropout", "cuda-attention-rows",
                  "cuda-check-cp")
TAIL_LINES = 40
KERNELS_RESERVE_S = 120  # ncu on the main kernels, which the switches back's variants leave it
BENCH_RESERVE_S = 330  # the benchmark's time (three 124M runs, torch.compile's compilation, gemm_choose,
#                        the first variants)


def tail(text, n=TAIL_LINES):
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-n:])


class Check:
    def __init__(self, a):
        self.a = a
        self.t0 = time.time()
        self.out = os.path.abspath(a.out)
        self.logdir = os.path.join(os.path.abspath(a.build) + "-check-logs")
        shutil.rmtree(self.logdir, ignore_errors=True)
        os.makedirs(self.logdir)
        os.makedirs(self.out, exist_ok=True)
        self.steps = []
        self.info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                     "host": socket.gethostname(), "platform": platform.platform(),
                     "cpus": os.cpu_count(), "python": sys.version.split()[0],
                     "commit": a.commit or self.git("rev-parse", "HEAD"), "dirty": bool(self.git("status", "--porcelain",
                                                                                        "--untracked-files=no")),
                     "budget_s": a.budget}
        self.results = {}  # what steps found: toolkit, device, tests, bench
        self.env = dict(os.environ)
        self.prefix = None
        self.cudnn_include = None  # cuDNN's own headers where its library was found (cuda-toolkit)
        self.no_gpu_reason = None
        self.compute_cap = None  # the GPU's, "90" on an H100 (gpu), for the build's -gencode

    def git(self, *args):
        try:
            p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
            return p.stdout.strip() if p.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    def left(self):
        return self.a.budget - (time.time() - self.t0)

    # ---- running commands
    def run(self, name, cmd, timeout=None, env=None, cwd=ROOT):
        """Run cmd with stdout+stderr into logs/NAME.log; (exit status, output). 124 when the
        time ran out (the whole process group is killed)."""
        timeout = max(1, min(timeout or self.left(), self.left()))
        log = os.path.join(self.logdir, name + ".log")
        with open(log, "ab") as f:
            f.write(f"$ {' '.join(map(str, cmd))}\n".encode())
            f.flush()
            try:
                p = subprocess.Popen(cmd, cwd=cwd, env=env or self.env, stdout=f, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                f.write(f"cannot run: {e}\n".encode())
                return 127, f"cannot run {cmd[0]}: {e}"
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                f.write(f"\n[gpu-check: stopped after {timeout:.0f} s (time budget)]\n".encode())
                rc = 124
        with open(log, errors="replace") as f:
            return rc, f.read()

    # ---- steps
    def asked(self, name):
        """--skip drops any step; --only selects among configure, build, tests and bench (the
        others set up what they need and always run)."""
        if name in self.a.skip:
            return False
        return not self.a.only or name in self.a.only or name not in SELECTABLE

    def step(self, name, fn, needs=()):
        if not self.asked(name):
            return self.record(name, "SKIP", "not asked for (--only / --skip)", 0)
        for n in needs:
            s = self.status(n)
            # a step left out on purpose is fine when the build folder it makes is there
            built = os.path.isfile(os.path.join(self.a.build, "build.ninja"))
            if s != "PASS" and not (not self.asked(n) and built):
                return self.record(name, "SKIP", f"{n} did not pass" + (f" ({s})" if s else ""), 0)
        if self.left() < 5:
            return self.record(name, "SKIP", "time budget spent", 0)
        print(f"== {name} ...", flush=True)
        t = time.time()
        try:
            status, summary, detail = fn()
        except Exception as e:  # a bug here must not lose the report
            import traceback
            status, summary, detail = "FAIL", f"gpu-check error: {e}", traceback.format_exc()
        self.record(name, status, summary, time.time() - t, detail)
        return status

    def record(self, name, status, summary, seconds, detail=""):
        self.steps.append({"name": name, "status": status, "seconds": round(seconds, 1), "summary": summary,
                           "tail": tail(detail) if status == "FAIL" else ""})
        print(f"   {status:4} {name} ({seconds:.0f} s): {summary}", flush=True)
        if status == "FAIL" and detail:
            print("     | " + tail(detail, 15).replace("\n", "\n     | "), flush=True)
        self.write()
        return status

    def status(self, name):
        for s in self.steps:
            if s["name"] == name:
                return s["status"]
        return None

    # 1. the bundle
    def bundle(self):
        bdir = os.path.abspath(self.a.bundle)
        prefix = os.path.join(bdir, "prefix")
        archive = os.path.join(bdir, "carry", "trident-gpu-bundle.tar.gz")
        unpacked = ""
        if os.path.isfile(archive) and (not os.path.isfile(os.path.join(prefix, "MANIFEST")) or
                                        os.path.getmtime(archive) > os.path.getmtime(os.path.join(prefix, "MANIFEST"))):
            shutil.rmtree(prefix, ignore_errors=True)
            with tarfile.open(archive) as t:
                try:
                    t.extractall(bdir, filter="tar")
                except TypeError:  # Python < 3.12 has no filter argument
                    t.extractall(bdir)
            os.utime(os.path.join(prefix, "MANIFEST"))
            unpacked = f"unpacked {os.path.relpath(archive, ROOT)}; "
        if not os.path.isfile(os.path.join(prefix, "MANIFEST")):
            return ("FAIL", f"no bundle in {self.a.bundle}: run scripts/gpu-bundle.sh on a Debian 12 machine with "
                    f"network and carry {self.a.bundle}/carry (the build falls back to this machine's packages)", "")
        manifest = open(os.path.join(prefix, "MANIFEST")).read()
        modules = next((l.split()[1:] for l in manifest.splitlines() if l.startswith("modules ")), [])
        pkgconf = os.path.join(prefix, "bin", "pkg-config")
        env = dict(self.env, PKG_CONFIG_LIBDIR=os.path.join(prefix, "lib", "pkgconfig"), PKG_CONFIG_PATH="")
        versions, bad = {}, []
        for m in modules:
            rc, out = self.run("bundle", [pkgconf, "--modversion", m], timeout=30, env=env)
            if rc == 0:
                versions[m] = out.strip().splitlines()[-1]
            else:
                bad.append(m)
        self.results["bundle"] = {"manifest": manifest.splitlines()[:2], "modules": versions}
        if bad:
            return "FAIL", f"modules that do not resolve from the bundle: {', '.join(bad)}", self.read_log("bundle")
        self.prefix = prefix
        self.env.update(PKG_CONFIG=pkgconf, PKG_CONFIG_LIBDIR=os.path.join(prefix, "lib", "pkgconfig"),
                        PKG_CONFIG_PATH="", UCX_MODULE_DIR=os.path.join(prefix, "lib", "ucx"))
        corpus = os.path.join(prefix, "share", "fortunes")
        if os.path.isdir(corpus):
            self.env["TRIDENT_DEMO_CORPUS"] = corpus
        return "PASS", unpacked + ", ".join(f"{m} {v}" for m, v in versions.items()), ""

    def read_log(self, name):
        try:
            return open(os.path.join(self.logdir, name + ".log"), errors="replace").read()
        except OSError:
            return ""

    # 2. the CUDA toolkit: nvcc, cudart, cuBLASLt, NCCL from wherever they are (gpu_check_cuda.py)
    def cuda_toolkit(self):
        nvcc = cuda.find_nvcc()
        roots = cuda.cuda_roots(nvcc)
        found, missing = cuda.find_libraries(roots)
        if not nvcc:
            missing.insert(0, "nvcc")
        detail = "searched: " + ", ".join(roots)
        if missing:
            gpu = os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi")
            msg = f"not found: {', '.join(missing)}"
            return ("FAIL" if gpu else "SKIP"), msg + ("" if gpu else " (and no GPU here)"), detail
        rc, out = self.run("cuda-toolkit", [nvcc, "--version"], timeout=60)
        nvcc_version = next((l for l in out.splitlines() if "release" in l), "?").strip()
        nccl_version = cuda.nccl_version(found["nccl"]["include"])
        tk = cuda.toolkit_folder(self.a.build, found)
        self.toolkit = tk
        self.lib_dirs = list(dict.fromkeys([os.path.join(tk, "lib64")] +
                                           [os.path.dirname(os.path.realpath(found[k]["lib"])) for k in found]))
        self.env["PATH"] = os.path.dirname(os.path.realpath(nvcc)) + os.pathsep + self.env.get("PATH", "")
        self.results["toolkit"] = {"nvcc": nvcc, "nvcc_version": nvcc_version, "nccl_version": nccl_version,
                                   **{k: v["lib"] for k, v in found.items()}, "folder": tk}
        where = "; ".join(f"{k} {v['lib']}" for k, v in found.items())
        dnn = cuda.find_cudnn(roots)  # optional: TRIDENT_CUDA_ATTENTION=cudnn's library
        if dnn:
            self.lib_dirs.append(os.path.dirname(os.path.realpath(dnn[0])))
            self.results["toolkit"]["cudnn"] = dnn[0]
            self.cudnn_include = dnn[1]
        nvrtc = cuda.find_nvrtc(roots)  # cuDNN's run-time compiled engines
        if nvrtc:
            self.lib_dirs.append(os.path.dirname(os.path.realpath(nvrtc)))
        where += f"; cudnn {dnn[0] if dnn else 'not found (cuDNN attention variants fall back)'}"
        where += f"; nvrtc {nvrtc or 'not found'}"
        return "PASS", f"nvcc {nvcc} ({nvcc_version}); NCCL {nccl_version}; {where}", detail

    # 3. the GPU, as the driver sees it (the probe after the build decides)
    def gpu(self):
        smi = shutil.which("nvidia-smi")
        if not smi:
            self.no_gpu_reason = "no nvidia-smi: no NVIDIA driver on this machine"
            return "SKIP", self.no_gpu_reason, ""
        rc, out = self.run("gpu", [smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                   "--format=csv,noheader"], timeout=60)
        lines = [l for l in out.splitlines()[1:] if l.strip()]
        if rc != 0 or not lines:
            self.no_gpu_reason = f"nvidia-smi found no GPU: {tail(out, 3)}"
            return "SKIP", self.no_gpu_reason, out
        self.results["gpu"] = lines
        self.info["device"] = lines[0].split(",")[0].strip()
        # its compute capability (a query of its own: an older driver that lacks the field
        # leaves the build on meson's default targets instead of failing this step)
        rc, cap = self.run("gpu", [smi, "--query-gpu=compute_cap", "--format=csv,noheader"], timeout=60)
        m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", cap.splitlines()[-1] if rc == 0 and cap.strip() else "")
        if m:
            self.compute_cap = m.group(1) + m.group(2)
        return "PASS", "; ".join(lines) + (f"; compute capability {m.group(1)}.{m.group(2)}" if m else ""), ""

    # 4-5. configure and build
    def configure(self):
        build = self.a.build
        # werror off: the image's gcc may be newer than Debian 12's and warn about new things;
        # the build step reports the warnings instead of stopping on the first
        opts = [f"-Dbuildtype={self.a.buildtype}", "-Dcuda=enabled", f"-Dcudatoolkit={self.toolkit}", "-Dwerror=false"]
        note = ""
        # machine code for this GPU alone (nvcc's front end runs once per target: the default's
        # compute_80 PTX for other GPUs doubles the build's longest compile, flash_mma.cu)
        arch = self.a.gencode or (f"arch=compute_{self.compute_cap},code=sm_{self.compute_cap}"
                                  if self.compute_cap else "")
        if arch:
            opts.append("-Dgencode=" + json.dumps(arch.split(";")))
            note = f"; nvcc -gencode {' '.join(arch.split(';'))}"
        if not os.path.exists("/usr/bin/python3") and shutil.which("python3") and os.geteuid() == 0:
            # the tests' meson files run their scripts with /usr/bin/python3 (stdlib only)
            os.symlink(shutil.which("python3"), "/usr/bin/python3")
            note += f"; made /usr/bin/python3 -> {shutil.which('python3')} for the tests' meson files"
        # RPATH (not RUNPATH): the bundle's and CUDA's libraries for every library loaded
        # on the way (OpenBLAS's libgfortran too), without LD_LIBRARY_PATH
        rpath = [os.path.join(self.prefix, "lib")] if self.prefix else []
        rpath += self.lib_dirs
        # (meson.build gives these to the C++ link too: with the cuDNN attention's C++ file in
        # the library, meson links every program with g++)
        opts.append("-Dc_link_args=" + ",".join(["-Wl", "--disable-new-dtags"] + [f"-rpath,{d}" for d in rpath]))
        # cuDNN's headers and its frontend's: the bundle's cudnn/include (gpu-bundle.sh), then
        # the cuDNN wheel's own (meson.build builds the cuDNN attention where both are found)
        dnn_inc = [d for d in (os.path.join(self.prefix, "cudnn", "include") if self.prefix else "",
                               self.cudnn_include or "") if d and os.path.isdir(d)]
        if dnn_inc:
            opts.append("-Dcudnn_include=" + ",".join(dnn_inc))
        if os.path.isfile(os.path.join(build, "build.ninja")):
            cmd = ["meson", "setup", "--reconfigure", build] + opts
        else:
            cmd = ["meson", "setup", build] + opts
        rc, out = self.run("configure", cmd, timeout=300)
        if rc != 0:
            return "FAIL", "meson setup failed", out
        m = re.search(r"CUDA backend\s*:\s*(\S+)", out)
        d = re.search(r"cuDNN attention\s*:\s*(\S+)", out)
        return "PASS", f"{build}: CUDA backend {m.group(1) if m else '?'}, cuDNN attention {d.group(1) if d else '?'}{note}", ""

    def build(self):
        targets = [t for t in self.a.targets.split(",") if t] if self.a.targets else []
        rc, out = self.run("build", ["ninja", "-C", self.a.build] + (["-j", str(self.a.jobs)] if self.a.jobs else [])
                           + targets, timeout=900)
        if rc == 124:
            return "FAIL", "the time budget ran out during the build", out
        if rc != 0:
            errs = [l for l in out.splitlines() if re.search(r"(^|\s|:)(fatal )?error:|^ERROR", l)][:10]
            return "FAIL", f"ninja failed ({rc})" + (f": {errs[0].strip()[:200]}" if errs else ""), out
        warnings = sorted(set(l.strip() for l in out.splitlines() if "warning:" in l))
        libs = self.check_libraries()
        summary = "built; " + (libs or "every library of trident resolves to the bundle, CUDA or the system's base")
        if warnings:
            summary += f"; {len(warnings)} compiler warning(s), e.g. {warnings[0][:160]} (build.log)"
        return ("PASS" if not libs else "FAIL"), summary, ""

    def check_libraries(self):
        """'' when every library trident needs resolves (ldd), else what does not."""
        rc, out = self.run("build", ["ldd", os.path.join(self.a.build, "trident")], timeout=60)
        bad = [l.strip() for l in out.splitlines() if "not found" in l]
        return f"not found: {'; '.join(bad)}" if bad else ""

    # 6. the probe
    def probe(self):
        exe = os.path.join(self.a.build, "tests", "cuda", "cuda_probe")
        rc, out = self.run("probe", [exe], timeout=120)
        line = tail(out.split("\n", 1)[-1], 1)
        if rc == 0:
            self.results["probe"] = line
            return "PASS", line, ""
        if rc == 77:
            self.no_gpu_reason = line.replace("SKIP: ", "")
            return "SKIP", line.replace("SKIP: ", ""), ""
        return "FAIL", f"cuda_probe exit {rc}", out

    # 7. the tests of the cuda suite, one step each
    def tests(self):
        build = self.a.build
        rc, out = self.run("tests", ["meson", "test", "-C", build, "--list", "--suite", "cuda", "--no-rebuild"],
                           timeout=120)
        listed = [n for n in (meson_test_name(l) for l in out.splitlines()) if n]
        for name in EXPECTED_TESTS:
            if name not in listed:
                self.record(f"test:{name}", "FAIL", "not registered in this build (tests/cuda/meson.build: "
                            "is /usr/bin/python3 or python3 there at configure time?)", 0)
        want_bench = "bench" not in self.a.skip and (not self.a.only or "bench" in self.a.only)
        limit = self.left() - (BENCH_RESERVE_S if want_bench else 0)
        if limit < 60:
            limit = max(self.left() - 10, 30)
        logbase = "gpucheck"
        jlog = os.path.join(build, "meson-logs", logbase + ".json")
        if os.path.exists(jlog):
            os.remove(jlog)
        rc, out = self.run("tests", ["meson", "test", "-C", build, "--suite", "cuda", "--no-rebuild",
                                     "--print-errorlogs", "--logbase", logbase,
                                     "--num-processes", str(min(4, os.cpu_count() or 1))], timeout=limit)
        done = []
        if os.path.exists(jlog):
            for line in open(jlog):
                try:
                    done.append(json.loads(line))
                except ValueError:
                    pass
        seen = set()
        for t in done:
            name = meson_test_name(t.get("name", "?")) or t.get("name", "?")
            seen.add(name)
            res, dur, text = t.get("result", "?"), t.get("duration", 0), t.get("stdout", "") or ""
            if t.get("stderr"):
                text += "\n" + t["stderr"]
            if res == "OK":
                status, summary = "PASS", self.summary_of(text) or "ok"
            elif res == "SKIP":
                m = re.search(r"^SKIP:?\s*(.*)$", text, re.M)
                status, summary = "SKIP", (m.group(1) if m else "exit 77") if text else "exit 77"
            else:
                status = "FAIL"
                summary = ("" if res == "FAIL" else f"{res}: ") + (self.first_failure(text) or
                                                                     f"exit {t.get('returncode')}")
            self.steps.append({"name": f"test:{name}", "status": status, "seconds": round(dur, 1),
                               "summary": summary[:300], "tail": tail(text) if status == "FAIL" else ""})
            print(f"   {status:4} test:{name} ({dur:.0f} s): {summary[:160]}", flush=True)
        for name in listed:
            if name not in seen:
                self.steps.append({"name": f"test:{name}", "status": "FAIL" if rc == 124 else "SKIP",
                                   "seconds": 0, "summary": "not run: the time budget ran out" if rc == 124
                                   else "not run (see tests.log)", "tail": ""})
        self.results["tests"] = {t.get("name", "?"): t.get("result") for t in done}
        if os.path.isfile(os.path.join(build, "meson-logs", logbase + ".txt")):
            shutil.copy(os.path.join(build, "meson-logs", logbase + ".txt"), os.path.join(self.logdir, "meson-test.txt"))
        if rc == 124:
            return "FAIL", f"stopped at the time budget after {len(done)} of {len(listed)} tests", out
        if not done:
            return "FAIL", f"meson test ran no test (exit {rc})", out
        # the suite ran: each test is its own step above (a failure counts there, once)
        fails = [t for t in done if t.get("result") not in ("OK", "SKIP")]
        skips = [t for t in done if t.get("result") == "SKIP"]
        return "PASS", (f"the suite ran: {len(done)} tests, {len(done) - len(fails) - len(skips)} passed, "
                        f"{len(fails)} failed, {len(skips)} skipped"), ""

    @staticmethod
    def last_output(out):
        """The last command's output in a run() log (a log holds each of its step's runs, each
        after its "$ command" line)."""
        return out[out.rfind("$ "):]

    @staticmethod
    def summary_of(text):
        oks = [l.strip() for l in text.splitlines() if l.startswith("ok ")]
        return "; ".join(oks)[:300] if oks else ""

    @staticmethod
    def first_failure(text):
        # a crash report first (tests/cuda/ops_check.c: "CRASH: SIGSEGV during check group: ...")
        for l in text.splitlines():
            if l.startswith("CRASH:"):
                return l.strip()[:240]
        for l in text.splitlines():
            if l.startswith("FAIL") or "Error" in l or "error:" in l:
                return l.strip()[:240]
        return ""

    # 8. the benchmark
    def bench(self):
        if self.status("probe") != "PASS":
            return "SKIP", self.no_gpu_reason or "the probe found no usable GPU", ""
        jout = os.path.join(self.logdir, "bench.json")
        env = dict(self.env, TRIDENT_CUDA_GEMM_KEYS=gemm_choice.keys_path(self))  # (its GEMMs)
        rc, out = self.run("bench", [os.path.join(ROOT, "benchmarks", "gpu_step.sh"), "--build", self.a.build,
                                     "--json-out", jout, "--profile"], timeout=self.left() - 5, env=env)
        if rc == 77:
            return "SKIP", tail(out, 1).replace("SKIP: ", ""), ""
        if rc != 0 or not os.path.isfile(jout):
            return "FAIL", f"benchmarks/gpu_step.sh exit {rc}", out
        b = json.load(open(jout))
        self.results["bench"] = b
        self.roofline(jout, b)
        self.write()  # (the benchmark kept should the device's time end during what follows)
        self.bench_variants(b, gemm_choice.choose(self))
        t = b["targets"]
        vs = f"{t['vs_compile']:.2f}x torch.compile" if t.get("vs_compile") else "torch.compile failed"
        mfu = f"MFU {100 * t['mfu']:.1f}%" if t.get("mfu") is not None else "MFU n/a"
        return "PASS", f"trident {t['trident_tokens_per_s']:.0f} tokens/s, {vs}, {mfu}; targets " + \
            ("met" if t["met"] else "NOT met (see the per-op split)"), ""

    def bench_variants(self, b, first=""):
        """trident's step again with settings changed (first, then --variants): gpu_check_variants.py"""
        variants.run(self, b, first, keep=KERNELS_RESERVE_S if self.asked("kernels") else 0)

    def roofline(self, jout, b):
        """benchmarks/gpu_roofline.py's expectation beside the measured per-op split (issue 24),
        for the preset of this GPU and the benchmark's micro-batch; kept in the report."""
        name = (self.info.get("device") or "").upper()
        preset = "h200" if "H200" in name else "a100-80gb" if "A100" in name else "h100-80gb"
        row = next((r for r in b.get("rows", []) if r.get("impl") == "trident"), {})
        cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_roofline.py"), "--preset", preset,
               "--measured", jout]
        if row.get("micro_batch"):
            cmd += ["--micro-batch", str(row["micro_batch"])]
        if row.get("seq"):
            cmd += ["--seq", str(row["seq"])]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
        except (OSError, subprocess.SubprocessError) as e:
            self.results["roofline"] = f"benchmarks/gpu_roofline.py did not run: {e}"
            return
        self.results["roofline"] = (r.stdout + r.stderr).strip() if r.returncode == 0 else \
            f"benchmarks/gpu_roofline.py exit {r.returncode}: {tail(r.stderr, 5)}"

    # 9. the kernels' hardware counters (gpu_check_ncu.py: ncu on the attention, cross-entropy
    # and norm kernels of a short gpu_step)
    def kernels(self):
        return ncu.step(self)

    # 10. the planner's GEMM table from this GPU (issue 22): benchmarks/gemm_shapes.sh writes the
    # rows plan/gemm/PRESET.inc holds into the report folder (gemm_shapes.inc, .log)
    def gemm(self):
        if self.status("probe") != "PASS":
            return "SKIP", self.no_gpu_reason or "the probe found no usable GPU", ""
        rc, out = self.run("gemm", [os.path.join(ROOT, "benchmarks", "gemm_shapes.sh"), "--build", self.a.build,
                                    "--out", os.path.join(self.out, "gemm_shapes.inc")], timeout=self.left() - 5)
        if rc == 77:
            return "SKIP", tail(out, 1).replace("SKIP: ", ""), ""
        if rc != 0:
            return "FAIL", f"benchmarks/gemm_shapes.sh exit {rc}", out
        return "PASS", next((l for l in out.splitlines() if l.startswith("gemm_shapes:")), tail(out, 1)), ""

    # ---- the report
    def write(self):
        counts = {s: sum(1 for x in self.steps if x["status"] == s) for s in ("PASS", "FAIL", "SKIP")}
        res = {"info": dict(self.info, seconds=round(time.time() - self.t0, 1)), "counts": counts,
               "ok": counts["FAIL"] == 0, "steps": self.steps, **self.results}
        tmp = os.path.join(self.out, "results.json.tmp")
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, os.path.join(self.out, "results.json"))
        tmp = os.path.join(self.out, "report.md.tmp")
        with open(tmp, "w") as f:
            f.write(report.markdown(res))
        os.replace(tmp, os.path.join(self.out, "report.md"))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            t.add(self.logdir, arcname="logs")
        with open(os.path.join(self.out, "logs.tar.gz"), "wb") as f:
            f.write(buf.getvalue())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-results")
    ap.add_argument("--bundle", default=".gpu")
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--budget", type=float, default=1200)
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--variants",
                    default="TRIDENT_CUDA_ATTENTION=cudnn;TRIDENT_CUDA_ATTENTION=cudnn-backward;"
                    "TRIDENT_CUDA_ATTENTION_BWD=fused;TRIDENT_CUDA_ATTENTION_BWD=fused,TRIDENT_CUDA_ATTENTION_KV=64;"
                    "COMBINE;TRIDENT_CUDA_ATTENTION=cudnn-nondeterministic;"
                    "TRIDENT_CUDA_XENT=two-pass;TRIDENT_CUDA_NORM_BACKWARD=two-pass;TRIDENT_CUDA_GEMM=fast;"
                    "TRIDENT_CUDA_HEAD=fp32;TRIDENT_CUDA_EPILOGUE=0;TRIDENT_CUDA_ACTIVATIONS=fp32",
                    help="after the benchmark (and the recorded GEMM choices, when gemm_choose found faster "
                    "algorithms), trident's step again with each NAME=VALUE set, ';'-separated "
                    "(NAME=VALUE,NAME=VALUE: both at once; COMBINE: the entries so far that beat the default, "
                    "all at once) (default: the candidates for the defaults first: cuDNN's attention (its "
                    "deterministic backward), both passes or the backward only; the attention backward as one "
                    "kernel (dK dV and dQ, S and dP computed once) instead of two, also with 64 query rows a step "
                    "(64 rows alone, TRIDENT_CUDA_ATTENTION_KV=64, measured the same as 32 on the H200); "
                    "then cuDNN's attention with its non-deterministic backward (PyTorch's and Megatron-LM's "
                    "default: what trident's determinism costs; never in the combined run); "
                    "then the switches back whose kernels changed since they were last timed or that cost the most: "
                    "the head's cross-entropy in two ops instead of the fused one; the norms' backward in two passes; "
                    "cuBLASLt's fast-bf16 mode instead of staging; the head's logits in fp32; the unfused linear "
                    "layers; the MLP's and the norms' tensors in fp32. Others: TRIDENT_CUDA_ATTENTION=wmma, "
                    "TRIDENT_CUDA_ATTENTION_OUT=fp32, TRIDENT_CUDA_ATTENTION_IN=fp32, TRIDENT_CUDA_GELU=separate)")
    ap.add_argument("--targets", default="", help="ninja targets of the build step, comma-separated "
                    "(default: everything; tests/gpu_bundle builds trident and the probe only)")
    ap.add_argument("--gencode", default="", help="nvcc -gencode targets of the build, ';'-separated "
                    "(default: the GPU's own compute capability, e.g. arch=compute_90,code=sm_90 on an "
                    "H100; with no GPU, meson's default: sm_90 and compute_80 PTX)")
    ap.add_argument("--buildtype", default="release", choices=["release", "plain"],
                    help="meson's buildtype of the build step (default release; tests/gpu_bundle builds "
                    "plain: its C at -O0, a third of the compile time, the .cu files at nvcc's -O3 either way)")
    ap.add_argument("--commit", default="", help="the commit to name in the report (where the tree has no .git)")
    a = ap.parse_args()
    for k in ("only", "skip"):
        names = [n for n in getattr(a, k).split(",") if n]
        unknown = [n for n in names if n not in STEPS]
        if unknown:
            ap.error(f"--{k}: unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEPS)}")
        setattr(a, k, names)
    if any(n not in SELECTABLE for n in a.only):
        ap.error(f"--only chooses among {', '.join(SELECTABLE)}")
    os.chdir(ROOT)
    c = Check(a)
    print(f"gpu-check: report in {c.out} (budget {a.budget:.0f} s)", flush=True)
    c.step("bundle", c.bundle)
    c.step("cuda-toolkit", c.cuda_toolkit)
    c.step("gpu", c.gpu)
    c.step("configure", c.configure, needs=("cuda-toolkit",))
    c.step("build", c.build, needs=("configure",))
    c.step("probe", c.probe, needs=("build",))
    c.step("tests", c.tests, needs=("build",))
    c.step("bench", c.bench, needs=("build",))
    c.step("kernels", c.kernels, needs=("build",))
    c.step("gemm", c.gemm, needs=("build",))
    c.write()
    res = json.load(open(os.path.join(c.out, "results.json")))
    n = res["counts"]
    print(f"\ngpu-check: {n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped; "
          f"report {os.path.join(c.out, 'report.md')}")
    for s in res["steps"]:
        print(f"  {s['status']:4}  {s['name']:34} {s['summary'][:110]}")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
