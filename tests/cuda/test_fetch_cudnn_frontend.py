#!/usr/bin/python3
"""scripts/fetch_cudnn_frontend.py refuses a wheel that is not the pinned one (its SHA-256) with
a clear message and exit 1, leaving nothing behind; no network (--wheel).
usage: test_fetch_cudnn_frontend.py SOURCE_ROOT WORKDIR"""
import os
import shutil
import subprocess
import sys
import zipfile

root, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f"\n{detail}"))
    failures += not ok


fake = os.path.join(work, "fake.whl")  # a wheel of the right shape with other bytes
with zipfile.ZipFile(fake, "w") as z:
    z.writestr("include/cudnn_frontend.h", "// not the frontend\n")
for name, path in (("a wheel of other bytes", fake), ("a file that is not there", os.path.join(work, "none.whl"))):
    dest = os.path.join(work, "dest")
    p = subprocess.run([sys.executable, os.path.join(root, "scripts", "fetch_cudnn_frontend.py"), "--dest", dest,
                        "--wheel", path], capture_output=True, text=True, timeout=60)
    msg = p.stderr.strip()
    check(f"{name}: exit 1, said ({msg[:120]})", p.returncode == 1 and msg.startswith("fetch_cudnn_frontend: ") and
          ("SHA-256" in msg if path == fake else "cannot get" in msg), p.stdout + p.stderr)
    check(f"{name}: nothing unpacked", not os.path.exists(dest) and not os.path.exists(dest + ".tmp"))
print(f"{'FAIL' if failures else 'ok'}: {failures} failures")
sys.exit(1 if failures else 0)
