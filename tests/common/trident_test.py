"""Helpers shared by trident's Python tests: recording checks and the verdict, a fresh work
folder, a generated corpus preprocessed by `trident preprocess`, running trident, `trident
train` command lines for a (DP, TP, PP) layout, configs, metrics.jsonl, and finding processes by a
marker in their command line.

A test finds this module from its own location:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    import trident_test as tt
"""
import fcntl
import json
import os
import random
import shutil
import subprocess
import sys

failures = []  # what each failed check was, in order


def gpt2_byte_char(b):
    """GPT-2's byte -> character map (the byte-level BPE's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in printable:
        return chr(b)
    return chr(256 + sum(1 for x in range(b) if x not in printable))


def check(what, ok, detail="", show=False):
    """Record one check and print 'ok   WHAT' or 'FAIL WHAT'; DETAIL follows, indented on a line
    of its own, on failure (and on success too when `show`). Returns ok."""
    ok = bool(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f"\n     {detail}" if detail != "" and (show or not ok) else ""),
          flush=True)
    if not ok:
        failures.append(what)
    return ok


def expect(ok, message):
    """A check that prints only when it fails ('FAIL: MESSAGE'), for checks made by the
    hundred; MESSAGE says what went wrong. Returns ok."""
    if not ok:
        failures.append(message)
        print(f"FAIL: {message}", flush=True)
    return bool(ok)


def finish(passed=None):
    """Exit: 1 after 'N check(s) failed' when any check failed, else 0 after PASSED (if given)."""
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    if passed:
        print(passed)
    sys.exit(0)


def fresh_dir(path):
    """An empty folder at path (whatever was there is removed); returns path."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write(path, text):
    """Write text (str or bytes) to path; returns path."""
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    return path


def write_config(path, **sections):
    """Write a trident config to path: each keyword is a section, a dict of its keys in order
    (strings double-quoted, booleans true/false, numbers and lists as Python writes them).
    Returns path."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v) if isinstance(v, str) else str(v)
    return write(path, "".join(f"{name}:\n" + "".join(f"  {k}: {value(v)}\n" for k, v in keys.items())
                               for name, keys in sections.items()))


def write_corpus(path, seed, words, docs, lo, hi, end="\n\n", capitalize=False):
    """`docs` documents of lo..hi words drawn from `words` by random.Random(seed), each ended by
    `end` (a blank line: one document each for `trident preprocess`)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(docs):
            doc = " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))
            f.write((doc.capitalize() if capitalize else doc) + end)
    return path


def preprocess(trident, inputs, prefix, **kw):
    """`trident preprocess --input INPUTS --output-prefix PREFIX`, which must succeed (stdout
    dropped; kw go to subprocess.run: timeout, cwd). Returns prefix."""
    inputs = [inputs] if isinstance(inputs, str) else list(inputs)
    subprocess.run([trident, "preprocess", "--input", *inputs, "--output-prefix", prefix],
                   check=True, stdout=subprocess.DEVNULL, **kw)
    return prefix


def make_corpus(trident, work, seed, words, docs, lo, hi, prefix=None, **kw):
    """write_corpus into WORK/corpus.txt, preprocessed into PREFIX (default WORK/corpus): the
    dataset prefix for data.data_path. kw: end, capitalize (the text), timeout (preprocess)."""
    text = write_corpus(os.path.join(work, "corpus.txt"), seed, words, docs, lo, hi,
                        **{k: kw.pop(k) for k in ("end", "capitalize") if k in kw})
    return preprocess(trident, text, prefix or os.path.join(work, "corpus"), **kw)


def run(cmd, timeout=None, **kw):
    """Run a command, capturing stdout and stderr as text (bytes that are not UTF-8 replaced,
    since bad input may be echoed back). Returns the CompletedProcess."""
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                          **kw)


