#!/usr/bin/python3
"""The oracle tests' virtual environments, made first (test oracle-venvs, priority 2), while
other tests run: each pip install (~10-40 s, network and CPU) is then off the oracles' own
time. A test that starts while its environment is being made waits on its lock
(trident_test.venv_python); run alone, each test still makes its own.
usage: make_venvs.py HF_VENV TOKENIZER_VENV TENSORBOARD_VENV"""
import os
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
tok_dir = os.path.join(here, "..", "tokenizer")
sys.path.insert(0, tok_dir)
import trident_test as tt  # noqa: E402
import oracle_env  # noqa: E402

hf, tokenizer, tensorboard = sys.argv[1:4]
for venv, packages, probe in [(hf, tt.HF_PACKAGES, "transformers, jinja2"),
                              (tokenizer, oracle_env.PACKAGES, "tokenizers, tiktoken"),
                              (tensorboard, ["tensorboard"], "tensorboard")]:
    t0 = time.time()
    py = tt.venv_python(venv, packages, probe)
    ok = True
    if venv == tokenizer:  # GPT-2's files too, downloaded by the venv's pip
        code = f"import sys; sys.path.insert(0, {tok_dir!r}); import oracle_env; oracle_env.gpt2_files({venv!r})"
        r = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=900)
        ok = tt.check("GPT-2's vocabulary files", r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:])
    if ok:
        tt.check(f"{os.path.basename(venv)}: {', '.join(packages)} ({time.time() - t0:.1f} s)", True)
tt.finish("the oracles' environments are ready")
