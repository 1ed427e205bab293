#!/usr/bin/python3
"""The GPU bundle builds, and a CUDA build against it alone compiles and links (issue 15,
point 4): a bundle that would fail on the GPU machine fails here first.
  1. scripts/gpu-bundle.sh --dir WORKDIR/bundle: downloads (cached in WORKDIR/bundle/debs),
     assembles and verifies the prefix; the archive that travels stays under 40 MiB.
  2. In a mount namespace (unshare -rm) where this machine's development files of the bundled
     packages are hidden (/dev/null over each header and .pc file of the -dev packages, so
     there is no /usr/include fallback), scripts/gpu-check.sh --only configure,build does
     what the GPU machine does first: unpack the archive, find the CUDA toolkit, configure
     with PKG_CONFIG_LIBDIR at the bundle alone (every dependency, cmocka's included, must
     resolve there) and build trident and the CUDA probe with CUDA (--targets: the library
     and every .cu file; the tests' own sources are the release build's), as PTX for sm_80
     and later (--gencode: the default's second target; scripts/test.sh's release build
     compiles its first, sm_90's machine code, so CI compiles each once; --buildtype plain:
     its C at -O0, a third of the release's compile time, the release build compiles it
     optimized and warns). The steps bundle,
     cuda-toolkit, configure and build must PASS; where the bundle carries cuDNN's headers
     (cudnn/include), with this machine's cudnn.h and cudnn_frontend.h hidden too, the
     configure step must report the cuDNN attention built.
  3. Every library of the bundle that trident needs resolves inside the bundle (ldd: RPATH),
     and the binary trains 2 iterations on 2 ranks (OpenBLAS, UCX and libyaml of the bundle).
SKIP (77) where this machine has no CUDA toolkit (the bundle is still made and verified).
usage: test_gpu_bundle.py SOURCE_ROOT WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
import trident_test as tt  # noqa: E402

root, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
os.makedirs(work, exist_ok=True)
bundle = os.path.join(work, "bundle")  # kept between runs: the download cache
build = os.path.join(work, "build")    # kept between runs: ninja rebuilds what changed
results = tt.fresh_dir(os.path.join(work, "results"))

# ---- 1. the bundle
r = tt.run([os.path.join(root, "scripts", "gpu-bundle.sh"), "--dir", bundle], timeout=900)
print(r.stdout.strip())
archive = os.path.join(bundle, "carry", "trident-gpu-bundle.tar.gz")
if not tt.check("scripts/gpu-bundle.sh exits 0 and leaves the archive", r.returncode == 0 and os.path.isfile(archive),
                f"exit {r.returncode}\n{r.stderr[-3000:]}"):
    tt.finish()
size = os.path.getsize(archive)
tt.check(f"the archive is {size / 2**20:.1f} MiB, under 40 MiB", size < 40 * 2**20)
prefix = os.path.join(bundle, "prefix")
manifest = open(os.path.join(prefix, "MANIFEST")).read().splitlines()
packages = [l.split()[1] for l in manifest if l.startswith("package ")]

nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
if not nvcc:
    print("SKIP: the bundle is made and verified; no CUDA toolkit (nvcc) here for the CUDA build against it")
    sys.exit(77 if not tt.failures else 1)

# ---- 2. the GPU machine's first steps, with this machine's development files hidden
hidden = set()
for p in packages:
    if not p.endswith("-dev"):
        continue
    q = subprocess.run(["dpkg", "-L", p], capture_output=True, text=True)
    for f in q.stdout.splitlines():
        if f.startswith("/usr/include/") or f.endswith(".pc"):
            real = os.path.realpath(f)
            if os.path.isfile(real):
                hidden.add(real)
# cuDNN's and its frontend's headers too: the GPU build must take them from the bundle's
# cudnn/include (the GPU image's cuDNN wheel need not have them)
cudnn_bundled = os.path.isfile(os.path.join(prefix, "cudnn", "include", "cudnn_frontend.h"))
if cudnn_bundled:
    for d in ("/usr/local/cuda/include", os.path.join(root, ".deps", "cudnn-frontend", "include")):
        for h in ("cudnn.h", "cudnn_frontend.h"):
            if os.path.isfile(os.path.join(d, h)):
                hidden.add(os.path.realpath(os.path.join(d, h)))
check_cmd = [os.path.join(root, "scripts", "gpu-check.sh"), "--bundle", bundle, "--build", build, "--out", results,
             "--only", "configure,build", "--jobs", "2", "--targets", "trident,tests/cuda/cuda_probe",
             "--gencode", "arch=compute_80,code=compute_80", "--buildtype", "plain"]
script = os.path.join(work, "in-namespace.sh")
with open(script, "w") as f:
    f.write("#!/bin/bash\nset -e\n")
    for h in sorted(hidden):
        f.write(f"mount --bind /dev/null '{h}'\n")
    f.write("exec " + " ".join(f"'{a}'" for a in check_cmd) + "\n")
os.chmod(script, 0o755)
can_hide = subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0
print(f"hiding {len(hidden)} headers and .pc files of {', '.join(p for p in packages if p.endswith('-dev'))}"
      if can_hide else "NOTE: unshare -rm is refused here: building without hiding the system's development files")
cmd = ["unshare", "-rm", script] if can_hide else check_cmd
env = {k: v for k, v in os.environ.items() if not k.startswith("PKG_CONFIG")}
r = tt.run(cmd, timeout=1500, env=env)
print(r.stdout[-4000:])
try:
    res = json.load(open(os.path.join(results, "results.json")))
except (OSError, ValueError) as e:
    tt.check("gpu-check wrote results.json", False, f"{e}\nexit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    tt.finish()
steps = {s["name"]: s for s in res["steps"]}
for name in ("bundle", "cuda-toolkit", "configure", "build"):
    s = steps.get(name, {"status": "missing", "summary": "", "tail": ""})
    tt.check(f"gpu-check step {name}: {s['status']} {s['summary'][:150]}", s["status"] == "PASS", s.get("tail", ""))
if tt.failures:
    tt.finish()
conf = steps["configure"]["summary"]
if cudnn_bundled:
    tt.check(f"the GPU build has cuDNN's attention from the bundle's headers ({conf[:120]})",
             "cuDNN attention yes" in conf)
else:
    print(f"NOTE: the bundle has no cuDNN headers (scripts/gpu-bundle.sh's warning): {conf[:120]}")
if can_hide:
    # the hiding worked: inside the namespace one of the hidden headers reads empty
    probe = sorted(hidden)[0]
    q = subprocess.run(["unshare", "-rm", "bash", "-c", f"mount --bind /dev/null '{probe}' && wc -c < '{probe}'"],
                       capture_output=True, text=True)
    tt.check(f"in the namespace {probe} reads as 0 bytes", q.stdout.strip() == "0", q.stdout + q.stderr)

# ---- 3. the binary's libraries, and a run
trident = os.path.join(build, "trident")
ldd = subprocess.run(["ldd", trident], capture_output=True, text=True).stdout
bundled = set(os.listdir(os.path.join(prefix, "lib")))
wrong = []
for line in ldd.splitlines():
    parts = line.split()
    if len(parts) >= 3 and parts[1] == "=>" and parts[0] in bundled and not parts[2].startswith(prefix + "/"):
        wrong.append(f"{parts[0]} => {parts[2]}")
used = [l.split()[0] for l in ldd.splitlines() if prefix + "/" in l]
tt.check(f"trident's libraries from the bundle resolve inside it ({', '.join(used)})",
         not wrong and len(used) >= 3, "\n".join(wrong) or ldd)
corpus = tt.make_corpus(trident, work, 2, ["bundle", "prefix", "rpath", "deb"], 200, 3, 30)
config = tt.write_config(os.path.join(work, "bundle.yaml"),
    model=dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=16, vocab_size=256,
               make_vocab_size_divisible_by=16),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=2, lr=1e-3),
    data=dict(data_path=corpus, split="95,5,0"))
run_env = dict(os.environ, UCX_MODULE_DIR=os.path.join(prefix, "lib", "ucx"))
r = tt.run(tt.train_cmd(trident, config, tt.fresh_dir(os.path.join(work, "run")), 2, 2, 1, flags=["--quiet"]),
           timeout=300, env=run_env)
tt.check("the bundle-built trident trains 2 iterations on 2 ranks (TP=2)",
         r.returncode == 0 and len(tt.losses(os.path.join(work, "run"))) == 2, f"exit {r.returncode}\n{r.stderr[-2000:]}")
tt.finish("the bundle builds trident with CUDA on its own")
