#!/usr/bin/env python3
"""A rank that never enters a collective: with the communicator timeout at 3 s, the job run by
`trident launch` must end within the bound, non-zero, with a timeout message naming the rank,
the group, the operation and the peer, and leave no process behind; with the collective
blocking, and ordered (tr_comm_order_after + tr_comm_flush: the same report).

usage: test_hang.py TRIDENT HANG_CHECK"""
import os
import re
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402


def main():
    trident, hang_check = sys.argv[1], sys.argv[2]
    failed = 0
    for extra in ([], ["--ordered"]):
        failed |= run(trident, hang_check, extra)
    return failed


def run(trident, hang_check, extra):
    print(f"--- hang_check {' '.join(extra) or '(blocking)'}")
    timeout_s = 3
    marker = "hang-" + uuid.uuid4().hex
    cmd = [trident, "launch", "--nproc", "4", "--grace-period", "2", "--", hang_check,
           "--hang-rank", "2", "--timeout", str(timeout_s), "--marker", marker] + extra
    t0 = time.monotonic()
    p = tt.run(cmd, timeout=90)
    elapsed = time.monotonic() - t0
    out = p.stdout + p.stderr
    print(out)
    print(f"exit {p.returncode} after {elapsed:.1f} s")
    errors = []
    if p.returncode == 0:
        errors.append("the job exited 0")
    # rank 3 shares the "tp" group with rank 2 (which hangs) and waits for it
    want = (r"rank 3 \(group 'tp', rank 1 of 2\): allreduce #\d+ \(4000 bytes\): "
            r"timed out after 3 s waiting for rank 2 \(group rank 0\)")
    if not re.search(want, out):
        errors.append("no timeout message naming rank 3, group 'tp', allreduce and peer rank 2")
    if "hang_check: error 6:" not in out:
        errors.append("the failing rank did not report TR_ERR_TIMEOUT (6)")
    # bound: the timeout, then the launcher's SIGTERM grace period, plus start-up slack
    if elapsed > timeout_s + 2 + 15:
        errors.append(f"the job took {elapsed:.1f} s")
    time.sleep(0.2)
    left = [(pid, line) for pid, line, _ in tt.processes_with(marker)]
    if left:
        errors.append(f"processes left behind: {left}")
        for pid, _ in left:
            try:
                os.kill(int(pid), 9)
            except OSError:
                pass
    if errors:
        print("FAIL: " + "; ".join(errors))
        return 1
    print("ok: hung rank detected, job ended non-zero, nothing left running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