def outputs(cmd, timeout=60, **kw):
    """(exit status, stdout, stderr) of run(cmd)."""
    p = run(cmd, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr


def json_output(cmd, timeout=60):
    """The JSON object a command prints on stdout, after expect()ing that it exits 0."""
    rc, out, err = outputs(cmd, timeout)
    expect(rc == 0, f"{cmd[1:]}: exit {rc}, stderr {err!r}")
    return json.loads(out)


def wait_output(proc, timeout):
    """(stdout, stderr) of a started Popen, killed if it has not ended within timeout seconds."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def train_cmd(trident, config, run_dir, world=1, tp=None, pp=None, sets=(), flags=()):
    """`trident train [--nproc WORLD] CONFIG --run-dir RUN_DIR FLAGS... --set ...`: the layout's
    tensor / pipeline sizes (when given) and every KEY=VALUE of `sets` as --set options."""
    args = [trident, "train"] + (["--nproc", str(world)] if world > 1 else [])
    args += [config, "--run-dir", run_dir, *flags]
    if tp is not None:
        args += ["--set", f"parallel.tensor_model_parallel_size={tp}"]
    if pp is not None:
        args += ["--set", f"parallel.pipeline_model_parallel_size={pp}"]
    for s in sets:
        args += ["--set", s]
    return args


def metrics(run_dir):
    """The objects of RUN_DIR/metrics.jsonl, one per line."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def losses(run_dir):
    """The loss of every iteration in RUN_DIR/metrics.jsonl."""
    return [m["loss"] for m in metrics(run_dir)]


def processes_with(marker):
    """(pid, command line, environment entries) of every process whose command line holds
    marker; processes that end while being read are left out."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmd:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = [e.decode(errors="replace") for e in f.read().split(b"\0")]
        except OSError:
            continue
        found.append((int(pid), cmd, env))
    return found


# The Hugging Face oracles' packages (tests/hf, tests/sft): one virtual environment holds them
HF_PACKAGES = ["transformers==4.38.2", "tokenizers<0.19", "safetensors", "jinja2"]
# a later transformers, the oracle of what 4.38 does not read (Mistral's head_dim: from 4.43;
# 4.44.2 still runs on Debian's torch 1.13): its own environment (tests/hf's hf-new-venv)
HF_NEW_PACKAGES = ["transformers==4.44.2", "tokenizers<0.20", "safetensors"]


def peft_python(venv):
    """venv_python of HF_PACKAGES with peft 0.7.1 and accelerate 0.25.0 added without their
    dependencies (pip would otherwise replace Debian's torch 1.13.0a0, which it reads as older
    than peft's torch>=1.13). Exits 1 with pip's message when they cannot be installed."""
    py = venv_python(venv, HF_PACKAGES, "transformers")
    if subprocess.run([py, "-c", "import peft"], capture_output=True).returncode:
        p = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                            "peft==0.7.1", "accelerate==0.25.0"], capture_output=True, text=True, timeout=900)
        if p.returncode:
            print(f"FAIL: pip install peft==0.7.1: exit {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
            sys.exit(1)
    return py


def venv_python(path, packages, import_name):
    """The Python of a virtual environment at path (made with Debian's /usr/bin/python3 and
    its site packages, so python3-torch stays importable) where `import_name` imports,
    pip-installing `packages` from PyPI the first time. Exits 1 with pip's message when they
    cannot be installed. One process at a time makes it (PATH.lock): the tests that use it
    and the oracle-venvs test, which makes them all first, may start at once. (pip's
    --no-compile: the modules a test imports are byte-compiled then, not all of them here.)"""
    with open(path.rstrip("/") + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        py = os.path.join(path, "bin", "python")
        probe = [py, "-c", f"import {import_name}"]
        if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
            return py
        shutil.rmtree(path, ignore_errors=True)
        steps = [["/usr/bin/python3", "-m", "venv", "--system-site-packages", path],
                 [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                  *packages]]
        for step in steps:
            p = subprocess.run(step, capture_output=True, text=True, timeout=900)
            if p.returncode:
                print(f"FAIL: {' '.join(step)}: exit {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
                sys.exit(1)
        return py
