#!/usr/bin/env python3
"""The cuDNN frontend's headers (header-only C++, Apache-2.0) for kernels/cuda/attention_cudnn.cpp:
taken from the PyPI wheel nvidia-cudnn-frontend at a pinned version, its SHA-256 checked, its
include/ folder unpacked into .deps/cudnn-frontend/include (meson.build looks there). Idempotent:
nothing is fetched when that version is there already. Standard library only.
    scripts/fetch_cudnn_frontend.py [--dest DIR] [--wheel FILE]
--wheel: unpack this wheel file instead of downloading it (its SHA-256 is checked too).
Exit 1 with the reason when the download or the check fails."""
import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import urllib.request
import zipfile

VERSION = "1.32.0"
WHEEL = f"nvidia_cudnn_frontend-{VERSION}-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
SHA256 = "c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0"


def download():
    # PyPI's simple index in JSON (PEP 691): every file of the project with its URL
    req = urllib.request.Request("https://pypi.org/simple/nvidia-cudnn-frontend/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    meta = json.load(urllib.request.urlopen(req, timeout=60))
    url = next((u["url"] for u in meta.get("files", []) if u.get("filename") == WHEEL), None)
    if not url:
        raise RuntimeError(f"PyPI lists no {WHEEL}")
    return urllib.request.urlopen(url, timeout=300).read()


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=os.path.join(root, ".deps", "cudnn-frontend"))
    ap.add_argument("--wheel")
    a = ap.parse_args()
    stamp = os.path.join(a.dest, "VERSION")
    if os.path.isfile(stamp) and open(stamp).read().strip() == VERSION and \
            os.path.isfile(os.path.join(a.dest, "include", "cudnn_frontend.h")):
        return 0
    try:
        data = open(a.wheel, "rb").read() if a.wheel else download()
    except (OSError, RuntimeError, ValueError) as e:
        print(f"fetch_cudnn_frontend: cannot get {WHEEL}: {e}", file=sys.stderr)
        return 1
    got = hashlib.sha256(data).hexdigest()
    if got != SHA256:
        print(f"fetch_cudnn_frontend: {WHEEL} has SHA-256 {got}, not {SHA256}", file=sys.stderr)
        return 1
    tmp = a.dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = [m for m in z.namelist() if m.startswith("include/") and not m.endswith("/")]
        if not any(m == "include/cudnn_frontend.h" for m in members):
            print(f"fetch_cudnn_frontend: {WHEEL} has no include/cudnn_frontend.h", file=sys.stderr)
            return 1
        for m in members:
            if ".." in m.split("/"):
                continue
            out = os.path.join(tmp, m)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(z.read(m))
    with open(os.path.join(tmp, "VERSION"), "w") as f:
        f.write(VERSION + "\n")
    shutil.rmtree(a.dest, ignore_errors=True)
    os.makedirs(os.path.dirname(a.dest), exist_ok=True)
    os.rename(tmp, a.dest)
    print(f"fetch_cudnn_frontend: cuDNN frontend {VERSION} headers in {a.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
